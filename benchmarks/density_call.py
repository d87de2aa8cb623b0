"""Microseconds of one 32-chain call of a model's compiled densities, in this package's mode.

Run from the repository root::

    python3 benchmarks/density_call.py                      # a set of suite and gallery models
    python3 benchmarks/density_call.py --pytensor-mode      # also in PyTensor's default mode
    python3 benchmarks/density_call.py --only "radon"       # models whose names start so

The densities compile in :func:`pymc_bdmc.model.rewrite_cache.hot_mode`, PyTensor's default
mode without the rewrites of ``HOT_MODE_EXCLUDES``. With ``--pytensor-mode`` each model is
also timed in a new interpreter with none excluded, so that what leaving them out costs is
measured. Each interpreter reads the caches as they are (a first run compiles into them).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent

DEFAULT_MODELS = ("eight schools, centered", "random intercepts 15 x 6, centered",
                  "radon, centered, 85 counties", "rugby, hierarchical Poisson",
                  "hierarchical logistic 20 x 10, centered", "item response (2PL)",
                  "random walk, T=200", "latent GP, 30 points", "categorical draws")

CHILD = """
import sys, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
import numpy as np
from _common import seconds_per_call
import geometry
from pymc_bdmc.model import rewrite_cache
if {pytensor_mode!r}:
    rewrite_cache.HOT_MODE_EXCLUDES = ()
from pymc_bdmc.model.density import ModelDensity
books = geometry.book_models("GALLERY", "SUITE", "NON_GAUSSIAN", "EXAMPLES")
name = next(k for k in books if k.startswith({model!r}))
built = books[name]()
density = ModelDensity(getattr(built, "model", built))
x = 0.3 * np.random.default_rng(0).normal(size=(32, density.n_dim))
calls = sorted(seconds_per_call(density.parts, x) for _ in range(5))
print(density.batching, calls[1] * 1e6)
"""


def call_time(model: str, pytensor_mode: bool) -> tuple[str, float]:
    """The batching form and the median-ish microseconds of a 32-chain call, in a new process."""
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), model=model,
                                                             pytensor_mode=pytensor_mode)],
                         capture_output=True, text=True, check=True)
    batching, micros = out.stdout.split()[-2:]
    return batching, float(micros)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="model names (prefixes)")
    parser.add_argument("--pytensor-mode", action="store_true",
                        help="also time each model in PyTensor's default mode")
    args = parser.parse_args(argv)
    for model in args.only or DEFAULT_MODELS:
        batching, ours = call_time(model, False)
        line = f"{model[:40]:40s} {batching:10s} {ours:9.1f} us"
        if args.pytensor_mode:
            other_batching, theirs = call_time(model, True)
            line += f"   PyTensor's default mode: {other_batching:10s} {theirs:9.1f} us"
        print(line, flush=True)


if __name__ == "__main__":
    main()
