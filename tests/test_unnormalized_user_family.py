"""A user's exponential family end to end (issue 18): Poisson vs geometric, paper §2.3.

Both likelihoods are written as un-normalised ``pmb.ExponentialFamily`` models, simulated
through ``unnormalized_simulator`` and their evidence estimated by SAVIS, against the closed
forms ``p1 = S! / (Π y_i! (n+1)^(S+1))`` (λ ~ Exp(1)) and ``p2 = n! S! / (n+S+1)!``
(p ~ U(0, 1)). Fixed seeds; errors within 4 reported standard errors and 0.1 nats.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy import stats
from scipy.special import gammaln

import pymc_bdmc as pmb
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized import mavis, savis, unnormalized_simulator

pytestmark = pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")

Y = np.random.default_rng(0).poisson(2.0, size=20).astype(float)
N, S = len(Y), Y.sum()


def _poisson_model():
    with pm.Model() as model:
        lam = pm.Exponential("lam", 1.0)
        pmb.ExponentialFamily(
            "y", pt.stack([pt.log(lam), pt.constant(1.0)]), observed=Y,
            statistic=lambda v: pt.stack([v.sum(), -pt.gammaln(v + 1).sum()]),
            sampler=lambda eta, rng: rng.poisson(np.exp(eta[0]), N).astype(float))
    return model


def _geometric_model():
    with pm.Model() as model:
        p = pm.Uniform("p", 0, 1)
        pmb.ExponentialFamily(
            "y", pt.log1p(-p)[None], observed=Y, statistic=lambda v: v.sum()[None],
            sampler=lambda eta, rng: rng.geometric(-np.expm1(eta[0]), N) - 1.0)
    return model


def test_poisson_and_geometric_evidence_by_savis():
    rng = np.random.default_rng(1)
    exact_1 = gammaln(S + 1) - gammaln(Y + 1).sum() - (S + 1) * np.log(N + 1)
    exact_2 = gammaln(N + 1) + gammaln(S + 1) - gammaln(N + S + 2)

    model = _poisson_model()
    assert pmb.unnormalized_likelihoods(model) == ["y"]
    sim = unnormalized_simulator("y", model)
    s_y = sim.statistics(Y)
    assert s_y == pytest.approx([S, -gammaln(Y + 1).sum()])
    post = stats.gamma(S + 1, scale=1 / (N + 1))  # the exact posterior, widened: sd x 1.5
    q = stats.gamma(post.mean() ** 2 / (1.5 * post.std()) ** 2,
                    scale=(1.5 * post.std()) ** 2 / post.mean())
    lam = q.rvs(size=1000, random_state=rng)
    eta = np.stack([np.log(lam), np.ones_like(lam)], 1)
    lam_hat = post.mean()
    fit_1 = savis(sim, s_y, eta, stats.expon.logpdf(lam), q.logpdf(lam),
                  np.array([np.log(lam_hat), 1.0]), N * lam_hat, n_aux=2, rng=rng)  # Z = e^{nλ}

    sim = unnormalized_simulator("y", _geometric_model())
    post = stats.beta(N + 1, S + 1)
    m, v = post.mean(), (1.5 * post.std()) ** 2
    common = m * (1 - m) / v - 1
    q = stats.beta(m * common, (1 - m) * common)
    p = q.rvs(size=1000, random_state=rng)
    fit_2 = savis(sim, sim.statistics(Y), np.log1p(-p)[:, None], stats.uniform.logpdf(p),
                  q.logpdf(p), np.array([np.log1p(-m)]), -N * np.log(m), n_aux=2,
                  rng=rng)  # Z = p^{-n}

    for fit, exact in ((fit_1, exact_1), (fit_2, exact_2)):
        error = fit.log_evidence - exact
        assert fit.exact and abs(error) < 4 * fit.relative_se and abs(error) < 0.1, error
    log_bf = fit_1.log_evidence - fit_2.log_evidence
    assert log_bf == pytest.approx(exact_1 - exact_2, abs=0.15)


def test_user_family_simulator_contract():
    sim = unnormalized_simulator("y", _poisson_model())
    draws = sim.sample(np.array([np.log(2.0), 1.0]), 3, np.random.default_rng(0))
    assert draws.shape == (3, N) and sim.statistics(draws).shape == (3, 2)
    with pytest.raises(BDMCInputError, match="no MCMC kernel"):
        mavis(sim, sim.statistics(Y), np.array([[0.5, 1.0]]), np.zeros(1), np.zeros(1),
              np.array([0.6, 1.0]), N * np.exp(0.6), n_bridges=2, rng=np.random.default_rng(0))
    with pm.Model() as normal:
        pm.Normal("z", 0, 1, observed=[0.1])
    with pytest.raises(BDMCInputError, match="not an observed variable"):
        unnormalized_simulator("z", normal)
    # Ising and ERGM variables give their own simulators, configured like the variable.
    with pm.Model() as model:
        pmb.Ising("f", pm.Normal("c"), observed=np.ones((3, 4), int), neighbourhood="second")
    ising = unnormalized_simulator("f", model)
    assert ising.shape == (3, 4) and ising.neighbourhood == "second" and ising.exact
