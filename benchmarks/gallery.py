"""More models as PyMC users write them, for ``benchmarks/geometry.py --gallery`` (gap only).

Each builder returns a ``pm.Model`` on fixed data; ``sample_bdmc()`` then certifies the
evidence of data simulated from it. None has a closed-form evidence, so the gap is the
certificate.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.exceptions import ImputationWarning


def item_response(n_persons: int = 60, n_items: int = 12, seed: int = 0) -> pm.Model:
    """Two-parameter logistic IRT: abilities, hierarchical difficulties, log-normal slopes."""
    rng = np.random.default_rng(seed)
    ability, difficulty = rng.normal(size=n_persons), rng.normal(size=n_items)
    slope = np.exp(rng.normal(0.0, 0.3, n_items))
    p = 1.0 / (1.0 + np.exp(-slope * (ability[:, None] - difficulty)))
    with pm.Model() as model:
        theta = pm.Normal("theta", 0.0, 1.0, shape=n_persons)
        b = pm.Normal("b", 0.0, pm.HalfNormal("sd_b", 1.0), shape=n_items)
        a = pm.LogNormal("a", 0.0, 0.5, shape=n_items)
        pm.Bernoulli("y", logit_p=a * (theta[:, None] - b),
                     observed=(rng.random(p.shape) < p).astype(int))
    return model


def unsorted_mixture(n_obs: int = 150, seed: int = 0) -> pm.Model:
    """Three Normal components with exchangeable means: the posterior has 3! label modes."""
    rng = np.random.default_rng(seed)
    y = np.concatenate([rng.normal(m, 1.0, n_obs // 3) for m in (-3.0, 0.0, 3.0)])
    with pm.Model() as model:
        pm.NormalMixture("y", w=pm.Dirichlet("w", np.ones(3)),
                         mu=pm.Normal("mu", 0.0, 5.0, shape=3),
                         sigma=pm.HalfNormal("sd", 2.0), observed=y)
    return model


def softmax_regression(n_obs: int = 200, n_classes: int = 3, seed: int = 0) -> pm.Model:
    """Multinomial logistic regression, ``ZeroSumNormal`` intercepts, ``pm.Categorical``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 2))
    with pm.Model() as model:
        a = pm.ZeroSumNormal("a", 1.0, shape=n_classes)
        coefficients = pm.Normal("B", 0.0, 1.0, shape=(2, n_classes))
        pm.Categorical("y", p=pm.math.softmax(a + x @ coefficients, axis=-1),
                       observed=rng.integers(0, n_classes, n_obs))
    return model


def robust_hierarchy(n_groups: int = 10, per_group: int = 8, seed: int = 0) -> pm.Model:
    """Centred group means with Student-t observations of unknown degrees of freedom."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), per_group)
    y = rng.normal(size=n_groups)[group] + rng.standard_t(3.0, size=group.size)
    with pm.Model() as model:
        a = pm.Normal("a", pm.Normal("mu", 0.0, 2.0), pm.HalfNormal("tau", 1.0),
                      shape=n_groups)
        pm.StudentT("y", nu=pm.Gamma("nu", 2.0, 0.1), mu=a[group],
                    sigma=pm.HalfNormal("s", 2.0), observed=y)
    return model


def dirichlet_multinomial(n_obs: int = 30, n_categories: int = 5, seed: int = 0) -> pm.Model:
    """Over-dispersed counts: ``pm.DirichletMultinomial`` with a simplex and a concentration."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(20, rng.dirichlet(3.0 * np.ones(n_categories)), size=n_obs)
    with pm.Model() as model:
        fractions = pm.Dirichlet("frac", np.ones(n_categories))
        pm.DirichletMultinomial("y", n=20, a=pm.LogNormal("conc", 1.0, 1.0) * fractions
                                * n_categories, observed=counts)
    return model


def categorical_draws(n_obs: int = 100, seed: int = 5) -> pm.Model:
    """``pm.Categorical`` draws of four outcomes, their probabilities ``pm.Dirichlet``."""
    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones(4))
        pm.Categorical("y", p=p, observed=rng.choice(4, size=n_obs, p=[0.1, 0.2, 0.3, 0.4]))
    return model


