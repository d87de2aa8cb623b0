"""Sequential Monte Carlo forward (lower bound) and in reverse (SHME, upper bound).

Notation follows Grosse, Ghahramani & Adams (2015, §3.4, §4.2.2, Algorithms 2 and 3), with the
index conventions of :mod:`pymc_bdmc.algorithms.ais`: unnormalized targets ``f_0, ..., f_T`` with
``f_0 = p(x)`` (normalizing constant 1) and ``f_T = p(x) p(y | x)`` (normalizing constant
``p(y)``), and a kernel ``T_t`` leaving ``f_t`` invariant. A *path* gives the log incremental
weight ``log f_t(x) - log f_{t-1}(x)``:

* tempering, ``f_t = p(x) p(y | x)^beta_t``: the increment is
  ``(beta_t - beta_{t-1}) log p(y | x)``;
* data-point tempering (§3.4.1; Chopin 2002), ``f_t = p(x) prod_{i in S_t} p(y_i | x)`` with
  ``S_0`` empty and ``S_T`` all observations: the increment is the log-likelihood of the
  observations entering at stage ``t``.

Particles come in ``chains`` independent populations of ``particles`` each, stored as the rows of
one ``(chains * particles, n_dim)`` array so that every model evaluation is one batched call.
Each population yields its own unbiased estimate; averaging them (on the natural scale) gives the
reported bound, and their spread a standard error.

Forward SMC (Algorithm 2) reweights by the increments, adds ``log sum_k W_k g_k`` (the weighted
mean of the increments, correct whether or not the previous stage resampled) to ``log Z^``,
resamples systematically when the ESS falls below ``threshold * K``, and moves the particles, so
that ``E[Z^] = p(y)``. Reverse SMC, the sequential harmonic mean estimator (Algorithm 3), runs
the same algorithm on the reversed sequence from particles at an exact posterior sample ``x*``,
with increments ``f_{t-1} / f_t`` and resampling in proportion to ``1 / w``, so that
``E[V^] = 1 / p(y)`` and ``-log V^`` is a stochastic upper bound. Why both identities hold, and
why all particles may start at the same ``x*``: docs/explanation/validity.md, "SMC and the
sequential harmonic mean estimator".

A particle whose state or densities stop being finite gets weight zero at that stage, and is
counted; the next resampling removes it. That replaces the potential ``g_t`` by
``g_t * 1{x finite}``, so ``E[Z^] <= p(y)`` and ``E[V^] <= 1 / p(y)``: both bounds stay valid,
only looser (as for AIS).

The path is frozen before either run, from the pilot's thermodynamic-length schedule
(:mod:`pymc_bdmc.kernels.tuning`): the reverse run must not depend on ``x*`` beyond its start,
and a next-temperature search on the measured particles' own ESS would make ``E[Z^] = p(y)`` hold
only as the number of particles grows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.special import logsumexp

from pymc_bdmc.algorithms.ais import weight_increment
from pymc_bdmc.kernels.base import Transition
from pymc_bdmc.model.density import DensityParts
from pymc_bdmc.resampling import systematic_resample

__all__ = [
    "DataPointPath",
    "Path",
    "ResampleFn",
    "SMCRun",
    "TemperingPath",
    "merge_smc_runs",
    "smc_forward",
    "smc_reverse",
]

#: ``(rng, normalized_weights, num_samples) -> indices`` (see :mod:`pymc_bdmc.resampling`).
ResampleFn = Callable[[np.random.Generator, np.ndarray, int], np.ndarray]


class Path(Protocol):
    """A sequence of unnormalized targets ``f_0 = p(x), ..., f_T = p(x) p(y|x)``."""

    @property
    def n_steps(self) -> int:
        """``T``: the number of reweighting stages."""
        ...

    def log_increment(self, parts: DensityParts, t: int) -> np.ndarray:
        """``log f_t(x) - log f_{t-1}(x)`` for the states whose densities are ``parts``."""
        ...


@dataclass(frozen=True)
class TemperingPath:
    """Geometric tempering ``f_t = p(x) p(y | x)^beta_t``.

    Attributes
    ----------
    betas : ndarray, shape (n_steps + 1,)
        Inverse temperatures from 0 to 1.
    """

    betas: np.ndarray

    @property
    def n_steps(self) -> int:
        """Number of stages."""
        return len(self.betas) - 1

    def log_increment(self, parts: DensityParts, t: int) -> np.ndarray:
        """``(beta_t - beta_{t-1}) log p(y | x)`` (0 for a zero step, even where it is -inf)."""
        return weight_increment(float(self.betas[t] - self.betas[t - 1]), parts.log_likelihood)


@dataclass(frozen=True)
class DataPointPath:
    """Data-point tempering: observations enter one at a time or in blocks.

    ``f_t = p(x) prod_{i in S_t} p(y_i | x)`` with ``S_t = order[:n_included[t]]``.

    Attributes
    ----------
    n_included : ndarray of int, shape (n_steps + 1,)
        Number of observations in the likelihood at each stage, from 0 to ``n_observations``.
    order : ndarray of int, shape (n_observations,)
        The order in which observations enter (a permutation of ``0..n_observations - 1``).
    """

    n_included: np.ndarray
    order: np.ndarray

    @classmethod
    def in_blocks(cls, n_observations: int, n_steps: int) -> DataPointPath:
        """Observations in data order, in ``n_steps`` blocks of (nearly) equal size."""
        n_steps = min(int(n_steps), int(n_observations))
        n_included = np.round(np.linspace(0, n_observations, n_steps + 1)).astype(int)
        return cls(n_included, np.arange(n_observations))

    @property
    def n_steps(self) -> int:
        """Number of stages."""
        return len(self.n_included) - 1

    @property
    def n_observations(self) -> int:
        """Number of observations."""
        return len(self.order)

    def observation_weights(self, t: int) -> np.ndarray:
        """Per-observation weights of ``f_t``: 1 for the included observations, else 0."""
        weights = np.zeros(self.n_observations)
        weights[self.order[: self.n_included[t]]] = 1.0
        return weights

    def log_increment(self, parts: DensityParts, t: int) -> np.ndarray:
        """Log-likelihood of the observations entering at stage ``t``.

        ``parts`` must carry ``log_likelihood_per_observation`` (an
        :class:`~pymc_bdmc.model.density.ObservationParts`).
        """
        entering = self.order[self.n_included[t - 1]: self.n_included[t]]
        return parts.log_likelihood_per_observation[:, entering].sum(axis=1)


@dataclass(frozen=True)
class SMCRun:
    """Result of one SMC run over ``chains`` independent populations.

    Per-stage arrays are indexed by the target just reached, ``t = 0..n_steps`` (forward: stage
    ``t`` reweights ``f_{t-1} -> f_t``; reverse: ``f_{t+1} -> f_t``); entries with no stage are
    NaN (or 0 / False).

    Attributes
    ----------
    log_weight : ndarray, shape (chains,)
        Log of each population's unbiased estimate: of ``p(y)`` forward, of ``1 / p(y)``
        reverse. The bounds combine them as AIS chain weights are combined.
    particle_log_weight : ndarray, shape (chains, particles)
        Algorithm 2's weights ``w`` (forward) or Algorithm 3's ``1 / w`` (reverse): within a
        population their log-mean-exp is ``log_weight``.
    x : ndarray, shape (chains * particles, n_dim)
        Final states (population ``c`` in rows ``c * particles .. (c + 1) * particles - 1``).
    parts : DensityParts
        Densities at the final states.
    log_evidence_increment : ndarray, shape (n_steps + 1, chains)
        ``log sum_k W_k g_k`` of the stage that reached ``t``.
    ess : ndarray, shape (n_steps + 1, chains)
        Effective sample size of the normalized weights after that reweighting, before any
        resampling, as a fraction of ``particles``.
    resampled : ndarray of bool, shape (n_steps + 1, chains)
        Whether the population was resampled at that stage.
    acceptance_rate : ndarray, shape (n_steps + 1,)
        Mean acceptance of the move targeting ``f_t`` (NaN where none ran).
    n_divergent : ndarray of int, shape (n_steps + 1,)
    n_failed : ndarray of int, shape (n_steps + 1,)
        Particles given zero weight at that stage because their state or densities were not
        finite (see the module notes).
    """

    log_weight: np.ndarray
    particle_log_weight: np.ndarray
    x: np.ndarray
    parts: DensityParts
    log_evidence_increment: np.ndarray
    ess: np.ndarray
    resampled: np.ndarray
    acceptance_rate: np.ndarray
    n_divergent: np.ndarray
    n_failed: np.ndarray

    @property
    def n_failed_total(self) -> int:
        """Particles given zero weight over the run for numerical failures."""
        return int(self.n_failed.sum())

    @property
    def chains(self) -> int:
        """Number of independent populations."""
        return self.particle_log_weight.shape[0]

    @property
    def particles(self) -> int:
        """Particles per population."""
        return self.particle_log_weight.shape[1]


@dataclass(frozen=True)
class _Stage:
    increment: Callable[[DensityParts], np.ndarray]
    record: int  # index of the target reached
    move: int | None  # kernel index applied after reweighting (None: no move)


def _run_stages(rng, x, parts, stages, n_steps, chains, transition, ess_threshold,
                resample_fn, on_step, resample_rngs=None) -> SMCRun:
    n_total = len(x)
    particles = n_total // chains
    log_z = np.zeros(chains)
    log_w = np.full((chains, particles), -np.log(particles))  # normalized, per population
    increments = np.full((n_steps + 1, chains), np.nan)
    ess = np.full((n_steps + 1, chains), np.nan)
    resampled = np.zeros((n_steps + 1, chains), dtype=bool)
    acceptance = np.full(n_steps + 1, np.nan)
    n_divergent = np.zeros(n_steps + 1, dtype=int)
    n_failed = np.zeros(n_steps + 1, dtype=int)
    offsets = (np.arange(chains) * particles)[:, None]
    for stage in stages:
        with np.errstate(invalid="ignore"):  # NaN increments belong to failed particles
            g = stage.increment(parts).reshape(chains, particles)
        failed = (np.isnan(g) | np.isposinf(g)
                  | ~_finite_state(x, parts).reshape(chains, particles))
        if failed.any():
            n_failed[stage.record] = int(np.count_nonzero(failed & ~np.isneginf(log_w)))
            g = np.where(failed, -np.inf, g)
        with np.errstate(invalid="ignore"):  # a particle already at zero weight stays there
            log_wg = np.where(np.isneginf(log_w), -np.inf, log_w + g)
        increment = logsumexp(log_wg, axis=1)
        log_z = log_z + increment
        alive = np.isfinite(increment)
        # A population whose every weight vanished has estimate 0 (log -inf): keep it inert.
        log_w = np.where(alive[:, None], log_wg - np.where(alive, increment, 0.0)[:, None],
                         -np.log(particles))
        weights = np.exp(log_w)
        stage_ess = 1.0 / np.sum(weights**2, axis=1)
        increments[stage.record], ess[stage.record] = increment, stage_ess / particles
        redo = alive & (stage_ess < ess_threshold * particles)
        if redo.any():
            index = np.arange(n_total).reshape(chains, particles)
            for c in np.flatnonzero(redo):
                own = rng if resample_rngs is None else resample_rngs[c]
                index[c] = offsets[c, 0] + resample_fn(own, weights[c], particles)
            index = index.ravel()
            x, parts = x[index], parts.select(index)
            log_w[redo] = -np.log(particles)
            resampled[stage.record] = redo
        if stage.move is not None:
            x, parts, info = transition(rng, x, parts, stage.move)
            acceptance[stage.record] = np.mean(info.acceptance_rate)
            n_divergent[stage.record] = np.count_nonzero(info.divergent)
        if on_step is not None:
            on_step()
    particle_log_weight = log_z[:, None] + log_w + np.log(particles)
    return SMCRun(log_z, particle_log_weight, x, parts, increments, ess, resampled, acceptance,
                  n_divergent, n_failed)


def _finite_state(x: np.ndarray, parts: DensityParts) -> np.ndarray:
    return (np.all(np.isfinite(x), axis=1) & np.isfinite(parts.log_prior)
            & np.isfinite(parts.log_likelihood))


def _check_threshold(ess_threshold: float) -> float:
    if not 0.0 <= ess_threshold <= 1.0:
        raise ValueError(f"`ess_threshold` must be in [0, 1], got {ess_threshold}.")
    return float(ess_threshold)


def smc_forward(
    rng: np.random.Generator,
    x0: np.ndarray,
    parts0: DensityParts,
    path: Path,
    transition: Transition,
    *,
    chains: int = 1,
    ess_threshold: float = 0.5,
    resample_fn: ResampleFn = systematic_resample,
    on_step: Callable[[], None] | None = None,
    resample_rngs: Sequence[np.random.Generator] | None = None,
) -> SMCRun:
    """Run forward SMC from exact prior draws (stochastic lower bound on ``log p(y)``).

    Parameters
    ----------
    rng : numpy.random.Generator
    x0 : ndarray, shape (chains * particles, n_dim)
        Exact prior draws; population ``c`` is rows ``c * particles .. (c + 1) * particles - 1``.
    parts0 : DensityParts
        Densities at ``x0`` (for a :class:`DataPointPath`, with per-observation terms).
    path : Path
        The frozen sequence of targets.
    transition : callable
        ``transition(rng, x, parts, t)`` leaves ``f_t`` invariant (see
        :class:`~pymc_bdmc.kernels.base.Transition`).
    chains : int, default 1
        Number of independent populations the rows of ``x0`` are split into.
    ess_threshold : float, default 0.5
        Resample a population when its ESS falls below ``ess_threshold * particles``
        (0: never, as in AIS; 1: whenever the weights are uneven).
    resample_fn : callable, default :func:`~pymc_bdmc.resampling.systematic_resample`
    on_step : callable, optional
        Called after every stage.
    resample_rngs : sequence of numpy.random.Generator, optional
        One generator per population for its resampling (default: ``rng``). With ``rng`` a
        :class:`~pymc_bdmc.parallel.streams.BlockedGenerator` over the populations, every
        population's randomness is its own, so populations can run in separate groups.

    Returns
    -------
    SMCRun
        ``log_weight`` holds each population's ``log Z^``, a stochastic lower bound on
        ``log p(y)``.
    """
    chains, ess_threshold = _split(len(x0), chains), _check_threshold(ess_threshold)
    n_steps = path.n_steps
    stages = [
        _Stage(lambda parts, t=t: path.log_increment(parts, t), t, t if t < n_steps else None)
        for t in range(1, n_steps + 1)
    ]
    return _run_stages(rng, x0, parts0, stages, n_steps, chains, transition, ess_threshold,
                       resample_fn, on_step, resample_rngs)


def smc_reverse(
    rng: np.random.Generator,
    x_star: np.ndarray,
    particles: int,
    path: Path,
    transition: Transition,
    parts_fn: Callable[[np.ndarray], DensityParts],
    *,
    chains: int = 1,
    ess_threshold: float = 0.5,
    resample_fn: ResampleFn = systematic_resample,
    spread_transitions: int = 0,
    on_step: Callable[[], None] | None = None,
    resample_rngs: Sequence[np.random.Generator] | None = None,
) -> SMCRun:
    """Run SMC in reverse from exact posterior samples: the sequential harmonic mean estimator.

    Parameters
    ----------
    rng : numpy.random.Generator
    x_star : ndarray, shape (n_dim,) or (chains, n_dim)
        One exact posterior sample that every particle starts from (BDMC on one simulated data
        set), or one per population.
    particles : int
        Particles per population.
    path, transition : as for :func:`smc_forward`
        The same path and kernels as the forward run; they are visited backwards.
    parts_fn : callable
        Densities of ``f_T`` at a batch of states (to evaluate the start).
    chains : int, default 1
    ess_threshold : float, default 0.5
    resample_fn : callable, default :func:`~pymc_bdmc.resampling.systematic_resample`
        Applied to the normalized *reverse* weights, i.e. in proportion to ``1 / w``.
    spread_transitions : int, default 0
        Transitions at ``t = T`` applied to every particle before the first stage. They leave
        the posterior invariant, so each particle's start is still an exact posterior sample,
        but the particles no longer coincide.
    on_step : callable, optional
    resample_rngs : sequence of numpy.random.Generator, optional
        As for :func:`smc_forward`.

    Returns
    -------
    SMCRun
        ``log_weight`` holds each population's ``log V^`` with ``E[V^] = 1 / p(y)``; ``-log``
        of their mean is a stochastic upper bound on ``log p(y)`` (see the module docstring).
    """
    ess_threshold = _check_threshold(ess_threshold)
    x_star = np.asarray(x_star, dtype=float)
    if x_star.ndim == 1:
        x = np.tile(x_star, (chains * particles, 1))
    elif x_star.shape[0] == chains:
        x = np.repeat(x_star, particles, axis=0)
    else:
        raise ValueError(f"`x_star` must have shape (n_dim,) or ({chains}, n_dim), got "
                         f"{x_star.shape}.")
    parts = parts_fn(x)
    n_steps = path.n_steps
    for _ in range(spread_transitions):
        x, parts, _ = transition(rng, x, parts, n_steps)
    stages = [
        _Stage(lambda parts, t=t: -path.log_increment(parts, t), t - 1, t - 1 if t > 1 else None)
        for t in range(n_steps, 0, -1)
    ]
    return _run_stages(rng, x, parts, stages, n_steps, chains, transition, ess_threshold,
                       resample_fn, on_step, resample_rngs)


def merge_smc_runs(runs: Sequence[SMCRun]) -> SMCRun:
    """Combine runs over disjoint sets of populations into one run over all of them, in order.

    Per-population arrays are concatenated; the per-stage mean acceptance is averaged with
    weights equal to each run's particles (all populations have the same number), counts are
    summed.
    """
    if len(runs) == 1:
        return runs[0]
    rows = np.array([len(r.x) for r in runs], dtype=float)
    acceptance = np.stack([r.acceptance_rate for r in runs])
    with np.errstate(invalid="ignore"):
        mean_acceptance = (rows[:, None] * acceptance).sum(axis=0) / rows.sum()
    return SMCRun(
        log_weight=np.concatenate([r.log_weight for r in runs]),
        particle_log_weight=np.concatenate([r.particle_log_weight for r in runs]),
        x=np.concatenate([r.x for r in runs]),
        parts=DensityParts(*(np.concatenate([getattr(r.parts, f) for r in runs])
                             for f in ("log_prior", "log_likelihood", "grad_log_prior",
                                       "grad_log_likelihood"))),
        log_evidence_increment=np.concatenate([r.log_evidence_increment for r in runs], axis=1),
        ess=np.concatenate([r.ess for r in runs], axis=1),
        resampled=np.concatenate([r.resampled for r in runs], axis=1),
        acceptance_rate=mean_acceptance,
        n_divergent=np.sum([r.n_divergent for r in runs], axis=0),
        n_failed=np.sum([r.n_failed for r in runs], axis=0),
    )


def _split(n_rows: int, chains: int) -> int:
    if chains < 1 or n_rows % chains:
        raise ValueError(f"{n_rows} particles cannot be split into {chains} equal populations.")
    return int(chains)
