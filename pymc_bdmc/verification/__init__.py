"""Check compiled densities and transition kernels the way the BDMC paper recommends.

Grosse, Ghahramani & Adams (2015, App. B) test an evidence estimator in layers: first the
densities, exactly, against the joint distribution; then the Markov kernels, statistically, with
Geweke's (2004) joint-distribution test; then the estimates, on models with a known answer
(:mod:`pymc_bdmc.testing`). This module provides the first two layers for any PyMC model and any
kernel, so users can check their own kernels before trusting bounds built on them.

Checks
------
:meth:`Verifier.check_density`
    The compiled log prior, log-likelihood, tempered density ``log p(x) + beta log p(y|x)`` and
    their gradients agree with PyMC's own (separately compiled) functions at random points, to
    round-off (default tolerance ``1e-9`` relative), and still do after simulated data are
    swapped in. This is deterministic: a failure is a bug, never bad luck.
:meth:`Verifier.geweke`
    The successive-conditional simulator of Geweke (2004) at ``beta = 1``: alternate the kernel
    (which should leave ``p(theta | y)`` invariant) with redrawing ``y ~ p(y | theta)``. Both
    steps leave the joint ``p(theta, y)`` invariant, so, started from exact joint draws, every
    iterate is an exact joint draw. Statistics of the iterates are compared with forward
    simulations. Redrawing the data amplifies a kernel's bias: a kernel that inflates the noise
    regenerates noisier data, which inflates it further.
:meth:`Verifier.invariance`
    At any ``beta`` where exact draws of ``f_beta = p(theta) p(y|theta)^beta / Z_beta`` exist
    (the prior at ``beta = 0``; conjugate models, see
    :meth:`pymc_bdmc.testing.AnalyticModel.sample_tempered`), start many independent chains
    from exact draws, apply the kernel, and compare the end points with fresh exact draws.
:meth:`Verifier.reversibility`
    From exact draws ``x ~ f_beta`` and one transition ``x' ~ T(x, .)``, a kernel in detailed
    balance makes ``(x, x')`` exchangeable, so ``E[a(x) b(x') - a(x') b(x)] = 0`` for any
    functions ``a, b``. The :class:`~pymc_bdmc.kernels.base.Transition` contract asks for this
    (a compound kernel ``A then B`` must be run as ``B then A`` in reverse).

What each property is needed for: every bound's validity needs only *invariance* of each kernel
(reverse AIS is AIS run from the posterior to the prior, and AIS needs nothing more); the
Geweke and invariance tests check it. *Reversibility* makes the reverse run the exact time
reversal of the forward run (paper eq. 27), which is what lets one frozen plan serve both
directions as a matched pair and underlies reading the gap as a divergence between the two runs
(§4.5). An unreversed compound kernel leaves both bounds valid, but breaks that pairing.

Why the Geweke test runs at ``beta = 1`` only
---------------------------------------------
At ``beta < 1`` the kernel leaves ``p(theta) p(y|theta)^beta`` invariant in ``theta``, but there
is in general *no* joint distribution of ``(theta, y)`` whose two conditionals are that tempered
posterior and ``p(y | theta)``: that would need ``p(y|theta)^(1 - beta)`` to factor into a
function of ``y`` times a function of ``theta``. The alternating chain would still converge, but
to an unknown distribution, so no forward simulation could serve as its reference. (Redrawing
``y`` from the normalised ``p(y|theta)^beta`` instead fixes the conditional, but the matching
marginal of ``theta``, ``p(theta) integral p(y|theta)^beta dy``, is then model-specific.)
Intermediate temperatures are therefore tested directly for invariance, from exact tempered
draws, where a model provides them. The kernels at every temperature run the same code with a
different ``beta``, so ``beta = 1`` (Geweke, any model) plus a conjugate model at a few
``beta < 1`` (exact starts) exercises every path.

Statistics and false alarms
---------------------------
Each test compares statistics of the kernel's draws with independent exact draws. The default
statistics are each unconstrained coordinate, the log prior and the log-likelihood, and for the
Geweke test the mean and mean square of each observed variable. They are compared as a P-P plot
is read (App. B): at fixed probability levels (by default the quartiles), the fraction of draws
below the level's exact quantile, fixed beforehand from a separate set of exact draws. Such
indicator statistics are bounded, so the normal approximation behind each test holds even for
heavy-tailed quantities (a Student-t marginal, whose square has no fourth moment, made raw
moment comparisons reject a correct kernel far too often). Each fraction gets a two-sided Welch
t-test; :meth:`~Verifier.invariance` adds a two-sample Kolmogorov-Smirnov test per statistic.
A test fails if any p-value is below ``alpha / m`` for ``m`` comparisons (Bonferroni), so its
false-alarm rate is at most ``alpha`` up to the normal approximations.

The iterates of one Geweke chain are autocorrelated. Rather than estimate an autocorrelation
time, the test runs many *independent* chains, each started from an exact joint draw, and uses
one number per chain and statistic: the chain's fraction over its iterations. These are
independent and identically distributed across chains, with exactly the forward-simulation
expectation if the kernel is right, so their spread across chains carries the autocorrelation
in full. The effective sample size reported is ``q (1 - q)`` (one draw's variance) over the
variance of a chain's fraction, times the number of chains.

Kernels
-------
A kernel is given as a *factory* ``kernel(parts_fn) -> transition``: given a batched density
function ``parts_fn(x) -> DensityParts``, it returns a ``Transition``
``transition(rng, x, parts, t) -> (x, parts, info)``. An :class:`AnnealingPlan` is one:
``plan.transition``. The tests call ``transition`` at the index ``t`` you give (whose target
must be the posterior for the Geweke test, and ``f_beta`` for the others). In the Geweke test
each chain has its own data set, and the ``parts_fn`` handed to the factory evaluates each row
of ``x`` under its chain's current data: kernels must call it on all chains at once, in order.
Kernels that cannot work through ``parts_fn`` (e.g. ones that evaluate their own copy of the
model) can instead be given ready-made with ``set_data=``, a function the test calls with each
chain's data before applying the kernel to that chain alone.
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
