"""What a call pays before its first transition: the package import, the first worker-pool
start, and each suite model's compilations by kind.

Run from the repository root::

    python3 benchmarks/compile_costs.py               # imports, pool start, every suite model
    python3 benchmarks/compile_costs.py --only "GP"   # one model (substring of its name)

The import and the pool start are timed in fresh processes (median of ``--repeats``). Each
model is compiled twice in this process (the first fills PyTensor's and Numba's caches) and
the second is reported: every PyTensor compilation it makes, grouped by backend: ``hot`` (the
default Numba mode: densities, scale maps), ``reference`` (the per-chain graph a vectorized one
is checked against), ``one-shot`` (simulators, results' constraining). To compare commits, run
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


def fresh_seconds(code: str, repeats: int) -> float:
    """Median seconds ``code`` prints, each run in a new interpreter."""
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout.split()[-1]) for _ in range(repeats)]
    return statistics.median(runs)


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
    args = parser.parse_args(argv)
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
