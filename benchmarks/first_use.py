"""Models a new user writes, at the defaults: ``calibrate()`` against ``pm.sample_smc``.

Each model is written as PyMC's documentation and examples write it (ordinal cutpoints as sorted
draws, an N-mixture's latent counts, a VonMises angle, a logp-only ``pm.CustomDist``, ...).
``pmb.calibrate(random_seed=seed)`` certifies on simulated data and estimates ``log p(y)`` of
the model's own data; ``pm.sample_smc`` (2 chains x 2000 draws, ``cores=1``) runs beside it.
Where the evidence is known (closed form, quadrature or a sum over a latent count) the row
gives both tools' errors. Models that are refused print the message's start: the refusal is the
result. Run from the repository root::

    python3 benchmarks/first_use.py                 # every model, seed 0
    python3 benchmarks/first_use.py --only angle    # substrings of model names
    python3 benchmarks/first_use.py --seeds 3

A model's first run in a process compiles it (both tools); the times are of that run.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from _common import pymc_smc_evidence
from scipy import integrate, stats
from scipy.special import gammaln, i0e, logsumexp

import pymc_bdmc as pmb


def ordinal_sorted_cutpoints():
    """Ordered logistic regression, its cutpoints sorted draws (not ``transform=ordered``)."""
    rng = np.random.default_rng(12)
    x = rng.normal(size=120)
    y = (1.2 * x[:, None] + rng.logistic(size=120)[:, None] > [-1.5, -0.3, 0.6, 1.8]).sum(1)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 2)
        cut = pm.Deterministic("c", pt.sort(pm.Normal("c_raw", 0, 3, shape=4)))
        pm.OrderedLogistic("y", eta=beta * x, cutpoints=cut, observed=y)
    return model, None


def angle_near_the_wrap():
    """A VonMises mean direction near pi, concentration unknown (quadrature evidence)."""
    y = np.random.default_rng(33).vonmises(np.pi - 0.05, 4.0, 60)
    with pm.Model() as model:
        mu = pm.VonMises("mu", 0.0, 0.5)
        pm.VonMises("y", mu, pm.Gamma("kappa", 2, 0.5), observed=y)
    mus, kappas = np.linspace(-np.pi, np.pi, 721)[:-1], np.linspace(1e-3, 30, 600)
    log_lik = (kappas[None, :] * np.cos(y[:, None] - mus[None, :]).sum(0)[:, None]
               - y.size * (np.log(2 * np.pi * i0e(kappas)) + kappas)[None, :])
    grid = (log_lik + stats.vonmises.logpdf(mus, 0.5)[:, None]
            + stats.gamma.logpdf(kappas, 2, scale=2)[None, :])
    return model, float(logsumexp(grid) + np.log((mus[1] - mus[0]) * (kappas[1] - kappas[0])))


def binomial_unknown_trials():
    """``n ~ DiscreteUniform(0, 30)``, ``y ~ Binomial(n, p)``: impossible data below a count."""
    y = np.random.default_rng(43).binomial(12, 0.4, 5)
    with pm.Model() as model:
        n = pm.DiscreteUniform("n", 0, 30)
        pm.Binomial("y", n=n, p=pm.Beta("p", 1, 1), observed=y)
    terms = [np.log(integrate.quad(lambda p, k=k: np.prod(stats.binom.pmf(y, k, p)), 0, 1,
                                   epsabs=0, epsrel=1e-10, limit=200)[0]) - np.log(31)
             for k in range(int(y.max()), 31)]
    return model, float(logsumexp(terms))


def _n_mixture_data(sites: int):
    """Counts of ``sites`` sites visited three times, and their exact ``log p(y)``."""
    rng = np.random.default_rng(35)
    y = rng.binomial(rng.poisson(8, sites)[:, None], 0.5, size=(sites, 3))
    # Sums over N < 100 and a 400 x 200 grid agree with N < 200 and 1200 x 600 to 1e-9 (6 sites).
    counts = np.arange(100)
    lams, ps = np.linspace(0.01, 60, 400), np.linspace(0.0005, 0.9995, 200)
    poisson = stats.poisson.logpmf(counts[None, :], lams[:, None])
    grid = np.zeros((lams.size, ps.size))
    for row in y:
        binomial = stats.binom.logpmf(row[:, None, None], counts, ps[:, None]).sum(0)
        grid += logsumexp(poisson[:, None, :] + binomial[None], axis=2)
    grid += stats.gamma.logpdf(lams, 2, scale=4)[:, None] + stats.beta.logpdf(ps, 2, 2)
    return y, float(logsumexp(grid) + np.log((lams[1] - lams[0]) * (ps[1] - ps[0])))


def n_mixture(sites: int = 6):
    """Sites visited three times, latent abundances ``N ~ Poisson(lam)`` (window Gibbs)."""
    y, exact = _n_mixture_data(sites)
    with pm.Model() as model:
        lam, p = pm.Gamma("lam", 2, 0.25), pm.Beta("p", 2, 2)
        pm.Binomial("y", n=pm.Poisson("N", lam, shape=sites)[:, None], p=p, observed=y)
    return model, exact


def n_mixture_summed_out(sites: int = 20, most: int = 100):
    """The N-mixture with each site's ``N`` summed out of its likelihood, up to ``most``.

    As docs/how-to/discrete.md writes it: a ``pm.CustomDist`` whose ``logp`` sums over ``N``
    and whose ``random`` draws ``N``, then the counts; its third parameter only carries the
    visits' dimension into the signature. The data and evidence of :func:`n_mixture`.
    """
    y, exact = _n_mixture_data(sites)

    def logp(value, lam, p, visits):
        n = pt.arange(most + 1)
        log_lik = pm.logp(pm.Binomial.dist(n=n, p=p), value[..., None]).sum(axis=-2)
        return pt.logsumexp(pm.logp(pm.Poisson.dist(lam), n) + log_lik, axis=-1)

    def random(lam, p, visits, rng=None, size=None):
        count = rng.poisson(lam, size)
        return rng.binomial(count[..., None], np.asarray(p)[..., None],
                            size=(*np.shape(count), np.shape(visits)[-1]))

    with pm.Model() as model:
        lam, p = pm.Gamma("lam", 2, 0.25), pm.Beta("p", 2, 2)
        pm.CustomDist("y", lam, p, np.zeros(3), logp=logp, random=random,
                      signature="(),(),(v)->(v)", observed=y)
    return model, exact


def latent_count_rates():
    """Latent counts ``N_i ~ Poisson(lam)`` as a Poisson likelihood's rates (quadrature)."""
    y = np.array([2, 5, 0, 7, 3, 4])
    with pm.Model() as model:
        count = pm.Poisson("N", pm.Gamma("lam", 2, 0.5), shape=y.size)
        pm.Poisson("y", count + 0.5, observed=y)
    n = np.arange(200)

    def joint(lam):
        per_site = [logsumexp(stats.poisson.logpmf(n, lam) + stats.poisson.logpmf(v, n + 0.5))
                    for v in y]
        return np.exp(sum(per_site)) * stats.gamma.pdf(lam, 2, scale=2)

    return model, float(np.log(integrate.quad(joint, 0, 80, limit=400, epsrel=1e-10)[0]))