def beta_regression(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """Proportions with a logit-linear mean and an unknown precision."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n_obs)
    mean = 1.0 / (1.0 + np.exp(-(0.3 + 0.8 * x)))
    with pm.Model() as model:
        mu = pm.math.invlogit(pm.Normal("b0", 0.0, 1.0) + pm.Normal("b1", 0.0, 1.0) * x)
        kappa = pm.Gamma("kappa", 2.0, 0.1)
        pm.Beta("y", mu * kappa, (1.0 - mu) * kappa,
                observed=rng.beta(10.0 * mean, 10.0 * (1.0 - mean)))
    return model


def measurement_error(n_obs: int = 50, seed: int = 0) -> pm.Model:
    """Errors in variables: a latent true covariate per observation, seen with noise."""
    rng = np.random.default_rng(seed)
    x_true = rng.normal(size=n_obs)
    with pm.Model() as model:
        x = pm.Normal("x", pm.Normal("mx", 0.0, 2.0), pm.HalfNormal("sx", 2.0), shape=n_obs)
        pm.Normal("x_obs", x, 0.5, observed=x_true + rng.normal(0.0, 0.5, n_obs))
        pm.Normal("y", pm.Normal("a", 0.0, 3.0) + pm.Normal("b", 0.0, 3.0) * x,
                  pm.HalfNormal("s", 2.0),
                  observed=1.0 + 2.0 * x_true + rng.normal(0.0, 0.5, n_obs))
    return model


def spline_walk(n_obs: int = 100, n_knots: int = 20, seed: int = 0) -> pm.Model:
    """A smoothing spline: hat-function basis weights on a random walk, half-Cauchy scale."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, n_obs)
    knots = np.linspace(0.0, 1.0, n_knots)
    basis = np.maximum(0.0, 1.0 - np.abs(t[:, None] - knots) / (knots[1] - knots[0]))
    with pm.Model() as model:
        w = pm.GaussianRandomWalk("w", sigma=pm.HalfCauchy("tau", 1.0),
                                  init_dist=pm.Normal.dist(0.0, 3.0), shape=n_knots)
        pm.Normal("y", pt.dot(basis, w), pm.HalfNormal("s", 1.0),
                  observed=np.sin(6.0 * t) + rng.normal(0.0, 0.3, n_obs))
    return model


def latent_gp_2d(n_points: int = 25, seed: int = 0) -> pm.Model:
    """``pm.gp.Latent`` on 2-D inputs, a Matern 5/2 kernel with one lengthscale per input."""
    rng = np.random.default_rng(seed)
    inputs = rng.uniform(0.0, 5.0, size=(n_points, 2))
    with pm.Model() as model:
        ell, eta = pm.Gamma("ell", 2.0, 1.0, shape=2), pm.HalfNormal("eta", 1.0)
        gp = pm.gp.Latent(cov_func=eta**2 * pm.gp.cov.Matern52(2, ell))
        pm.Normal("y", gp.prior("f", inputs), pm.HalfNormal("s", 1.0),
                  observed=np.sin(inputs[:, 0]) + np.cos(inputs[:, 1])
                  + rng.normal(0.0, 0.3, n_points))
    return model


def missing_observations(n_obs: int = 80, seed: int = 0) -> pm.Model:
    """A centred random-intercepts regression with 10% of its outcomes missing (imputed)."""
    rng = np.random.default_rng(seed)
    group = np.arange(n_obs) % 8
    x = rng.normal(size=n_obs)
    y = rng.normal(size=8)[group] + 0.5 * x + rng.normal(0.0, 0.5, n_obs)
    y[rng.choice(n_obs, n_obs // 10, replace=False)] = np.nan
    with pm.Model() as model, warnings.catch_warnings():
        warnings.simplefilter("ignore", ImputationWarning)  # the imputation is the point
        a = pm.Normal("a", 0.0, pm.HalfNormal("tau", 1.0), shape=8)
        pm.Normal("y", a[group] + pm.Normal("b", 0.0, 1.0) * x, pm.HalfNormal("s", 1.0),
                  observed=y)
    return model


def observed_autoregression(n_obs: int = 300, seed: int = 0) -> pm.Model:
    """An observed ``pm.AR(1)`` with a ``Normal(0, 1)`` coefficient, as the AR docs write it.

    A third of the prior's coefficients are explosive, so a third of the simulated series
    are of astronomical size; the real series is stationary (coefficient 0.7).
    """
    noise = np.random.default_rng(seed).normal(size=n_obs)
    y = np.zeros(n_obs)
    for t in range(1, n_obs):
        y[t] = 0.7 * y[t - 1] + noise[t]
    with pm.Model() as model:
        pm.AR("y", rho=[pm.Normal("rho", 0.0, 1.0)], sigma=pm.HalfNormal("sigma", 1.0),
              init_dist=pm.Normal.dist(0.0, 1.0), observed=y, shape=n_obs)
    return model


#: ``--gallery``: name -> builder.
GALLERY = {"item response (2PL), 60 persons x 12 items": item_response,
           "normal mixture, 3 unsorted means": unsorted_mixture,
           "softmax regression, 3 classes": softmax_regression,
           "Student-t hierarchy, unknown nu": robust_hierarchy,
           "Dirichlet-multinomial counts": dirichlet_multinomial,
           "categorical draws, Dirichlet probabilities": categorical_draws,
           "beta regression": beta_regression,
           "measurement error, 50 latent covariates": measurement_error,
           "spline on a random walk, 20 knots": spline_walk,
           "latent GP on 2-D inputs": latent_gp_2d,
           "random intercepts, 10% missing outcomes": missing_observations,
           "observed AR(1), Normal(0, 1) coefficient, 300 points": observed_autoregression}
