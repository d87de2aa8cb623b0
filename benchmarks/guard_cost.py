"""What the default guard's simulation costs on large data sets, in each sampling backend.

BDMC's guard (``match_data=None``) draws 101 data sets from the model. The fast-compiling
backend draws a categorical variable (a mixture's components, an ordinal outcome) one element at
a time, and runs a ``Scan`` (``pm.AR``'s simulation) one step at a time, in Python; from
:data:`pymc_bdmc.model.simulate.PYTHON_LOOPS` observed values such a model's joint sampler
compiles in the default (Numba) backend instead. For each model this times the guard
(compilation of the joint sampler included) as the package runs it, and with the
fast-compiling backend forced; both must give the same kept data set.

    python3 benchmarks/guard_cost.py
"""

import time
import warnings

import numpy as np
import pymc as pm
from _common import quiet

import pymc_bdmc.model.simulate as simulate
from pymc_bdmc.model.cache import compiled_model, observed_values
from pymc_bdmc.pipeline.matching import guarded_draw


def ordinal(n: int) -> pm.Model:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3))
    y = np.digitize(x @ [1.0, -0.5, 0.3] + rng.logistic(size=n), [-1.0, 0.5, 2.0])
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        cuts = pm.Deterministic("cuts", pm.math.sort(pm.Normal("raw", 0, 2, shape=3)))
        pm.OrderedLogistic("y", eta=pm.math.dot(x, b), cutpoints=cuts, observed=y)
    return model


def mixture(n: int) -> pm.Model:
    rng = np.random.default_rng(3)
    y = np.concatenate([rng.normal(-2, 1, 6 * n // 10), rng.normal(3, 1, n - 6 * n // 10)])
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        mu = pm.Normal("mu", 0, 5, shape=2)
        pm.NormalMixture("y", w=w, mu=mu, sigma=pm.HalfNormal("s", 2), observed=y)
    return model


def autoregression(n: int) -> pm.Model:
    rng = np.random.default_rng(13)
    y = np.zeros(n)
    for t in range(1, n):
        y[t] = 0.7 * y[t - 1] + rng.normal(0, 0.5)
    with pm.Model() as model:
        pm.AR("y", rho=[pm.Normal("rho", 0, 0.5)], sigma=pm.HalfNormal("sigma", 1),
              init_dist=pm.Normal.dist(0, 1), observed=y)
    return model


def regression(n: int) -> pm.Model:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 20))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=20)
        pm.Normal("y", x @ b, pm.HalfNormal("s", 1), observed=x @ np.ones(20) + rng.normal(size=n))
    return model


MODELS = {"ordinal regression, 50,000 outcomes": lambda: ordinal(50_000),
          "NormalMixture, 12,000 values": lambda: mixture(12_000),
          "pm.AR(1), 500 points": lambda: autoregression(500),
          "Gaussian regression, 100,000 x 20": lambda: regression(100_000)}


def guard_seconds(model: pm.Model, thresholds: dict) -> tuple[float, np.ndarray]:
    simulate.PYTHON_LOOPS = thresholds
    simulator = compiled_model(model, cache=False).simulator
    start = time.perf_counter()
    kept = guarded_draw(simulator, observed_values(model), np.random.default_rng(1),
                        np.random.default_rng(2))
    return time.perf_counter() - start, kept.truth.x


def main() -> None:
    quiet()
    warnings.simplefilter("ignore")
    default = dict(simulate.PYTHON_LOOPS)
    for name, build in MODELS.items():
        seconds, x = guard_seconds(build(), default)
        slow, x_slow = guard_seconds(build(), dict.fromkeys(default, np.inf))
        simulate.PYTHON_LOOPS = default
        same = np.allclose(x, x_slow, rtol=1e-12, atol=0)
        print(f"{name:38s} guard {seconds:6.2f} s (fast-compiling backend {slow:6.2f} s), "
              f"same draw: {same}", flush=True)


if __name__ == "__main__":
    main()
