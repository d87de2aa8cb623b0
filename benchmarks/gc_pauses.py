"""Where Python's full garbage collections fall in a session of calls, frozen or not.

Run from the repository root::

    python3 benchmarks/gc_pauses.py            # about 2 minutes on 2 cores, alone

In new interpreters, alternately with and without ``--frozen`` (``--repeats`` pairs): three
models in turn, each ``sample_bdmc`` then ``sample_ais`` at their defaults, then a short
``pm.sample_smc`` of a small model (what a user does next). With ``--frozen`` the objects alive
before each call are frozen for it (``gc.freeze``, ``gc.unfreeze`` after; what 04aad6f did
around the driver's run, not kept). Prints per setting the seconds the collector spent in full
(generation-2) collections inside the calls, in the steps after them and in the whole process
(``gc.callbacks``), and the calls' wall time.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager, nullcontext

MODELS = ["regression, 5 coefficients", "eight schools, centered", "latent GP"]


@contextmanager
def _frozen():
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _one_process(frozen: bool) -> dict:
    warnings.simplefilter("ignore")
    import arviz  # noqa: F401  (imported before timing, as time_to_certificate.py does)
    import numba  # noqa: F401
    import pymc as pm
    from geometry import SUITE
    from time_to_certificate import CLOSED_FORM

    import pymc_bdmc as pmb

    full, started = [0.0], {}

    def clock(phase, info):
        if info["generation"] != 2:
            return
        if phase == "start":
            started["t"] = time.perf_counter()
        else:
            full[0] += time.perf_counter() - started["t"]

    gc.callbacks.append(clock)
    models = {**CLOSED_FORM, **SUITE}
    around = _frozen if frozen else nullcontext
    in_calls = after_calls = call_seconds = 0.0
    for name in MODELS:
        model = models[next(k for k in models if k.startswith(name))]().model
        before, start = full[0], time.perf_counter()
        with model:
            with around():
                pmb.sample_bdmc(random_seed=0, progressbar=False)
            with around():
                pmb.sample_ais(random_seed=100, progressbar=False)
        call_seconds += time.perf_counter() - start
        in_calls += full[0] - before
        before = full[0]
        with pm.Model():
            pm.Normal("a", shape=5)
            pm.sample_smc(draws=200, chains=1, cores=1, progressbar=False,
                          compute_convergence_checks=False, random_seed=0)
        after_calls += full[0] - before
    return {"in_calls": in_calls, "after_calls": after_calls, "process": full[0],
            "call_seconds": call_seconds}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", choices=["frozen", "unfrozen"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_one_process(args.child == "frozen")))
        return
    runs = {"unfrozen": [], "frozen": []}
    for _ in range(args.repeats):
        for setting in runs:
            out = subprocess.run([sys.executable, __file__, "--child", setting], check=True,
                                 capture_output=True, text=True, cwd=sys.path[0]).stdout
            runs[setting].append(json.loads(out.strip().splitlines()[-1]))
    print(f"{', '.join(MODELS)}: full collections (s) in the calls / in the step after them / "
          "in the whole process; the calls' wall time (s)")
    for setting, rows in runs.items():
        cells = "; ".join(f"{r['in_calls']:.2f} / {r['after_calls']:.2f} / {r['process']:.2f}, "
                          f"{r['call_seconds']:.1f}" for r in rows)
        print(f"  {setting:8s} {cells}")


if __name__ == "__main__":
    main()
