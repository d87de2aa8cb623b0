"""Bayesian model comparison from evidence results: Bayes factors, ranking tables, probabilities.

Every pymc_bdmc result has an ``evidence`` group with the same core fields (``lower``,
``upper``, ``gap``, ``lower_se``, ``upper_se``; NaN where a method has no such number), and an
``observed_data`` group with the data the evidence refers to. This module reads that layout
only. Each result becomes an *interval* for ``log p(y)`` and a point value inside it; nothing
pretends a lower bound is an estimate with symmetric error:

* a **sandwich** (lower and upper bound) gives ``[lower, upper]``, never inverted;
* a **certified lower bound** (a :func:`~pymc_bdmc.calibrate` result whose certificate holds)
  gives ``[lower, lower + allowance]`` from what the calibration measured on simulated data
  (:class:`Certificate`);
* a **lower bound** alone gives ``[lower, inf)``;
* a **biased estimate** (inexact simulation) and a **summary-statistic** number (ABC,
  synthetic likelihood: about ``S(y)``, not ``p(y)``) give ``(-inf, inf)``.

Only evidences of the *same* data compare: results on different observed data, and results of
:func:`~pymc_bdmc.sample_bdmc` (each on data simulated from its own model), are refused; a
result without ``observed_data`` (built by hand) is not checked, and the caller vouches for it.
Summary-statistic results are never mixed with evidences, and are compared with each other
only when they share the method, the summary and ABC's tolerance: only then is their ratio a
Bayes factor (:mod:`pymc_bdmc.unnormalized.summary`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import expit, logsumexp

from pymc_bdmc.errors import BDMCInputError

__all__ = ["CERTIFICATE_SE_FACTOR", "EVIDENCE_FIELDS", "BayesFactor", "Certificate",
           "bayes_factor", "compare", "evidence_strength", "model_probabilities"]

#: The ``evidence`` variables every result has and :func:`compare` reads.
EVIDENCE_FIELDS = ("lower", "upper", "lower_se", "upper_se")

#: Standard errors of the certified gap added to it in a certificate's allowance.
CERTIFICATE_SE_FACTOR = 2.0

#: Kass & Raftery (1995) scale on log10 Bayes factors, as tabulated in the BDMC paper (§6.3).
_KASS_RAFTERY = (
    (0.5, "not worth more than a bare mention"),
    (1.0, "substantial"),
    (2.0, "strong"),
    (np.inf, "decisive"),
)

_USE_INSTEAD = ("Pass results of pmb.calibrate (certified on simulated data, then estimated on "
                "the real data) or pmb.sample_ais, each run on the same real data.")


def evidence_strength(log_bf: float) -> str:
    """Kass-Raftery strength of evidence for ``log_bf`` (natural log) in favour of the first model.

    Parameters
    ----------
    log_bf : float
        Natural log of a Bayes factor.

    Returns
    -------
    str
        ``"not worth more than a bare mention"``, ``"substantial"``, ``"strong"``,
        ``"decisive"``, or ``"undetermined"`` for NaN.

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
class Certificate:
    """What :func:`~pymc_bdmc.calibrate` measured about its estimator on simulated data.

    The BDMC gap ``upper - lower`` on data simulated from the model bounds, in expectation,
    how far the lower bound falls short of ``log p(y*)`` there. The certificate *holds* when
    the calibration certified its run (``|gap|`` and its standard error within
    ``tolerance``) and did not flag the real data as harder than the simulated ones. Then the
    real-data lower bound, made with the certified plan, is given the upper side
    ``lower + allowance``, with ``allowance = |gap| + CERTIFICATE_SE_FACTOR * gap_se``: the
    measured shortfall, made non-negative, plus two of its standard errors. That side is
    *evidence about the estimator on data like the simulated ones*, not a bound on ``log p(y)``
    for the real data: it transfers only as far as the real data resemble draws from the model.

    Attributes
    ----------
    certified : bool
        The calibration's ``certified``.
    gap : float
        ``certified_gap``: the BDMC gap of the last attempt, in nats (may be slightly negative).
    gap_se : float
        The last attempt's standard error of the gap.
    tolerance : float
        The tolerance the calibration was asked to meet.
    n_steps : int
        ``certified_n_steps``: the annealing length of the last attempt.
    real_data_harder : bool
        The calibration's transfer check: the real data's forward log weights spread much more
        than the simulated data's, so the certificate may not transfer.
    """

    certified: bool
    gap: float
    gap_se: float
    tolerance: float
    n_steps: int
    real_data_harder: bool = False

    @property
    def allowance(self) -> float:
        """``|gap| + CERTIFICATE_SE_FACTOR * gap_se`` nats above the lower bound."""
        return abs(self.gap) + CERTIFICATE_SE_FACTOR * self.gap_se

    @property
    def holds(self) -> bool:
        """Certified, not flagged by the transfer check, and with a finite allowance."""
        return self.certified and not self.real_data_harder and bool(np.isfinite(self.allowance))

    def __str__(self) -> str:
        measured = (f"gap {self.gap:.3f} nats (standard error {self.gap_se:.3f}) at "
                    f"{self.n_steps} steps on simulated data, tolerance {self.tolerance:g}")
        if self.holds:
            return (f"certified: {measured}; upper side = lower + {self.allowance:.3f} "
                    "(about the estimator on data like these, not a bound on them)")
        if self.certified:
            return (f"certified ({measured}), but the real data look harder than the simulated "
                    "ones (real_data_harder): lower bound only")
        return f"not certified: {measured}; lower bound only"


