"""Hard geometry at the defaults: what a user gets from `sample_bdmc()` and `sample_ais()`.

Run from the repository root::

    python3 benchmarks/geometry.py                       # the whole suite, one seed
    python3 benchmarks/geometry.py --seeds 3 --only "random walk"
    python3 benchmarks/geometry.py --no-smc              # skip pm.sample_smc
    python3 benchmarks/geometry.py --long --only T=500 --no-smc   # the 500-step walk
    python3 benchmarks/geometry.py --long --only T=1000 --no-smc --no-paper   # 1000 steps
    python3 benchmarks/geometry.py --long --only "GP, 80" --no-smc --no-paper  # 80 x 80 Cholesky
    python3 benchmarks/geometry.py --non-gaussian --no-suite --no-paper   # no closed forms
    python3 benchmarks/geometry.py --blocks --no-suite --no-paper   # HSGP, gp.Marginal, LKJ, ...
    python3 benchmarks/geometry.py --examples --no-suite --no-paper  # switchpoint, horseshoe, ...
    python3 benchmarks/geometry.py --gallery --no-suite --no-paper   # IRT, mixtures, AR, ...

Models people write (``pymc_bdmc.known_evidence``: random walks, eight schools centered and
non-centered, a centered random-intercepts regression, a latent GP), each with exact evidence by
quadrature over its one or two scale parameters, and the BDMC paper's low-rank and clustering
models (no exact value: the BDMC gap is the certificate). ``--non-gaussian`` adds models with
non-Gaussian likelihoods as people write them (a centered hierarchical logistic regression,
Poisson random intercepts, stochastic volatility, GP classification, a negative-binomial
regression, an ordinal regression and a two-component mixture), where too the gap on simulated
data is the certificate. ``--blocks`` adds PyMC's building blocks as its examples use them (an
HSGP, ``gp.Marginal``, an ``LKJCholeskyCov`` normal, a drifting random walk, ``pm.Truncated``
and a Student-t regression with ``pm.Data``), also gap only; ``--examples`` models from
PyMC's examples (the coal-mining switchpoint, rugby, radon, horseshoe regressions centred and
non-centred, a regularised horseshoe, zero-inflated and censored data, a logistic regression on 10000 observations).
For each model and seed, at the
defaults (no ``n_steps``, ``chains`` or kernel settings), printed side by side:

* ``sample_bdmc()``: lower and upper bound minus the exact ``log p(y*)`` of its simulated data,
  the gap, and wall seconds (compilation and pilot included);
* ``sample_ais()`` on the model's own data: lower bound minus the exact ``log p(y)``, seconds;
* ``pm.sample_smc(draws=2000, chains=2, cores=2)`` on the same data: each chain's error, seconds.

Targets (issue "Hard geometry"): ``|gap| <= 0.5`` and ``|AIS error| <= 0.5`` within 60 s for both
calls together, and never less accurate than ``pm.sample_smc``'s worse chain.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from _common import quiet, smc_log_ml
from gallery import GALLERY

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence as tq
from pymc_bdmc.testbed import clustering, low_rank

SUITE = {
    "random walk, T=60": lambda: tq.gaussian_random_walk(60),
    "random walk, T=200": lambda: tq.gaussian_random_walk(200, seed=1),
    "eight schools, centered": lambda: tq.eight_schools(centered=True),
    "eight schools, non-centered": lambda: tq.eight_schools(centered=False),
    "random intercepts 15 x 6, centered": lambda: tq.random_intercepts(15, 6),
    "latent GP, 30 points": lambda: tq.latent_gp(30),
}
#: Above the 400 coordinates up to which the pilot's population gives a dense metric
#: (``--long``): the metric and the fitted base take their correlations from the model's
#: curvature (kernels/mass.py).
LONG = {"random walk, T=500": lambda: tq.gaussian_random_walk(500),
        "random walk, T=1000": lambda: tq.gaussian_random_walk(1000),
        # Every model call factorises an 80 x 80 covariance per chain: the 60 s budget cuts the
        # first attempt short of 1000 steps.
        "latent GP, 80 points": lambda: tq.latent_gp(80)}
PAPER = {
    "paper: low rank (50 x 25, rank 5)": lambda: low_rank(50, 25, rank=5).model,
    "paper: clustering (50 x 25, 10 clusters)": lambda: clustering(50, 25, n_clusters=10).model,
}


def hierarchical_logistic(n_groups: int = 20, per_group: int = 10, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    group, x = np.repeat(np.arange(n_groups), per_group), rng.normal(size=n_groups * per_group)
    with pm.Model() as model:
        mu, tau = pm.Normal("mu", 0.0, 1.0), pm.HalfNormal("tau", 1.0)
        a = pm.Normal("a", mu, tau, shape=n_groups)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=a[group] + b * x, observed=rng.integers(0, 2, len(x)))
    return model


def poisson_intercepts(n_groups: int = 12, per_group: int = 8, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), per_group)
    with pm.Model() as model:
        mu, tau = pm.Normal("mu", 1.0, 1.0), pm.HalfNormal("tau", 1.0)
        a = pm.Normal("a", mu, tau, shape=n_groups)
        pm.Poisson("y", pt.exp(a[group]), observed=rng.poisson(3.0, len(group)))
    return model


def stochastic_volatility(n_days: int = 100, seed: int = 0) -> pm.Model:
    """PyMC's stochastic-volatility example: a random walk of log volatility, Student-t returns."""
    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        step = pm.Exponential("step", 10.0)
        s = pm.GaussianRandomWalk("s", sigma=step, init_dist=pm.Normal.dist(0.0, 1.0),
                                  shape=n_days)
        nu = pm.Exponential("nu", 0.1)
        pm.StudentT("r", nu=nu + 2.0, lam=pt.exp(-2.0 * s),
                    observed=0.02 * rng.standard_t(5.0, n_days))
    return model


