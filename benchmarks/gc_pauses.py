"""What Python's garbage collector costs a call, with the process's objects frozen or not.

Run from the repository root::

    python3 benchmarks/gc_pauses.py            # about 3 minutes on 2 cores, alone

Runs ``sample_bdmc`` then ``sample_ais`` at their defaults on the suite's models in turn, as
``time_to_certificate.py`` does, in new interpreters: with the package as it is (the objects a
call starts with frozen for its duration, ``pipeline/heap.py``) and with that freezing turned
off, alternately (``--repeats`` pairs). Prints, per model and setting, both calls' seconds and
the seconds the collector spent in them (``gc.callbacks``), by generation, with the bounds (the
same in both settings: the freezing changes no number).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import time
import warnings

MODELS = ["regression, 5 coefficients", "eight schools, centered", "random walk, T=60",
          "random intercepts", "latent GP"]


def _one_process(frozen: bool) -> None:
    warnings.simplefilter("ignore")
    import arviz  # noqa: F401  (imported before timing, as time_to_certificate.py does)
    import numba  # noqa: F401
    from geometry import SUITE
    from time_to_certificate import CLOSED_FORM

    import pymc_bdmc as pmb
    from pymc_bdmc.pipeline import driver

    if not frozen:
        driver.objects_frozen = contextlib.nullcontext
    spent, started = [0.0, 0.0, 0.0], {}

    def clock(phase, info):
        if phase == "start":
            started["t"] = time.perf_counter()
        else:
            spent[info["generation"]] += time.perf_counter() - started["t"]

    gc.callbacks.append(clock)
    models = {**CLOSED_FORM, **SUITE}
    rows = []
    for name in MODELS:
        model = models[next(k for k in models if k.startswith(name))]().model
        before, start = list(spent), time.perf_counter()
        with model:
            bd = pmb.sample_bdmc(random_seed=0, progressbar=False)
            ais = pmb.sample_ais(random_seed=100, progressbar=False)
        rows.append({"model": name, "seconds": time.perf_counter() - start,
                     "gc": [a - b for a, b in zip(spent, before, strict=True)],
                     "bounds": [float(bd["evidence"]["lower"]), float(bd["evidence"]["upper"]),
                                float(ais["evidence"]["lower"])]})
    print(json.dumps(rows))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", choices=["frozen", "unfrozen"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _one_process(args.child == "frozen")
        return
    results = {"frozen": [], "unfrozen": []}
    for _ in range(args.repeats):
        for setting in ("unfrozen", "frozen"):
            out = subprocess.run([sys.executable, __file__, "--child", setting], check=True,
                                 capture_output=True, text=True, cwd=sys.path[0]).stdout
            results[setting].append(json.loads(out.strip().splitlines()[-1]))
    for i, name in enumerate(MODELS):
        for setting, runs in results.items():
            seconds = ", ".join(f"{run[i]['seconds']:.2f}" for run in runs)
            collected = ", ".join("/".join(f"{g:.2f}" for g in run[i]["gc"]) for run in runs)
            print(f"{name:30s} {setting:8s} both calls {seconds} s; collector (gen 0/1/2) "
                  f"{collected} s; bounds {runs[0][i]['bounds']}")


if __name__ == "__main__":
    main()