def known_covariance():
    """A 3-variate normal mean, covariance known (closed form)."""
    cov = np.array([[1.0, 0.5, 0.2], [0.5, 2.0, 0.3], [0.2, 0.3, 1.5]])
    y = np.random.default_rng(16).multivariate_normal([1, -1, 0.5], cov, size=50)
    with pm.Model() as model:
        mu = pm.MvNormal("mu", mu=np.zeros(3), cov=4 * np.eye(3))
        pm.MvNormal("y", mu=mu, cov=cov, observed=y)
    joint = np.kron(np.eye(50), cov) + np.kron(np.ones((50, 50)), 4 * np.eye(3))
    return model, float(stats.multivariate_normal(np.zeros(150), joint).logpdf(y.ravel()))


def multinomial_rows():
    """Twenty multinomial rows of 30 under one Dirichlet (closed form)."""
    y = np.random.default_rng(17).multinomial(30, [0.1, 0.2, 0.3, 0.4], size=20)
    with pm.Model() as model:
        pm.Multinomial("y", n=30, p=pm.Dirichlet("p", np.ones(4)), observed=y)
    total = y.sum(0)
    exact = (np.sum(gammaln(31) - gammaln(y + 1).sum(1)) + gammaln(4) + gammaln(1 + total).sum()
             - gammaln(4 + total.sum()))
    return model, float(exact)


