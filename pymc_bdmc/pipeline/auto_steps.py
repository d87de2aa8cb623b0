"""``sample_bdmc(n_steps="auto")``: lengthen the annealing path until BDMC certifies it.

The bias of both bounds falls roughly as ``1 / n_steps``, and the gap measures it. So the search
(:class:`LengthSearch`) runs BDMC at :attr:`~pymc_bdmc.config.Tuning.first_n_steps`, or fewer
where the path's thermodynamic length says it needs fewer (:func:`path_needs`) or the pilot's
timing says they would not fit in ``max_time`` (:func:`first_length`), and until an
attempt certifies (:func:`~pymc_bdmc.estimators.certifies`: ``|gap|`` and its standard error
within ``target_gap``) it runs again:

* at the same length with more chains, where the gap is within the target but too noisy,
  or twice as long where the log weights' effective sample size is too small a fraction of the
  chains for more chains to pay (:attr:`~pymc_bdmc.config.Tuning.noisy_gap_ess_fraction`);
* in the model's other parameterisation (:mod:`pymc_bdmc.model.reparameterize`, switched by
  :class:`FormSwitch`), on the same ``theta*`` and ``y*``, where the first attempt is not close
  (within :attr:`~pymc_bdmc.config.Tuning.swap_gap` times the target) and the model has one;
  the search then goes on in the form with the smaller gap per step;
* on a fresh pilot of more particles, once, where the gap is far beyond the target (a pilot
  that missed part of the posterior leaves gaps that steps hardly close);
* otherwise longer: at the length ``1 / n_steps`` decay predicts the target needs, at least
  twice the last, at most what fits in what is left of ``max_time``; but not once the reverse
  chains are stuck at ``theta*`` after every other remedy (a longer attempt runs the same
  kernels there).

Every attempt sandwiches the same simulated data through the first attempt's pilot re-frozen
onto its length (a fresh pilot only where said above), drawing from the call's random streams
started afresh (:func:`~pymc_bdmc.pipeline.seeding.restarted`), so that a call with its settings
replays it: the pilot sees neither ``theta*`` nor a measured chain, so each attempt's bounds are
valid on their own (their shared random numbers make them correlated, not biased). The
search stops at the first attempt within the target, which slightly favours attempts whose
noise narrowed the gap: a certificate is a measured gap, not a proof. The result is the last
attempt's, with every attempt recorded in its ``evidence`` attributes (``auto_*``,
``certified``, ``auto_stop``) and a log message saying what to change when the target was not
reached. docs/explanation/automatic-choices.md gives the measurements behind each rule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy.special import betaincinv

from pymc_bdmc.config import DEFAULT_TUNING, Tuning
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import certifies
from pymc_bdmc.pipeline.diagnostics import reverse_stuck
from pymc_bdmc.pipeline.timing import budget_clock

__all__ = ["Attempt", "FormSwitch", "LengthSearch", "check_auto_settings", "far_data_advice",
           "first_length", "path_needs"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Attempt:
    """What one attempt of a run asks of the driver.

    Attributes
    ----------
    n_steps : int
        Annealing steps (the call's own where it is not a search).
    fit_length : callable, optional
        ``(n_steps, predicted_seconds, path_length=None) -> steps``: where given, the run calls
        it once its kernels are timed, and runs that many steps if fewer.
    chains : int, optional
        More chains than the call's own.
    pilot_chains : int, optional
        The particles of a fresh pilot that replaces the shared one from then on.
    """

    n_steps: int
    fit_length: Callable | None = None
    chains: int | None = None
    pilot_chains: int | None = None


class FormSwitch:
    """The model as written and, once made, its other parameterisation: which one runs.

    Parameters
    ----------
    as_written : object
        What the driver runs the model as written on (its problem and shared pilot).
    make_other : callable
        ``() -> object or None``: the same for the other parameterisation, made on first use;
        None where the model has nothing to swap.
    """

    def __init__(self, as_written, make_other: Callable[[], object | None]):
        self.forms = {False: as_written}
        self.other = False
        self._make_other = make_other

    @property
    def current(self):
        """The form the next attempt runs on."""
        return self.forms[self.other]

    def use(self, other: bool) -> bool:
        """Switch to the other form (``True``) or back (``False``); return whether it did."""
        if other and other not in self.forms:
            self.forms[True] = self._make_other()
        if self.forms[other] is None:  # nothing to swap
            return False
        self.other = other
        return True


def check_auto_settings(target_gap: float, max_time: float | None) -> None:
    """Refuse a non-positive ``target_gap`` or ``max_time`` before anything runs."""
    if not (np.isfinite(target_gap) and target_gap > 0):
        raise BDMCInputError(f"`target_gap` must be a positive number of nats, got {target_gap}.")
    if max_time is not None and not (max_time > 0):
        raise BDMCInputError(f"`max_time` must be positive seconds or None, got {max_time}.")


def far_data_advice(attrs) -> str:
    """Advice where the certified data set lies far from the real data (else empty).

    The default guard replaces only draws more than 10 times farther out than the median
    candidate; one 3 times farther (and over 3 robust sds) may still be why it is hard.
    """
    distance = attrs.get("data_match_distance", np.nan)
    median = attrs.get("data_match_median_distance", np.nan)
    if attrs.get("data_matched", 0) or not distance > 3.0 * max(median, 1.0):
        return ""
    return (f"; the simulated data lie {distance:.1f} robust sds from yours on their summaries "
            f"(the median of 100 simulated data sets: {median:.1f}), so this certificate is about "
            "data unlike yours: `match_data=True` certifies on the nearest of 100")


def gap_and_se(result: xr.DataTree) -> tuple[float, float]:
    """A BDMC result's gap and its standard error."""
    ev = result["evidence"]
    return float(ev["gap"]), float(ev["gap_se"])


def first_length(n_steps: int, predicted_seconds: float, remaining: float | None,
                 path_length: float | None = None, tuning: Tuning = DEFAULT_TUNING) -> int:
    """Return the first attempt's length: ``n_steps``, or fewer where they do not fit.

    Parameters
    ----------
    n_steps : int
        The planned length (``tuning.first_n_steps``).
    predicted_seconds : float
        Predicted wall seconds of the measured runs at ``n_steps``.
    remaining : float or None
        Seconds left of ``max_time`` (None: no limit).
    path_length : float, optional
        The pilot's thermodynamic length of the path the plan anneals along.
    tuning : Tuning, optional

    Returns
    -------
    int
        ``n_steps`` where it fits. Else the longest multiple of ``tuning.min_first_n_steps``
        that fits, or, where fewer, what the path needs (:func:`path_needs`: so that a later
        attempt still fits); never fewer than ``tuning.min_first_n_steps``.
    """
    if remaining is None or not predicted_seconds > remaining:
        return n_steps
    unit = tuning.min_first_n_steps
    fits = int(n_steps * max(remaining, 0.0) / predicted_seconds)
    steps = min(unit * (fits // unit), path_needs(n_steps, path_length, tuning))
    return int(min(n_steps, max(unit, steps)))


def path_needs(n_steps: int, path_length: float | None, tuning: Tuning = DEFAULT_TUNING,
               steps_per_squared_length: float | None = None) -> int:
    """The steps a path of thermodynamic length ``path_length`` needs, at most ``n_steps``.

    ``steps_per_squared_length`` (``tuning.steps_per_squared_length`` unless given, e.g. a
    certified run's steps over its path's squared length) times its square (the variance of a
    log weight with perfect transitions is then ``L^2 / n_steps``), rounded up to a multiple
    of ``tuning.length_unit``, at least ``tuning.min_first_n_steps``; ``n_steps`` where the
    length is unknown.
    """
    if path_length is None or not np.isfinite(path_length):
        return n_steps
    rate = tuning.steps_per_squared_length if steps_per_squared_length is None \
        else steps_per_squared_length
    if not np.isfinite(rate):
        return n_steps
    unit = tuning.length_unit
    needs = unit * int(np.ceil(rate * path_length**2 / unit))
    return int(min(n_steps, max(tuning.min_first_n_steps, needs)))


def next_length(n_steps: int, gap: float, target_gap: float, seconds: float,
                remaining: float | None, unit: int, tuning: Tuning = DEFAULT_TUNING) -> int | None:
    """Return the next attempt's length in multiples of ``unit`` (module docstring), or None."""
    longest = tuning.max_n_steps
    if remaining is not None:
        per_step = seconds / n_steps
        fits = int(remaining / per_step) if per_step > 0 else tuning.max_n_steps
        longest = min(longest, unit * (fits // unit))
    if longest < 2 * n_steps:
        return None
    wanted = n_steps * abs(gap) / target_gap if np.isfinite(gap) else float(longest)
    wanted = unit * int(np.ceil(wanted / unit))
    return int(min(max(wanted, 2 * n_steps), longest))


def more_chains(chains: int, noise: float, target_gap: float, seconds: float,
                remaining: float | None, tuning: Tuning = DEFAULT_TUNING) -> int | None:
    """Chains for a gap within the target but measured too noisily, or None.

    As many times more as the squared ratio of the standard error to the target (the standard
    error falls as one over the square root of the chains), at least 2 and at most
    ``tuning.max_chains_factor`` times, within ``tuning.max_chains`` and what is left of the
    time.
    """
    # No standard error (a single chain) is no measurement: at least two chains make one.
    wanted = (noise / target_gap) ** 2 if np.isfinite(noise) else 2.0
    factor = min(tuning.max_chains_factor, max(2, int(np.ceil(wanted))),
                 tuning.max_chains // chains)
    if remaining is not None and seconds > 0:
        factor = min(factor, int(remaining / seconds))
    return chains * factor if factor >= 2 else None


def larger_pilot(pilot_chains: int, pilot_seconds: float, seconds: float,
                 remaining: float | None, tuning: Tuning = DEFAULT_TUNING) -> int | None:
    """Particles of a fresh pilot for a gap far beyond the target, or None where it won't fit."""
    size = min(tuning.max_pilot_chains, tuning.pilot_growth * pilot_chains)
    if size <= pilot_chains:
        return None
    # The pilot's cost grows at most in proportion to its particles (they run batched).
    predicted = pilot_seconds * size / pilot_chains + seconds
    if remaining is not None and predicted > remaining:
        return None
    return size


class LengthSearch:
    """The state of one ``n_steps="auto"`` search, and its decisions (module docstring).

    Parameters
    ----------
    run : callable
        ``(Attempt) -> result`` of one BDMC run on the already simulated data, on the form
        ``switch`` currently selects.
    target_gap : float
        Largest acceptable ``|gap|`` (nats).
    max_time : float or None
        Wall-clock budget in seconds for the call less its compilation, counted from
        ``started`` on :func:`~pymc_bdmc.pipeline.timing.budget_clock`; None means only
        ``tuning.max_n_steps`` limits the search.
    started : float
        When the call started (``time.perf_counter()``; simulation and the pilots count against
        the budget).
    larger_pilot : bool, default True
        Whether a gap far beyond the target may be answered with a larger pilot (False where
        the user fixed ``pilot_chains``).
    switch : FormSwitch, optional
        The model's forms; None where the model has no other form (or the user chose one).
    tuning : Tuning, optional
    """

    def __init__(self, run: Callable[[Attempt], xr.DataTree], *, target_gap: float,
                 max_time: float | None, started: float, larger_pilot: bool = True,
                 switch: FormSwitch | None = None, tuning: Tuning = DEFAULT_TUNING):
        self._run, self.target_gap, self.max_time = run, target_gap, max_time
        self.started, self.larger_pilot, self.switch, self.tuning = (
            started, larger_pilot, switch, tuning)
        self.n_steps, self.chains, self.pilot_chains = tuning.first_n_steps, None, None
        self.tried, self.gaps, self.gap_se, self.tried_chains = [], [], [], []
        self.tried_pilots, self.tried_other = [], []
        self.pilot_seconds, self.fresh_pilot, self.grown, self.certified = 0.0, False, False, False
        self.as_written = None  # (result, seconds, pilot seconds): what the other form is
        #                         measured against
        self.result, self.reason = None, "certified"
        self.advice = "Raise `max_time` or pass a larger `n_steps`"
        self.floored = False  # the gap has a floor no length removes (_impossible_starts)

    def remaining(self) -> float | None:
        """Seconds left of ``max_time`` (None: no limit)."""
        return None if self.max_time is None else self.max_time - (budget_clock() - self.started)

    def fit_first(self, planned: int, predicted: float, path_length: float | None = None) -> int:
        """Return the length of an attempt on a fresh pilot: what its path needs, and fits."""
        remaining = self.remaining()
        steps = min(first_length(planned, predicted, remaining, path_length, self.tuning),
                    path_needs(planned, path_length, self.tuning))
        if steps < planned:
            logger.debug("The %s attempt runs %d steps (the path's thermodynamic length %s; "
                         "%.0f s predicted for %d steps, %s s left).",
                         "next" if self.tried else "first", steps,
                         "unknown" if path_length is None else f"{path_length:.2f}",
                         predicted, planned,
                         "unlimited" if remaining is None else f"{remaining:.0f}")
        return steps

    def run(self) -> xr.DataTree:
        """Run attempts until one certifies or the budget ends; return the last, annotated."""
        while True:
            attempt_start = budget_clock()
            try:
                # A first attempt, or one on a fresh pilot, is fitted to the budget once its
                # kernels are timed.
                fresh = not self.tried or self.fresh_pilot
                result = self._run(Attempt(self.n_steps, self.fit_first if fresh else None,
                                           self.chains, self.pilot_chains))
            except KeyboardInterrupt:
                if self.result is None:
                    raise
                self.reason = "interrupted"
                logger.warning("Interrupted: returning the finished run of %d steps.",
                               self.tried[-1])
                break
            self.result, seconds = result, budget_clock() - attempt_start
            self._record(seconds)
            if self.certified:
                self._log_certified_form()
                break
            if result["evidence"].attrs.get("interrupted"):
                self.reason = "interrupted"
                break
            # The first attempt's time includes the pilot, which later attempts reuse.
            seconds -= float(result["evidence"].attrs.get("pilot_time", 0.0))
            if not self._plan_next(seconds):
                break
        return self._finish()

    def _record(self, seconds: float) -> None:
        """Record the attempt just run."""
        attrs = self.result["evidence"].attrs
        self.n_steps = int(attrs["n_steps"])  # the first may have been shortened
        self.tried.append(self.n_steps)
        self.tried_chains.append(int(attrs["chains"]))
        self.tried_pilots.append(int(attrs["pilot_chains"]))
        self.tried_other.append("reparameterized" in attrs)
        if self.pilot_chains is not None or self.fresh_pilot or len(self.tried) == 1:
            self.pilot_seconds = float(attrs.get("pilot_time", 0.0))  # it ran its own pilot
        self.pilot_chains, self.fresh_pilot = None, False
        gap, se = gap_and_se(self.result)
        self.gaps.append(gap)
        self.gap_se.append(se)
        self.certified = certifies(gap, se, self.target_gap)
        logger.debug("Auto n_steps: %d steps, %d chains, gap %.3f nats (standard error %.3f, "
                    "target %.2f), %.1f s.", self.n_steps, self.tried_chains[-1], gap, se,
                    self.target_gap, seconds)

    def _log_certified_form(self) -> None:
        attrs = self.result["evidence"].attrs
        if "reparameterized" in attrs:
            # A fitted base sits at the simulated data's posterior, so it does not transfer.
            fitted = attrs.get("path_start", "prior") != "prior"
            logger.debug("Certified in the model's other parameterisation (%s): on the real "
                        "data, `sample_ais(reparameterize=True)` runs the same form, piloted "
                        "on those data (`plan=AnnealingPlan.from_result(result)` reuses "
                        "this run's kernels%s).", attrs["reparameterized"],
                        ", and its base, fitted to the simulated data" if fitted else "")

    def _plan_next(self, seconds: float) -> bool:
        """Set up the next attempt; return False (with the reason) where none is made."""
        elapsed = budget_clock() - self.started
        remaining = None if self.max_time is None else self.max_time - elapsed
        gap = self.gaps[-1]
        unit = min(self.tuning.first_n_steps, self.tried[0])
        if np.isfinite(gap) and abs(gap) <= self.target_gap:  # close enough, but too noisy
            if self._weights_degenerate():
                steps = next_length(self.n_steps, gap, self.target_gap, seconds, remaining,
                                    unit, self.tuning)
                if steps is not None:
                    logger.debug("The gap is within the target but its standard error is not, "
                                 "and the weights' effective sample size is %.0f%% of the "
                                 "chains: the next attempt runs %d steps.",
                                 100 * self._ess_fraction(), steps)
                    self.n_steps = steps
                    return True
            return self._more_chains(seconds, remaining, elapsed)
        if self._impossible_starts():
            return False
        # Lengthened first where 1/n_steps decay predicts that doubling certifies (and it
        # fits): that costs about what the other form's compilation, pilot and attempt do.
        # A first attempt shorter than first_n_steps (its path looked short) is lengthened
        # while 1/n decay predicts a certificate within first_n_steps: as the search did
        # before the path's length set the first attempt.
        predicted = self.n_steps * abs(gap) / self.target_gap if np.isfinite(gap) else np.inf
        lengthen_first = (len(self.tried) == 1
                          and (abs(gap) <= self.tuning.swap_gap * self.target_gap
                               or predicted <= self.tuning.first_n_steps)
                          and next_length(self.n_steps, gap, self.target_gap, seconds,
                                          remaining, unit, self.tuning) is not None)
        if (self.switch is not None and not any(self.tried_other) and not lengthen_first
                and (remaining is None or self.pilot_seconds < remaining)
                and self.switch.use(True)):
            logger.debug("The next attempt runs the model's Gaussian hierarchies in their other "
                        "parameterisation (centred ones, random walks and autoregressions "
                        "non-centred, non-centred ones centred; the same evidence), on a fresh "
                        "pilot, at %d steps.", self.n_steps)
            self.as_written, self.fresh_pilot = (self.result, seconds, self.pilot_seconds), True
            return True
        if self.as_written is not None:
            seconds, gap = self._keep_better_form(seconds, gap)
        # Far at the default first length (1/n decay from a shorter attempt's gap).
        at_first = min(1.0, self.n_steps / self.tuning.first_n_steps)
        far = not abs(gap) * at_first <= self.tuning.larger_pilot_gap * self.target_gap
        # One larger pilot at most: where it does not close the gap, more steps are the buy left.
        if self.larger_pilot and not self.grown and far:
            pilot_chains = int(self.result["evidence"].attrs["pilot_chains"])
            self.pilot_chains = larger_pilot(pilot_chains, self.pilot_seconds, seconds,
                                             remaining, self.tuning)
            self.grown = self.pilot_chains is not None
            if self.grown:
                logger.debug("The gap is more than %g times the target: the pilot's %d particles "
                            "may have missed part of the posterior, which more steps hardly "
                            "mend. The next attempt pilots afresh with %d particles, at %d "
                            "steps.", self.tuning.larger_pilot_gap, pilot_chains,
                            self.pilot_chains, self.n_steps)
                return True
        if self._stuck_after_every_remedy():
            return False
        steps = next_length(self.n_steps, gap, self.target_gap, seconds, remaining, unit,
                            self.tuning)
        if steps is None:
            self._out_of_steps(gap, seconds, elapsed)
            return False
        self.n_steps = steps
        return True

    def _impossible_starts(self) -> bool:
        """Whether forward chains that start where the simulated data are impossible floor the gap.

        Such starts are replaced, and their mass taken out of both bounds
        (:func:`~pymc_bdmc.pipeline.draws.possible_starts`), unless that mass was too small to
        estimate. Then the chains keep zero weight from their first step, which the lower bound
        accounts for; but at any ``beta > 0`` the path's densities are zero there, so reverse
        chains never reach that prior mass, and the upper bound exceeds ``log p(y*)`` by ``-log``
        of the prior's mass where the data are possible, at any length. Judged on the prior's
        path only, and only where even the upper 97.5% confidence bound of that mass (from the
        chains that started alive) leaves the floor above the target.
        """
        evidence = self.result["evidence"]
        if (evidence.attrs.get("path_start", "prior") != "prior"
                or "failed_step_forward" not in evidence
                or "possible_start_mass" in evidence.attrs):  # the upper bound accounts for it
            return False
        failed = np.asarray(evidence["failed_step_forward"].values)
        n, dead = failed.size, int(np.count_nonzero(failed == 1))
        if dead == 0:
            return False
        alive = n - dead
        floor = -float(np.log(max(alive, 0.5) / n))
        at_least = -float(np.log(betaincinv(alive + 1, n - alive, 0.975)))  # Beta quantile
        if at_least <= self.target_gap:
            return False
        self.reason = (f"{dead} of {n} forward chains started where the simulated data are "
                       "impossible (log-likelihood -inf), and the upper bound also counts the "
                       f"prior's mass there: about {floor:.2f} nats (at least {at_least:.2f}) "
                       "that no run length removes")
        self.floored = True
        self.advice = ("The lower bound stays valid. A certificate needs data that most prior "
                       "draws make possible: a prior with less mass where these are impossible "
                       "(e.g. a count's prior above the largest count), or other simulated data "
                       "(another `random_seed`, or `match_data=True`)")
        return True

    def _stuck_after_every_remedy(self) -> bool:
        """Whether the reverse chains did not move from theta*, with only more steps left to try.

        A longer attempt re-freezes the same pilot, so it runs the same kernels near
        ``beta = 1``: chains they cannot move at one length they cannot move at any (a
        horseshoe at seed 1: 608 nats at 600 steps, 598 at 4200). Only once the other form and
        a larger pilot have been tried, where the search would try them.
        """
        if self.switch is not None and not any(self.tried_other):
            return False
        if self.larger_pilot and not self.grown:
            return False
        if "annealing" not in self.result.children:
            return False
        annealing = self.result["annealing"]
        if "acceptance_rate_reverse" not in annealing:
            return False
        stuck = reverse_stuck(annealing["acceptance_rate_forward"].values,
                              annealing["acceptance_rate_reverse"].values)
        if stuck is None:
            return False
        tried = (["both forms"] if self.switch is not None else []) + (
            ["a larger pilot"] if self.grown else [])
        self.reason = (f"the reverse chains did not move near beta = 1 (acceptance {stuck[0]:.2f}, "
                       f"against {stuck[1]:.2f} for the forward chains)"
                       + (f" after {' and '.join(tried)}" if tried else "")
                       + "; a longer path runs the same kernels there")
        self.advice = ("More steps will not move them: theta* lies where these kernels cannot "
                       "(the warning above names its farthest coordinate)")
        return True

    def _ess_fraction(self) -> float:
        """Return the last attempt's effective sample size per chain (weaker direction), or NaN."""
        evidence = self.result["evidence"]
        ess = [float(evidence[name]) for name in ("ess_forward", "ess_reverse")
               if name in evidence and np.isfinite(float(evidence[name]))]
        return min(ess) / self.tried_chains[-1] if ess else float("nan")

    def _weights_degenerate(self) -> bool:
        """Whether doubling the steps gains more effective samples than doubling the chains."""
        return self._ess_fraction() < self.tuning.noisy_gap_ess_fraction

    def _more_chains(self, seconds: float, remaining: float | None, elapsed: float) -> bool:
        chains = more_chains(self.tried_chains[-1], self.gap_se[-1], self.target_gap, seconds,
                             remaining, self.tuning)
        if chains is None:
            twice = 2 * self.tried_chains[-1]
            self.reason = (f"twice the chains would exceed {self.tuning.max_chains}"
                           if twice > self.tuning.max_chains else
                           f"a run with more chains (about {2 * seconds:.0f} s for twice as "
                           f"many) would exceed max_time={self.max_time:g} s ({elapsed:.0f} s "
                           "spent besides compiling)")
            self.advice = (f"Pass `chains={twice}` or more, or raise `max_time`, to measure the "
                           "gap more precisely")
            return False
        logger.debug("The gap is within the target but its standard error is not: the next "
                    "attempt runs %d chains at %d steps.", chains, self.n_steps)
        self.chains = chains
        return True

    def _keep_better_form(self, seconds: float, gap: float) -> tuple[float, float]:
        """After the other form's attempt, go on in the form with the smaller gap per step."""
        kept, kept_seconds, kept_pilot_seconds = self.as_written
        kept_steps = int(kept["evidence"].attrs["n_steps"])
        kept_gap = gap_and_se(kept)[0]
        self.as_written = None
        # Compared per step (1/n_steps decay): the other attempt may have been shortened.
        if not abs(gap) * self.n_steps < abs(kept_gap) * kept_steps and self.switch.use(False):
            logger.debug("The model as written had the smaller gap (%.2f nats at %d steps, "
                        "against %.2f at %d): the search goes on with it.", kept_gap,
                        kept_steps, gap, self.n_steps)
            self.result, self.n_steps = kept, kept_steps
            self.pilot_seconds = kept_pilot_seconds
            return kept_seconds, kept_gap
        return seconds, gap

    def _out_of_steps(self, gap: float, seconds: float, elapsed: float) -> None:
        """Say why no longer attempt is made, and what the target would need."""
        if 2 * self.n_steps > self.tuning.max_n_steps:
            self.reason = f"n_steps would exceed {self.tuning.max_n_steps}"
            return
        self.reason = (f"the next run ({2 * self.n_steps} steps, about {2 * seconds:.0f} s) would "
                       f"exceed max_time={self.max_time:g} s ({elapsed:.0f} s spent besides "
                       "compiling)")
        if np.isfinite(gap):  # what 1/n_steps decay predicts the target needs
            unit = self.tuning.min_first_n_steps
            wanted = max(2 * self.n_steps, unit * int(np.ceil(
                self.n_steps * abs(gap) / self.target_gap / unit)))
            self.advice = (f"1/n_steps decay predicts about {wanted} steps (about "
                           f"{wanted * seconds / self.n_steps:.0f} s of sampling after the "
                           f"pilot): pass `n_steps={wanted}` or raise `max_time`")

    def _finish(self) -> xr.DataTree:
        """Warn where the target was not reached; record the search in the result."""
        if not self.certified:
            self._warn_uncertified()
        self.result["evidence"].attrs.update({
            "auto_n_steps": np.array(self.tried), "auto_gaps": np.array(self.gaps),
            "auto_gap_se": np.array(self.gap_se), "auto_chains": np.array(self.tried_chains),
            "auto_pilot_chains": np.array(self.tried_pilots),
            "auto_reparameterized": np.array(self.tried_other, dtype=int),
            "target_gap": float(self.target_gap),
            "max_time": float("nan") if self.max_time is None else float(self.max_time),
            "certified": int(self.certified), "auto_stop": self.reason,
        })
        return self.result

    def _warn_uncertified(self) -> None:
        final_gap, final_se = gap_and_se(self.result)  # the form the search went on with
        if self.floored:
            logger.warning("BDMC did not certify the estimate: gap %.2f nats (standard error "
                           "%.2f) at %d steps, target %.2f; stopped because %s. %s.", final_gap,
                           final_se, int(self.result["evidence"].attrs["n_steps"]),
                           self.target_gap, self.reason, self.advice)
            return
        advice = self.advice
        if (self.switch is not None and not any(self.tried_other)
                and self.reason != "interrupted"):
            advice += ("; the model's other parameterisation was not tried (no time was left "
                       "for its pilot): `reparameterize=True` runs it from the start")
        advice += far_data_advice(self.result["evidence"].attrs)
        attempts = ", ".join(
            attempt_label(self.tried, self.tried_chains, self.tried_pilots, i, self.tried_other)
            + f": {self.gaps[i]:.2f}" for i in range(len(self.tried)))
        discrete = self.result["evidence"].attrs.get("kernel") in DISCRETE_KERNELS
        remedy = (
            "summing the discrete variables out of the likelihood (a `pm.CustomDist` with a "
            "`random`) helps more than steps: updated in turn, discrete and continuous variables "
            "that trade off (an N-mixture's counts and detection probability) barely move "
            "along that ridge" if discrete else
            "a reparameterisation helps more than steps (non-centred for a funnel of Gaussian "
            "children; centred where the data pin products such as a horseshoe's z * tau * lam)")
        logger.warning(
            "BDMC did not certify the estimate: gap %.2f nats (standard error %.2f) at %d steps, "
            "target %.2f (both the gap and its standard error must be within it); stopped "
            "because %s. %s; if the gap hardly shrinks as n_steps doubles (here: %s), the "
            "kernels cannot follow this posterior's geometry (docs/explanation/how-it-works.md, "
            "'Settings that matter'), and %s.",
            final_gap, final_se, int(self.result["evidence"].attrs["n_steps"]),
            self.target_gap, self.reason, advice, attempts, remedy)


#: Result kernels that update discrete variables in turn with continuous ones.
DISCRETE_KERNELS = ("hmc+gibbs",)


def attempt_label(steps: list, chains: list, pilots: list, i: int,
                  other: list | None = None) -> str:
    """``1000``, or ``1000 (64 chains, pilot 416, other form)`` where attempt ``i`` changed."""
    other = other or [False] * len(steps)
    changed = ([f"{chains[i]} chains"] if i and chains[i] != chains[i - 1] else []) + (
        [f"pilot {pilots[i]}"] if i and pilots[i] != pilots[i - 1] else []) + (
        [("other form" if other[i] else "as written")] if i and other[i] != other[i - 1]
        else [])
    return f"{steps[i]}" + (f" ({', '.join(changed)})" if changed else "")
