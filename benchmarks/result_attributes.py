"""What a result's ArviZ attributes cost: ours against ``make_attrs(inference_library=pymc)``.

Every attempt of a call builds a DataTree whose groups carry ArviZ's standard attributes.
``make_attrs(inference_library=pm)`` looks PyMC's version up among the installed packages on
each call; ``results.datatree.run_attributes`` names pymc_bdmc without that look-up. This
alternates the two for whole calls (``sample_bdmc`` then ``sample_ais`` on a new model object,
as a notebook cell run again makes one), in one process, and reports seconds per pair.

Run from the repository root::

    python3 benchmarks/result_attributes.py
    python3 benchmarks/result_attributes.py --repeats 6 --model "random walk, T=60"
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import pymc as pm

import pymc_bdmc as pmb
from pymc_bdmc.results import datatree
from pymc_bdmc.version import __version__

sys.path.insert(0, str(Path(__file__).parent))
from geometry import SUITE  # benchmarks/ is not a package


def pymc_lookup_attributes(attrs: dict) -> dict:
    """The attributes as built before ff557e5: ArviZ looks PyMC's version up, then ours wins."""
    from arviz_base import make_attrs

    run_attrs = make_attrs({**attrs, "inference_library_version": __version__},
                           inference_library=pm)
    run_attrs["inference_library"] = "pymc_bdmc"
    return run_attrs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="eight schools, centered")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    ours = datatree.run_attributes
    seconds = {"make_attrs(inference_library=pm)": [], "run_attributes": []}
    for repeat in range(args.repeats + 1):  # the first pair compiles: not counted
        for name, build in zip(seconds, (pymc_lookup_attributes, ours), strict=True):
            datatree.run_attributes = build
            model = SUITE[args.model]()
            model = getattr(model, "model", model)
            with model:
                start = time.perf_counter()
                pmb.sample_bdmc(random_seed=0, progressbar=False)
                pmb.sample_ais(random_seed=1, progressbar=False)
            if repeat:
                seconds[name].append(time.perf_counter() - start)
    datatree.run_attributes = ours
    for name, values in seconds.items():
        print(f"{name:<36} " + " ".join(f"{v:.3f}" for v in values)
              + f"  (median {sorted(values)[len(values) // 2]:.3f} s)")


if __name__ == "__main__":
    main()
