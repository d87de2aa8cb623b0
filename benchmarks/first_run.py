"""A model's first run on a machine: both calls against ``pm.sample_smc`` with empty caches.

PyTensor compiles each function it runs with Numba and keeps the machine code on disk (under
its ``base_compiledir``, ``~/.pytensor``), as this package keeps its rewritten graphs there.
A model's first run pays for compiling; later runs, in any process, load it. Every other table
times warm runs; this one times each side's first run in a new interpreter with an empty
``base_compiledir`` of its own, then a second run in another new interpreter with that
directory as the first left it, and says whether pymc_bdmc's two runs gave the same bounds to
the last bit (they must: :mod:`pymc_bdmc.model.first_compile`).

Run from the repository root::

    python3 benchmarks/first_run.py                   # the suite's small models
    python3 benchmarks/first_run.py --only "eight"    # substrings of their names
    python3 benchmarks/first_run.py --after-demo      # after another model's run
    python3 benchmarks/first_run.py --shared-cache    # the models in turn, one cache per tool
    python3 benchmarks/first_run.py --one-session     # the models in turn in one interpreter
    python3 benchmarks/first_run.py --one-core --repeats 3   # with and without the helper
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent

#: Models of the geometry suite and one of the gallery, built by code run in the child process.
MODELS = {name: f"from geometry import SUITE; built = SUITE[{name!r}]()"
          for name in ("eight schools, centered", "random walk, T=60", "latent GP, 30 points")}
MODELS |= {name: f"from gallery import GALLERY; built = GALLERY[{name!r}]()"
           for name in ("categorical draws, Dirichlet probabilities",
                        "normal mixture, 3 unsorted means", "Dirichlet-multinomial counts")}

#: The model a machine has run before, with ``--after-demo``.
DEMO = ("from pymc_bdmc import known_evidence; "
        "built = known_evidence.normal_inverse_gamma_regression(n_obs=60, n_coef=10, seed=0)")

CALLS = {
    "pymc_bdmc": ("import pymc_bdmc as pmb\n"
                  "with model:\n"
                  "    bd = pmb.sample_bdmc(random_seed=0, progressbar=False)\n"
                  "    ais = pmb.sample_ais(random_seed=100, progressbar=False)\n"
                  "numbers = [float(bd['evidence'][k]) for k in ('lower', 'upper')]\n"
                  "numbers.append(float(ais['evidence']['lower']))\n"),
    # One core: no helper interpreter compiles the scale moves' map ahead (``--one-core``).
    "pymc_bdmc, cores=1": ("import pymc_bdmc as pmb\n"
                           "with model:\n"
                           "    pmb.sample_bdmc(random_seed=0, progressbar=False, cores=1)\n"
                           "    pmb.sample_ais(random_seed=100, progressbar=False, cores=1)\n"),
    "pm.sample_smc": ("import pymc as pm\n"
                      "with model:\n"
                      "    pm.sample_smc(draws=2000, chains=2, cores=1, random_seed=0,\n"
                      "                  progressbar=False, compute_convergence_checks=False)\n"),
}

CHILD = """
import sys, time, warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
sys.path.insert(0, {root!r})
{build}
model = getattr(built, "model", built)
start = time.perf_counter()
{call}
seconds = time.perf_counter() - start
print(repr(globals().get("numbers")))  # the bounds, to the last bit (pymc_bdmc's calls)
print(seconds)
"""


def run(build: str, call: str, compiledir: str) -> tuple[float, str]:
    """Seconds of ``call`` on the model ``build`` makes, in a new interpreter, and its bounds."""
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    code = CHILD.format(root=str(ROOT), build=build, call=call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    numbers, seconds_taken = out.stdout.splitlines()[-2:]
    return float(seconds_taken), numbers


def seconds(build: str, call: str, compiledir: str) -> float:
    """Seconds of ``call`` on the model ``build`` makes, in a new interpreter."""
    return run(build, call, compiledir)[0]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="substrings of model names")
    parser.add_argument("--after-demo", action="store_true",
                        help="first compile the demo's regression into each empty cache")
    parser.add_argument("--one-core", action="store_true",
                        help="also pymc_bdmc's first run with cores=1 (no helper compiling "
                             "ahead), alternating with the default's --repeats times")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--shared-cache", action="store_true",
                        help="first runs of the models in turn, sharing one cache per tool "
                             "(as when a user tries variants of a model): no second runs")
    parser.add_argument("--one-session", action="store_true",
                        help="first runs of the models in turn in one interpreter, sharing one "
                             "cache per tool (as in a notebook comparing them)")
    args = parser.parse_args(argv)
    if args.shared_cache or args.one_session:
        in_turn(args.only, one_interpreter=args.one_session)
        return
    if args.one_core:
        helper_or_not(args.only, args.after_demo, args.repeats)
        return
    for name, build in MODELS.items():
        if args.only and not any(s in name for s in args.only):
            continue
        times, numbers = {}, {}
        for label in ("pymc_bdmc", "pm.sample_smc"):
            call = CALLS[label]
            with tempfile.TemporaryDirectory(prefix="pytensor_") as compiledir:
                if args.after_demo:
                    seconds(DEMO, call, compiledir)
                (cold, numbers[label]), (warm, again) = (run(build, call, compiledir),
                                                         run(build, call, compiledir))
                times[label] = (cold, warm)
                numbers[label] = "yes" if numbers[label] == again else "NO"
        (ours_cold, ours_warm), (smc_cold, smc_warm) = times["pymc_bdmc"], times["pm.sample_smc"]
        print(f"{name:28s} first run {ours_cold:6.1f} s against {smc_cold:6.1f} s (ratio "
              f"{ours_cold / smc_cold:.2f}); second {ours_warm:5.1f} s against {smc_warm:5.1f} s "
              f"(ratio {ours_warm / smc_warm:.2f}); first run's bounds the second's to the "
              f"last bit: {numbers['pymc_bdmc']}", flush=True)


def helper_or_not(only, after_demo: bool, repeats: int) -> None:
    """pymc_bdmc's first run at the defaults and with ``cores=1``, alternately, on empty caches."""
    for name, build in MODELS.items():
        if only and not any(s in name for s in only):
            continue
        times = {"pymc_bdmc": [], "pymc_bdmc, cores=1": []}
        for _ in range(repeats):
            for label, runs in times.items():
                with tempfile.TemporaryDirectory(prefix="pytensor_") as compiledir:
                    if after_demo:
                        seconds(DEMO, CALLS[label], compiledir)
                    runs.append(seconds(build, CALLS[label], compiledir))
        print(f"{name:28s} first run " + "; ".join(
            f"{label}: " + ", ".join(f"{t:.1f}" for t in runs) + " s"
            for label, runs in times.items()), flush=True)