def gp_classification(n_points: int = 30) -> pm.Model:
    X = np.linspace(0.0, 10.0, n_points)[:, None]
    with pm.Model() as model:
        ell, eta = pm.InverseGamma("ell", 5.0, 5.0), pm.HalfNormal("eta", 1.0)
        gp = pm.gp.Latent(cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ell))
        pm.Bernoulli("y", logit_p=gp.prior("f", X), observed=(np.sin(X[:, 0]) > 0).astype(int))
    return model


def negative_binomial(n_obs: int = 50, seed: int = 0) -> pm.Model:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, 3))
    with pm.Model() as model:
        b, a = pm.Normal("b", 0.0, 1.0, shape=3), pm.Normal("a", 0.0, 2.0)
        alpha = pm.Exponential("alpha", 1.0)
        pm.NegativeBinomial("y", mu=pt.exp(a + x @ b), alpha=alpha,
                            observed=rng.poisson(2.0, n_obs))
    return model


def ordinal_regression(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """Cutpoints as sorted draws: ``transform=ordered`` is refused (docs/bad-input.md)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n_obs)
    with pm.Model() as model:
        cut = pm.Deterministic("cut", pt.sort(pm.Normal("cut_raw", 0.0, 3.0, shape=3)))
        b = pm.Normal("b", 0.0, 1.0)
        pm.OrderedLogistic("y", eta=b * x, cutpoints=cut, observed=rng.integers(0, 4, n_obs))
    return model


def normal_mixture(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """Two components, their means sorted draws (label switching left to the sort)."""
    rng = np.random.default_rng(seed)
    y = np.concatenate([rng.normal(-2.0, 1.0, n_obs // 2), rng.normal(2.0, 1.0, n_obs // 2)])
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        mu = pm.Deterministic("mu", pt.sort(pm.Normal("mu_raw", 0.0, 5.0, shape=2)))
        pm.NormalMixture("y", w=w, mu=mu, sigma=pm.HalfNormal("sd", 2.0), observed=y)
    return model


#: Non-Gaussian likelihoods (``--non-gaussian``): no exact value, the gap is the certificate.
NON_GAUSSIAN = {
    "hierarchical logistic 20 x 10, centered": hierarchical_logistic,
    "Poisson random intercepts 12 x 8, centered": poisson_intercepts,
    "stochastic volatility, T=100": stochastic_volatility,
    # PyMC's example has about 400 days: 402 coordinates, where the dense metric and the
    # fitted base take their correlations from the model's curvature.
    "stochastic volatility, T=400": lambda: stochastic_volatility(400),
    "GP classification, 30 points": gp_classification,
    "negative binomial regression, 50 x 3": negative_binomial,
    "ordinal regression, 3 sorted cutpoints": ordinal_regression,
    "normal mixture, 2 sorted means": normal_mixture,
}


def wide_hierarchy(n_groups: int = 450, per_group: int = 3) -> pm.Model:
    """A centered random-intercepts model past 400 coordinates."""
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(n_groups), per_group)
    with pm.Model() as model:
        mu, tau = pm.Normal("mu", 0.0, 2.0), pm.HalfNormal("tau", 1.0)
        a = pm.Normal("a", mu, tau, shape=n_groups)
        pm.Normal("y", a[group], 1.0, observed=rng.normal(size=n_groups * per_group))
    return model


def wide_logistic(n_obs: int = 600, n_coefficients: int = 420) -> pm.Model:
    """A logistic regression with more than 400 coefficients."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_obs, n_coefficients)) / np.sqrt(n_coefficients)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=n_coefficients)
        pm.Bernoulli("y", logit_p=x @ b, observed=rng.integers(0, 2, n_obs))
    return model


#: Above 400 coordinates, gap only (``--wide``): the curvature's dense metrics and bases.
WIDE = {"centered hierarchy, 450 groups x 3": wide_hierarchy,
        "logistic regression, 420 coefficients": wide_logistic}


def hsgp(n_points: int = 60, seed: int = 0) -> pm.Model:
    """A Hilbert-space GP (``pm.gp.HSGP``, 20 basis functions) with unknown lengthscale."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 10.0, n_points)[:, None]
    with pm.Model() as model:
        ell, eta = pm.InverseGamma("ell", 5.0, 5.0), pm.HalfNormal("eta", 1.0)
        gp = pm.gp.HSGP(m=[20], c=1.5, cov_func=eta**2 * pm.gp.cov.ExpQuad(1, ls=ell))
        f = gp.prior("f", X=x)
        pm.Normal("y", f, pm.HalfNormal("sigma", 1.0),
                  observed=np.sin(x[:, 0]) + 0.3 * rng.normal(size=n_points))
    return model


def marginal_gp(n_points: int = 40, seed: int = 0) -> pm.Model:
    """``pm.gp.Marginal`` (Matern 5/2): the latent function integrated out, 3 parameters."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 10.0, n_points)[:, None]
    with pm.Model() as model:
        ell, eta = pm.Gamma("ell", 2.0, 1.0), pm.HalfNormal("eta", 1.0)
        gp = pm.gp.Marginal(cov_func=eta**2 * pm.gp.cov.Matern52(1, ls=ell))
        gp.marginal_likelihood("y", X=x, y=np.sin(x[:, 0]) + 0.3 * rng.normal(size=n_points),
                               sigma=pm.HalfNormal("sigma", 1.0))
    return model


def lkj_normal(n_obs: int = 50, seed: int = 0) -> pm.Model:
    """A 3-variate normal with an ``LKJCholeskyCov`` covariance and unknown means."""
    rng = np.random.default_rng(seed)
    cov = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.3], [0.2, 0.3, 1.0]])
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0,
                                       sd_dist=pm.Exponential.dist(1.0, shape=3))
        pm.MvNormal("y", pm.Normal("mu", 0.0, 2.0, shape=3), chol=chol,
                    observed=rng.multivariate_normal([0.0, 1.0, 2.0], cov, size=n_obs))
    return model


