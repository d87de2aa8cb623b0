"""Kernel tests from exact draws of a tempered target: invariance and reversibility.

:func:`invariance` and :func:`reversibility` are :meth:`pymc_bdmc.verification.Verifier.invariance`
and :meth:`pymc_bdmc.verification.Verifier.reversibility`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
import scipy

from pymc_bdmc.verification.common import (
    QUANTILES,
    ExactSampler,
    KernelFactory,
    KernelTestResult,
    PPStatistics,
    Statistics,
    check_alpha,
    default_statistics,
    mean_acceptance,
    one_sample,
    stack_statistics,
    verdict,
    welch,
)

__all__ = ["invariance", "reversibility"]


def invariance(self, kernel: KernelFactory, *, t: int, beta: float,
               exact_sampler: ExactSampler | None = None, n_chains: int = 2000,
               n_transitions: int = 10, n_reference: int | None = None,
               statistics: Statistics | None = None, quantiles: Sequence[float] = QUANTILES,
               max_coordinates: int = 20, alpha: float = 0.01,
               random_seed=None) -> KernelTestResult:
    """Test that the kernel leaves ``f_beta = p(x) p(y|x)^beta`` invariant, from exact starts.

    ``n_chains`` independent chains start from exact draws of ``f_beta``, take
    ``n_transitions`` kernel steps (index ``t``) on the model's current data, and their end
    points are compared with ``n_reference`` fresh exact draws: for each statistic, the
    fractions below its exact quantiles at ``quantiles`` (Welch t-tests) and the whole
    distribution (two-sample Kolmogorov-Smirnov test), Bonferroni-corrected. All draws on
    both sides are independent.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition``.
    t : int
        Index at which the transition is called; its target must be ``f_beta``.
    beta : float
        Inverse temperature of that target.
    exact_sampler : callable, optional
        ``exact_sampler(n, rng)``: exact draws of ``f_beta`` (flat or keyed by
        value-variable name). Default: prior draws, for ``beta = 0`` only.
    n_chains : int, default 2000
    n_transitions : int, default 10
    n_reference : int, optional
        Default ``n_chains`` (plus ``n_reference // 4`` draws that fix the quantiles).
    statistics : callable, optional
        As for :meth:`geweke` (``data`` is the model's current data); default: every
        coordinate (up to ``max_coordinates``), the log prior and the log-likelihood.
    quantiles : sequence of float, default (0.25, 0.5, 0.75)
    max_coordinates : int, default 20
    alpha : float, default 0.01
    random_seed : optional

    Returns
    -------
    KernelTestResult
    """
    alpha = check_alpha(alpha)
    rng = np.random.default_rng(random_seed)
    sampler = self._sampler(beta, exact_sampler)
    n_reference = n_chains if n_reference is None else n_reference
    statistics = statistics or default_statistics(self, max_coordinates, with_data=False)
    data = self.density.observed_data()
    transition = kernel(self.density.parts)

    def exact(n):
        x_e = self._draw(sampler, n, rng)
        return stack_statistics(statistics(x_e, data, self.density.parts(x_e)))

    x = self._draw(sampler, n_chains, rng)
    parts = self.density.parts(x)
    infos = []
    for _ in range(n_transitions):
        x, parts, info = transition(rng, x, parts, t)
        infos.append(info)
    base_names, g_thr = exact(max(n_reference // 4, 100))
    g_ref = exact(n_reference)[1]
    g = stack_statistics(statistics(x, data, parts))[1]
    pp = PPStatistics(base_names, g_thr, quantiles)
    t_stat, p = welch(pp(g), pp(g_ref))
    names, statistic, p_values = list(pp.names), list(t_stat), list(p)
    kernel_value, reference_value = list(pp(g).mean(axis=0)), list(pp(g_ref).mean(axis=0))
    for j, label in enumerate(base_names):
        a, b = g[:, j], g_ref[:, j]
        if np.any(np.isnan(a)) or np.any(np.isnan(b)):
            res_stat, res_p = np.inf, 0.0
        else:
            res = scipy.stats.ks_2samp(a, b)
            res_stat, res_p = res.statistic, res.pvalue
        names.append(f"KS: {label}")
        statistic.append(res_stat)
        p_values.append(res_p)
        kernel_value.append(np.median(a))
        reference_value.append(np.median(b))
    ess = np.full(len(names), float(n_chains))
    return verdict("invariance", names, statistic, p_values, kernel_value, reference_value,
                   ess, alpha, n_chains, n_reference, mean_acceptance(infos))


def reversibility(self, kernel: KernelFactory, *, t: int, beta: float,
                  exact_sampler: ExactSampler | None = None, n_chains: int = 4000,
                  max_coordinates: int = 8, alpha: float = 0.01,
                  random_seed=None) -> KernelTestResult:
    """Test detailed balance: ``(x, x')`` exchangeable for ``x ~ f_beta``, ``x' ~ T(x, .)``.

    Features ``phi`` are bounded transforms of the coordinates (up to ``max_coordinates``)
    and of the log-likelihood: ``tanh(u)`` and ``tanh(u)^2``, with ``u`` the value centred
    and scaled by the median and interquartile range of an independent exact sample. For
    every pair ``(a, b)`` of features, ``a(x) b(x') - a(x') b(x)`` has mean zero under
    reversibility; one-sample t-tests over the ``n_chains`` independent pairs,
    Bonferroni-corrected.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition``.
    t : int
    beta : float
    exact_sampler : callable, optional
        As for :meth:`invariance`.
    n_chains : int, default 4000
    max_coordinates : int, default 8
    alpha : float, default 0.01
    random_seed : optional

    Returns
    -------
    KernelTestResult
    """
    alpha = check_alpha(alpha)
    rng = np.random.default_rng(random_seed)
    sampler = self._sampler(beta, exact_sampler)
    transition = kernel(self.density.parts)
    labels = [*self.layout.coordinate_labels()[:max_coordinates], "log_likelihood"]
    d = len(labels) - 1

    def values(x, parts):
        return np.column_stack([x[:, :d], parts.log_likelihood])

    x_std = self._draw(sampler, max(n_chains // 4, 100), rng)
    v_std = values(x_std, self.density.parts(x_std))
    center = np.median(v_std, axis=0)
    q25, q75 = np.quantile(v_std, [0.25, 0.75], axis=0)
    scale = np.where(q75 > q25, (q75 - q25) / 1.349, 1.0)  # the sd, for a normal

    def features(v):
        u = np.tanh((v - center) / scale)
        return np.column_stack([u, u**2])

    x0 = self._draw(sampler, n_chains, rng)
    parts0 = self.density.parts(x0)
    x1, parts1, info = transition(rng, x0, parts0, t)
    f0, f1 = features(values(x0, parts0)), features(values(x1, parts1))
    feature_names = [*labels, *(f"{lab}^2" for lab in labels)]
    pairs = list(combinations(range(f0.shape[1]), 2))
    diffs = np.column_stack([f0[:, a] * f1[:, b] - f1[:, a] * f0[:, b] for a, b in pairs])
    t_stat, p = one_sample(diffs)
    names = [f"{feature_names[a]} -> {feature_names[b]}" for a, b in pairs]
    return verdict("reversibility", names, t_stat, p, diffs.mean(axis=0),
                   np.zeros(len(pairs)), np.full(len(pairs), float(n_chains)), alpha,
                   n_chains, n_chains, mean_acceptance([info]))