@dataclass(frozen=True)
class _Evidence:
    lower: float
    upper: float
    lower_se: float
    upper_se: float
    estimate_kind: str = "unbiased"
    # (method, summary, epsilon) of a summary-statistic result, None for an evidence
    summary: tuple | None = None
    certificate: Certificate | None = None
    # (fingerprint, description) of the observed data; None when the result records none
    data: tuple[str, str] | None = None
    simulated: bool = False

    @property
    def kind(self) -> str:
        if self.summary is not None:
            return "summary-statistic"
        if self.estimate_kind == "biased":
            return "biased estimate"
        if not np.isnan(self.upper):
            return "sandwich"
        if self.certificate is not None and self.certificate.holds:
            return "certified lower bound"
        return "lower bound"

    @property
    def estimate(self) -> float:
        # Between the bounds, the paper's ground-truth convention is their average.
        return self.lower if np.isnan(self.upper) else 0.5 * (self.lower + self.upper)

    @property
    def interval(self) -> tuple[float, float]:
        kind = self.kind
        if kind in ("summary-statistic", "biased estimate"):
            return -np.inf, np.inf  # no bound is claimed on either side
        if kind == "sandwich":  # crossed bounds (a negative gap) span both estimates
            return min(self.lower, self.upper), max(self.lower, self.upper)
        if kind == "certified lower bound":
            return self.lower, self.lower + self.certificate.allowance
        return self.lower, np.inf


def _data_fingerprint(observed: xr.Dataset) -> tuple[str, str]:
    """Hash the observed variables' names, shapes and values; describe names and shapes."""
    digest = hashlib.sha256()
    described = []
    for name in sorted(observed.data_vars, key=str):
        values = np.asarray(observed[name].values)
        if values.dtype.kind in "biuf":  # 1 and 1.0 are the same datum
            values = values.astype(float)
            values[np.isnan(values)] = np.nan  # one NaN pattern for missing values
        elif values.dtype.kind not in "c":
            values = values.astype(str)
        digest.update(f"{name}{values.shape}{values.dtype}".encode())
        digest.update(np.ascontiguousarray(values).tobytes())
        described.append(f"{name} {values.shape}")
    return digest.hexdigest(), ", ".join(described) or "no variables"


def _certificate(tree: xr.DataTree) -> Certificate | None:
    """Read the ``calibration`` group of a :func:`~pymc_bdmc.calibrate` result, if any."""
    if "calibration" not in tree.children:
        return None
    cal = tree["calibration"]
    missing = [k for k in ("certified", "certified_gap", "tolerance", "certified_n_steps")
               if k not in cal.attrs]
    if missing or "gap_se" not in cal.data_vars:
        raise BDMCInputError(f"The result's calibration group lacks {missing or ['gap_se']}; "
                             "pass the result of pmb.calibrate unchanged.")
    attrs = cal.attrs
    return Certificate(bool(attrs["certified"]), float(attrs["certified_gap"]),
                       float(np.ravel(cal["gap_se"].values)[-1]), float(attrs["tolerance"]),
                       int(attrs["certified_n_steps"]),
                       bool(attrs.get("real_data_harder", False)))


