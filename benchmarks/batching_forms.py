"""The two batched forms of a model's density: compile cost in new processes, and call time.

Run from the repository root::

    python3 benchmarks/batching_forms.py                       # the linear-algebra models
    python3 benchmarks/batching_forms.py --only "latent GP"    # models whose names start so

A model's batched density and gradient is compiled either as the vectorized graph (every
operation over a stack of chains) or as one loop over chains around the per-chain graph
(``Blockwise(OpFromGraph)``); :func:`pymc_bdmc.model.batching.compile_batched` picks the loop
where chains factorize matrices of their own (``factorizes_per_chain``).
For each model and form (``vectorized``, ``loop``, and ``default``, the package's choice), two
new interpreters share a new, empty PyTensor ``base_compiledir``: the first compiles into it
(what a model's first run on a machine pays), the second reads it (a later run). Each reports
the seconds from building the density to the end of its first 32-chain call, and the
microseconds of a 32-chain call after that.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent

DEFAULT_MODELS = ("latent GP, 30 points", "latent GP, 80 points", "latent GP on 2-D inputs",
                  "GP classification, 30 points", "gp.Marginal, 40 points",
                  "LKJCholeskyCov, 3-variate normal", "HSGP, 60 points", "random walk, T=60",
                  "eight schools, centered")

CHILD = """
import sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
import numpy as np
import geometry
import pymc_bdmc.model.batching as batching
form = {form!r}
if form == "loop":
    def unavailable(*args, **kwargs):
        raise ValueError("the per-chain loop asked for")
    batching.vectorize_graph = unavailable
elif form == "vectorized":
    batching.factorizes_per_chain = lambda outputs: False
from pymc_bdmc.model.cache import compiled_model
books = geometry.book_models("GALLERY", "SUITE", "LONG", "PAPER", "NON_GAUSSIAN", "WIDE",
                             "BLOCKS", "EXAMPLES")
name = next(k for k in books if k.startswith({model!r}))
built = books[name]()
model = getattr(built, "model", built)
start = time.perf_counter()
density = compiled_model(model, cache=False).density
points = density.validation_points()
x = points[:1] + 0.01 * np.random.default_rng(0).normal(size=(32, points.shape[1]))
density.parts(x)
first = time.perf_counter() - start
calls, start = 0, time.perf_counter()
while time.perf_counter() - start < 1.0:
    density.parts(x)
    calls += 1
print(density.batching, first, (time.perf_counter() - start) / calls * 1e6)
"""


def run(model: str, form: str, compiledir: str) -> tuple[str, float, float]:
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={compiledir}"}
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), form=form,
                                                             model=model)],
                         capture_output=True, text=True, env=env, check=True)
    batching, first, call = out.stdout.split()[-3:]
    return batching, float(first), float(call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="model names (prefixes)")
    parser.add_argument("--forms", nargs="*", default=["vectorized", "loop", "default"])
    args = parser.parse_args()
    print(f"{'model':34s} {'form':10s} {'batching':10s} {'1st process':>12s} "
          f"{'2nd process':>12s} {'32-chain call':>14s}")
    for model in args.only or DEFAULT_MODELS:
        for form in args.forms:
            with tempfile.TemporaryDirectory() as compiledir:
                batching, cold, _ = run(model, form, compiledir)
                _, warm, call = run(model, form, compiledir)
            print(f"{model[:34]:34s} {form:10s} {batching:10s} {cold:10.1f} s "
                  f"{warm:10.1f} s {call:11.0f} us", flush=True)


if __name__ == "__main__":
    main()
