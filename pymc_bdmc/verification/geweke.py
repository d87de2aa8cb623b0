"""Geweke's (2004) joint-distribution test of a kernel that targets the posterior.

:func:`geweke` is :meth:`pymc_bdmc.verification.Verifier.geweke`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from pymc_bdmc.kernels.base import Transition
from pymc_bdmc.verification.common import (
    QUANTILES,
    KernelFactory,
    KernelTestResult,
    MeanInfo,
    PPStatistics,
    Statistics,
    VerificationError,
    batched_step,
    check_alpha,
    default_statistics,
    mean_acceptance,
    stack_statistics,
    verdict,
    welch,
)
from pymc_bdmc.verification.per_chain import ConditionalSimulator, PerChainDensity

__all__ = ["geweke", "geweke_machinery"]

logger = logging.getLogger("pymc_bdmc.verification")


def geweke_machinery(self):
    """The per-chain simulator and densities of the Geweke test, built once per verifier."""
    if self._conditional is None or self._per_chain is None:
        if self.model.potentials:
            raise VerificationError(
                "The model has Potentials, which are not part of its generative process: "
                "the Geweke test cannot simulate data from it.")
        # Check points from a fixed stream of their own: building the machinery on the first
        # call must not shift the random streams of the test itself.
        rng = np.random.default_rng(0)
        check_x = self.prior_draws(3, rng)
        self._conditional = ConditionalSimulator(self.density, check_x)
        self._per_chain = PerChainDensity(self.density, check_x,
                                          self._conditional(check_x, rng))
        logger.debug("Geweke machinery: simulation %s, densities %s.",
                     self._conditional.mode, self._per_chain.mode)
    return self._conditional, self._per_chain


def geweke(self, kernel: KernelFactory | Transition, *, t: int, n_chains: int = 100,
           n_iterations: int = 200, burn_in: int | None = None, n_reference: int = 4000,
           statistics: Statistics | None = None, quantiles: Sequence[float] = QUANTILES,
           max_coordinates: int = 20, alpha: float = 0.01,
           set_data: Callable[[dict], None] | None = None,
           random_seed=None) -> KernelTestResult:
    """Geweke's joint-distribution test of a kernel that targets the posterior.

    ``n_chains`` independent successive-conditional chains start from exact joint draws
    ``(theta, y) ~ p(theta) p(y|theta)``; each iteration applies the kernel (at index
    ``t``, whose target must be ``p(theta | y)``, i.e. ``beta = 1``) and then redraws
    ``y ~ p(y | theta)``. For each statistic and each level in ``quantiles``, the fraction
    of iterations ``burn_in..n_iterations`` at which the statistic lies below the level's
    quantile under forward simulation is computed per chain, and the chains' fractions are
    compared with the fraction among ``n_reference`` forward simulations by Welch t-tests,
    Bonferroni-corrected (see the module notes).

    Parameters
    ----------
    kernel : callable
        A kernel factory ``kernel(parts_fn) -> Transition`` (e.g. ``plan.transition``), or,
        with ``set_data``, a ready-made ``Transition``.
    t : int
        Index at which the transition is called; its target must be the posterior.
    n_chains : int, default 100
        Independent Geweke chains (the units of the test; at least 20).
    n_iterations : int, default 200
        Kernel steps (each followed by redrawing the data) per chain.
    burn_in : int, optional
        Iterations left out of the chain means (default ``n_iterations // 2``). Every
        iterate is exact under a correct kernel, so this costs no validity; it gives a
        biased kernel's drift time to build up.
    n_reference : int, default 4000
        Forward simulations (plus ``n_reference // 4`` more that fix the quantiles).
    statistics : callable, optional
        ``statistics(x, data, parts) -> {name: (chains,)}``; default: every coordinate
        (up to ``max_coordinates``), the log prior, the log-likelihood, and the mean and
        mean square of each observed variable.
    quantiles : sequence of float, default (0.25, 0.5, 0.75)
        Probability levels of the P-P comparison.
    max_coordinates : int, default 20
    alpha : float, default 0.01
        Family-wise false-alarm rate.
    set_data : callable, optional
        For kernels that cannot use ``parts_fn``: called with ``{name: data}`` of one chain
        before ``kernel`` (then a ``Transition``) is applied to that chain alone. It is
        left holding the last chain's data: restore your own data afterwards.
    random_seed : optional

    Returns
    -------
    KernelTestResult
    """
    alpha = check_alpha(alpha)
    if n_chains < 20:
        raise ValueError(f"`n_chains` must be at least 20 (the test's units), got {n_chains}.")
    burn_in = n_iterations // 2 if burn_in is None else burn_in
    if not 0 <= burn_in < n_iterations:
        raise ValueError(f"`burn_in` must be in [0, n_iterations), got {burn_in}.")
    rng = np.random.default_rng(random_seed)
    simulate, per_chain = geweke_machinery(self)
    statistics = statistics or default_statistics(self, max_coordinates, with_data=True)

    def forward(n):
        x_f = self.prior_draws(n, rng)
        data_f = simulate(x_f, rng)
        return stack_statistics(statistics(x_f, data_f, per_chain(x_f, data_f)))

    base_names, g_thr = forward(max(n_reference // 4, 100))
    pp = PPStatistics(base_names, g_thr, quantiles)
    g_ref = pp(forward(n_reference)[1])

    x = self.prior_draws(n_chains, rng)
    current = {"data": simulate(x, rng)}

    def parts_fn(q):
        return per_chain(q, current["data"])

    step = (_per_chain_step(kernel, set_data, per_chain, current, t)
            if set_data is not None else batched_step(kernel(parts_fn), t))
    parts = parts_fn(x)
    n_used = n_iterations - burn_in
    sums = np.zeros((n_chains, len(pp.names)))
    infos = []
    for i in range(n_iterations):
        x, _, info = step(rng, x, parts)
        infos.append(info)
        current["data"] = simulate(x, rng)
        parts = parts_fn(x)
        if i >= burn_in:
            sums += pp(stack_statistics(statistics(x, current["data"], parts))[1])
    chain_means = sums / n_used
    t_stat, p = welch(chain_means, g_ref)
    grand = chain_means.mean(axis=0)
    # Indicators: one draw's variance is q (1 - q); a chain mean's variance shows how many
    # of its n_used draws were effectively independent.
    with np.errstate(invalid="ignore", divide="ignore"):
        ess = np.minimum(n_chains * grand * (1 - grand) / np.var(chain_means, axis=0, ddof=1),
                         n_chains * n_used)
    return verdict("geweke", pp.names, t_stat, p, grand, g_ref.mean(axis=0), ess, alpha,
                   n_chains, n_reference, mean_acceptance(infos))


def _per_chain_step(transition, set_data, per_chain, current, t):
    def step(rng, x, parts):
        new_x, infos = np.empty_like(x), []
        for k in range(len(x)):
            data_k = {name: values[k] for name, values in current["data"].items()}
            set_data(data_k)
            one = {name: values[k:k + 1] for name, values in current["data"].items()}
            xk, _, info = transition(rng, x[k:k + 1], per_chain(x[k:k + 1], one), t)
            new_x[k] = xk[0]
            infos.append(info)
        return new_x, None, MeanInfo(mean_acceptance(infos))

    return step
