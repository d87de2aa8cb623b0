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
or :func:`~pymc_bdmc.calibrate`), that length is run once instead (:func:`remember_certified`).
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
from pymc_bdmc.estimators import certifies
from pymc_bdmc.pipeline.auto_steps import Attempt, first_length, more_chains, path_needs

__all__ = ["CertifiedLength", "LowerBoundSearch", "certified_length", "remember_certified"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CertifiedLength:
    """A length (and chains) BDMC certified for a model in this process, and in which form."""

    n_steps: int
    chains: int
    reparameterized: bool


#: Certified lengths of this process, by model structure (:func:`pymc_bdmc.model.cache.model_key`).
_CERTIFIED: dict[tuple, CertifiedLength] = {}


def remember_certified(key: tuple, result: xr.DataTree) -> None:
    """Keep a certified BDMC search's length and chains for later lower bounds of the model."""
    attrs = result["evidence"].attrs
    if attrs.get("certified"):
        _CERTIFIED[key] = CertifiedLength(int(attrs["n_steps"]), int(attrs["chains"]),
                                          "reparameterized" in attrs)


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
        A length BDMC certified for this model: run once, at it (with its chains where they
        are more than ``chains``).
    chains : int, default 32
        The call's chains.
    """

    def __init__(self, run: Callable[[Attempt], xr.DataTree], *, target_gap: float,
                 max_time: float | None, started: float, tuning: Tuning = DEFAULT_TUNING,
                 known: CertifiedLength | None = None, chains: int = 32):
        self._run, self.target_gap, self.max_time = run, target_gap, max_time
        self.started, self.tuning, self.known, self.call_chains = started, tuning, known, chains
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

    def run(self) -> xr.DataTree:
        """Run attempts until the lower bound stops moving or the budget ends; annotate it."""
        if self.known is not None:
            chains = self.known.chains if self.known.chains > self.call_chains else None
            self.result = self._run(Attempt(self.known.n_steps, chains=chains))
            self._record(self.result)
            self.reason, self.converged = "certified by BDMC in this process", True
            return self._finish()
        n_steps = self.tuning.first_n_steps
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
            seconds = (time.perf_counter() - attempt_start
                       - float(result["evidence"].attrs.get("pilot_time", 0.0)))
            n_steps = self._next(seconds)
            if n_steps is None:
                break
        return self._finish()

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
        if not self.converged and self.reason != "interrupted":
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
        return self.result
