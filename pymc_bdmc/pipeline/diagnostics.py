"""Warnings about finished runs: dead, divergent or failed chains, degenerate weights.

Logged on the ``pymc_bdmc`` logger for every method; the same facts are stored in the result's
groups. What the user should act on is a warning; what only describes a valid run (divergent,
hence rejected, moves) is at DEBUG. Within a length search, an attempt's warnings are held
(:func:`deferred_warnings`) and only the returned attempt's are logged.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from pymc_bdmc.algorithms.ais import AISRun
from pymc_bdmc.algorithms.smc import SMCRun
from pymc_bdmc.estimators import EvidenceBounds

__all__ = [
    "PRIOR_END_BETA",
    "deferred_warnings",
    "log_ais_diagnostics",
    "log_heldout_diagnostics",
    "log_smc_diagnostics",
    "log_step_diagnostics",
    "outlying_coordinate",
    "prior_end_divergences",
    "replay_warnings",
    "reverse_stuck",
    "warn",
]

logger = logging.getLogger("pymc_bdmc")

#: Where an attempt's warnings are held, or None to log them at once.
_HELD: ContextVar[list | None] = ContextVar("pymc_bdmc_held_warnings", default=None)


def warn(message: str, *args) -> None:
    """Log a warning about a run, or hold it where :func:`deferred_warnings` asks."""
    held = _HELD.get()
    if held is None:
        logger.warning(message, *args)
    else:
        held.append((message, args))


@contextmanager
def deferred_warnings():
    """Hold the warnings of the runs inside; yield the list they are held in."""
    held: list = []
    token = _HELD.set(held)
    try:
        yield held
    finally:
        _HELD.reset(token)


def replay_warnings(held: list) -> None:
    """Log warnings held by :func:`deferred_warnings`."""
    for message, args in held:
        logger.warning(message, *args)


#: Divergences mostly below this inverse temperature are the prior's own geometry: the target
#: there is the prior, nearly.
PRIOR_END_BETA = 1e-3


def prior_end_divergences(n_divergent: np.ndarray, betas: np.ndarray) -> bool:
    """Whether most divergences happened below :data:`PRIOR_END_BETA`.

    Parameters
    ----------
    n_divergent, betas : numpy.ndarray, shape (n_steps + 1,)

    Returns
    -------
    bool
    """
    n_divergent, betas = np.asarray(n_divergent), np.asarray(betas)
    total = n_divergent.sum()
    return bool(total > 0 and n_divergent[betas < PRIOR_END_BETA].sum() > 0.5 * total)


def log_ais_diagnostics(bounds, forward, reverse, betas=None, theta=None,
                        labels=None, from_prior: bool = True) -> None:
    """Warn about dead, divergent or failed chains and a degenerate lower bound (AIS runs).

    Parameters
    ----------
    bounds : EvidenceBounds
    forward : AISRun
    reverse : AISRun or None
    betas : numpy.ndarray, optional
        The schedule, to say where on the path a step is.
    theta : numpy.ndarray, shape (n_dim,), optional
        ``theta*``, where the reverse chains started (BDMC) ...
    labels : list of str, optional
        ... and the flat coordinates' names: where the reverse chains are stuck, the warning
        names the coordinate of ``theta*`` farthest from the forward chains' final states.
    from_prior : bool, default True
        Whether the path starts at the prior (else at a fitted Gaussian): what the target is
        where divergences gather at small ``beta``.
    """
    def at(step):  # where a step is on the path, for messages
        return f"step {step}" + ("" if betas is None else f" (beta {betas[step]:.3g})")

    # chains that failed numerically are reported below, not twice
    dead = int(np.count_nonzero(~np.isfinite(forward.log_weight))) - forward.n_failed_total
    if dead:
        warn("%d forward chains ended with zero weight (log weight -inf).", dead)
    for name, run in (("forward", forward), ("reverse", reverse)):
        if run is None:
            continue
        if run.n_divergent.sum():
            worst = int(np.argmax(run.n_divergent))
            logger.debug(
                "%d divergent HMC trajectories in the %s run, at %d of %d steps (most at %s); "
                "per step: annealing['n_divergent_%s']. They are rejected moves, so the bounds "
                "stay valid; what they cost the mixing shows in the BDMC gap.",
                int(run.n_divergent.sum()), name, int(np.count_nonzero(run.n_divergent)),
                len(run.n_divergent) - 1, at(worst), name,
            )
            if betas is not None and not from_prior and prior_end_divergences(run.n_divergent,
                                                                               betas):
                logger.debug(
                    "Most of the %s run's divergences are near the path's start (beta < %g), "
                    "where the target is the fitted Gaussian tilted by a sliver of the model's "
                    "density: that density changes steeply where the Gaussian's tails reach "
                    "(variables spanning many orders of magnitude want a tighter prior).",
                    name, PRIOR_END_BETA)
            elif betas is not None and prior_end_divergences(run.n_divergent, betas):
                logger.debug(
                    "Most of the %s run's divergences are near the prior (beta < %g), where the "
                    "target is the prior itself. Where the gap is wide, the prior's geometry is "
                    "the likely cause. A funnel (a scale and the variables it scales) and a "
                    "`pm.AR` whose prior allows explosive coefficients are what "
                    "`reparameterize=True` swaps; other draws spanning many orders of magnitude "
                    "want a tighter prior.",
                    name, PRIOR_END_BETA)
        if run.n_failed_total:
            first = int(np.flatnonzero(run.n_failed)[0])
            warn(
                "%d of %d %s chains reached a non-finite state or density (NaN or infinite), "
                "first at %s. They carry zero weight, which keeps the %s bound valid but "
                "looser; per chain: evidence['failed_step_%s'].",
                run.n_failed_total, len(run.log_weight), name, at(first),
                "lower" if name == "forward" else "upper", name,
            )
    if bounds.ess_forward < 2:
        warn(
            "The forward weights have an effective sample size of %.1f: the lower bound rests on "
            "one chain. Increase `n_steps`.", bounds.ess_forward,
        )
    if reverse is not None:
        _warn_if_reverse_stuck(forward, reverse, theta, labels)


#: Share of the path, from beta = 1, where the reverse chains' acceptance is compared with the
#: forward chains' at the same temperatures ...
STUCK_SHARE = 0.1
#: ... and warned about below this acceptance while the forward chains accept at least half.
STUCK_ACCEPTANCE = 0.05
#: A coordinate of theta* this many robust standard deviations from the forward chains' final
#: states is named in that warning.
OUTLYING_SCORE = 4.0


def outlying_coordinate(theta: np.ndarray, x: np.ndarray) -> tuple[int, float] | None:
    """Return the coordinate of ``theta`` farthest from the population ``x``, and its score.

    The score is ``(theta_i - median_i) / (1.4826 MAD_i)`` over the rows of ``x`` (a
    coordinate whose rows all agree is left out). Returns None where no score reaches
    :data:`OUTLYING_SCORE`.
    """
    median = np.median(x, axis=0)
    spread = 1.4826 * np.median(np.abs(x - median), axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(spread > 0, (theta - median) / spread, 0.0)
    score = np.where(np.isfinite(score), score, 0.0)
    i = int(np.argmax(np.abs(score)))
    return (i, float(score[i])) if abs(score[i]) >= OUTLYING_SCORE else None


def reverse_stuck(forward_acceptance: np.ndarray, reverse_acceptance: np.ndarray
                  ) -> tuple[float, float] | None:
    """Return the reverse and forward acceptance near ``beta = 1`` if only the forward moved.

    The arrays are per step, as in a result's ``annealing`` group; None where the reverse
    chains moved too (or the forward ones did not). The same kernels at the same
    temperatures: where the forward chains move and the reverse ones, started at theta*, do
    not, theta* lies where kernels tuned on the posterior's bulk cannot move (measured: a
    random walk's sigma* = 0.001, acceptance 0.00 against 0.94).
    """
    n_steps = len(forward_acceptance) - 1
    if n_steps <= 1:
        return None
    top = slice(max(1, int((1.0 - STUCK_SHARE) * n_steps)), n_steps)
    with np.errstate(invalid="ignore"):
        ahead = float(np.nanmean(forward_acceptance[top]))
        back = float(np.nanmean(reverse_acceptance[top]))
    return (back, ahead) if back < STUCK_ACCEPTANCE and ahead >= 0.5 else None


def _warn_if_reverse_stuck(forward: AISRun, reverse: AISRun, theta=None, labels=None) -> None:
    stuck = reverse_stuck(forward.acceptance_rate, reverse.acceptance_rate)
    if stuck is not None:
        back, ahead = stuck
        # Which variable holds theta* there: the one to reparameterise.
        far = (None if theta is None or labels is None
               else outlying_coordinate(np.asarray(theta), forward.x))
        where = "" if far is None else (
            f" Its farthest coordinate is {labels[far[0]]}, {far[1]:+.1f} robust standard "
            f"deviations from the forward chains' final states.")
        warn(
            "The reverse chains hardly moved near beta = 1 (acceptance %.2f over the last %d%% "
            "of the path, against %.2f for the forward chains there): theta* lies where kernels "
            "tuned on the bulk of the posterior cannot move (e.g. deep in a funnel's neck), so "
            "the upper bound is loose.%s More steps help little; another parameterisation "
            "helps: non-centred for a funnel of Gaussian children, centred where the data pin "
            "a product (such as a horseshoe's z * tau * lam).", back, int(100 * STUCK_SHARE),
            ahead, where,
        )


def log_smc_diagnostics(bounds: EvidenceBounds, forward: SMCRun, reverse: SMCRun | None,
                        path: str) -> None:
    """Warn about dominant populations, lost weights, divergences, failures and ESS collapse.

    Parameters
    ----------
    bounds : EvidenceBounds
    forward : SMCRun
    reverse : SMCRun or None
    path : {"tempering", "data"}
        The SMC path, for the advice given.
    """
    advice = ("Increase `particles`, or use path='tempering': single observations may be too "
              "informative to enter one at a time." if path == "data"
              else "Increase `n_steps` or `particles`.")
    if forward.chains > 2 and bounds.ess_forward < 2:
        warn(
            "One of the %d SMC populations dominates the lower bound (ESS of their estimates "
            "%.1f): the estimates disagree by more than their spread suggests. %s",
            forward.chains, bounds.ess_forward, advice,
        )
    for name, run in (("forward", forward), ("reverse", reverse)):
        if run is None:
            continue
        dead = int(np.count_nonzero(~np.isfinite(run.log_weight)))
        if dead:
            warn("%d of %d %s SMC populations lost every particle's weight.", dead,
                           run.chains, name)
        if run.n_divergent.sum():
            logger.debug("%d divergent HMC trajectories in the %s SMC run.",
                           int(run.n_divergent.sum()), name)
        if run.n_failed_total:
            stages = np.flatnonzero(run.n_failed)
            warn(
                "%d %s SMC particles reached a non-finite state or density and were given "
                "zero weight (the bound stays valid, only looser), first reaching target %d.",
                run.n_failed_total, name, int(stages[0] if name == "forward" else stages[-1]),
            )
        # Fewer than two effective particles after a reweighting: that stage's estimate
        # rests on one particle, and the bound is loose.
        with np.errstate(invalid="ignore"):  # NaN where no stage reached that target
            collapsed = np.flatnonzero(np.any(run.ess * run.particles < 2, axis=1))
        if collapsed.size:
            warn(
                "The %s SMC weights degenerated (ESS below 2 particles) at %d stage(s), first "
                "reaching target %d. %s", name, collapsed.size,
                int(collapsed[0] if name == "forward" else collapsed[-1]), advice,
            )
        resampled = int(run.resampled.sum())
        logger.debug("%s SMC: %d resampling events over %d stages and %d populations.",
                    name.capitalize(), resampled, len(run.ess) - 1, run.chains)


def log_step_diagnostics(bounds: EvidenceBounds, forward: AISRun) -> None:
    """Warn about zero-weight forward chains and a lower bound resting on one chain (step methods).

    Parameters
    ----------
    bounds : EvidenceBounds
    forward : AISRun
    """
    dead = int(np.count_nonzero(~np.isfinite(forward.log_weight)))
    if dead:
        warn("%d forward chains ended with zero weight (log weight -inf).", dead)
    if bounds.ess_forward < 2:
        warn("The forward weights have an effective sample size of %.1f: the lower "
                       "bound rests on one chain. Increase `n_steps`.", bounds.ess_forward)


def log_heldout_diagnostics(forward: AISRun, reverse: AISRun | None, summary: dict,
                            chains: int) -> None:
    """Warn about divergent or failed (chain, case) pairs and cases whose lower bound is weak.

    Parameters
    ----------
    forward : AISRun
    reverse : AISRun or None
    summary : dict
        Per-case summaries (``ess_forward``).
    chains : int
    """
    for name, run in (("forward", forward), ("reverse", reverse)):
        if run is None:
            continue
        if run.n_divergent.sum():
            logger.debug("%d divergent HMC trajectories (over all chains and cases) in the %s "
                           "run; per step: annealing['n_divergent_%s'].",
                           int(run.n_divergent.sum()), name, name)
        if run.n_failed_total:
            warn(
                "%d (chain, case) pairs of the %s run reached a non-finite state or density; "
                "they carry zero weight (the bounds stay valid but looser); per case: "
                "heldout['n_failed_%s'].", run.n_failed_total, name, name,
            )
    weak = int(np.count_nonzero(summary["ess_forward"] < 2))
    if weak and chains > 1:
        warn(
            "%d cases have a forward weight ESS below 2: their lower bound rests on one chain. "
            "Increase `n_steps`.", weak,
        )
