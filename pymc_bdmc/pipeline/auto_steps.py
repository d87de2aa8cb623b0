"""``sample_bdmc(n_steps="auto")``: lengthen the annealing path until BDMC certifies it.

The bias of both bounds falls roughly as ``1 / n_steps``, and the gap measures it. So the search
runs BDMC at :data:`FIRST_N_STEPS`, and until an attempt certifies (below) runs again, longer:
at the length that ``1 / n_steps`` decay predicts would reach the target (``n_steps * |gap| /
target_gap``, in multiples of the first attempt's length), at least twice the last length, and
at most the longest run that fits in what is left of ``max_time`` (predicted from the last run's
time per step, the first attempt's pilot left out). A run that is far from the target
therefore spends the rest of the budget on one long attempt rather than on a ladder of short
ones: on a 201-coordinate random walk the doubling search stopped at 2000 steps with 40 s spent,
where the budget allowed 4000. The first attempt fits the budget too: where the pilot's timing
of the kernels predicts that :data:`FIRST_N_STEPS` steps would take longer than what is left of
``max_time``, it runs as many as fit, and at least :data:`MIN_FIRST_N_STEPS`. On a latent GP at
80 inputs (each model call a batched 80 x 80 Cholesky factorisation and its gradient), 1000
steps took 315 s of a 60 s budget for a gap of -0.19; the first attempt now runs 100 steps,
which gave a gap of 0.35 in 70 s, 46 s of them the pilot's (docs/performance.md). A first
attempt that must be shortened runs no more steps than its path needs, by the pilot's
thermodynamic length (:func:`first_length`): a logistic regression on 10000 observations,
whose fitted path has length 0.6, ran 400 steps to fill the budget (59 s) and now runs 100
(40 s), with the same gaps.
Every attempt sandwiches the same simulated ``y*`` with fresh randomness (its chains and
kernels' draws) through the first attempt's pilot, re-frozen onto more temperatures: the pilot
sees neither ``theta*`` nor any measured chain, so each attempt's bounds are valid on their own,
the path chosen once stays the same, and the time per step predicted from one attempt holds for
the next (two attempts on different paths once took 77 s of a 60 s budget). The
search stops at the first attempt within the target, as :func:`pymc_bdmc.calibrate` does; that
choice slightly favours attempts whose noise narrowed the gap, which is why a certificate is a
measured gap, not a proof.

The result is the last attempt's, with the search in its ``evidence`` attributes:
``auto_n_steps``, ``auto_chains``, ``auto_pilot_chains``, ``auto_reparameterized``,
``auto_gaps`` and ``auto_gap_se`` (every attempt),
``target_gap``, ``max_time`` and ``certified``, and a log message that says what to change when
the target was not reached. An attempt certifies where both its ``|gap|`` and the gap's standard
error are within ``target_gap`` (:func:`~pymc_bdmc.estimators.certifies`: with few effective
chains a gap can land near zero by chance). A gap within the target whose standard error is not
is measured again at the same length with more chains (as many times more as the squared ratio
of the standard error to the target, at least 2 and at most :data:`MAX_CHAINS_FACTOR`, within
what is left of ``max_time``): the standard error falls as one over the square root of the
chains, where a longer path need not narrow it (on the paper's low-rank model, seed 2, it went
from 0.58 at 1000 steps to 0.75 at 2000).

A gap far beyond the target (more than :data:`LARGER_PILOT_GAP` times it, or not finite) is
run again at the same length on a fresh pilot with :data:`PILOT_GROWTH` times the
particles (at most :data:`MAX_PILOT_CHAINS`; where the user did not fix ``pilot_chains``, and
where four times the pilot's time plus the run fit in what is left of ``max_time``): the pilot's
population is what the plan, and a fitted base, are built on, and one that missed part of the
posterior leaves a gap no number of steps closes within a budget. On a centred horseshoe
regression (seed 1) the 104-particle pilot's fitted Gaussian sat at the noise scale of a
"few coefficients, much noise" mode, 160 nats of evidence below the simulated data's mode; the
gap was 172227 nats at 1000 steps and 603116 at 8000. A fresh 416-particle pilot found the mode,
and certified -0.08 at 1000 steps (22 s in all). Later attempts re-freeze the larger pilot.
A search makes one larger pilot at most: where it does not close the gap, the pilot is not what
limits it (seed 3 of the same model: 8.0, 9.2 and 14.9 nats with 104, 416 and 1024 particles),
and a second one cost the non-centred horseshoe (seed 2) 8 s over its 60 s budget for a gap
still of 2265 nats.

A model with Gaussian hierarchies or random walks (:mod:`pymc_bdmc.model.reparameterize`)
whose attempt does not certify (and whose gap is not merely too noisy) is run again at the same
length in its other parameterisation (centred variables and walks non-centred, non-centred
ones centred), on the same ``theta*`` and ``y*`` and a fresh pilot (where the last pilot's time
fits in what is left of ``max_time``; the attempt is then shortened to fit, as a first attempt
is). A first attempt within :data:`SWAP_GAP` times the target is lengthened first (where
the longer attempt fits), as ``1 / n_steps`` decay predicts that doubling certifies it, and the
other form is tried only where that fails: the swap costs a compilation, a pilot and an
attempt, about what doubling does, and on a random walk with drift (seed 0: -0.59 nats at 1000
steps as written) the other form's attempt (4.95 nats, on a cold compilation cache) left no
time for the 2000 steps that certify (+0.14). The evidence is the same in either form, and
the search goes on in the form whose gap per step was smaller
(``|gap| * n_steps``: ``1/n_steps`` decay; the model as written keeps its pilot). Which form
the kernels follow depends on the data: where they pin each coefficient of a horseshoe,
``beta = z * tau * lam`` is a curved ridge per coefficient (gaps of 100-1000 nats on a
40-coefficient horseshoe) and ``beta ~ Normal(0, tau * lam)`` is Gaussian in ``beta``, with
scale moves; where the data are weak, the form as written did better (a regularised horseshoe
certified at 1000 steps on 4 of 4 seeds as written and on 1 of 4 centred), which is why the
search starts from it and compares. The larger pilot comes after that comparison.
``sample_ais`` has no gap to tell, and runs the model as written unless asked
(``reparameterize=True``, or a plan frozen on the other form).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import xarray as xr

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import certifies

__all__ = ["FIRST_N_STEPS", "LARGER_PILOT_GAP", "MAX_CHAINS", "MAX_CHAINS_FACTOR", "MAX_N_STEPS",
           "MAX_PILOT_CHAINS", "MIN_FIRST_N_STEPS", "PILOT_GROWTH", "SWAP_GAP",
           "check_auto_settings", "far_data_advice", "first_length", "search_n_steps"]

logger = logging.getLogger(__name__)

#: Annealing steps of the first attempt (the fixed default of earlier versions).
FIRST_N_STEPS = 1000
#: No attempt is longer than this.
MAX_N_STEPS = 64000
#: The first attempt is never shorter than this, even where it does not fit in ``max_time``.
MIN_FIRST_N_STEPS = 100
#: A gap within the target but too noisy is measured again with at most this many times the
#: chains ...
MAX_CHAINS_FACTOR = 8
#: ... and never with more chains than this.
MAX_CHAINS = 1024
#: A first attempt that must be shortened runs no more than this many steps per squared
#: thermodynamic length of the path (``Lambda^2 / n_steps``, the variance of a log weight with
#: perfect transitions, is then 0.01), where that is fewer than fit.
STEPS_PER_SQUARED_LENGTH = 100
#: An attempt whose gap is more than this many times the target (or not finite) is run again
#: at the same length on a fresh pilot with :data:`PILOT_GROWTH` times the particles ...
LARGER_PILOT_GAP = 8.0
PILOT_GROWTH = 4
#: ... and never more than this many.
MAX_PILOT_CHAINS = 1024
#: A first attempt whose gap is within this many times the target is lengthened before the
#: model's other parameterisation is tried.
SWAP_GAP = 2.0


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


def _gap_and_se(result: xr.DataTree) -> tuple[float, float]:
    ev = result["evidence"]
    return float(ev["gap"]), float(ev["gap_se"])


def first_length(n_steps: int, predicted_seconds: float, remaining: float | None,
                 path_length: float | None = None) -> int:
    """Return the first attempt's length: ``n_steps``, or fewer where they do not fit.

    Parameters
    ----------
    n_steps : int
        The planned length (:data:`FIRST_N_STEPS`).
    predicted_seconds : float
        Predicted wall seconds of the measured runs at ``n_steps``.
    remaining : float or None
        Seconds left of ``max_time`` (None: no limit).
    path_length : float, optional
        The pilot's thermodynamic length of the path the plan anneals along.

    Returns
    -------
    int
        ``n_steps`` where it fits. Else the longest multiple of :data:`MIN_FIRST_N_STEPS` that
        fits, or, where fewer, the multiple of it at or above :data:`STEPS_PER_SQUARED_LENGTH`
        times the squared path length (so that a later attempt still fits); never fewer than
        :data:`MIN_FIRST_N_STEPS`.
    """
    if remaining is None or not predicted_seconds > remaining:
        return n_steps
    fits = int(n_steps * max(remaining, 0.0) / predicted_seconds)
    steps = MIN_FIRST_N_STEPS * (fits // MIN_FIRST_N_STEPS)
    if path_length is not None and np.isfinite(path_length):
        needs = STEPS_PER_SQUARED_LENGTH * path_length**2
        steps = min(steps, MIN_FIRST_N_STEPS * int(np.ceil(needs / MIN_FIRST_N_STEPS)))
    return int(min(n_steps, max(MIN_FIRST_N_STEPS, steps)))


def _next_length(n_steps: int, gap: float, target_gap: float, seconds: float,
                 remaining: float | None, unit: int = FIRST_N_STEPS) -> int | None:
    """Return the next attempt's length in multiples of ``unit`` (module docstring), or None."""
    longest = MAX_N_STEPS
    if remaining is not None:
        per_step = seconds / n_steps
        fits = int(remaining / per_step) if per_step > 0 else MAX_N_STEPS
        longest = min(longest, unit * (fits // unit))
    if longest < 2 * n_steps:
        return None
    wanted = n_steps * abs(gap) / target_gap if np.isfinite(gap) else float(longest)
    wanted = unit * int(np.ceil(wanted / unit))
    return int(min(max(wanted, 2 * n_steps), longest))


def _more_chains(chains: int, noise: float, target_gap: float, seconds: float,
                 remaining: float | None) -> int | None:
    """Chains for a gap within the target but measured too noisily (module docstring), or None."""
    # No standard error (a single chain) is no measurement: at least two chains make one.
    wanted = (noise / target_gap) ** 2 if np.isfinite(noise) else 2.0
    factor = min(MAX_CHAINS_FACTOR, max(2, int(np.ceil(wanted))), MAX_CHAINS // chains)
    if remaining is not None and seconds > 0:
        factor = min(factor, int(remaining / seconds))
    return chains * factor if factor >= 2 else None


def _larger_pilot(pilot_chains: int, pilot_seconds: float, seconds: float,
                  remaining: float | None) -> int | None:
    """Particles of a fresh pilot for a gap far beyond the target (module docstring), or None."""
    size = min(MAX_PILOT_CHAINS, PILOT_GROWTH * pilot_chains)
    if size <= pilot_chains:
        return None
    # The pilot's cost grows at most in proportion to its particles (they run batched).
    predicted = pilot_seconds * size / pilot_chains + seconds
    if remaining is not None and predicted > remaining:
        return None
    return size


def _attempt_label(steps: list, chains: list, pilots: list, i: int,
                   other: list | None = None) -> str:
    """``1000``, or ``1000 (64 chains, pilot 416, other form)`` where attempt ``i`` changed."""
    other = other or [False] * len(steps)
    changed = ([f"{chains[i]} chains"] if i and chains[i] != chains[i - 1] else []) + (
        [f"pilot {pilots[i]}"] if i and pilots[i] != pilots[i - 1] else []) + (
        [("other form" if other[i] else "as written")] if i and other[i] != other[i - 1]
        else [])
    return f"{steps[i]}" + (f" ({', '.join(changed)})" if changed else "")


def search_n_steps(run: Callable[..., xr.DataTree], *, target_gap: float,
                   max_time: float | None, started: float,
                   larger_pilot: bool = True,
                   reparameterize: Callable[[bool], bool] | None = None) -> xr.DataTree:
    """Run ``run(n_steps)`` at growing lengths until the gap certifies ``target_gap``.

    Parameters
    ----------
    run : callable
        ``(n_steps, fit_length, chains) -> result`` of one BDMC run on the already simulated
        data. ``fit_length`` is None, or (first attempt) ``(n_steps, predicted_seconds,
        path_length=None) -> steps``, which the run calls once its kernels are timed and then
        runs that many steps (:func:`first_length`).
        ``chains`` is None (the call's own) or more chains (module docstring).
        ``pilot_chains`` (keyword) is None (the shared pilot) or the particles of a fresh pilot
        that replaces it from then on.
    target_gap : float
        Largest acceptable ``|gap|`` (nats).
    max_time : float or None
        Wall-clock budget in seconds for the whole call, counted from ``started``
        (``time.perf_counter()``); None means only :data:`MAX_N_STEPS` limits the search.
    started : float
        When the call started (compilation and simulation count against the budget).
    larger_pilot : bool, default True
        Whether a gap far beyond the target may be answered with a larger pilot (False where
        the user fixed ``pilot_chains``).
    reparameterize : callable, optional
        ``reparameterize(True)`` switches ``run``'s later attempts to the model's other
        parameterisation, on a fresh pilot, ``reparameterize(False)`` back to the model as
        written, on its own pilot; each returns whether it did (module docstring). None: the
        model has no other form.

    Returns
    -------
    xarray.DataTree
        The last attempt's result, with the search recorded in its ``evidence`` attributes.
    """
    def fit_first(planned: int, predicted: float, path_length: float | None = None) -> int:
        remaining = None if max_time is None else max_time - (time.perf_counter() - started)
        steps = first_length(planned, predicted, remaining, path_length)
        if steps < planned:
            short_path = first_length(planned, predicted, remaining) > steps
            logger.info("%d steps would take about %.0f s, more than the %.0f s left of "
                        "max_time=%g s: the %s attempt runs %d steps%s.", planned, predicted,
                        remaining, max_time, "next" if tried else "first", steps,
                        f" (the path's thermodynamic length, {path_length:.2f}, needs no more)"
                        if short_path else "")
        return steps

    n_steps, tried, gaps, gap_se, certified = FIRST_N_STEPS, [], [], [], False
    chains, tried_chains = None, []
    pilot_chains, tried_pilots, pilot_seconds = None, [], 0.0
    tried_other, fresh_pilot, grown = [], False, False
    as_written = None  # (result, seconds, pilot seconds): what the other form is measured against
    result, reason, advice = None, "certified", "Raise `max_time` or pass a larger `n_steps`"
    while True:
        attempt_start = time.perf_counter()
        try:
            # A first attempt, or one on the other parameterisation's fresh pilot, is fitted
            # to the budget once its kernels are timed.
            attempt = run(n_steps, fit_first if not tried or fresh_pilot else None, chains,
                          pilot_chains=pilot_chains)
        except KeyboardInterrupt:
            if result is None:
                raise
            reason = "interrupted"
            logger.warning("Interrupted: returning the finished run of %d steps.", tried[-1])
            break
        result, seconds = attempt, time.perf_counter() - attempt_start
        n_steps = int(result["evidence"].attrs["n_steps"])  # the first may have been shortened
        tried.append(n_steps)
        tried_chains.append(int(result["evidence"].attrs["chains"]))
        tried_pilots.append(int(result["evidence"].attrs["pilot_chains"]))
        tried_other.append("reparameterized" in result["evidence"].attrs)
        if pilot_chains is not None or fresh_pilot or len(tried) == 1:  # it ran its own pilot
            pilot_seconds = float(result["evidence"].attrs.get("pilot_time", 0.0))
        pilot_chains, fresh_pilot = None, False
        gap, se = _gap_and_se(result)
        gaps.append(gap)
        gap_se.append(se)
        certified = certifies(gap, se, target_gap)
        interrupted = result["evidence"].attrs.get("interrupted")
        logger.info("Auto n_steps: %d steps, %d chains, gap %.3f nats (standard error %.3f, "
                    "target %.2f), %.1f s.", n_steps, tried_chains[-1], gap, gap_se[-1],
                    target_gap, seconds)
        if certified:
            attrs = result["evidence"].attrs
            if "reparameterized" in attrs:
                # A fitted base sits at the simulated data's posterior: on a 2-D walk the
                # transferred plan's bound was 2 nats below a fresh pilot's on the real data.
                fitted = attrs.get("path_start", "prior") != "prior"
                logger.info("Certified in the model's other parameterisation (%s): on the real "
                            "data, `sample_ais(reparameterize=True)` runs the same form, piloted "
                            "on those data (`plan=AnnealingPlan.from_result(result)` reuses "
                            "this run's kernels%s).", attrs["reparameterized"],
                            ", and its base, fitted to the simulated data" if fitted else "")
            break
        if interrupted:
            reason = "interrupted"
            break
        elapsed = time.perf_counter() - started
        # The first attempt's time includes the pilot, which later attempts reuse.
        seconds -= float(result["evidence"].attrs.get("pilot_time", 0.0))
        remaining = None if max_time is None else max_time - elapsed
        if np.isfinite(gap) and abs(gap) <= target_gap:  # close enough, but too noisy
            chains = _more_chains(tried_chains[-1], gap_se[-1], target_gap, seconds, remaining)
            if chains is None:
                reason = (f"twice the chains would exceed {MAX_CHAINS}"
                          if 2 * tried_chains[-1] > MAX_CHAINS else
                          f"a run with more chains (about {2 * seconds:.0f} s for twice as many) "
                          f"would exceed max_time={max_time:g} s ({elapsed:.0f} s spent)")
                advice = (f"Pass `chains={2 * tried_chains[-1]}` or more, or raise `max_time`, "
                          f"to measure the gap more precisely")
                break
            logger.info("The gap is within the target but its standard error is not: the next "
                        "attempt runs %d chains at %d steps.", chains, n_steps)
            continue
        # Lengthened first where 1/n_steps decay predicts that doubling certifies (and it
        # fits): that costs about what the other form's compilation, pilot and attempt do.
        lengthen_first = (len(tried) == 1 and abs(gap) <= SWAP_GAP * target_gap
                          and _next_length(n_steps, gap, target_gap, seconds, remaining,
                                           unit=min(FIRST_N_STEPS, tried[0])) is not None)
        if (reparameterize is not None and not any(tried_other) and not lengthen_first
                and (remaining is None or pilot_seconds < remaining) and reparameterize(True)):
            logger.info("The next attempt runs the model's Gaussian hierarchies in their other "
                        "parameterisation (centred ones, random walks and autoregressions "
                        "non-centred, non-centred ones centred; the same evidence), on a fresh "
                        "pilot, at %d steps.", n_steps)
            as_written, fresh_pilot = (result, seconds, pilot_seconds), True
            continue
        if as_written is not None:  # the other form has run: keep the form with the smaller gap
            kept, kept_seconds, kept_pilot_seconds = as_written
            kept_steps = int(kept["evidence"].attrs["n_steps"])
            kept_gap = _gap_and_se(kept)[0]
            as_written = None
            # Compared per step (1/n_steps decay): the other attempt may have been shortened.
            if not abs(gap) * n_steps < abs(kept_gap) * kept_steps and reparameterize(False):
                logger.info("The model as written had the smaller gap (%.2f nats at %d steps, "
                            "against %.2f at %d): the search goes on with it.", kept_gap,
                            kept_steps, gap, n_steps)
                result, seconds, n_steps, gap = kept, kept_seconds, kept_steps, kept_gap
                pilot_seconds = kept_pilot_seconds
        far = not abs(gap) <= LARGER_PILOT_GAP * target_gap
        # One larger pilot at most: where it does not close the gap, more steps are the buy left.
        if larger_pilot and not grown and far:
            pilot_chains = _larger_pilot(int(result["evidence"].attrs["pilot_chains"]),
                                         pilot_seconds, seconds, remaining)
            grown = pilot_chains is not None
            if grown:
                logger.info("The gap is more than %g times the target: the pilot's %d particles "
                            "may have missed part of the posterior, which more steps hardly "
                            "mend. The next attempt pilots afresh with %d particles, at %d "
                            "steps.", LARGER_PILOT_GAP, int(result["evidence"].attrs[
                                "pilot_chains"]), pilot_chains, n_steps)
                continue
        next_steps = _next_length(n_steps, gap, target_gap, seconds,
                                  remaining, unit=min(FIRST_N_STEPS, tried[0]))
        if next_steps is None:
            if 2 * n_steps > MAX_N_STEPS:
                reason = f"n_steps would exceed {MAX_N_STEPS}"
            else:
                reason = (f"the next run ({2 * n_steps} steps, about {2 * seconds:.0f} s) would "
                          f"exceed max_time={max_time:g} s ({elapsed:.0f} s spent)")
                if np.isfinite(gap):  # what 1/n_steps decay predicts the target needs
                    wanted = max(2 * n_steps, MIN_FIRST_N_STEPS * int(np.ceil(
                        n_steps * abs(gap) / target_gap / MIN_FIRST_N_STEPS)))
                    advice = (f"1/n_steps decay predicts about {wanted} steps (about "
                              f"{wanted * seconds / n_steps:.0f} s of sampling after the pilot): "
                              f"pass `n_steps={wanted}` or raise `max_time`")
            break
        n_steps = next_steps
    if not certified:
        final_gap, final_se = _gap_and_se(result)  # the form the search went on with
        if reparameterize is not None and not any(tried_other) and reason != "interrupted":
            advice += ("; the model's other parameterisation was not tried (no time was left "
                       "for its pilot): `reparameterize=True` runs it from the start")
        advice += far_data_advice(result["evidence"].attrs)
        logger.warning(
            "BDMC did not certify the estimate: gap %.2f nats (standard error %.2f) at %d steps, "
            "target %.2f (both the gap and its standard error must be within it); stopped "
            "because %s. %s; if the gap hardly shrinks as n_steps doubles (here: %s), the "
            "kernels cannot follow this posterior's geometry (docs/guide.md, §4 'Settings that "
            "matter'), and a reparameterisation helps more than steps (non-centred for a "
            "funnel of Gaussian children; centred where the data pin products such as a "
            "horseshoe's z * tau * lam).",
            final_gap, final_se, int(result["evidence"].attrs["n_steps"]), target_gap, reason,
            advice,
            ", ".join(_attempt_label(tried, tried_chains, tried_pilots, i, tried_other)
                      + f": {gaps[i]:.2f}"
                      for i in range(len(tried))))
    result["evidence"].attrs.update({
        "auto_n_steps": np.array(tried), "auto_gaps": np.array(gaps),
        "auto_gap_se": np.array(gap_se), "auto_chains": np.array(tried_chains),
        "auto_pilot_chains": np.array(tried_pilots),
        "auto_reparameterized": np.array(tried_other, dtype=int),
        "target_gap": float(target_gap),
        "max_time": float("nan") if max_time is None else float(max_time),
        "certified": int(certified), "auto_stop": reason,
    })
    return result