def drifting_walk(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """A ``GaussianRandomWalk`` with unknown drift, innovation and observation scales."""
    rng = np.random.default_rng(seed)
    y = np.cumsum(0.1 + 0.5 * rng.normal(size=n_obs)) + 0.3 * rng.normal(size=n_obs)
    with pm.Model() as model:
        x = pm.GaussianRandomWalk("x", mu=pm.Normal("drift", 0.0, 1.0),
                                  sigma=pm.HalfNormal("s", 1.0),
                                  init_dist=pm.Normal.dist(0.0, 5.0), steps=n_obs - 1)
        pm.Normal("y", x, pm.HalfNormal("e", 1.0), observed=y)
    return model


def truncated_normal(n_obs: int = 80, seed: int = 0) -> pm.Model:
    """``pm.Truncated`` Normal observations (the normaliser depends on the parameters)."""
    y = np.random.default_rng(seed).normal(1.0, 1.0, n_obs)
    with pm.Model() as model:
        dist = pm.Normal.dist(pm.Normal("mu", 0.0, 2.0), pm.HalfNormal("s", 2.0))
        pm.Truncated("y", dist, lower=0.0, observed=y[y > 0])
    return model


def robust_regression(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """Student-t regression with unknown degrees of freedom, ``pm.Data`` and ``dims``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n_obs)
    with pm.Model(coords={"obs": range(n_obs)}) as model:
        xd = pm.Data("x", x, dims="obs")
        mu = pm.Normal("a", 0.0, 5.0) + pm.Normal("b", 0.0, 5.0) * xd
        pm.StudentT("y", nu=pm.Gamma("nu", 2.0, 0.1), mu=mu, sigma=pm.HalfNormal("s", 2.0),
                    observed=1.0 + 2.0 * x + rng.standard_t(3, size=n_obs), dims="obs")
    return model


def latent_ar1(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """A latent ``pm.AR`` process of order 1 with unknown coefficient and scales."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n_obs)
    for t in range(1, n_obs):
        x[t] = 0.8 * x[t - 1] + 0.3 * rng.normal()
    with pm.Model() as model:
        latent = pm.AR("latent", rho=[pm.Uniform("rho", -1.0, 1.0)], sigma=pm.HalfNormal("s", 1.0),
                       init_dist=pm.Normal.dist(0.0, 1.0), steps=n_obs - 1)
        pm.Normal("y", latent, pm.HalfNormal("e", 1.0),
                  observed=x + 0.2 * rng.normal(size=n_obs))
    return model


def latent_ar2(n_obs: int = 80, seed: int = 0) -> pm.Model:
    """A latent ``pm.AR(2)`` whose ``Normal(0, 0.5)`` coefficients allow explosive series."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n_obs)
    for t in range(2, n_obs):
        x[t] = 0.6 * x[t - 1] + 0.2 * x[t - 2] + 0.5 * rng.normal()
    with pm.Model() as model:
        latent = pm.AR("latent", rho=pm.Normal("rho", 0.0, 0.5, shape=2),
                       sigma=pm.HalfNormal("s", 1.0), init_dist=pm.Normal.dist(0.0, 1.0),
                       shape=n_obs)
        pm.Normal("y", latent, pm.HalfNormal("e", 1.0),
                  observed=x + 0.5 * rng.normal(size=n_obs))
    return model


def batched_walks(n_series: int = 4, n_obs: int = 40, seed: int = 0) -> pm.Model:
    """Four ``GaussianRandomWalk`` series in one variable, each with its own innovation scale."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(0.2 * rng.normal(size=(n_series, n_obs)), axis=1)
    with pm.Model() as model:
        walks = pm.GaussianRandomWalk("w", sigma=pm.HalfNormal("s", 0.5, shape=n_series),
                                      init_dist=pm.Normal.dist(0.0, 1.0),
                                      shape=(n_series, n_obs))
        pm.Normal("y", walks, 0.3, observed=x + 0.3 * rng.normal(size=(n_series, n_obs)))
    return model


def multivariate_walk(n_obs: int = 40, seed: int = 0) -> pm.Model:
    """A 2-D ``MvGaussianRandomWalk`` with an ``LKJCholeskyCov`` innovation covariance."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.normal(0.0, 0.3, (n_obs, 2)), axis=0)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(0.5),
                                       compute_corr=True)
        walk = pm.MvGaussianRandomWalk("x", mu=np.zeros(2), chol=chol, shape=(n_obs, 2),
                                       init_dist=pm.MvNormal.dist(np.zeros(2), np.eye(2)))
        pm.Normal("y", walk, pm.HalfNormal("s", 1.0),
                  observed=x + rng.normal(0.0, 0.5, (n_obs, 2)))
    return model


def car_disease_map(side: int = 7, seed: int = 0) -> pm.Model:
    """Poisson counts on a ``side x side`` grid of areas with ``pm.CAR`` spatial effects."""
    rng = np.random.default_rng(seed)
    n = side * side
    adjacency = np.zeros((n, n))
    for i in range(side):
        for j in range(side):
            k = i * side + j
            if i + 1 < side:
                adjacency[k, k + side] = adjacency[k + side, k] = 1
            if j + 1 < side:
                adjacency[k, k + 1] = adjacency[k + 1, k] = 1
    expected = rng.uniform(5.0, 20.0, n)
    with pm.Model() as model:
        b0 = pm.Normal("b0", 0.0, 1.0)
        phi = pm.CAR("phi", mu=np.zeros(n), W=adjacency, alpha=pm.Beta("alpha", 2.0, 2.0),
                     tau=pm.Gamma("tau", 2.0, 2.0))
        pm.Poisson("y", expected * pm.math.exp(b0 + phi),
                   observed=rng.poisson(expected * np.exp(rng.normal(0.0, 0.3, n))))
    return model


def zero_sum_effects(n_groups: int = 8, per_group: int = 6, seed: int = 0) -> pm.Model:
    """Group effects as a ``pm.ZeroSumNormal`` with an unknown scale."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), per_group)
    effects = 0.7 * rng.normal(size=n_groups)
    y = 2.0 + (effects - effects.mean())[group] + 0.5 * rng.normal(size=group.size)
    with pm.Model() as model:
        e = pm.ZeroSumNormal("e", sigma=pm.HalfNormal("sd", 1.0), shape=n_groups)
        pm.Normal("y", pm.Normal("a", 0.0, 5.0) + e[group], pm.HalfNormal("s", 1.0), observed=y)
    return model


def varying_slopes(n_groups: int = 10, per_group: int = 8, seed: int = 0) -> pm.Model:
    """Correlated varying intercepts and slopes, non-centred through an ``LKJCholeskyCov``."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(n_groups), per_group)
    x = rng.normal(size=group.size)
    ab = rng.multivariate_normal([1.0, 0.5], [[0.5, 0.2], [0.2, 0.3]], size=n_groups)
    y = ab[group, 0] + ab[group, 1] * x + 0.5 * rng.normal(size=group.size)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=2, eta=2.0, sd_dist=pm.HalfNormal.dist(1.0),
                                       compute_corr=True)
        z = pm.Normal("z", 0.0, 1.0, shape=(n_groups, 2))
        effects = pm.Deterministic("ab", pm.Normal("mu", 0.0, 2.0, shape=2) + z @ chol.T)
        pm.Normal("y", effects[group, 0] + effects[group, 1] * x, pm.HalfNormal("e", 1.0),
                  observed=y)
    return model


#: PyMC's building blocks as its examples use them (``--blocks``, gap only).
BLOCKS = {"HSGP, 60 points, 20 basis functions": hsgp,
          "gp.Marginal, 40 points": marginal_gp,
          "LKJCholeskyCov, 3-variate normal": lkj_normal,
          "random walk with drift, 100 steps": drifting_walk,
          "truncated normal": truncated_normal,
          "robust regression, pm.Data": robust_regression,
          "latent AR(1), 100 steps": latent_ar1,
          "latent AR(2), explosive prior, 80 steps": latent_ar2,
          "4 random walks, one variable": batched_walks,
          "2-D random walk, MvGaussianRandomWalk": multivariate_walk,
          "CAR spatial effects, Poisson, 7 x 7 areas": car_disease_map,
          "ZeroSumNormal group effects": zero_sum_effects,
          "varying slopes, LKJ, non-centred": varying_slopes}


#: Coal-mining disasters per year, 1851-1961 (PyMC's switchpoint example).
COAL_DISASTERS = np.array([
    4, 5, 4, 0, 1, 4, 3, 4, 0, 6, 3, 3, 4, 0, 2, 6, 3, 3, 5, 4, 5, 3, 1, 4, 4, 1, 5, 5, 3, 4, 2, 5,
    2, 2, 3, 4, 2, 1, 3, 2, 2, 1, 1, 1, 1, 3, 0, 0, 1, 0, 1, 1, 0, 0, 3, 1, 0, 3, 2, 2, 0, 1, 1, 1,
    0, 1, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 1, 1, 0, 2, 3, 3, 1, 1, 2, 1, 1, 1, 1, 2, 4, 2, 0, 0, 1, 4,
    0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1])


def switchpoint() -> pm.Model:
    """PyMC's coal-mining switchpoint: a ``DiscreteUniform`` over 111 years (Gibbs + HMC)."""
    years = np.arange(1851, 1851 + len(COAL_DISASTERS))
    with pm.Model() as model:
        point = pm.DiscreteUniform("switchpoint", lower=years.min(), upper=years.max())
        early, late = pm.Exponential("early_rate", 1.0), pm.Exponential("late_rate", 1.0)
        pm.Poisson("disasters", pm.math.switch(point >= years, early, late),
                   observed=COAL_DISASTERS)
    return model


def rugby(n_teams: int = 6, seed: int = 0) -> pm.Model:
    """Hierarchical Poisson scores with sum-to-zero attack and defence effects (PyMC's rugby)."""
    rng = np.random.default_rng(seed)
    home, away = (a.ravel() for a in np.meshgrid(np.arange(n_teams), np.arange(n_teams),
                                                 indexing="ij"))
    home, away = home[home != away], away[home != away]
    attack, defence = rng.normal(0.0, 0.2, n_teams), rng.normal(0.0, 0.2, n_teams)
    with pm.Model() as model:
        advantage, intercept = pm.Normal("home", 0.0, 1.0), pm.Normal("intercept", 0.0, 1.0)
        atts = pm.Normal("atts_star", 0.0, pm.HalfNormal("sd_att", 2.0), shape=n_teams)
        defs = pm.Normal("defs_star", 0.0, pm.HalfNormal("sd_def", 2.0), shape=n_teams)
        atts, defs = atts - atts.mean(), defs - defs.mean()
        pm.Poisson("home_points", pm.math.exp(intercept + advantage + atts[home] + defs[away]),
                   observed=rng.poisson(np.exp(0.5 + attack[home] - defence[away])))
        pm.Poisson("away_points", pm.math.exp(intercept + atts[away] + defs[home]),
                   observed=rng.poisson(np.exp(0.2 + attack[away] - defence[home])))
    return model


def radon(n_counties: int = 85, n_obs: int = 919, seed: int = 0,
          centered: bool = True) -> pm.Model:
    """Varying intercepts, the radon example's shape: 85 counties, 919 houses."""
    rng = np.random.default_rng(seed)
    county = np.concatenate([np.arange(n_counties), rng.integers(0, n_counties,
                                                                 n_obs - n_counties)])
    floor = rng.integers(0, 2, n_obs).astype(float)
    y = rng.normal(1.5, 0.3, n_counties)[county] - 0.7 * floor + rng.normal(0.0, 0.75, n_obs)
    with pm.Model(coords={"county": range(n_counties), "obs": range(n_obs)}) as model:
        mu_a, sigma_a = pm.Normal("mu_a", 0.0, 10.0), pm.HalfNormal("sigma_a", 5.0)
        if centered:
            alpha = pm.Normal("alpha", mu_a, sigma_a, dims="county")
        else:
            alpha = pm.Deterministic(
                "alpha", mu_a + sigma_a * pm.Normal("z_a", 0.0, 1.0, dims="county"),
                dims="county")
        pm.Normal("y", alpha[county] + pm.Normal("beta", 0.0, 10.0) * floor,
                  pm.Exponential("sigma", 1.0), observed=y, dims="obs")
    return model


def _sparse_regression(n_obs: int, n_coefficients: int, seed: int):
    """Covariates and data with 4 non-zero coefficients, as the horseshoes regress them."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, n_coefficients))
    coefficients = np.zeros(n_coefficients)
    coefficients[:4] = [2.0, -1.5, 1.0, 0.8]
    return x, x @ coefficients + rng.normal(size=n_obs)


def horseshoe(centered: bool, n_obs: int = 100, n_coefficients: int = 40,
              seed: int = 0) -> pm.Model:
    """Sparse regression with a horseshoe prior (4 of 40 coefficients non-zero)."""
    x, y = _sparse_regression(n_obs, n_coefficients, seed)
    with pm.Model() as model:
        tau = pm.HalfCauchy("tau", 0.1)
        lam = pm.HalfCauchy("lam", 1.0, shape=n_coefficients)
        if centered:
            beta = pm.Normal("beta", 0.0, tau * lam)
        else:
            beta = pm.Deterministic(
                "beta", pm.Normal("z", 0.0, 1.0, shape=n_coefficients) * tau * lam)
        pm.Normal("y", x @ beta, pm.HalfNormal("sigma", 2.0), observed=y)
    return model


def regularized_horseshoe(n_obs: int = 100, n_coefficients: int = 40,
                          seed: int = 0) -> pm.Model:
    """The regularised horseshoe (Piironen & Vehtari 2017), non-centred as PyMC users write it."""
    x, y = _sparse_regression(n_obs, n_coefficients, seed)
    with pm.Model() as model:
        tau = pm.HalfStudentT("tau", 2.0, 0.1)
        lam = pm.HalfStudentT("lam", 5.0, shape=n_coefficients)
        c2 = pm.InverseGamma("c2", 2.0, 8.0)
        lam_tilde = pm.Deterministic(
            "lam_tilde", pm.math.sqrt(c2) * lam / pm.math.sqrt(c2 + tau**2 * lam**2))
        beta = pm.Deterministic(
            "beta", pm.Normal("z", 0.0, 1.0, shape=n_coefficients) * tau * lam_tilde)
        pm.Normal("y", x @ beta, pm.HalfNormal("sigma", 2.0), observed=y)
    return model


def zero_inflated(n_obs: int = 120, seed: int = 0) -> pm.Model:
    """``pm.ZeroInflatedPoisson`` counts."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n_obs) < 0.3, 0, rng.poisson(3.0, n_obs))
    with pm.Model() as model:
        pm.ZeroInflatedPoisson("y", psi=pm.Beta("psi", 1.0, 1.0), mu=pm.Gamma("mu", 2.0, 0.5),
                               observed=y)
    return model


def censored_normal(n_obs: int = 100, seed: int = 0) -> pm.Model:
    """``pm.Censored`` Normal observations, clipped to [-1, 3]."""
    y = np.clip(np.random.default_rng(seed).normal(1.0, 2.0, n_obs), -1.0, 3.0)
    with pm.Model() as model:
        dist = pm.Normal.dist(pm.Normal("mu", 0.0, 3.0), pm.HalfNormal("s", 3.0))
        pm.Censored("y", dist, lower=-1.0, upper=3.0, observed=y)
    return model


def weibull_survival(n_obs: int = 80, seed: int = 0) -> pm.Model:
    """Weibull survival regression, right-censored at 2 (``pm.Censored``).

    Its log-likelihood underflows to -inf at some prior draws (the survival function's far
    tail): those chains carry zero weight.
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n_obs)
    times = np.minimum(rng.weibull(1.5, n_obs) * np.exp(0.5 * x), 2.0)
    with pm.Model() as model:
        scale = pm.math.exp(pm.Normal("b0", 0.0, 1.0) + pm.Normal("b1", 0.0, 1.0) * x)
        pm.Censored("t", pm.Weibull.dist(alpha=pm.HalfNormal("a", 2.0), beta=scale),
                    lower=None, upper=2.0, observed=times)
    return model


def rats(n_groups: int = 71, seed: int = 0) -> pm.Model:
    """BDA's hierarchical binomial: ``theta ~ Beta(mu * kappa, (1 - mu) * kappa)``.

    With ``kappa ~ Pareto(1.5, 1)``, some prior draws of ``theta`` lie below 1e-300.
    """
    rng = np.random.default_rng(seed)
    trials = rng.integers(14, 52, n_groups)
    with pm.Model() as model:
        mu, kappa = pm.Beta("mu", 1.0, 1.0), pm.Pareto("kappa", alpha=1.5, m=1.0)
        theta = pm.Beta("theta", mu * kappa, (1.0 - mu) * kappa, shape=n_groups)
        pm.Binomial("y", trials, theta,
                    observed=rng.binomial(trials, rng.beta(2.3, 14.0, n_groups)))
    return model


def large_logistic(n_obs: int = 10000, n_coefficients: int = 5, seed: int = 0) -> pm.Model:
    """Logistic regression on 10000 observations: each model call is 10000 x 32 terms."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, n_coefficients))
    eta = x @ rng.normal(0.0, 0.5, n_coefficients) - 0.3
    with pm.Model() as model:
        pm.Bernoulli("y", logit_p=pm.Normal("a", 0.0, 2.0)
                     + x @ pm.Normal("beta", 0.0, 1.0, shape=n_coefficients),
                     observed=(rng.random(n_obs) < 1.0 / (1.0 + np.exp(-eta))).astype(int))
    return model


#: Models from PyMC's examples as users write them (``--examples``, gap only).
EXAMPLES = {"coal-mining switchpoint": switchpoint,
            "rugby, hierarchical Poisson": rugby,
            "radon, centered, 85 counties": radon,
            "radon, non-centered, 85 counties": lambda: radon(centered=False),
            "horseshoe, 40 coefficients, centered": lambda: horseshoe(True),
            "horseshoe, 40 coefficients, non-centered": lambda: horseshoe(False),
            "regularized horseshoe, 40 coefficients, non-centered": regularized_horseshoe,
            "zero-inflated Poisson": zero_inflated,
            "censored normal": censored_normal,
            "Weibull survival, right-censored": weibull_survival,
            "rats: hierarchical binomial, Beta(mu kappa, (1 - mu) kappa)": rats,
            "logistic regression, 10000 observations": large_logistic}


def book_models(*books: str) -> dict:
    """The models of this module's named books (``"SUITE"``, ...) and ``"GALLERY"``, by name."""
    found = {}
    for book in books:
        found.update(GALLERY if book == "GALLERY" else globals()[book])
    return found

def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _search(evidence) -> dict:
    """The auto search's attempts, e.g. ``1000, 1000 other form``, for the row."""
    attrs = evidence.attrs
    if "auto_n_steps" not in attrs:
        return {}
    other = np.atleast_1d(attrs.get("auto_reparameterized", 0))
    steps = np.atleast_1d(attrs["auto_n_steps"])
    other = np.broadcast_to(other, steps.shape)
    return {"attempts": ", ".join(f"{n}{' other form' if o else ''}"
                                  for n, o in zip(steps, other, strict=True)),
            "redrawn": int(attrs.get("data_redrawn", 0))}


def run_suite_model(name, build, seed, smc: bool, **settings) -> dict:
    analytic = build()
    row = {"model": name + "".join(f", {k}={v}" for k, v in settings.items()), "seed": seed}
    with analytic.model:
        bd, row["bdmc_s"] = _timed(lambda: pmb.sample_bdmc(random_seed=seed, progressbar=False,
                                                           **settings))
        truth_sim = analytic.log_evidence({"y": bd["observed_data"]["y"].values})
        ev = bd["evidence"]
        row.update(lower=float(ev["lower"]) - truth_sim, upper=float(ev["upper"]) - truth_sim,
                   gap=float(ev["gap"]), n_steps=int(ev.attrs["n_steps"]),
                   pilot=int(ev.attrs["pilot_chains"]), **_search(ev))
        ais, row["ais_s"] = _timed(lambda: pmb.sample_ais(random_seed=seed, progressbar=False,
                                                          **settings))
        truth = analytic.log_evidence()
        row["ais_error"] = float(ais["evidence"]["lower"]) - truth
        if smc:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata, row["smc_s"] = _timed(lambda: pm.sample_smc(
                    draws=2000, chains=2, cores=2, random_seed=seed, progressbar=False,
                    compute_convergence_checks=False))
            row["smc_errors"] = smc_log_ml(idata) - truth
    return row


def run_gap_only(name, build, seed, **settings) -> dict:
    """``sample_bdmc()`` on a model without an exact evidence: the gap is the certificate."""
    model = build()
    with model:
        bd, seconds = _timed(lambda: pmb.sample_bdmc(random_seed=seed, progressbar=False,
                                                     **settings))
    ev = bd["evidence"]
    return {"model": name, "seed": seed, "gap": float(ev["gap"]), "bdmc_s": seconds,
            "lower_abs": float(ev["lower"]), "upper_abs": float(ev["upper"]),
            "n_steps": int(ev.attrs["n_steps"]), "pilot": int(ev.attrs["pilot_chains"]),
            **_search(ev)}


def format_row(row: dict) -> str:
    attempts = f", attempts {row['attempts']}" if "," in row.get("attempts", "") else ""
    attempts += ", data redrawn" if row.get("redrawn") else ""
    if "ais_error" not in row:
        return (f"{row['model']:<40} seed {row['seed']}  BDMC [{row['lower_abs']:.2f}, "
                f"{row['upper_abs']:.2f}] gap {row['gap']:+.2f} ({row['n_steps']} steps, "
                f"pilot {row['pilot']}{attempts}) "
                f"{row['bdmc_s']:.1f} s")
    text = (f"{row['model']:<40} seed {row['seed']}  BDMC lower {row['lower']:+.2f} upper "
            f"{row['upper']:+.2f} gap {row['gap']:+.2f} ({row['n_steps']} steps, pilot "
            f"{row['pilot']}{attempts}) "
            f"{row['bdmc_s']:.1f} s | AIS error {row['ais_error']:+.2f} {row['ais_s']:.1f} s")
    if "smc_errors" in row:
        errors = ", ".join(f"{e:+.2f}" for e in row["smc_errors"])
        worse = float(np.max(np.abs(row["smc_errors"])))
        verdict = "ok" if abs(row["ais_error"]) <= max(worse, 0.5) else "WORSE"
        text += (f" | pm.sample_smc {errors} {row['smc_s']:.1f} s [AIS vs SMC worse chain: "
                 f"{verdict}]")
    met = abs(row["gap"]) <= 0.5 and abs(row["ais_error"]) <= 0.5 and (
        row["bdmc_s"] + row["ais_s"] <= 60)
    return text + ("  TARGET MET" if met else "  target not met")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="substrings of model names to run")
    parser.add_argument("--no-smc", action="store_true", help="skip pm.sample_smc")
    parser.add_argument("--no-paper", action="store_true", help="skip the paper's models")
    parser.add_argument("--no-suite", action="store_true",
                        help="skip the models with exact evidence by quadrature")
    parser.add_argument("--long", action="store_true",
                        help="also the 500- and 1000-step walks and an 80-point latent GP")
    parser.add_argument("--non-gaussian", action="store_true",
                        help="also models with non-Gaussian likelihoods (gap only)")
    parser.add_argument("--wide", action="store_true",
                        help="also a hierarchy and a regression above 400 coordinates (gap only)")
    parser.add_argument("--blocks", action="store_true",
                        help="also HSGP, gp.Marginal, LKJ, drift, Truncated, Student-t (gap only)")
    parser.add_argument("--examples", action="store_true",
                        help="also models from PyMC's examples: switchpoint, rugby, radon, "
                             "horseshoes, zero-inflated, censored (gap only)")
    parser.add_argument("--gallery", action="store_true",
                        help="also benchmarks/gallery.py: IRT, mixtures, softmax, Dirichlet-"
                             "multinomial, splines, 2-D GP, missing data (gap only)")
    parser.add_argument("--plain", action="store_true",
                        help="gap-only models with match_data=False (no guard on y*)")
    parser.add_argument("--max-time", type=float, default=None,
                        help="sample_bdmc's max_time for the gap-only models (default: its own)")
    args = parser.parse_args(argv)
    quiet()
    logging.getLogger("pymc").setLevel(logging.ERROR)

    def wanted(name):
        return not args.only or any(s.lower() in name.lower() for s in args.only)

    for seed in range(args.seeds):
        for name, build in ({} if args.no_suite else SUITE).items():
            if wanted(name):
                print(format_row(run_suite_model(name, build, seed, not args.no_smc)),
                      flush=True)
        if args.long:
            for name, build in filter(lambda item: wanted(item[0]), LONG.items()):
                print(format_row(run_suite_model(name, build, seed, not args.no_smc)),
                      flush=True)
        certified_only = {**(NON_GAUSSIAN if args.non_gaussian else {}),
                          **(WIDE if args.wide else {}),
                          **(BLOCKS if args.blocks else {}),
                          **(EXAMPLES if args.examples else {}),
                          **(GALLERY if args.gallery else {}),
                          **({} if args.no_paper else PAPER)}
        for name, build in filter(lambda item: wanted(item[0]), certified_only.items()):
            settings = ({} if args.max_time is None else {"max_time": args.max_time}) | (
                {"match_data": False} if args.plain else {})
            print(format_row(run_gap_only(name, build, seed, **settings)), flush=True)


if __name__ == "__main__":
    main()
