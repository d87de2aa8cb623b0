"""Every benchmark model's compiled densities against PyMC's own, over batches of many sizes.

Run from the repository root::

    python3 benchmarks/density_audit.py                  # the gallery and the geometry books
    python3 benchmarks/density_audit.py --only radon GP  # names holding these substrings

A batched density is checked against the per-chain graph at three points when it is compiled
(:func:`pymc_bdmc.model.batching.compile_batched`), but a miscompilation that depends on what
the buffers held before (one was seen: ``rewrite_cache.HOT_MODE_EXCLUDES``) can pass three
points. Here each model's ``ModelDensity`` is called on six batches of 1 to 40 random rows, and
the log density and gradient of three rows of each are compared with PyMC's ``compile_logp``
and ``compile_dlogp``. A row is ``BAD`` past a relative error of 1e-6. Models with discrete
free variables (whose gradients PyMC's ``dlogp`` leaves out) are skipped.
"""

from __future__ import annotations

import argparse
import time
import warnings

import geometry
import numpy as np

from pymc_bdmc.model.density import ModelDensity

BOOKS = ("SUITE", "NON_GAUSSIAN", "EXAMPLES", "BLOCKS", "WIDE", "LONG")


def worst_error(density: ModelDensity, model, rng: np.random.Generator) -> float:
    """The largest relative error of log density and gradient over random batches."""
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    start = density.layout.ravel(density._initial_point)
    worst = 0.0
    for _ in range(6):
        n = int(rng.integers(1, 41))
        x = start + rng.normal(scale=0.3, size=(n, start.size))
        parts = density.parts(x)
        for i in rng.choice(n, size=min(n, 3), replace=False):
            point = density.layout.unravel(x[i])
            expected, gradient = logp(point), dlogp(point)
            value = parts.log_prior[i] + parts.log_likelihood[i]
            if not (np.isfinite(expected) and np.isfinite(value)):
                continue
            grad = parts.grad_log_prior[i] + parts.grad_log_likelihood[i]
            worst = max(worst, abs(value - expected) / (1 + abs(expected)),
                        float(np.max(np.abs(grad - gradient) / (1 + np.abs(gradient)))))
    return worst


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="substrings of model names")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    for name, build in geometry.book_models("GALLERY", *BOOKS).items():
        if args.only and not any(s in name for s in args.only):
            continue
        start = time.perf_counter()
        built = build()
        model = getattr(built, "model", built)
        if model.discrete_value_vars:
            print(f"skip {name[:50]:50s} (discrete free variables)", flush=True)
            continue
        density = ModelDensity(model)
        worst = worst_error(density, model, np.random.default_rng(0))
        print(f"{'BAD ' if worst > 1e-6 else 'ok  '} {name[:50]:50s} {density.batching:10s} "
              f"worst relative error {worst:.1e} ({time.perf_counter() - start:.1f} s)",
              flush=True)


if __name__ == "__main__":
    main()
