"""How finely a path's length is rounded: ``Tuning.length_unit`` against the old unit of 100.

The first attempt runs ``steps_per_squared_length * L^2`` steps rounded up to a multiple of
``Tuning.length_unit``. This runs ``sample_bdmc`` then ``sample_ais`` at the defaults on the
models whose paths land where the unit matters (5 L^2 just past 100), at several seeds, with
each unit in turn in the same process, and prints the attempts, gaps, errors and seconds (a
model's first row includes its compilation).

    python3 benchmarks/length_unit.py --seeds 1 2 3 4
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from _common import quiet
from geometry import EXAMPLES, SUITE
from time_to_certificate import hierarchy_500

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence

MODELS = {"latent GP, 30 points": SUITE["latent GP, 30 points"],
          "centred hierarchy, 500 groups x 20": hierarchy_500,
          **{name: EXAMPLES[name] for name in (
              "radon, non-centered, 85 counties", "horseshoe, 40 coefficients, centered",
              "horseshoe, 40 coefficients, non-centered",
              "regularized horseshoe, 40 coefficients, non-centered")}}


def run(build, seed: int, unit: int) -> dict:
    built = build()
    analytic = built if isinstance(built, known_evidence.AnalyticModel) else None
    model = built.model if analytic is not None else built
    tuning = pmb.Tuning(length_unit=unit)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        bd = pmb.sample_bdmc(random_seed=seed, progressbar=False, tuning=tuning)
        middle = time.perf_counter()
        ais = pmb.sample_ais(random_seed=seed + 100, progressbar=False, tuning=tuning)
        end = time.perf_counter()
    ev = bd["evidence"]
    row = {"steps": list(map(int, np.atleast_1d(ev.attrs["auto_n_steps"]))),
           "gap": float(ev["gap"]), "certified": int(ev.attrs.get("certified", 0)),
           "ais_steps": list(map(int, np.atleast_1d(ais["evidence"].attrs["auto_n_steps"]))),
           "bdmc_s": middle - start, "ais_s": end - middle, "error": np.nan}
    if analytic is not None:
        row["error"] = float(ais["evidence"]["lower"]) - analytic.log_evidence()
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--units", type=int, nargs="+", default=[100, 50])
    parser.add_argument("--only", nargs="*", default=None, help="substrings of model names")
    args = parser.parse_args(argv)
    quiet()
    for name, build in MODELS.items():
        if args.only and not any(s in name for s in args.only):
            continue
        for seed in args.seeds:
            for unit in args.units:
                r = run(build, seed, unit)
                print(f"{name[:40]:40s} seed {seed} unit {unit:3d}: steps {r['steps']} gap "
                      f"{r['gap']:+.2f} cert {r['certified']} | ais {r['ais_steps']} error "
                      f"{r['error']:+.2f} | {r['bdmc_s']:.1f} + {r['ais_s']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
