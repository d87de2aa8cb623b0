"""What a call pays before its first transition: the package import, the first worker-pool
start, and each suite model's compilations by kind.

Run from the repository root::

    python3 benchmarks/compile_costs.py               # imports, pool start, every suite model
    python3 benchmarks/compile_costs.py --only "GP"   # one model (substring of its name)
    python3 benchmarks/compile_costs.py --new-process # each model in a new interpreter
    python3 benchmarks/compile_costs.py --calls       # both calls, in a new interpreter

The import and the pool start are timed in fresh processes (median of ``--repeats``). Each
model is compiled twice in this process (the first fills PyTensor's and Numba's caches) and
the second is reported: every PyTensor compilation it makes, grouped by backend: ``hot`` (the
default Numba mode: densities, scale maps), ``reference`` (the per-chain graph a vectorized one
is checked against), ``one-shot`` (simulators, results' constraining). With ``--new-process``,
each model's densities are compiled in a new interpreter (after another model's) through their
first 32-chain call, the median of ``--repeats``; the last row is a latent GP whose prior takes
a value no run used before (a prior-sensitivity loop's next model). Of that time, it also
reports the object-mode blocks Numba compiles on the first call in a process of a function
loaded from its cache: PyTensor's LAPACK and BLAS calls fetch each routine's address in one,
per routine and function. ``--calls`` times ``sample_bdmc()`` and ``sample_ais()`` on a model
new to an interpreter that ran both on another. To compare commits, run
this file with ``PYTHONPATH`` pointing at another checkout (``git worktree add``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent

IMPORT = "import time; t = time.perf_counter(); import pymc_bdmc; print(time.perf_counter() - t)"
POOL = """
import pymc_bdmc, time
from pymc_bdmc.parallel.executors import local_pool
t = time.perf_counter()
list(local_pool(2).map(abs, [-1, -2]))
print(time.perf_counter() - t)
"""


#: A model's densities compiled in a new interpreter (after another model, so that what every
#: process pays once is paid), through their first 32-chain call: what a call pays per model.
NEW_PROCESS = """
import sys, time
sys.path.insert(0, {root!r})
import numpy as np, pymc as pm
from geometry import SUITE
from gallery import GALLERY
from pymc_bdmc.model.cache import compiled_model
compiled_model(GALLERY["beta regression"](), cache=False)
{build}
model = getattr(built, "model", built)
{count_object_mode}
start = time.perf_counter()
density = compiled_model(model, cache=False).density
density.parts(np.tile(density.layout.ravel(model.initial_point()), (32, 1)))
print(len(object_mode), sum(object_mode), time.perf_counter() - start)
"""

#: Counts and times the object-mode blocks Numba compiles from here on (``object_mode``).
COUNT_OBJECT_MODE = """
from numba.core.dispatcher import ObjModeLiftedWith
object_mode, original = [], ObjModeLiftedWith.compile
def counted(self, sig):
    start = time.perf_counter()
    try:
        return original(self, sig)
    finally:
        object_mode.append(time.perf_counter() - start)
ObjModeLiftedWith.compile = counted
"""

#: ``sample_bdmc()`` then ``sample_ais()`` at the defaults in a new interpreter, after both
#: calls on another model: what a model's first calls in a process pay.
NEW_PROCESS_CALLS = """
import sys, time, logging
sys.path.insert(0, {root!r})
logging.disable(logging.WARNING)
import numpy as np, pymc as pm
import _common
import pymc_bdmc as pmb
from gallery import GALLERY
from time_to_certificate import CLOSED_FORM
with GALLERY["beta regression"]():
    pmb.sample_bdmc(random_seed=1, progressbar=False)
    pmb.sample_ais(random_seed=1, progressbar=False)
built = {{**CLOSED_FORM, **GALLERY}}[{name!r}]()
model = getattr(built, "model", built)
{count_object_mode}
start = time.perf_counter()
with model:
    pmb.sample_bdmc(random_seed=0, progressbar=False)
    pmb.sample_ais(random_seed=0, progressbar=False)
print(len(object_mode), sum(object_mode), time.perf_counter() - start)
"""

#: Models timed with ``--calls``.
CALLS_MODELS = ("regression, 5 coefficients, N=50", "regression, 20 coefficients, N=500",
                "latent GP on 2-D inputs")

#: A latent GP whose lengthscale prior takes a value no run used before: a prior-sensitivity
#: loop's next model.
NEW_PRIOR = """
rng = np.random.default_rng(0)
x = np.sort(rng.uniform(0.0, 5.0, 30))
with pm.Model() as built:
    ell = pm.Gamma("ell", 4.0 + (time.time_ns() % 10**6) / 10**6, 4.0)
    eta = pm.HalfNormal("eta", 1.0)
    gp = pm.gp.Latent(cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ls=ell))
    pm.Normal("y", gp.prior("f", X=x[:, None]), 0.3, observed=np.sin(x))
