# ruff: noqa: RUF002  (Greek letters are the paper's notation)
"""A Gaussian with a Wishart prior on its precision, written as a user's exponential family.

Issue 18 lists this among the cases with exact evidence (Everitt et al. 2017, §3.2). Data
``y_i ~ N(0, Λ⁻¹)``, ``i = 1..n``, in dimension ``d = 2``, with ``Λ ~ W(ν, V)`` (density
``∝ |Λ|^{(ν-d-1)/2} exp(-tr(V⁻¹Λ)/2)``, mean ``νV``). The prior is a genuine Wishart, written
in PyMC by the Bartlett decomposition ``Λ = L A Aᵀ Lᵀ`` with ``V = L Lᵀ`` and ``A`` lower
triangular, ``A₁₁² ~ χ²(ν)``, ``A₂₂² ~ χ²(ν-1)``, ``A₂₁ ~ N(0, 1)`` (``pm.Wishart`` has no
transform to an unconstrained space, which the exchange pilot needs).

Likelihood as an un-normalised exponential family: with ``S = Σ y_i y_iᵀ``,
``γ(y | Λ) = exp(-tr(ΛS)/2) = exp(η · s(y))``, ``s = (S₁₁, S₁₂, S₂₂)``,
``η = -(Λ₁₁, 2Λ₁₂, Λ₂₂)/2``, and ``log Z(η) = (nd/2) log 2π - (n/2) log|Λ|``.

Closed form. Write ``Z_W(ν, V) = 2^{νd/2} |V|^{ν/2} Γ_d(ν/2)`` for the Wishart normaliser.
The prior times the likelihood is ``(2π)^{-nd/2} Z_W(ν, V)⁻¹`` times the un-normalised
``W(ν + n, V_n)`` density with ``V_n = (V⁻¹ + S)⁻¹``, so

    p(y) = (2π)^{-nd/2} Z_W(ν + n, V_n) / Z_W(ν, V)
         = π^{-nd/2} Γ_d((ν+n)/2) / Γ_d(ν/2) · |V_n|^{(ν+n)/2} / |V|^{ν/2}.

The test checks this first against brute-force Monte Carlo over the prior (the Bartlett draws
the model makes; within 4 standard errors), then estimates it with
``pmb.sample_unnormalized_evidence`` (exchange pilot + SAVIS, exact Gaussian draws of ``y``
given ``Λ``, ``Z(θ̂)`` from the family's ``log_partition``). Fixed seeds; the error must lie
within 4 reported standard errors and 0.1 nats.
"""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy.special import logsumexp, multigammaln

import pymc_bdmc as pmb

pytestmark = pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")

D, NU = 2, 4.0
V = np.array([[1.0, 0.3], [0.3, 0.5]])
L = np.linalg.cholesky(V)
Y = np.random.default_rng(0).multivariate_normal(np.zeros(D), [[1.5, -0.4], [-0.4, 0.8]], 12)
N = len(Y)
S = Y.T @ Y


def _precision(eta):
    return np.array([[-2.0 * eta[0], -eta[1]], [-eta[1], -2.0 * eta[2]]])


def _log_partition(eta):
    sign, logdet = np.linalg.slogdet(_precision(eta))
    if sign <= 0:
        return np.inf  # outside the natural parameter space
    return N * D / 2 * np.log(2 * np.pi) - N / 2 * logdet


def _sampler(eta, rng):
    cov = np.linalg.inv(_precision(eta))
    return rng.multivariate_normal(np.zeros(D), cov, size=N)


def _statistic(v):
    return pt.stack([(v[:, 0] ** 2).sum(), (v[:, 0] * v[:, 1]).sum(), (v[:, 1] ** 2).sum()])


def _model():
    with pm.Model() as model:
        c1 = pm.ChiSquared("c1", NU)
        c2 = pm.ChiSquared("c2", NU - 1)
        z = pm.Normal("z", 0.0, 1.0)
        a = pt.stack([pt.stack([pt.sqrt(c1), 0.0]), pt.stack([z, pt.sqrt(c2)])])
        b = pt.as_tensor_variable(L) @ a
        lam = b @ b.T
        natural = -0.5 * pt.stack([lam[0, 0], 2.0 * lam[0, 1], lam[1, 1]])
        pmb.ExponentialFamily("y", natural, statistic=_statistic, sampler=_sampler,
                              log_partition=_log_partition, observed=Y)
    return model


def _closed_form():
    v_n = np.linalg.inv(np.linalg.inv(V) + S)
    return (-N * D / 2 * np.log(np.pi) + multigammaln((NU + N) / 2, D)
            - multigammaln(NU / 2, D) + (NU + N) / 2 * np.linalg.slogdet(v_n)[1]
            - NU / 2 * np.linalg.slogdet(V)[1])


def test_closed_form_matches_monte_carlo_over_the_prior():
    rng = np.random.default_rng(1)
    m = 200_000
    a = np.zeros((m, D, D))
    a[:, 0, 0] = np.sqrt(rng.chisquare(NU, m))
    a[:, 1, 1] = np.sqrt(rng.chisquare(NU - 1, m))
    a[:, 1, 0] = rng.standard_normal(m)
    b = L @ a
    lam = b @ np.swapaxes(b, 1, 2)
    log_lik = (-N * D / 2 * np.log(2 * np.pi) + N / 2 * np.linalg.slogdet(lam)[1]
               - 0.5 * np.einsum("mij,ji->m", lam, S))
    estimate = logsumexp(log_lik) - np.log(m)
    w = np.exp(log_lik - log_lik.max())
    se = w.std() / w.mean() / np.sqrt(m)
    assert abs(estimate - _closed_form()) < 4 * se, (estimate, _closed_form(), se)
    assert se < 0.02  # the check is sharp enough to mean something


def test_wishart_evidence_by_savis_through_the_entry_point():
    model = _model()
    assert pmb.unnormalized_likelihoods(model) == ["y"]
    tree = pmb.sample_unnormalized_evidence(model=model, draws=1000, pilot_draws=1000,
                                            n_aux=2, random_seed=3, progressbar=False)
    ev = tree["evidence"]
    estimate = float(ev["lower"])
    se = float(ev["relative_se"])
    exact = _closed_form()
    assert ev.attrs["estimate_kind"] == "unbiased" and float(tree["evidence"]["ess"]) > 100
    assert abs(estimate - exact) < 4 * se and abs(estimate - exact) < 0.1, (estimate, exact, se)
