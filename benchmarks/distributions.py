"""PyMC's less common distributions, as priors and likelihoods: ``calibrate()`` at the defaults.

Each model has one or two free coordinates (after PyMC's transforms), or a Gaussian latent
field whose evidence is a Gaussian marginal integrated over one scale. Its data are drawn from
the model's own prior predictive (seed ``100 + seed``), and its exact ``log p(y)`` is computed
without pymc_bdmc: by a grid over the free coordinates of PyMC's own compiled log density
(centred at its mode, spaced by its curvature), or by the Gaussian marginal. Each row says
whether the estimator was certified on simulated data, the gap, and the real-data error;
``pm.sample_smc`` (2 chains x 2000 draws, ``cores=1``) runs beside it on the same data, and the
last line sums both tools' times. Run from the repository root::

    python3 benchmarks/distributions.py                   # every model, seeds 0 and 1
    python3 benchmarks/distributions.py --only Hurdle --seeds 3 --no-smc
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from collections.abc import Callable

import numpy as np
import pymc as pm
from _common import pymc_smc_evidence
from scipy import optimize, stats
from scipy.special import logsumexp

import pymc_bdmc as pmb

N_OBS = 20
X = np.linspace(-1.0, 1.0, N_OBS)


def grid_log_evidence(model: pm.Model, half_width: float = 20.0) -> float:
    """``log p(y)`` of a model with one or two free coordinates, by a grid in those coordinates.

    The grid spans ``half_width`` curvature sds either side of the mode of PyMC's log density
    (Jacobians included), 4001 points in one dimension and 401 x 401 in two.
    """
    point = model.initial_point()
    names = [v.name for v in model.value_vars]
    sizes = [int(np.size(point[name])) for name in names]
    logp = model.compile_logp(jacobian=True)

    def log_f(z):
        values, start = {}, 0
        for name, size in zip(names, sizes, strict=True):
            values[name] = np.reshape(z[start:start + size], np.shape(point[name]))
            start += size
        out = float(logp(values))
        return out if np.isfinite(out) else -np.inf

    z0 = np.concatenate([np.ravel(point[name]) for name in names]).astype(float)
    best = optimize.minimize(lambda z: -log_f(z) if np.isfinite(log_f(z)) else 1e300, z0,
                             method="Nelder-Mead",
                             options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 20000})
    mode, n_dim, h = best.x, z0.size, 1e-3
    sds = []
    for k in range(n_dim):
        step = np.zeros(n_dim)
        step[k] = h
        curvature = -(log_f(mode + step) - 2 * log_f(mode) + log_f(mode - step)) / h**2
        sds.append(1.0 / np.sqrt(curvature) if curvature > 0 else 1.0)
    if n_dim == 1:
        grid = mode[0] + sds[0] * np.linspace(-half_width, half_width, 4001)
        values = np.array([log_f([u]) for u in grid])
        return float(logsumexp(values) + np.log(grid[1] - grid[0]))
    if n_dim == 2:
        first, second = (mode[k] + sds[k] * np.linspace(-half_width, half_width, 401)
                         for k in range(2))
        values = np.array([[log_f([u, v]) for v in second] for u in first])
        return float(logsumexp(values) + np.log(first[1] - first[0])
                     + np.log(second[1] - second[0]))
    raise ValueError(f"grid_log_evidence takes one or two free coordinates, not {n_dim}")


def gaussian_log_evidence(cov_given_scale: Callable[[float], np.ndarray]):
    """``log p(y)`` of ``y ~ N(0, cov(s))``, ``s ~ HalfNormal(1)``, by quadrature over ``s``."""
    def log_evidence(y: np.ndarray) -> float:
        y = np.ravel(y)
        scales = np.linspace(1e-4, 6.0, 6001)
        values = np.array([stats.multivariate_normal(np.zeros(y.size), cov_given_scale(s)).logpdf(y)
                           + stats.halfnorm.logpdf(s) for s in scales])
        return float(logsumexp(values) + np.log(scales[1] - scales[0]))
    return log_evidence


def _observed(y, shape=(N_OBS,)):
    return {"observed": y} if y is not None else {"shape": shape}


def _model(body):
    def build(y):
        with pm.Model() as model:
            body(y)
        return model
    return build


ROWCOV = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.5], [0.2, 0.5, 1.0]])
COLCOV = np.diag([1.0, 2.0, 0.5, 1.0])
KRON = (np.array([[1.0, 0.6], [0.6, 1.0]]),
        np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.3], [0.1, 0.3, 1.0]]))
GROUPS, PER_GROUP = 6, 4
GROUP = np.repeat(np.arange(GROUPS), PER_GROUP)
CENTRE = np.eye(GROUPS) - np.ones((GROUPS, GROUPS)) / GROUPS
MEMBERSHIP = np.eye(GROUPS)[GROUP]


def _zero_sum(y):
    z = pm.ZeroSumNormal("z", sigma=pm.HalfNormal("s", 1.0), shape=GROUPS)
    pm.Normal("y", z[GROUP], 0.5, **_observed(y, (GROUPS * PER_GROUP,)))


def _matrix_normal(y):
    s = pm.HalfNormal("s", 1.0)
    m = pm.MatrixNormal("M", mu=np.zeros((3, 4)), rowcov=ROWCOV * s**2, colcov=COLCOV)
    pm.Normal("y", m, 0.5, **_observed(y, (3, 4)))


def _kronecker(y):
    s = pm.HalfNormal("s", 1.0)
    f = pm.KroneckerNormal("f", mu=np.zeros(6), covs=[KRON[0] * s**2, KRON[1]])
    pm.Normal("y", f, 0.5, **_observed(y, (6,)))


def _mv_student_t(y):
    theta = pm.MvStudentT("t", nu=5, mu=np.zeros(2), scale=np.eye(2))
    pm.Normal("y", theta[0] + theta[1] * X, 1.0, **_observed(y))


# name: (model builder taking the data, or None to draw it; exact log p(y) from the data, or
# None for grid_log_evidence)
MODELS = {
    "Triangular prior, Binomial": (_model(lambda y: pm.Binomial(
        "y", 10, pm.Triangular("t", lower=0, c=0.3, upper=1), **_observed(y))), None),
    "Kumaraswamy prior, Binomial": (_model(lambda y: pm.Binomial(
        "y", 10, pm.Kumaraswamy("t", 2, 3), **_observed(y))), None),
    "LogitNormal prior, Bernoulli": (_model(lambda y: pm.Bernoulli(
        "y", pm.LogitNormal("t", 0, 1), **_observed(y))), None),
    "SkewNormal prior": (_model(lambda y: pm.Normal(
        "y", pm.SkewNormal("t", mu=0, sigma=2, alpha=4), 1, **_observed(y))), None),
    "Gumbel prior, Logistic likelihood": (_model(lambda y: pm.Logistic(
        "y", pm.Gumbel("t", 0, 2), 1, **_observed(y))), None),
    "AsymmetricLaplace prior": (_model(lambda y: pm.Normal(
        "y", pm.AsymmetricLaplace("t", b=1, kappa=2, mu=0), 1, **_observed(y))), None),
    "Wald prior on a scale": (_model(lambda y: pm.Normal(
        "y", 0, pm.Wald("t", 1, 2), **_observed(y))), None),
    "Interpolated prior": (_model(lambda y: pm.Normal(
        "y", pm.Interpolated("t", np.linspace(-3, 3, 7), np.array([1, 2, 5, 3, 4, 2, 1.0])), 1,
        **_observed(y))), None),
    "Pareto prior, Exponential likelihood": (_model(lambda y: pm.Exponential(
        "y", pm.Pareto("t", 2, 0.5), **_observed(y))), None),
    "Weibull prior, Poisson likelihood": (_model(lambda y: pm.Poisson(
        "y", pm.Weibull("t", 2, 3), **_observed(y))), None),
    "Laplace prior, LogNormal likelihood": (_model(lambda y: pm.LogNormal(
        "y", pm.Laplace("t", 0, 1), 0.5, **_observed(y))), None),
    "HalfCauchy scale": (_model(lambda y: pm.Normal(
        "y", 0, pm.HalfCauchy("t", 1), **_observed(y))), None),
    "ExGaussian likelihood": (_model(lambda y: pm.ExGaussian(
        "y", mu=pm.Normal("t", 0, 3), sigma=1, nu=0.5, **_observed(y))), None),
    "Rice likelihood": (_model(lambda y: pm.Rice(
        "y", nu=1, sigma=pm.HalfNormal("t", 1), **_observed(y))), None),
    "Moyal likelihood": (_model(lambda y: pm.Moyal(
        "y", pm.Normal("t", 0, 2), 1, **_observed(y))), None),
    "VonMises likelihood": (_model(lambda y: pm.VonMises(
        "y", 0, pm.Gamma("t", 2, 1), **_observed(y))), None),
    "Cauchy likelihood": (_model(lambda y: pm.Cauchy(
        "y", pm.Normal("t", 0, 2), 1, **_observed(y))), None),
    "SkewStudentT likelihood": (_model(lambda y: pm.SkewStudentT(
        "y", a=2, b=3, mu=pm.Normal("t", 0, 2), sigma=1, **_observed(y))), None),
    "GARCH11 likelihood": (_model(lambda y: pm.GARCH11(
        "y", omega=pm.HalfNormal("t", 0.5), alpha_1=0.2, beta_1=0.5, initial_vol=1.0,
        **_observed(y))), None),
    "TruncatedNormal likelihood, Truncated prior": (_model(lambda y: pm.TruncatedNormal(
        "y", pm.Truncated("t", pm.Normal.dist(0, 2), lower=-1, upper=3), 1, lower=-0.5,
        upper=2.5, **_observed(y))), None),
    "ZeroInflatedNegativeBinomial likelihood": (_model(lambda y: pm.ZeroInflatedNegativeBinomial(
        "y", psi=pm.Beta("t", 2, 2), mu=3, alpha=2, **_observed(y))), None),
    "HurdlePoisson likelihood": (_model(lambda y: pm.HurdlePoisson(
        "y", psi=0.7, mu=pm.Gamma("t", 2, 1), **_observed(y))), None),
    "HurdleLogNormal likelihood": (_model(lambda y: pm.HurdleLogNormal(
        "y", psi=0.6, mu=pm.Normal("t", 0, 1), sigma=1, **_observed(y))), None),
    "HurdleGamma likelihood": (_model(lambda y: pm.HurdleGamma(
        "y", psi=0.6, alpha=2, beta=pm.Gamma("t", 2, 1), **_observed(y))), None),
    "Geometric likelihood": (_model(lambda y: pm.Geometric(
        "y", pm.Beta("t", 2, 2), **_observed(y))), None),
    "BetaBinomial likelihood": (_model(lambda y: pm.BetaBinomial(
        "y", alpha=pm.Gamma("t", 2, 1), beta=2, n=10, **_observed(y))), None),
    "DiscreteWeibull likelihood": (_model(lambda y: pm.DiscreteWeibull(
        "y", q=pm.Beta("t", 5, 2), beta=1.5, **_observed(y))), None),
    "OrderedLogistic likelihood": (_model(lambda y: pm.OrderedLogistic(
        "y", eta=pm.Normal("t", 0, 2) * X, cutpoints=np.array([-1.0, 0.0, 1.0]),
        **_observed(y))), None),
    "logistic regression (2-D)": (_model(lambda y: pm.Bernoulli(
        "y", logit_p=pm.Normal("a", 0, 1) + pm.Normal("b", 0, 2) * X, **_observed(y))), None),
    "Normal-InverseGamma (2-D)": (_model(lambda y: pm.Normal(
        "y", pm.Normal("m", 0, 2), pm.InverseGamma("s", 3, 2), **_observed(y))), None),
    "Dirichlet-Multinomial, 3 categories (2-D)": (_model(lambda y: pm.Multinomial(
        "y", n=15, p=pm.Dirichlet("p", np.ones(3)), **_observed(y, (N_OBS, 3)))), None),
    "MvStudentT prior (2-D)": (_model(_mv_student_t), None),
    "ZeroSumNormal group effects": (_model(_zero_sum), gaussian_log_evidence(
        lambda s: s**2 * MEMBERSHIP @ CENTRE @ MEMBERSHIP.T + 0.25 * np.eye(GROUPS * PER_GROUP))),
    "MatrixNormal latent, 3 x 4": (_model(_matrix_normal), gaussian_log_evidence(
        lambda s: s**2 * np.kron(ROWCOV, COLCOV) + 0.25 * np.eye(12))),
    "KroneckerNormal latent, 2 x 3": (_model(_kronecker), gaussian_log_evidence(
        lambda s: s**2 * np.kron(*KRON) + 0.25 * np.eye(6))),
}


def run(name: str, seed: int, smc: bool = True) -> tuple[str, float, float, bool, float]:
    """One row, and its calibrate seconds, pm.sample_smc seconds, certificate and error."""
    build, exact_fn = MODELS[name]
    with build(None) as prior_model:
        y = pm.draw(prior_model["y"], random_seed=100 + seed)
    model = build(y)
    exact = grid_log_evidence(model) if exact_fn is None else exact_fn(y)
    start = time.perf_counter()
    try:
        with model:
            result = pmb.calibrate(random_seed=seed, progressbar=False)
    except pmb.BDMCInputError as err:
        return f"{name:44s} seed {seed}: refused: {str(err)[:160]}", 0.0, 0.0, False, np.nan
    seconds = time.perf_counter() - start
    c = result["calibration"].attrs
    error = float(result["evidence"].lower) - exact
    row = (f"{name:44s} seed {seed}: {'certified' if c['certified'] else 'NOT certified'}, gap "
           f"{c['certified_gap']:+.3f} ({c['certified_n_steps']} steps), error {error:+.3f} "
           f"(exact {exact:.3f}), {seconds:.1f} s")
    smc_seconds = 0.0
    if smc:
        smc_estimates, smc_seconds = pymc_smc_evidence(model, seed)
        row += ("; pm.sample_smc errors "
                + ", ".join(f"{value - exact:+.2f}" for value in smc_estimates)
                + f", {smc_seconds:.1f} s (ratio {seconds / smc_seconds:.2f})")
    return row, seconds, smc_seconds, bool(c["certified"]), error


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="substrings of model names to run")
    parser.add_argument("--no-smc", action="store_true", help="skip pm.sample_smc")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    print(f"# {time.strftime('%Y-%m-%d')}, pymc_bdmc {pmb.__version__}, pymc {pm.__version__}")
    rows = []
    for name in MODELS:
        if args.only and not any(s in name for s in args.only):
            continue
        for seed in range(args.seeds):
            line, *numbers = run(name, seed, smc=not args.no_smc)
            print(line, flush=True)
            rows.append(numbers)
    if rows:
        ours, theirs, certified, errors = (np.array(column) for column in zip(*rows, strict=True))
        print(f"# {certified.sum()} of {len(rows)} certified; largest |error| "
              f"{np.nanmax(np.abs(errors)):.3f}; calibrate {ours.sum():.1f} s"
              + (f" against pm.sample_smc's {theirs.sum():.1f} s (ratio "
                 f"{ours.sum() / theirs.sum():.2f})" if theirs.sum() > 0 else ""))


if __name__ == "__main__":
    main()