def _evidence(result, label: str) -> _Evidence:
    """Read one result (a DataTree, or an evidence Dataset alone) in the shared layout."""
    tree = result if isinstance(result, xr.DataTree) else None
    if tree is not None:
        if "evidence" not in tree.children:
            raise BDMCInputError(f"{label} has no `evidence` group. {_USE_INSTEAD}")
        ev = tree["evidence"].to_dataset()
    elif isinstance(result, xr.Dataset):
        ev = result
    else:
        raise BDMCInputError(
            f"Expected a pymc_bdmc result (xarray.DataTree) for {label}, got "
            f"{type(result).__name__}. Models are compared by their results: run "
            "`pmb.calibrate(model)` (or `pmb.sample_ais`) on each, on the same data, and pass "
            "those.")
    missing = [name for name in EVIDENCE_FIELDS if name not in ev]
    if missing:
        raise BDMCInputError(
            f"The evidence group of {label} lacks {missing}. compare reads the layout every "
            f"pymc_bdmc result has: {list(EVIDENCE_FIELDS)} (NaN where a method has none).")
    kind = str(ev.attrs.get("estimate_kind", "unbiased"))
    summary = None
    if kind == "summary-statistic":
        epsilon = tuple(np.ravel(ev["epsilon"].values).tolist()) if "epsilon" in ev else ()
        summary = (str(ev.attrs.get("method")), str(ev.attrs.get("summary")), epsilon)
    has = tree.children if tree is not None else {}
    return _Evidence(
        *(float(ev[name]) for name in EVIDENCE_FIELDS), kind, summary,
        certificate=None if tree is None else _certificate(tree),
        data=(_data_fingerprint(tree["observed_data"].to_dataset())
              if "observed_data" in has else None),
        simulated=ev.attrs.get("algorithm") == "bdmc" or "generating_values" in has,
    )


def _check_real_data(evidences: Mapping[str, _Evidence]) -> None:
    """Refuse results on data simulated from their own model (BDMC)."""
    simulated = [n for n, e in evidences.items() if e.simulated]
    if simulated:
        raise BDMCInputError(
            f"Results {simulated} come from pmb.sample_bdmc (or another run on data simulated "
            "from the model: they have a generating_values group). Each refers to data "
            "simulated from its own model, so their evidences are of different data and make "
            "no Bayes factor: sample_bdmc results certify an estimator, they are not evidence "
            f"for the real data. {_USE_INSTEAD}"
        )


def _check_same_data(evidences: Mapping[str, _Evidence]) -> None:
    """Refuse results whose observed_data groups differ (those without one are not checked)."""
    recorded = {n: e.data for n, e in evidences.items() if e.data is not None}
    if len({fingerprint for fingerprint, _ in recorded.values()}) <= 1:
        return
    detail = "; ".join(f"{n!r}: {d} [data {f[:8]}]" for n, (f, d) in recorded.items())
    if len({description for _, description in recorded.values()}) == 1:
        detail = f"same names and shapes, different values: {detail}"
    raise BDMCInputError(
        f"The results refer to different observed data ({detail}). A Bayes factor compares "
        "the evidences of the same data: run every model on the same observed data (with the "
        f"same names for the observed variables). {_USE_INSTEAD}"
    )


def _check_summary(evidences: Mapping[str, _Evidence]) -> None:
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


def _read_all(results: Mapping[str, object]) -> dict[str, _Evidence]:
    evidences = {name: _evidence(r, repr(name)) for name, r in results.items()}
    _check_real_data(evidences)
    _check_same_data(evidences)
    _check_summary(evidences)
    return evidences


@dataclass(frozen=True)
class BayesFactor:
    """``log p(y | a) - log p(y | b)`` with an interval propagated from each model's interval.

    Attributes
    ----------
    log_bf : float
        From each model's point value (the midpoint of a sandwich, else the lower bound).
    interval : tuple of float
        ``(low_a - high_b, high_a - low_b)`` from each model's interval ``[low, high]`` (see
        :func:`bayes_factor`); never inverted, and infinite on a side where a model has no
        upper end.
    strength : str
        Kass-Raftery strength of ``log_bf``.
    kinds : tuple of str
        For each model: ``"sandwich"``, ``"certified lower bound"``, ``"lower bound"``,
        ``"biased estimate"`` (inexact simulation) or ``"summary-statistic"`` (then ``log_bf``
        is the ratio of the summary-statistic numbers, and a Bayes factor only under the
        conditions of :mod:`pymc_bdmc.unnormalized.summary`).
    certificates : tuple
        For each model, the :class:`Certificate` of a :func:`~pymc_bdmc.calibrate` result
        (whether it holds or not), else None.
    """

    log_bf: float
    interval: tuple[float, float]
    strength: str
    kinds: tuple[str, str]
    certificates: tuple[Certificate | None, Certificate | None] = (None, None)

    def __str__(self) -> str:
        lo, hi = self.interval
        lines = [f"log BF = {self.log_bf:.3f}  (interval [{lo:.3f}, {hi:.3f}]), "
                 f"{self.strength}; from a {self.kinds[0]} and a {self.kinds[1]}"]
        for which, cert in zip(("first", "second"), self.certificates, strict=True):
            if cert is not None:
                lines.append(f"  {which} model: {cert}")
        return "\n".join(lines)


