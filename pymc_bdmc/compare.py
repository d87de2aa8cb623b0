"""Bayesian model comparison from evidence results: ranking tables and Bayes factors.

A result from :func:`~pymc_bdmc.sample_ais` carries only a stochastic *lower* bound on
``log p(y)``; a result from :func:`~pymc_bdmc.sample_bdmc` carries a sandwich. Nothing here
pretends a lower bound is an estimate with symmetric error: intervals for log Bayes factors come
from the bounds, and are unbounded on a side where no bound exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

__all__ = ["BayesFactor", "bayes_factor", "compare", "evidence_strength"]

#: Kass & Raftery (1995) scale on log10 Bayes factors, as tabulated in the BDMC paper (§6.3).
_KASS_RAFTERY = (
    (0.5, "not worth more than a bare mention"),
    (1.0, "substantial"),
    (2.0, "strong"),
    (np.inf, "decisive"),
)


def evidence_strength(log_bf: float) -> str:
    """Kass-Raftery strength of evidence for ``log_bf`` (natural log) in favour of the first model.

    Examples
    --------
    >>> evidence_strength(np.log(30.0))
    'strong'
    """
    if np.isnan(log_bf):
        return "undetermined"
    magnitude = abs(log_bf) / np.log(10.0)
    for limit, label in _KASS_RAFTERY:
        if magnitude <= limit:
            return label
    return "decisive"  # pragma: no cover - the last limit is infinite


@dataclass(frozen=True)
class _Evidence:
    lower: float
    upper: float
    lower_se: float
    upper_se: float

    @property
    def kind(self) -> str:
        return "lower bound" if np.isnan(self.upper) else "sandwich"

    @property
    def estimate(self) -> float:
        # Between the bounds, the paper's ground-truth convention is their average.
        return self.lower if np.isnan(self.upper) else 0.5 * (self.lower + self.upper)

    @property
    def interval(self) -> tuple[float, float]:
        return self.lower, np.inf if np.isnan(self.upper) else self.upper


def _evidence(result) -> _Evidence:
    if isinstance(result, xr.DataTree):
        if "evidence" not in result.children:
            raise ValueError("The result has no `evidence` group; pass pymc_bdmc results.")
        ev = result["evidence"]
    elif isinstance(result, xr.Dataset):
        ev = result
    else:
        raise TypeError(f"Expected a pymc_bdmc result (xarray.DataTree), got {type(result)}.")
    return _Evidence(float(ev["lower"]), float(ev["upper"]), float(ev["lower_se"]),
                     float(ev["upper_se"]))


@dataclass(frozen=True)
class BayesFactor:
    """``log p(y | a) - log p(y | b)`` with an interval propagated from the bounds.

    Attributes
    ----------
    log_bf : float
        Point value from each model's estimate (the midpoint of a sandwich, else the lower
        bound).
    interval : tuple of float
        ``(lower_a - upper_b, upper_a - lower_b)``; a side is infinite where a bound is missing.
    strength : str
        Kass-Raftery strength of ``log_bf``.
    kinds : tuple of str
        ``"sandwich"`` or ``"lower bound"`` for each model.
    """

    log_bf: float
    interval: tuple[float, float]
    strength: str
    kinds: tuple[str, str]

    def __str__(self) -> str:
        lo, hi = self.interval
        return (f"log BF = {self.log_bf:.3f}  (interval [{lo:.3f}, {hi:.3f}]), "
                f"{self.strength}; from a {self.kinds[0]} and a {self.kinds[1]}")


def bayes_factor(a, b) -> BayesFactor:
    """Log Bayes factor of model ``a`` against model ``b`` from two evidence results.

    Parameters
    ----------
    a, b : xarray.DataTree
        Results of :func:`~pymc_bdmc.sample_ais` or :func:`~pymc_bdmc.sample_bdmc` on the *same*
        data.

    Returns
    -------
    BayesFactor
    """
    ea, eb = _evidence(a), _evidence(b)
    lo_a, hi_a = ea.interval
    lo_b, hi_b = eb.interval
    log_bf = ea.estimate - eb.estimate
    return BayesFactor(log_bf, (lo_a - hi_b, hi_a - lo_b), evidence_strength(log_bf),
                       (ea.kind, eb.kind))


def compare(results: Mapping[str, object]) -> pd.DataFrame:
    """Rank models by log evidence, like ``az.compare`` ranks them by ELPD.

    Parameters
    ----------
    results : mapping of str to xarray.DataTree
        Evidence results on the same data, keyed by model name.

    Returns
    -------
    pandas.DataFrame
        Indexed by model, best first, with columns ``rank``, ``log_evidence`` (midpoint of a
        sandwich, else the lower bound), ``lower``, ``upper``, ``se`` (bootstrap standard error
        of the lower bound), ``kind``, ``log_bf`` (against the best model, <= 0),
        ``log_bf_lower`` / ``log_bf_upper`` (interval from the bounds) and ``strength``
        (Kass-Raftery strength of the evidence *against* this model relative to the best).
    """
    if not results:
        raise ValueError("`results` is empty.")
    ev = {name: _evidence(r) for name, r in results.items()}
    order = sorted(ev, key=lambda n: ev[n].estimate, reverse=True)
    best = ev[order[0]]
    rows = []
    for rank, name in enumerate(order):
        e = ev[name]
        lo, hi = e.interval
        log_bf = e.estimate - best.estimate
        rows.append({
            "rank": rank,
            "log_evidence": e.estimate,
            "lower": e.lower,
            "upper": e.upper,
            "se": e.lower_se,
            "kind": e.kind,
            "log_bf": log_bf,
            "log_bf_lower": lo - best.interval[1],
            "log_bf_upper": hi - best.lower,
            "strength": "" if rank == 0 else evidence_strength(log_bf),
        })
    return pd.DataFrame(rows, index=pd.Index(order, name="model"))
