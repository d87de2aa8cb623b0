"""Check compiled densities and transition kernels the way the BDMC paper recommends.

Grosse, Ghahramani & Adams (2015, App. B) test an evidence estimator in layers: first the
densities, exactly, against the joint distribution; then the Markov kernels, statistically, with
Geweke's (2004) joint-distribution test; then the estimates, on models with a known answer
(:mod:`pymc_bdmc.known_evidence`). This module provides the first two layers for any PyMC model
and any kernel, so users can check their own kernels before trusting bounds built on them.

Checks
------
:meth:`Verifier.check_density`
    The compiled log prior, log-likelihood, tempered density and their gradients against PyMC's
    own functions at random points, to round-off, also after simulated data are swapped in.
    Deterministic: a failure is a bug, never bad luck.
:meth:`Verifier.geweke`
    Geweke's successive-conditional simulator at ``beta = 1``: the kernel alternates with
    redrawing ``y ~ p(y | theta)``, which keeps the joint ``p(theta, y)`` invariant, and the
    iterates' statistics are compared with forward simulations. Only at ``beta = 1`` does such a
    joint distribution exist; intermediate temperatures are tested by :meth:`Verifier.invariance`.
:meth:`Verifier.invariance`
    At any ``beta`` with exact draws of ``p(theta) p(y|theta)^beta / Z_beta`` (the prior;
    conjugate models, :meth:`pymc_bdmc.known_evidence.AnalyticModel.sample_tempered`), chains
    started from exact draws end at draws compared with fresh exact ones.
:meth:`Verifier.reversibility`
    Detailed balance: from ``x ~ f_beta`` and ``x' ~ T(x, .)``, ``(x, x')`` is exchangeable.

Every bound needs only invariance; reversibility makes the reverse run the exact time reversal of
the forward run, so that one frozen plan serves both directions as a matched pair.

Statistics are fractions of draws below fixed quantiles (bounded, so their normal approximations
hold for heavy tails), compared by Welch t-tests (and KS tests for invariance) with a Bonferroni
correction: a test's false-alarm rate is at most ``alpha``. The Geweke test runs many independent
chains and uses one number per chain, which carries the autocorrelation in full. Why the tests
are built this way: docs/explanation/validity.md, "Testing the kernels".

A kernel is a *factory* ``kernel(parts_fn) -> transition`` returning a ``Transition``
``transition(rng, x, parts, t) -> (x, parts, info)``; ``AnnealingPlan.transition`` is one. In the
Geweke test each chain has its own data set, so kernels must call ``parts_fn`` on all chains at
once, in order; kernels that evaluate their own model copy can be given with ``set_data=``.
"""

import logging

from pymc_bdmc.verification import common
from pymc_bdmc.verification.common import (
    DensityCheckResult,
    KernelTestResult,
    VerificationError,
)
from pymc_bdmc.verification.verifier import (
    Verifier,
    check_density_consistency,
    geweke_test,
    invariance_test,
    reversibility_test,
)

#: ``kernel(parts_fn) -> Transition``: builds a kernel on a given batched density function.
KernelFactory = common.KernelFactory

logger = logging.getLogger(__name__)  # the checks log here (pymc_bdmc.verification)

__all__ = [
    "DensityCheckResult",
    "KernelFactory",
    "KernelTestResult",
    "VerificationError",
    "Verifier",
    "check_density_consistency",
    "geweke_test",
    "invariance_test",
    "reversibility_test",
]
