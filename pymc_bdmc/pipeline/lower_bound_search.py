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
* doubles the length, and stops once the bias left, so estimated, and its standard error are
  within ``target_gap`` (measured again with more chains where only its noise is not);
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
import time
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
        Seconds the whole call may take, counted from ``started``.
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
        return None if self.max_time is None else self.max_time - (
            time.perf_counter() - self.started)

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
            attempt_start = time.perf_counter()
            self.result = self._run(Attempt(self.known.n_steps, self.fit_certified,
                                            chains=chains))
            self._record(self.result)
            real_sd = forward_spread(self.result)
            if not harder_than_certified(real_sd, self.known.forward_sd, self.target_gap,
                                         SEARCH_ON_BIAS_SCALE):
                self.reason, self.converged = "certified by BDMC in this process", True
                return self._finish()
            # The real data look harder than the certified simulated data: the certified
            # length need not do here, so the search goes on from it.
            logger.debug("The real data's forward log weights spread more (sd %.2f) than the "
                         "certified run's (sd %.2f): lengthening past the certified %d steps.",
                         real_sd, self.known.forward_sd, self.known.n_steps)
            self.converged = False
            seconds = self._try_other_form(self._run_seconds(self.result, attempt_start))
            n_steps = self._next(seconds)
            if n_steps is None:
                return self._finish()
        while True:
            attempt_start = time.perf_counter()
            try:
                result = self._run(Attempt(n_steps, self.fit_first if not self.tried else None,
                                           self.next_chains))
            except KeyboardInterrupt:
                if self.result is None:
                    raise
                self.reason = "interrupted"
                break
            self.result = result
            self._record(result)
            seconds = self._run_seconds(result, attempt_start)
            if not self.converged and forward_spread(result) ** 2 / 2 > self.target_gap:
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
        started = time.perf_counter()
        result = self._run(Attempt(self.tried[-1], chains=self.next_chains))
        ev = result["evidence"]
        lower, se = float(ev["lower"]), float(ev["lower_se"])
        margin = 2.0 * float(np.hypot(se, self.lower_se[-1]))
        better = bool(np.isfinite(lower) and lower > self.lowers[-1] + margin)
        logger.debug("The other parameterisation at %d steps: lower %.3f (standard error %.3f) "
                     "against %.3f; %s.", self.tried[-1], lower, se, self.lowers[-1],
                     "switching to it" if better else "keeping this one")
        self.form_trial = (f"{'reparameterized' if not was_other else 'as written'} "
                           f"{'kept' if better else 'tried'}: {lower:.3f} against "
                           f"{self.lowers[-1]:.3f} at {self.tried[-1]} steps")
        if not better:
            self.switch.use(was_other)
            return seconds
        self.tried, self.lowers, self.lower_se, self.chains, self.bias = [], [], [], [], []
        self.result = result
        self._record(result)
        return self._run_seconds(result, started)

    @staticmethod
    def _run_seconds(result: xr.DataTree, attempt_start: float) -> float:
        """Seconds an attempt's runs took (its pilot left out)."""
        return (time.perf_counter() - attempt_start
                - float(result["evidence"].attrs.get("pilot_time", 0.0)))

    def _record(self, result: xr.DataTree) -> None:
        ev = result["evidence"]
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
        """The bias left at the last length, by 1/n decay from the last two, and its noise."""
        if len(self.tried) < 2:
            return float("nan"), float("nan")
        k, m = self.tried[-2], self.tried[-1]
        if m <= k:  # more chains at the same length: compare with the last shorter run
            shorter = [i for i, n in enumerate(self.tried) if n < m]
            if not shorter:
                return float("nan"), float("nan")
            k = self.tried[shorter[-1]]
            first, last = self.lowers[shorter[-1]], self.lowers[-1]
            noise = float(np.hypot(self.lower_se[shorter[-1]], self.lower_se[-1]))
        else:
            first, last = self.lowers[-2], self.lowers[-1]
            noise = float(np.hypot(self.lower_se[-2], self.lower_se[-1]))
        factor = k / (m - k)
        return abs(last - first) * factor, noise * factor

    def _next(self, seconds: float) -> int | None:
        """The next attempt's length (and chains), or None with the reason to stop."""
        if self.converged:
            return None
        n, remaining = self.tried[-1], self.remaining()
        bias, noise = self.bias_left()
        unit = min(self.tuning.first_n_steps, self.tried[0])
        if np.isfinite(bias) and bias <= self.target_gap:  # small, but measured too noisily
            chains = more_chains(self.chains[-1], noise, self.target_gap, seconds, remaining,
                                 self.tuning)
            if chains is None:
                self.reason = "more chains would not fit in max_time"
                return None
            self.next_chains = chains
            return n
        wanted = 2 * n if not np.isfinite(bias) else max(
            2 * n, unit * int(np.ceil(n * bias / self.target_gap / unit)))
        longest = self.tuning.max_n_steps
        if remaining is not None and seconds > 0:
            longest = min(longest, unit * int(remaining / (seconds / n) // unit))
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
                "simulated from the model (a BDMC certificate).", self.tried[-1], self.lowers[-1],
                f"; {self.form_trial}" if self.form_trial else "", self.reason)
        elif not self.converged and self.reason != "interrupted":
            logger.warning(
                "The lower bound still moved as the path lengthened (%s; last %d steps, about "
                "%.2f nats of bias left, target %.2f); stopped because %s. Raise `max_time` or "
                "pass a larger `n_steps`; `pmb.calibrate()` measures the estimator's error on "
                "data simulated from the model (a BDMC certificate).",
                ", ".join(f"{n}: {lower:.2f}" for n, lower in zip(self.tried, self.lowers,
                                                                   strict=True)),
                self.tried[-1], self.bias[-1], self.target_gap, self.reason)
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
