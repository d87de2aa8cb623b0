"""How to run: fused kernels from the run's counts, worker processes from timing the kernels.

Nothing here may change a result: workers leave every number as it is (each block of chains
has its own streams), and the fused kernels, which agree with the NumPy ones only to round-off,
are chosen from the plan's counts alone, never from timing or from what has been compiled, so
a seed gives the same numbers in a fresh process and in a warm one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from pymc_bdmc.config import DEFAULT_TUNING
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.hmc import hmc_step
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.parallel.executors import IN_PROCESS, Workers, resolve_workers
from pymc_bdmc.pipeline.timing import timed

__all__ = [
    "FUSED_CALL_OVERHEAD",
    "FUSED_MIN_LEAPFROG_STEPS",
    "FUSED_MIN_SWEEPS",
    "FUSED_SWEEP_SAVING",
    "METRIC_PRODUCTS",
    "KernelTiming",
    "choose_workers",
    "count_sweeps",
    "count_transitions",
    "fused_forms",
    "metric_seconds",
    "model_call_seconds",
    "predicted_seconds",
    "predicted_wall_seconds",
    "use_fused_kernel",
]

logger = logging.getLogger("pymc_bdmc")

#: With ``fused_kernel=None``, runs of at least this many batched leapfrog steps per form of
#: the kernel they use run the fused kernels. A fused step saves 5-100 us of Python (median 23,
#: measured on the models of ``benchmarks/time_to_certificate.py``) and a form costs seconds to
#: compile cold: this is where the saving is twice a compilation of 2 s.
FUSED_MIN_LEAPFROG_STEPS = 200_000
#: The same for runs of at least this many Gibbs sweeps (the coal-mining model's 111 values:
#: 2.9 ms a sweep, 40% of it saved).
FUSED_MIN_SWEEPS = 4_000
#: A fused transition, measured, costs about this multiple of its model calls alone (1.2 on a
#: 4-parameter regression, 1.6 on the 375-parameter low-rank model).
FUSED_CALL_OVERHEAD = 1.6
#: Products of the chains with a ``d x d`` matrix per leapfrog step of a dense metric
#: (kernels/hmc.py: the move and the kick; the principal form's two with the base's basis).
METRIC_PRODUCTS = 2
#: Share of a NumPy Gibbs sweep's time the compiled color updates save (measured 44% on the
#: binary-attributes model, 750 parameters, 16 chains).
FUSED_SWEEP_SAVING = 0.4


@dataclass(frozen=True)
class KernelTiming:
    """Measured cost of the hot path on all chains, to choose how to run (never the result).

    Attributes
    ----------
    model_call : float
        Seconds per batched model call.
    transition : float
        Seconds per NumPy HMC transition (``n_leapfrog`` model calls and Python).
    sweep : float
        Seconds per Gibbs sweep of the discrete coordinates (with its parts).
    metric : float
        Seconds per leapfrog step of a dense metric's products with the chains (two products
        with a ``d x d`` matrix, for a dense factor or a base's principal basis alike), averaged
        over the plan's steps; 0 for diagonal metrics. A fused kernel saves Python, not these:
        on the 1000-step random walk they are most of a transition, and without them 1000
        steps were predicted at 5 s where 100 took 10.
    transition_metric : float
        Seconds per leapfrog step of dense-metric products inside the timed ``transition``
        (``transition`` is timed on the last step's kernel): the NumPy kernel's prediction
        swaps them for the plan's average ``metric``. On stochastic volatility at T=400, in its
        other form, the last kernel was diagonal and 11 of 19 pilot temperatures dense: 1000
        steps were predicted at 29 s and took 45 s.
    model_call_half, transition_half, metric_half, transition_metric_half : float or None
        The same on half of the chains (None: half the time). A group of chains on a worker
        costs the part that does not shrink with fewer chains plus its share of the rest
        (:meth:`per_group`): a dense metric's product streams the whole ``d x d`` matrix for
        any number of chains (1001 coordinates: 1.18 ms for 32 chains, 0.84 ms for 16), and
        Python's overhead is paid per call, so two workers ran the 1000-step walk 1.4 times,
        not 2 times, faster.
    """

    model_call: float
    transition: float
    sweep: float = 0.0
    metric: float = 0.0
    model_call_half: float | None = None
    transition_half: float | None = None
    metric_half: float | None = None
    transition_metric: float = 0.0
    transition_metric_half: float | None = None

    @staticmethod
    def per_group(full: float, half: float | None, n_groups: int) -> float:
        """Return the seconds on one of ``n_groups`` equal groups of the chains.

        From the times on all of them and on half of them: affine in the number of chains.
        """
        n_groups = max(1, n_groups)
        if half is None:
            return full / n_groups
        fixed = min(max(2.0 * half - full, 0.0), full)
        return fixed + (full - fixed) / n_groups

    @classmethod
    def measure(cls, density: ModelDensity, x: np.ndarray, plan: AnnealingPlan,
                gibbs: ChromaticGibbs | None = None) -> KernelTiming:
        """Time the model call, the HMC transition and the Gibbs sweep on the chains ``x``.

        Parameters
        ----------
        density : ModelDensity
        x : numpy.ndarray
        plan : AnnealingPlan
        gibbs : ChromaticGibbs, optional

        Returns
        -------
        KernelTiming
        """
        # One BLAS thread, as in the runs it predicts (parallel/annealing.py): with BLAS
        # threads on a busy machine, a latent GP's 80 x 80 factorisations took 16 ms per chain
        # instead of 0.23.
        with threadpool_limits(limits=1, user_api="blas"), timed("kernel_timing"):
            return cls._measure(density, x, plan, gibbs)

    @classmethod
    def _measure(cls, density, x, plan, gibbs) -> KernelTiming:
        calls_before = density.n_evaluations  # timing is not part of the run's cost
        terms_before = density.n_term_evaluations
        parts_fn = plan.path_parts(density.parts)  # the prior's path, or a fitted base's
        parts = parts_fn(x)
        rng = np.random.default_rng(0)  # a throwaway stream: the chains' own are untouched
        beta, params = float(plan.betas[-1]), plan.kernel(plan.n_steps)
        half = max(1, len(x) // 2)
        half_parts = parts_fn(x[:half])
        calls, transitions, calls_half, transitions_half = [], [], [], []
        for _ in range(3):
            for rows, row_parts, call_times, transition_times in (
                    (x, parts, calls, transitions),
                    (x[:half], half_parts, calls_half, transitions_half)):
                start = time.perf_counter()
                density.parts(rows)
                call_times.append(time.perf_counter() - start)
                start = time.perf_counter()
                hmc_step(rng, rows, row_parts, beta, params, parts_fn)
                transition_times.append(time.perf_counter() - start)
        sweep = 0.0
        if gibbs is not None:
            start = time.perf_counter()
            density.parts(gibbs.sweep(rng, x, beta, density.terms)[0])
            sweep = time.perf_counter() - start
        density.n_evaluations, density.n_term_evaluations = calls_before, terms_before
        # The timed transition ran the last step's kernel, with a dense (or principal) metric
        # or not; metric_seconds prices both kinds alike.
        last_dense = params.mass_factor is not None
        return cls(float(np.median(calls)), float(np.median(transitions)), sweep,
                   metric_seconds(x, plan), float(np.median(calls_half)),
                   float(np.median(transitions_half)), metric_seconds(x[:half], plan),
                   metric_seconds(x, plan, last_dense) if last_dense else 0.0,
                   metric_seconds(x[:half], plan, last_dense) if last_dense else 0.0)

    def numpy_transition(self, n_leapfrog: int, n_groups: int = 1) -> float:
        """Predicted seconds per NumPy transition, with the plan's average dense products.

        The measured transition, its own dense products (if any) swapped for the plan's
        average; the parameters are :meth:`fused_transition`'s.
        """
        measured = self.per_group(self.transition, self.transition_half, n_groups)
        average = self.per_group(self.metric, self.metric_half, n_groups)
        included = self.per_group(self.transition_metric, self.transition_metric_half,
                                  n_groups)
        return max(measured + n_leapfrog * (average - included), 0.0)

    def fused_transition(self, n_leapfrog: int, n_groups: int = 1) -> float:
        """Predicted seconds per fused transition: its model calls and a little more.

        Parameters
        ----------
        n_leapfrog : int
        n_groups : int, default 1
            On one of this many equal groups of the chains (:meth:`per_group`).

        Returns
        -------
        float
        """
        return n_leapfrog * (
            FUSED_CALL_OVERHEAD * self.per_group(self.model_call, self.model_call_half,
                                                 n_groups)
            + self.per_group(self.metric, self.metric_half, n_groups))


def model_call_seconds(density: ModelDensity, x: np.ndarray,
                       timing: KernelTiming | None) -> float:
    """Seconds of one batched evaluation of the densities and gradients at the chains ``x``."""
    if timing is not None:
        return timing.model_call
    start = time.perf_counter()
    density.parts(x)
    return time.perf_counter() - start


def metric_seconds(x: np.ndarray, plan: AnnealingPlan, every_step: bool = False) -> float:
    """:attr:`KernelTiming.metric` of ``plan`` on the chains ``x`` (seconds).

    Parameters
    ----------
    x : numpy.ndarray, shape (chains, n_dim)
    plan : AnnealingPlan
    every_step : bool, default False
        As if every step's metric were dense (:attr:`KernelTiming.transition_metric`), not
        only the plan's share of them.

    Returns
    -------
    float
    """
    if not (plan.is_dense or every_step):
        return 0.0
    share = 1.0 if every_step else float(np.mean(np.asarray(plan.mass_index)[1:] >= 0))
    basis = np.eye(x.shape[1])  # any d x d matrix: the product costs the same
    products = []
    for _ in range(3):
        start = time.perf_counter()
        np.dot(x, basis)
        products.append(time.perf_counter() - start)
    return METRIC_PRODUCTS * share * float(np.median(products))


def count_transitions(plan: AnnealingPlan, directions: int, spread: int,
                      gibbs: ChromaticGibbs | None = None) -> int:
    """HMC transitions of the measured runs (each chain group runs all of them).

    Parameters
    ----------
    plan : AnnealingPlan
    directions : int
        1 (forward) or 2 (forward and reverse).
    spread : int
        Kernel steps at beta = 1 before a reverse run.
    gibbs : ChromaticGibbs, optional
        The discrete coordinates' sweep (where it goes can add a transition a step).

    Returns
    -------
    int
    """
    return plan.hmc_transitions_per_step(gibbs) * _kernel_steps(plan, directions, spread)


def count_sweeps(plan: AnnealingPlan, directions: int, spread: int,
                 gibbs: ChromaticGibbs | None) -> int:
    """Gibbs sweeps of the measured runs: one or two a step (:meth:`~AnnealingPlan.transition`).

    Parameters are those of :func:`count_transitions`.

    Returns
    -------
    int
    """
    return plan.sweeps_per_step(gibbs) * _kernel_steps(plan, directions, spread)


def _kernel_steps(plan: AnnealingPlan, directions: int, spread: int) -> int:
    return directions * plan.n_steps + (spread if directions == 2 else 0)


def predicted_seconds(timing: KernelTiming | None, n_transitions: int, n_sweeps: int,
                      n_leapfrog: int) -> float:
    """Predicted seconds of the measured runs on the NumPy kernels (0 without a timing).

    Workers are chosen on this, which a fused kernel does not always cut much (on large models
    the model calls dominate either way).

    Parameters
    ----------
    timing : KernelTiming or None
    n_transitions, n_sweeps, n_leapfrog : int

    Returns
    -------
    float
    """
    if timing is None:
        return 0.0
    return n_transitions * timing.numpy_transition(n_leapfrog) + n_sweeps * timing.sweep


def predicted_wall_seconds(timing: KernelTiming | None, n_transitions: int, n_sweeps: int,
                           fused: bool, n_leapfrog: int, n_parallel: int) -> float:
    """Predicted wall seconds of the measured runs on the kernels and workers chosen.

    Parameters
    ----------
    timing : KernelTiming or None
    n_transitions, n_sweeps : int
    fused : bool
        Whether the compiled kernels run.
    n_leapfrog : int
    n_parallel : int
        Groups of chains running at the same time.

    Returns
    -------
    float
        0 without a timing.
    """
    if timing is None:
        return 0.0
    # Each group runs every transition on its own chains (KernelTiming.per_group).
    n_parallel = max(1, n_parallel)
    transition = (timing.fused_transition(n_leapfrog, n_parallel) if fused else
                  timing.numpy_transition(n_leapfrog, n_parallel))
    sweep = (1.0 - FUSED_SWEEP_SAVING) * timing.sweep if fused else timing.sweep
    return n_transitions * transition + n_sweeps * sweep / n_parallel


def use_fused_kernel(setting: bool | None, density: ModelDensity, plan: AnnealingPlan,
                     n_transitions: int, n_sweeps: int = 0) -> bool:
    """Whether to run the compiled kernels (see ``fused_kernel`` in the docstrings).

    With ``setting=None`` the answer depends on the run's counts only: not on timing, nor on
    what this process or this machine has compiled. The compiled kernels agree with the NumPy
    ones to round-off only, which a long search can amplify into another length or another
    verdict, so a choice made from the state of the caches would let a warm call and a cold
    one with the same seed disagree.

    Parameters
    ----------
    setting : bool or None
        The user's ``fused_kernel``.
    density : ModelDensity
    plan : AnnealingPlan
    n_transitions : int
        HMC transitions of the run.
    n_sweeps : int, default 0
        Gibbs sweeps of the run.

    Returns
    -------
    bool
    """
    if setting is False:
        return False
    if not density.can_fuse_hmc:
        if setting:
            logger.debug("No fused kernel for this model (its densities are evaluated chain by "
                        "chain); using the NumPy kernel.")
        return False
    base = getattr(plan, "base", None)
    if getattr(plan, "principal_metrics", False) and not base.full_rank:
        if setting:
            logger.debug("No fused kernel in the principal coordinates of a base of low rank; "
                         "using the NumPy kernel.")
        return False
    if setting:
        return True
    forms = len(fused_forms(plan))
    return (n_transitions * plan.n_leapfrog >= FUSED_MIN_LEAPFROG_STEPS * forms
            or n_sweeps >= FUSED_MIN_SWEEPS)


def fused_forms(plan: AnnealingPlan) -> list[dict]:
    """The forms of the compiled kernel a plan's steps use (``FusedHMC.compiled`` keywords)."""
    base = getattr(plan, "base", None) is not None
    index = getattr(plan, "mass_index", None)
    steps = np.zeros(1, dtype=int) - 1 if index is None else np.asarray(index)[1:]
    # Vectors of principal scales (kernels/pilot_metrics.py) are a form of their own.
    principal = getattr(plan, "principal_metrics", False)
    return [{"dense": bool(dense), "base": base, "principal": bool(dense) and principal}
            for dense in np.unique(steps >= 0)]


def choose_workers(cores, executor, predicted_seconds: float, n_blocks: int, *,
                   announce: bool = True, threshold: float = DEFAULT_TUNING.auto_parallel_seconds
                   ) -> Workers:
    """Where the chains run: as asked, or all cores for runs predicted to be long.

    Parameters
    ----------
    cores : int or None
    executor : Executor or None
    predicted_seconds : float
    n_blocks : int
        Blocks of chains (fewer than two cannot be split).
    announce : bool, default True
        Log the choice of all cores (off while a run's length is still being decided).
    threshold : float, optional
        Seconds from which all cores are used
        (:attr:`~pymc_bdmc.config.Tuning.auto_parallel_seconds`).

    Returns
    -------
    Workers
    """
    if executor is not None or cores is not None:
        return resolve_workers(cores, executor)
    if n_blocks < 2 or predicted_seconds < threshold:
        return IN_PROCESS
    if announce:
        logger.debug("Predicted run of %.0f s: using all cores (set `cores=1` to stay in this "
                    "process).", predicted_seconds)
    return resolve_workers(None)