def bayes_factor(a, b) -> BayesFactor:
    """Log Bayes factor of model ``a`` against model ``b`` from two evidence results.

    Each result gives an interval ``[low, high]`` for its ``log p(y)``; the Bayes factor's
    interval is ``(low_a - high_b, high_a - low_b)``.

    * A sandwich gives ``[lower, upper]``. Both ends are stochastic, and when both are
      accurate their noise can cross them (``upper < lower``, a negative gap); neither can
      then be trusted to lie on its side of ``log p(y)``, and the interval is
      ``[upper, lower]``: it spans both estimates, as wide as their disagreement. An interval
      is never inverted.
    * A :func:`~pymc_bdmc.calibrate` result whose certificate holds gives
      ``[lower, lower + |certified_gap| + 2 gap_se]`` (:class:`Certificate`). The upper side
      is what the calibration measured about the estimator on data simulated from the model,
      carried over to the real data: evidence about the estimator, not a bound on these data.
    * A lower bound alone (``sample_ais``; a calibration that did not certify, or whose real
      data looked harder) gives ``[lower, inf)``; a biased or summary-statistic estimate
      ``(-inf, inf)``.

    Parameters
    ----------
    a, b : xarray.DataTree
        Results of :func:`~pymc_bdmc.calibrate`, :func:`~pymc_bdmc.sample_ais`,
        :func:`~pymc_bdmc.sample_smc_evidence` or
        :func:`~pymc_bdmc.sample_unnormalized_evidence` on the *same* data. A result without
        an ``observed_data`` group (built by hand) records no data: it is not checked, and the
        caller vouches that it refers to the same data.

    Returns
    -------
    BayesFactor

    Raises
    ------
    BDMCInputError
        If a result comes from :func:`~pymc_bdmc.sample_bdmc` (data simulated from its own
        model: it certifies an estimator, it is no evidence for the real data); if the two
        results' ``observed_data`` differ; if one is a summary-statistic estimate (ABC,
        synthetic likelihood) and the other an evidence, or both are summary-statistic
        estimates with a different method, summary or ABC tolerance; or if a result lacks the
        evidence fields :data:`EVIDENCE_FIELDS`.
    """
    ev = _read_all({"the first argument": a, "the second argument": b})
    ea, eb = ev["the first argument"], ev["the second argument"]
    lo_a, hi_a = ea.interval
    lo_b, hi_b = eb.interval
    log_bf = ea.estimate - eb.estimate
    return BayesFactor(log_bf, (lo_a - hi_b, hi_a - lo_b), evidence_strength(log_bf),
                       (ea.kind, eb.kind), (ea.certificate, eb.certificate))


def _share(log_mass: float, log_rest: float) -> float:
    """``exp(log_mass) / (exp(log_mass) + exp(log_rest))``, infinite arguments included."""
    if log_mass == -np.inf:
        return 0.0
    if log_rest == -np.inf:
        return 1.0
    return float(expit(log_mass - log_rest))


