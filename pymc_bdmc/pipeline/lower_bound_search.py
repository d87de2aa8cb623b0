"""``sample_ais(n_steps="auto")``: the length a lower bound needs, measured on the real data.

On real data there is no upper bound, so no gap: what can be measured is how the lower bound
moves as the path lengthens. Its bias falls roughly as ``1 / n_steps`` (``lower(n) ~ log p(y) -
b / n``), so between two lengths ``k < m`` it moves by ``b (m - k) / (k m)``, and the bias left at
``m`` is that move times ``k / (m - k)``: at ``m = 2k``, the move itself. The search
(:class:`LowerBoundSearch`) therefore

* starts where the path's thermodynamic length ``L`` says a run can be short
  (:attr:`~pymc_bdmc.config.Tuning.steps_per_squared_length` times ``L^2`` steps, at least
  :attr:`~pymc_bdmc.config.Tuning.min_first_n_steps`, at most
  :attr:`~pymc_bdmc.config.Tuning.first_n_steps`, and what fits in ``max_time``);
* where that first run's forward log weights spread little (their variance allows at most
  ``target_gap`` of bias), runs half its length: the move from there measures the bias left at
  the first length itself, for half a run more, where doubling would cost two; otherwise
  doubles the length;
* stops once the bias left at the longest length, so estimated, and its standard error are
  within ``target_gap`` (measured again with more chains where only its noise is not), and
  returns the run at that length;
* otherwise runs at the length ``1 / n_steps`` decay predicts the target needs, within
  ``max_time``.

Where this process certified the same model by BDMC (an earlier :func:`~pymc_bdmc.sample_bdmc`
or :func:`~pymc_bdmc.calibrate`), that length is run first, on the certified path (prior or
fitted Gaussian), and kept unless the real data's forward log weights spread much more than the
certified run's (:func:`~pymc_bdmc.estimators.harder_than_certified`); then the search goes on
from it (:func:`remember_certified`). Where the real data's pilot path is already far longer
than the certified run's, the driver pilots both forms first, and a form other than the
certified one searches as if nothing were certified.
Every attempt re-freezes the first attempt's pilot, which never sees a measured chain, so each
attempt's lower bound is valid on its own; the estimate of the bias is a measurement, not a
bound: only BDMC certifies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import xarray as xr

from pymc_bdmc.config import DEFAULT_TUNING, Tuning
from pymc_bdmc.estimators import (
    SEARCH_ON_BIAS_SCALE,
    certifies,
    forward_spread,
    harder_than_certified,
)
from pymc_bdmc.pipeline.auto_steps import (
    Attempt,
    FormSwitch,
    first_length,
    more_chains,
    path_needs,
)
from pymc_bdmc.pipeline.timing import budget_clock

__all__ = ["CertifiedLength", "LowerBoundSearch", "certified_length", "remember_certified"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CertifiedLength:
    """A length (and chains) BDMC certified for a model in this process, in which form and path.

    ``fitted``: the certified runs annealed from a fitted Gaussian, not from the prior.
    ``forward_sd``: the spread of the certified forward log weights, against which a real-data
    run is checked (:func:`~pymc_bdmc.estimators.harder_than_certified`); ``path_length``: the
    thermodynamic length of the certified run's path, against which a real-data pilot's is.
    """

    n_steps: int
    chains: int
    reparameterized: bool
    fitted: bool = False
    forward_sd: float = float("nan")
    path_length: float = float("nan")


#: Certified lengths of this process, by model structure (:func:`pymc_bdmc.model.cache.model_key`).
_CERTIFIED: dict[tuple, CertifiedLength] = {}


def remember_certified(key: tuple, result: xr.DataTree) -> None:
    """Keep a certified BDMC search's length and chains for later lower bounds of the model."""
    attrs = result["evidence"].attrs
    if attrs.get("certified"):
        _CERTIFIED[key] = CertifiedLength(int(attrs["n_steps"]), int(attrs["chains"]),
                                          "reparameterized" in attrs,
                                          attrs.get("path_start", "prior") != "prior",
                                          forward_spread(result),
                                          float(attrs.get("pilot_path_length", np.nan)))