SESSION = """
import sys, time, warnings, logging
warnings.simplefilter("ignore")
logging.disable(logging.WARNING)
sys.path.insert(0, {root!r})
for build in {builds!r}:
    exec(build)
    model = getattr(built, "model", built)
    start = time.perf_counter()
    exec({call!r})
    print(time.perf_counter() - start, flush=True)
"""


def in_turn(only=None, one_interpreter: bool = False) -> None:
    """Each model's first run after the models before it, with one cache per tool.

    Each run in a new interpreter, or (``one_interpreter``) all of them in one.
    """
    names = [name for name in SHARED if not only or any(s in name for s in only)]
    times = {}
    for label in ("pymc_bdmc", "pm.sample_smc"):
        with tempfile.TemporaryDirectory(prefix="pytensor_") as compiledir:
            if not one_interpreter:
                times[label] = [seconds(SHARED[name], CALLS[label], compiledir)
                                for name in names]
                continue
            env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
            code = SESSION.format(root=str(ROOT), builds=[SHARED[name] for name in names],
                                  call=CALLS[label])
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True, env=env)
            times[label] = [float(line) for line in out.stdout.splitlines()[-len(names):]]
    where = ", in one interpreter" if one_interpreter else ""
    for name, ours, smc in zip(names, times["pymc_bdmc"], times["pm.sample_smc"], strict=True):
        print(f"{name:36s} first run after the models above{where} {ours:6.1f} s against "
              f"{smc:6.1f} s (ratio {ours / smc:.2f})", flush=True)
    print(f"{'all':36s} {sum(times['pymc_bdmc']):6.1f} s against "
          f"{sum(times['pm.sample_smc']):6.1f} s", flush=True)


#: Models run in turn by ``--shared-cache`` and ``--one-session``: variants of the same kinds,
#: as a user compares.
SHARED = {name: f"from geometry import SUITE; built = SUITE[{name!r}]()"
          for name in ("random walk, T=60", "random walk, T=200", "eight schools, centered",
                       "eight schools, non-centered", "random intercepts 15 x 6, centered")}


if __name__ == "__main__":
    main()