def model_probabilities(log_evidence, lower, upper,
                        log_prior=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior model probabilities, and their range over evidences within the intervals.

    ``p_i = π_i exp(e_i) / Σ_j π_j exp(e_j)`` grows with ``e_i`` and falls with every other
    ``e_j``. So its smallest value over evidences in the intervals puts model ``i`` at its
    lower end and the others at their upper ends, and its largest the reverse.

    Parameters
    ----------
    log_evidence : array_like
        Each model's point value of ``log p(y)``.
    lower, upper : array_like
        Each model's interval (``-inf`` / ``inf`` where unbounded).
    log_prior : array_like, optional
        Log prior model probabilities (normalised); uniform when omitted.

    Returns
    -------
    probability, probability_lower, probability_upper : ndarray
        Point values (from ``log_evidence``) and the bounds.
    """
    estimate, lower, upper = (np.asarray(v, dtype=float) for v in (log_evidence, lower, upper))
    n = len(estimate)
    log_prior = (np.full(n, -np.log(n)) if log_prior is None
                 else np.asarray(log_prior, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_post = log_prior + estimate
        point = np.exp(log_post - logsumexp(log_post))
        low, high = np.ones(n), np.ones(n)
        for i in range(1 if n == 1 else 0, n):  # one model: probability 1 exactly
            others = np.arange(n) != i
            low[i] = _share(log_prior[i] + lower[i], logsumexp((log_prior + upper)[others]))
            high[i] = _share(log_prior[i] + upper[i], logsumexp((log_prior + lower)[others]))
    return point, low, high


def _log_prior(prior: Mapping[str, float] | None, names: list[str]) -> np.ndarray:
    if prior is None:
        return np.full(len(names), -np.log(len(names)))
    if not isinstance(prior, Mapping):
        raise BDMCInputError(f"`prior` must be a mapping of model name to prior weight, got "
                             f"{type(prior).__name__}.")
    missing = [n for n in names if n not in prior]
    unknown = [k for k in prior if k not in names]
    if missing or unknown:
        raise BDMCInputError(f"`prior` must give a weight to each model and no other: missing "
                             f"{missing}, unknown {unknown} (models: {names}).")
    weights = np.array([float(prior[n]) for n in names])
    if not np.all(np.isfinite(weights) & (weights > 0)):
        raise BDMCInputError(f"`prior` weights must be positive and finite, got "
                             f"{dict(zip(names, weights.tolist(), strict=True))}; leave a "
                             "model out of `results` rather than giving it weight 0.")
    return np.log(weights) - np.log(weights.sum())


def compare(results: Mapping[str, object], *,
            prior: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Rank models by log evidence, like ``az.compare`` ranks them by ELPD.

    Parameters
    ----------
    results : mapping of str to xarray.DataTree
        Evidence results on the same data, keyed by model name (see :func:`bayes_factor` for
        what is accepted, refused, and how each result's interval is formed); or
        summary-statistic results (ABC, synthetic likelihood) that share method, summary and
        tolerance, whose ``log_evidence`` column is then the log summary-statistic number.
    prior : mapping of str to float, optional
        Prior weight of each model (normalised here, each positive); uniform when omitted.

    Returns
    -------
    pandas.DataFrame
        Indexed by model, best first, with columns ``rank``, ``log_evidence`` (midpoint of a
        sandwich, else the lower bound), ``lower`` and ``upper`` (the model's interval, ``inf``
        where unbounded; for a certified lower bound ``upper`` is ``lower`` plus the
        certificate's allowance), ``se`` (bootstrap standard error of the lower bound),
        ``kind``, ``log_bf`` (against the best model, <= 0), ``log_bf_lower`` /
        ``log_bf_upper`` (its interval, from the models' intervals), ``strength``
        (Kass-Raftery strength of the evidence *against* this model relative to the best),
        and ``probability``, ``probability_lower``, ``probability_upper``: the posterior model
        probability from the point values, and its range over evidences within the intervals
        (:func:`model_probabilities`).

    Raises
    ------
    BDMCInputError
        As :func:`bayes_factor`, for any pair of the results; or for a ``prior`` that does not
        give each model a positive weight.
    """
    if not isinstance(results, Mapping):
        raise BDMCInputError(f"`results` must map model names to results, e.g. "
                             f"{{'model a': result_a, 'model b': result_b}}, as `az.compare` "
                             f"takes them; got {type(results).__name__}.")
    if not results:
        raise BDMCInputError("`results` is empty: pass a mapping of model name to result.")
    ev = _read_all(results)
    order = sorted(ev, key=lambda n: ev[n].estimate, reverse=True)
    intervals = np.array([ev[n].interval for n in order]).reshape(-1, 2)
    estimates = np.array([ev[n].estimate for n in order])
    probability = model_probabilities(estimates, intervals[:, 0], intervals[:, 1],
                                      _log_prior(prior, order))
    best_lo, best_hi = intervals[0]
    rows = []
    for rank, name in enumerate(order):
        lo, hi = intervals[rank]
        log_bf = estimates[rank] - estimates[0]
        rows.append({
            "rank": rank, "log_evidence": estimates[rank], "lower": lo, "upper": hi,
            "se": ev[name].lower_se, "kind": ev[name].kind, "log_bf": log_bf,
            # the best model against itself is 0 exactly, not the width of its interval
            "log_bf_lower": 0.0 if rank == 0 else lo - best_hi,
            "log_bf_upper": 0.0 if rank == 0 else hi - best_lo,
            "strength": "" if rank == 0 else evidence_strength(log_bf),
            "probability": probability[0][rank], "probability_lower": probability[1][rank],
            "probability_upper": probability[2][rank],
        })
    return pd.DataFrame(rows, index=pd.Index(order, name="model"))