def logp_only_likelihood():
    """A Laplace likelihood as a ``pm.CustomDist`` with ``logp`` and no ``random``."""
    y = np.random.default_rng(18).laplace(0.5, 1.0, 50)
    with pm.Model() as model:
        mu, scale = pm.Normal("mu", 0, 3), pm.HalfNormal("b", 2)
        pm.CustomDist("y", mu, scale, observed=y,
                      logp=lambda value, m, b: -pt.log(2 * b) - pt.abs(value - m) / b)
    return model, None


def poisson_mixture_sorted():
    """Two Poisson components, their rates sorted draws, Dirichlet weights."""
    rng = np.random.default_rng(19)
    y = np.where(rng.random(150) < 0.4, rng.poisson(2, 150), rng.poisson(9, 150))
    with pm.Model() as model:
        rates = pm.Deterministic("lam", pt.sort(pm.Gamma("lam_raw", 2, 0.3, shape=2)))
        pm.Mixture("y", w=pm.Dirichlet("w", np.ones(2)), comp_dists=pm.Poisson.dist(rates),
                   observed=y)
    return model, None


def truncated_counts():
    """Zero-truncated Poisson counts (``pm.Truncated``)."""
    y = np.random.default_rng(47).poisson(3, 200)
    with pm.Model() as model:
        pm.Truncated("y", pm.Poisson.dist(pm.Gamma("lam", 2, 0.5)), lower=1,
                     observed=y[y > 0][:80])
    return model, None


def _robust_regression():
    rng = np.random.default_rng(11)
    x = rng.normal(size=(100, 3))
    y = x @ [1.0, -2.0, 0.5] + 0.7 * rng.standard_t(3, 100)
    with pm.Model() as model:
        mean = pm.Normal("a", 0, 5) + pm.math.dot(x, pm.Normal("b", 0, 5, shape=3))
        pm.StudentT("y", nu=pm.Gamma("nu", 2, 0.1), mu=mean, sigma=pm.HalfNormal("s", 2),
                    observed=y)
    return model, None


def _negative_binomial_regression():
    rng = np.random.default_rng(13)
    x = rng.normal(size=100)
    mu = np.exp(1.0 + 0.5 * x)
    with pm.Model() as model:
        rate = pm.math.exp(pm.Normal("a", 0, 2) + pm.Normal("b", 0, 2) * x)
        pm.NegativeBinomial("y", mu=rate, alpha=pm.Exponential("alpha", 0.5),
                            observed=rng.negative_binomial(3, 3 / (3 + mu)))
    return model, None


def _zero_inflated_latent():
    rng = np.random.default_rng(42)
    y = np.where(rng.random(50) < 0.3, 0, rng.poisson(4, 50))
    with pm.Model() as model:
        present = pm.Bernoulli("z", pm.Beta("psi", 1, 1), shape=50)
        pm.Poisson("y", pm.Gamma("lam", 2, 0.5) * present + 1e-6, observed=y)
    return model, None


def _latent_classes():
    rng = np.random.default_rng(41)
    labels = rng.integers(0, 3, 40)
    with pm.Model() as model:
        z = pm.Categorical("z", p=pm.Dirichlet("w", np.ones(3)), shape=40)
        pm.Normal("y", pm.Normal("mu", 0, 5, shape=3)[z], 1.0,
                  observed=rng.normal(np.array([-3.0, 0.0, 3.0])[labels], 1.0))
    return model, None


def _continuous_changepoint():
    rng = np.random.default_rng(20)
    t = np.arange(100.0)
    with pm.Model() as model:
        tau = pm.Uniform("tau", 0, 100)
        level = pm.math.switch(t < tau, pm.Normal("m1", 0, 5), pm.Normal("m2", 0, 5))
        pm.Normal("y", level, pm.HalfNormal("s", 2),
                  observed=np.where(t < 60, 1.0, 3.0) + rng.normal(0, 1, 100))
    return model, None


def _stick_breaking_mixture():
    rng = np.random.default_rng(54)
    y = np.concatenate([rng.normal(-2, 0.5, 40), rng.normal(2, 0.5, 40)])
    with pm.Model() as model:
        w = pm.StickBreakingWeights("w", alpha=pm.Gamma("alpha", 2, 1), K=4)
        pm.NormalMixture("y", w=w, mu=pm.Normal("mu", 0, 3, shape=5), sigma=0.5, observed=y)
    return model, None