"""

#: Models timed with ``--new-process``.
NEW_PROCESS_MODELS = ("eight schools, centered", "random walk, T=60", "latent GP, 30 points",
                      "normal mixture, 3 unsorted means", "latent GP on 2-D inputs")


def fresh_values(code: str, repeats: int) -> list[float]:
    """Medians of the numbers ``code`` prints on its last line, each run in a new interpreter."""
    runs = [[float(v) for v in subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        check=True).stdout.splitlines()[-1].split()] for _ in range(repeats)]
    return [statistics.median(column) for column in zip(*runs, strict=True)]


def fresh_seconds(code: str, repeats: int) -> float:
    """Median seconds ``code`` prints last, each run in a new interpreter."""
    return fresh_values(code, repeats)[-1]


def compile_seconds(build) -> dict[str, list[float]]:
    """Seconds of each PyTensor compilation of one model's ``compile_model``, by kind."""
    import pytensor
    from pytensor.link.numba.linker import NumbaLinker

    from pymc_bdmc.model import batching
    from pymc_bdmc.pipeline.compile import compile_model

    reference = getattr(batching, "REFERENCE_MODE", None)  # absent before 08896f6
    seconds: dict[str, list[float]] = defaultdict(list)
    original = pytensor.function

    def timed(*args, **kwargs):
        # PyMC's compile hands PyTensor a new Mode with the linker of the one it was given.
        linker = getattr(kwargs.get("mode"), "linker", None)
        kind = ("hot" if isinstance(linker, NumbaLinker) else
                "reference" if reference is not None and linker is reference.linker
                else "one-shot")
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            seconds[kind].append(time.perf_counter() - start)

    for attempt in range(2):
        built = build()
        model = getattr(built, "model", built)
        seconds.clear()
        pytensor.function = timed
        try:
            start = time.perf_counter()
            compile_model(model, False, None)
            seconds["compile_model"] = [time.perf_counter() - start]
        finally:
            pytensor.function = original
    return dict(seconds)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="substrings of suite model names")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-imports", action="store_true")
    parser.add_argument("--new-process", action="store_true",
                        help="each model's densities in a new interpreter, through their first "
                             "call, and a latent GP with a prior value no run used before")
    parser.add_argument("--calls", action="store_true",
                        help="both calls at the defaults on a model new to the interpreter")
    args = parser.parse_args(argv)
    if args.calls:
        for name in CALLS_MODELS:
            if args.only and not any(s.lower() in name.lower() for s in args.only):
                continue
            n_object_mode, object_mode, seconds = fresh_values(NEW_PROCESS_CALLS.format(
                root=str(ROOT), name=name, count_object_mode=COUNT_OBJECT_MODE), args.repeats)
            print(f"{name:<36} sample_bdmc and sample_ais {seconds:.2f} s, of which "
                  f"{n_object_mode:.0f} object-mode blocks compiled {object_mode:.2f} s "
                  f"(medians of {args.repeats} new interpreters)", flush=True)
        return
    if args.new_process:
        builds = {name: f"built = {{**SUITE, **GALLERY}}[{name!r}]()"
                  for name in NEW_PROCESS_MODELS}
        builds["latent GP, a new prior value"] = NEW_PRIOR
        for name, build in builds.items():
            if args.only and not any(s.lower() in name.lower() for s in args.only):
                continue
            n_object_mode, object_mode, seconds = fresh_values(
                NEW_PROCESS.format(root=str(ROOT), build=build,
                                   count_object_mode=COUNT_OBJECT_MODE), args.repeats)
            print(f"{name:<36} densities through their first call {seconds:.2f} s, of which "
                  f"{n_object_mode:.0f} object-mode blocks compiled {object_mode:.2f} s "
                  f"(medians of {args.repeats} new interpreters)", flush=True)
        return
    if not args.no_imports:
        print(f"import pymc_bdmc {fresh_seconds(IMPORT, args.repeats):.2f} s; first pool of 2 "
              f"workers with two tasks {fresh_seconds(POOL, args.repeats):.2f} s "
              f"(medians of {args.repeats} fresh processes)", flush=True)
    sys.path.insert(0, str(ROOT))
    from geometry import SUITE

    for name, build in SUITE.items():
        if args.only and not any(s.lower() in name.lower() for s in args.only):
            continue
        seconds = compile_seconds(build)
        parts = ", ".join(f"{kind} {sum(v):.2f} s ({len(v)})" for kind, v in seconds.items()
                          if kind != "compile_model")
        print(f"{name:<36} compile_model {seconds['compile_model'][0]:.2f} s: {parts}",
              flush=True)


if __name__ == "__main__":
    main()
