"""Bayesian model comparison from evidence results: ranking tables and Bayes factors.

A result from :func:`~pymc_bdmc.sample_ais` carries only a stochastic *lower* bound on
``log p(y)``; a result from :func:`~pymc_bdmc.sample_bdmc` carries a sandwich. Nothing here
pretends a lower bound is an estimate with symmetric error: intervals for log Bayes factors come
from the bounds, and are unbounded on a side where no bound exists.

Results of :func:`~pymc_bdmc.sample_unnormalized_evidence` are read by their ``estimate_kind``
attribute: ``"unbiased"`` (a stochastic lower bound, like AIS), ``"biased"`` (inexact
simulation: no bound on either side) and ``"summary-statistic"`` (ABC or synthetic likelihood,
which estimate a number about ``S(y)``, not ``p(y)``). Summary-statistic results are never mixed
with evidences, and are compared with each other only when they share the method, the summary
and ABC's tolerance: only then is their ratio a Bayes factor
(:mod:`pymc_bdmc.unnormalized.summary`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from pymc_bdmc.errors import BDMCInputError

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
    estimate_kind: str = "unbiased"
    # (method, summary, epsilon) of a summary-statistic result, None for an evidence
    summary: tuple | None = None

    @property
    def kind(self) -> str:
        if self.summary is not None:
            return "summary-statistic"
        if self.estimate_kind == "biased":
            return "biased estimate"
        return "lower bound" if np.isnan(self.upper) else "sandwich"

    @property
    def estimate(self) -> float:
        # Between the bounds, the paper's ground-truth convention is their average.
        return self.lower if np.isnan(self.upper) else 0.5 * (self.lower + self.upper)

    @property
    def interval(self) -> tuple[float, float]:
        if self.kind in ("summary-statistic", "biased estimate"):
            return -np.inf, np.inf  # no bound is claimed on either side
        return self.lower, np.inf if np.isnan(self.upper) else self.upper


def _value(ev: xr.Dataset, name: str) -> float:
    return float(ev[name]) if name in ev else np.nan


def _check_comparable(evidences: Mapping[str, _Evidence]) -> None:
    """Refuse summary-statistic numbers against evidences, or against unlike ones."""
    summary = [n for n, e in evidences.items() if e.summary is not None]
    if not summary:
        return
    other = [n for n in evidences if n not in summary]
    if other:
        raise BDMCInputError(
            f"Results {summary} are summary-statistic estimates (ABC or synthetic likelihood: "
            f"estimate_kind='summary-statistic'), numbers about a summary S(y), not the evidence "
            f"p(y) that {other} estimate; their difference is no Bayes factor. Compare "
            "summary-statistic results only with each other (same method, summary and epsilon), "
            "or estimate every model's evidence with an evidence method (e.g. "
            "pmb.sample_unnormalized_evidence(method='savis'))."
        )
    keys = {n: evidences[n].summary for n in summary}
    if len(set(keys.values())) > 1:
        described = "; ".join(f"{n}: method={k[0]!r}, summary={k[1]!r}, epsilon={list(k[2])}"
                              for n, k in keys.items())
        raise BDMCInputError(
            "Summary-statistic results give a Bayes factor only with the same method, summary "
            f"and epsilon; these differ ({described})."
        )


def _evidence(result) -> _Evidence:
    if isinstance(result, xr.DataTree):
        if "evidence" not in result.children:
            raise ValueError("The result has no `evidence` group; pass pymc_bdmc results.")
        ev = result["evidence"]
    elif isinstance(result, xr.Dataset):
        ev = result
    else:
        raise TypeError(f"Expected a pymc_bdmc result (xarray.DataTree), got {type(result)}.")
    if isinstance(ev, xr.DataTree):
        ev = ev.to_dataset()
    kind = str(ev.attrs.get("estimate_kind", "unbiased"))
    summary = None
    if kind == "summary-statistic":
        epsilon = tuple(np.ravel(ev["epsilon"].values).tolist()) if "epsilon" in ev else ()
        summary = (str(ev.attrs.get("method")), str(ev.attrs.get("summary")), epsilon)
    # Un-normalised results have no upper bound and a relative standard error of p̂ instead
    # of a bootstrap one of log p̂ (the same to first order).
    lower_se = _value(ev, "lower_se") if "lower_se" in ev else _value(ev, "relative_se")
    return _Evidence(float(ev["lower"]), _value(ev, "upper"), lower_se,
                     _value(ev, "upper_se"), kind, summary)


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
        ``"sandwich"``, ``"lower bound"``, ``"biased estimate"`` (inexact simulation) or
        ``"summary-statistic"`` (then ``log_bf`` is the ratio of the summary-statistic
        numbers, and a Bayes factor only under the conditions of
        :mod:`pymc_bdmc.unnormalized.summary`) for each model.
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
        Results of :func:`~pymc_bdmc.sample_ais`, :func:`~pymc_bdmc.sample_bdmc` or
        :func:`~pymc_bdmc.sample_unnormalized_evidence` on the *same* data.

    Returns
    -------
    BayesFactor

    Raises
    ------
    BDMCInputError
        If one result is a summary-statistic estimate (ABC, synthetic likelihood) and the
        other an evidence, or both are summary-statistic estimates with a different method,
        summary or ABC tolerance.
    """
    ea, eb = _evidence(a), _evidence(b)
    _check_comparable({"the first argument": ea, "the second argument": eb})
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
        Evidence results on the same data, keyed by model name; or summary-statistic results
        (ABC, synthetic likelihood) that share method, summary and tolerance, whose
        ``log_evidence`` column is then the log summary-statistic number.

    Returns
    -------
    pandas.DataFrame
        Indexed by model, best first, with columns ``rank``, ``log_evidence`` (midpoint of a
        sandwich, else the lower bound), ``lower``, ``upper``, ``se`` (bootstrap standard error
        of the lower bound), ``kind``, ``log_bf`` (against the best model, <= 0),
        ``log_bf_lower`` / ``log_bf_upper`` (interval from the bounds) and ``strength``
        (Kass-Raftery strength of the evidence *against* this model relative to the best).

    Raises
    ------
    BDMCInputError
        If summary-statistic results are mixed with evidences, or differ among themselves in
        method, summary or ABC tolerance.
    """
    if not results:
        raise ValueError("`results` is empty.")
    ev = {name: _evidence(r) for name, r in results.items()}
    _check_comparable(ev)
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