def _zero_sum_effects():
    rng = np.random.default_rng(38)
    group = rng.integers(0, 6, 90)
    y = rng.normal(np.array([-1, 0, 1, 0.5, -0.5, 0])[group], 1)
    with pm.Model(coords={"g": range(6)}) as model:
        effects = pm.ZeroSumNormal("eff", sigma=pm.HalfNormal("sd", 1), dims="g")
        pm.Normal("y", pm.Normal("mu", 0, 3) + effects[group], 1.0, observed=y)
    return model, None


def _latent_autoregression():
    rng = np.random.default_rng(48)
    x = np.zeros(50)
    for t in range(1, 50):
        x[t] = 0.8 * x[t - 1] + rng.normal(0, 0.5)
    with pm.Model() as model:
        latent = pm.AR("lat", rho=[pm.Uniform("rho", -1, 1)], sigma=pm.HalfNormal("sig", 1),
                       init_dist=pm.Normal.dist(0, 1), shape=50)
        pm.Normal("y", latent, 0.3, observed=x + rng.normal(0, 0.3, 50))
    return model, None


def _minibatch_scaled():
    with pm.Model() as model:
        pm.Normal("y", pm.Normal("mu", 0, 1), 1, total_size=200,
                  observed=np.random.default_rng(0).normal(1, 1, 20))
    return model, None


#: Models without a known evidence (and two that are refused), run after the ones above.
MORE = {"Student-t regression, unknown nu": _robust_regression,
        "negative binomial regression": _negative_binomial_regression,
        "zero inflation as a latent Bernoulli": _zero_inflated_latent,
        "latent classes, Categorical labels": _latent_classes,
        "continuous changepoint (switch)": _continuous_changepoint,
        "stick-breaking mixture, 5 components": _stick_breaking_mixture,
        "ZeroSumNormal group effects": _zero_sum_effects,
        "latent AR(1) observed with noise": _latent_autoregression,
        "total_size carried over from ADVI": _minibatch_scaled}

MODELS = {"ordinal regression, sorted cutpoints": ordinal_sorted_cutpoints,
          "VonMises angle near the wrap": angle_near_the_wrap,
          "Binomial with unknown trials": binomial_unknown_trials,
          "N-mixture, 6 sites x 3 visits": n_mixture,
          "N-mixture, 20 sites x 3 visits": lambda: n_mixture(20),
          "N-mixture, 20 sites, N summed out": n_mixture_summed_out,
          "latent counts as Poisson rates": latent_count_rates,
          "MvNormal mean, known covariance": known_covariance,
          "multinomial rows, Dirichlet": multinomial_rows,
          "logp-only CustomDist likelihood": logp_only_likelihood,
          "Poisson mixture, sorted rates": poisson_mixture_sorted,
          "zero-truncated Poisson": truncated_counts, **MORE}


def run(name: str, seed: int) -> str:
    """One row: calibrate's outcome and time, pm.sample_smc's, and both errors where known."""
    model, exact = MODELS[name]()
    start = time.perf_counter()
    try:
        with model:
            result = pmb.calibrate(random_seed=seed, progressbar=False)
    except pmb.BDMCInputError as err:
        return f"{name:34s} seed {seed}: refused: {str(err)[:150]}"
    ours = time.perf_counter() - start
    cal = result["calibration"].attrs
    estimate = float(result["evidence"]["lower"])
    smc_estimates, smc = pymc_smc_evidence(model, seed)
    errors = ("" if exact is None else
              f"; errors {estimate - exact:+.3f}, pm.sample_smc's "
              + ", ".join(f"{value - exact:+.2f}" for value in smc_estimates))
    return (f"{name:34s} seed {seed}: {'certified' if cal['certified'] else 'NOT certified'}, "
            f"gap {cal['certified_gap']:+.3f} ({cal['certified_n_steps']} steps){errors}; "
            f"{ours:.1f} s against {smc:.1f} s (ratio {ours / smc:.2f})")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="substrings of model names")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args(argv)
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    for name in MODELS:
        if args.only and not any(s in name for s in args.only):
            continue
        for seed in range(args.seeds):
            print(run(name, seed), flush=True)


if __name__ == "__main__":
    main()