def certified_length(key: tuple, reparameterized: bool) -> CertifiedLength | None:
    """The length BDMC certified for this model in this form, if this process has one."""
    known = _CERTIFIED.get(key)
    return known if known is not None and known.reparameterized == reparameterized else None


class LowerBoundSearch:
    """The state of one ``sample_ais(n_steps="auto")`` search (module docstring).

    Parameters
    ----------
    run : callable
        ``(Attempt) -> result`` of one AIS run on the real data.
    target_gap : float
        Largest bias (nats) the lower bound is taken to have left.
    max_time : float or None
        Seconds the call may take, counted from ``started``, less its compilation
        (:func:`~pymc_bdmc.pipeline.timing.budget_clock`).
    started : float
        ``time.perf_counter()`` when the call started.
    tuning : Tuning, optional
    known : CertifiedLength, optional
        A length BDMC certified for this model: run first, at it (with its chains where they
        are more than ``chains``).
    chains : int, default 32
        The call's chains.
    switch : FormSwitch, optional
        The model's two parameterisations, where the search may try the other one; ``run``
        runs on ``switch.current``.
    form_choice : str, optional
        How the form was chosen before the search (the pilots of both): then it is not tried
        again.
    """

    def __init__(self, run: Callable[[Attempt], xr.DataTree], *, target_gap: float,
                 max_time: float | None, started: float, tuning: Tuning = DEFAULT_TUNING,
                 known: CertifiedLength | None = None, chains: int = 32,
                 switch: FormSwitch | None = None, form_choice: str = ""):
        self._run, self.target_gap, self.max_time = run, target_gap, max_time
        self.started, self.tuning, self.known, self.call_chains = started, tuning, known, chains
        self.switch, self.form_trial = switch, form_choice
        self.tried, self.lowers, self.lower_se, self.chains, self.bias = [], [], [], [], []
        self.next_chains, self.converged, self.reason = None, False, "converged"
        self.result = None

    def remaining(self) -> float | None:
        """Seconds left of ``max_time`` (None: no limit)."""
        return None if self.max_time is None else self.max_time - (budget_clock() - self.started)

    def fit_first(self, planned: int, predicted: float, path_length: float | None = None) -> int:
        """The first length: what the path's length needs, and what fits in the budget."""
        return min(first_length(planned, predicted, self.remaining(), path_length, self.tuning),
                   path_needs(planned, path_length, self.tuning))

    def fit_certified(self, planned: int, predicted: float,
                      path_length: float | None = None) -> int:
        """Return the certified length, shortened where the real data's path is shorter.

        The certified run's steps over its path's squared length is the rate this model was
        certified at; a shorter real-data path needs that rate times its own squared length
        (:func:`~pymc_bdmc.pipeline.auto_steps.path_needs`), never more than certified.
        """
        certified = self.known.path_length
        rate = planned / certified**2 if certified > 0 else float("nan")
        return path_needs(planned, path_length, self.tuning, steps_per_squared_length=rate)

    def run(self) -> xr.DataTree:
        """Run attempts until the lower bound stops moving or the budget ends; annotate it."""
        n_steps = self.tuning.first_n_steps
        if self.known is not None:
            chains = self.known.chains if self.known.chains > self.call_chains else None
            attempt_start = budget_clock()
            self._record(self._run(Attempt(self.known.n_steps, self.fit_certified,
                                           chains=chains)))
            real_sd = forward_spread(self.result)
            if not harder_than_certified(real_sd, self.known.forward_sd, self.target_gap,
                                         SEARCH_ON_BIAS_SCALE):
                self.reason, self.converged = "certified by BDMC in this process", True
                return self._finish()
            # The real data look harder than the certified simulated data: the certified
            # length need not do here, so the search goes on from it.
            logger.debug("The real data's forward log weights spread more (sd %.2f) than the "
                         "certified run's (sd %.2f): measuring the bias left at the certified "
                         "%d steps.", real_sd, self.known.forward_sd, self.known.n_steps)
            self.converged = False
            seconds = self._try_other_form(self._run_seconds(self.result, attempt_start))
            n_steps = self._next(seconds)
            if n_steps is None:
                return self._finish()
        while True:
            attempt_start = budget_clock()
            try:
                result = self._run(Attempt(n_steps, self.fit_first if not self.tried else None,
                                           self.next_chains))
            except KeyboardInterrupt:
                if self.result is None:
                    raise
                self.reason = "interrupted"
                break
            self._record(result)
            seconds = self._run_seconds(result, attempt_start)
            if not self.converged and forward_spread(self.result) ** 2 / 2 > self.target_gap:
                seconds = self._try_other_form(seconds)
            n_steps = self._next(seconds)
            if n_steps is None:
                break
        return self._finish()

    def _try_other_form(self, seconds: float) -> float:
        """Run the last length in the other form, once; keep the form whose bound is higher.

        Both runs are lower bounds of the same ``log p(y)``: the other form is kept only where
        its bound is above this one's by more than twice their combined standard error (its
        attempt then starts the search's record afresh). ``seconds``: the last attempt's runs;
        returns the kept form's.
        """
        if self.switch is None or self.form_trial:
            return seconds
        remaining = self.remaining()
        if remaining is not None and remaining < 2 * seconds:
            return seconds
        was_other = self.switch.other
        if not self.switch.use(not was_other):
            return seconds
        kept = self.kept
        n_steps, kept_lower = self.tried[kept], self.lowers[kept]
        started = budget_clock()
        result = self._run(Attempt(n_steps, chains=self.next_chains))
        ev = result["evidence"]
        lower, se = float(ev["lower"]), float(ev["lower_se"])
        margin = 2.0 * float(np.hypot(se, self.lower_se[kept]))
        better = bool(np.isfinite(lower) and lower > kept_lower + margin)
        logger.debug("The other parameterisation at %d steps: lower %.3f (standard error %.3f) "
                     "against %.3f; %s.", n_steps, lower, se, kept_lower,
                     "switching to it" if better else "keeping this one")
        self.form_trial = (f"{'reparameterized' if not was_other else 'as written'} "
                           f"{'kept' if better else 'tried'}: {lower:.3f} against "
                           f"{kept_lower:.3f} at {n_steps} steps")
        if not better:
            self.switch.use(was_other)
            return seconds
        self.tried, self.lowers, self.lower_se, self.chains, self.bias = [], [], [], [], []
        self.result = None
        self._record(result)
        return self._run_seconds(result, started)

    @staticmethod
    def _run_seconds(result: xr.DataTree, attempt_start: float) -> float:
        """Seconds an attempt's runs took (its pilot left out)."""
        return (budget_clock() - attempt_start
                - float(result["evidence"].attrs.get("pilot_time", 0.0)))

    @property
    def kept(self) -> int:
        """Index of the run the search returns: the last at the longest length tried."""
        longest = max(self.tried)
        return max(i for i, n in enumerate(self.tried) if n == longest)

    def _record(self, result: xr.DataTree) -> None:
        ev = result["evidence"]
        if self.result is None or int(ev.attrs["n_steps"]) >= max(self.tried):
            self.result = result
        self.tried.append(int(ev.attrs["n_steps"]))
        self.chains.append(int(ev.attrs["chains"]))
        self.lowers.append(float(ev["lower"]))
        self.lower_se.append(float(ev["lower_se"]))
        bias, se = self.bias_left()
        self.bias.append(bias)
        logger.debug("Auto n_steps (lower bound): %d steps, %d chains, lower %.3f (standard "
                     "error %.3f), bias left about %.3f.", self.tried[-1], self.chains[-1],
                     self.lowers[-1], self.lower_se[-1], bias)
        self.converged = certifies(bias, se, self.target_gap)

    def bias_left(self) -> tuple[float, float]:
        """Return the bias left at the longest length, by 1/n decay, and its noise.

        Measured from the move between the kept run and the last run at the next shorter length
        (NaN where there is none).
        """
        last = self.kept
        m = self.tried[last]
        shorter = [i for i, n in enumerate(self.tried) if n < m]
        if not shorter:
            return float("nan"), float("nan")
        first = max(shorter, key=lambda i: (self.tried[i], i))
        k = self.tried[first]
        factor = k / (m - k)
        noise = float(np.hypot(self.lower_se[first], self.lower_se[last]))
        return abs(self.lowers[last] - self.lowers[first]) * factor, noise * factor

    def _next(self, seconds: float) -> int | None:
        """Return the next attempt's length (and chains), or None with the reason to stop.

        ``seconds``: the last attempt's runs.
        """
        if self.converged:
            return None
        kept, remaining = self.kept, self.remaining()
        n = self.tried[kept]
        # Seconds per step and chain of the last attempt, for runs of other lengths and chains.
        per_step = seconds / (self.tried[-1] * self.chains[-1])
        bias, noise = self.bias_left()
        unit = min(self.tuning.first_n_steps, self.tried[0])
        if np.isfinite(bias) and bias <= self.target_gap:  # small, but measured too noisily
            chains = more_chains(self.chains[kept], noise, self.target_gap,
                                 per_step * n * self.chains[kept], remaining, self.tuning)
            if chains is None:
                self.reason = "more chains would not fit in max_time"
                return None
            self.next_chains = chains
            return n
        if not np.isfinite(bias) and n >= 2 and forward_spread(self.result) ** 2 / 2 \
                <= self.target_gap:  # the spread allows the length to do: measure it there
            if remaining is not None and per_step * (n // 2) * self.chains[-1] > remaining:
                self.reason = f"a run of {n // 2} steps would exceed max_time"
                return None
            return n // 2
        wanted = 2 * n if not np.isfinite(bias) else max(
            2 * n, unit * int(np.ceil(n * bias / self.target_gap / unit)))
        longest = self.tuning.max_n_steps
        if remaining is not None and per_step > 0:
            longest = min(longest,
                          unit * int(remaining / (per_step * self.chains[-1]) // unit))
        if longest < 2 * n:
            self.reason = ("n_steps would exceed the limit" if longest >= self.tuning.max_n_steps
                           else f"a run of {2 * n} steps would exceed max_time")
            return None
        return int(min(wanted, longest))

    def _finish(self) -> xr.DataTree:
        attrs = self.result["evidence"].attrs
        if not self.converged and self.reason != "interrupted" and len(self.tried) < 2:
            logger.warning(
                "One length only (%d steps, lower %.2f%s): how far the lower bound still is "
                "from converging was not measured; stopped because %s. Raise `max_time` or pass "
                "a larger `n_steps`; `pmb.calibrate()` measures the estimator's error on data "
                "simulated from the model (a BDMC certificate).", self.tried[self.kept],
                self.lowers[self.kept], f"; {self.form_trial}" if self.form_trial else "",
                self.reason)
        elif not self.converged and self.reason != "interrupted":
            logger.warning(
                "The lower bound still moved as the path lengthened (%s; longest %d steps, about "
                "%.2f nats of bias left, target %.2f); stopped because %s. Raise `max_time` or "
                "pass a larger `n_steps`; `pmb.calibrate()` measures the estimator's error on "
                "data simulated from the model (a BDMC certificate).",
                ", ".join(f"{n}: {lower:.2f}" for n, lower in zip(self.tried, self.lowers,
                                                                   strict=True)),
                self.tried[self.kept], self.bias[-1], self.target_gap, self.reason)
        attrs.update({
            "auto_n_steps": np.array(self.tried), "auto_chains": np.array(self.chains),
            "auto_lowers": np.array(self.lowers), "auto_lower_se": np.array(self.lower_se),
            "auto_bias_left": np.array(self.bias), "target_gap": float(self.target_gap),
            "max_time": float("nan") if self.max_time is None else float(self.max_time),
            "converged": int(self.converged), "auto_stop": self.reason,
        })
        if self.form_trial:
            attrs["auto_form"] = self.form_trial
        return self.result
