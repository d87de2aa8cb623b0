"""Shared pieces of the checks: result types, two-sample statistics, P-P indicators."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy

from pymc_bdmc.kernels.base import Transition
from pymc_bdmc.model.density import DensityParts, FlatLayout

logger = logging.getLogger("pymc_bdmc.verification")

PartsFn = Callable[[np.ndarray], DensityParts]
#: ``kernel(parts_fn) -> Transition``: builds a kernel on a given batched density function.
KernelFactory = Callable[[PartsFn], Transition]
#: ``exact_sampler(n, rng)``: ``n`` exact draws of the kernel's target, as flat unconstrained
#: vectors ``(n, n_dim)`` or a mapping from value-variable name to ``(n, *shape)`` arrays.
ExactSampler = Callable[[int, np.random.Generator], np.ndarray | Mapping[str, np.ndarray]]
#: ``statistics(x, data, parts) -> {name: values of shape (chains,)}``.
Statistics = Callable[[np.ndarray, Mapping[str, np.ndarray], DensityParts],
                      Mapping[str, np.ndarray]]

#: Probability levels of the P-P comparisons in the statistical tests.
QUANTILES = (0.25, 0.5, 0.75)
#: Default tolerance of the exact density checks: relative to ``max(1, |value|)``.
EXACT_TOLERANCE = 1e-9


class VerificationError(AssertionError):
    """A verification check failed (or could not be run on this model)."""


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelTestResult:
    """Outcome of one statistical kernel test (a family of tests with a Bonferroni correction).

    Attributes
    ----------
    test : str
        ``"geweke"``, ``"invariance"`` or ``"reversibility"``.
    passed : bool
        No p-value fell below ``alpha / len(names)``.
    alpha : float
        Family-wise false-alarm rate.
    p_value : float
        Bonferroni-adjusted smallest p-value, ``min(1, m * min(p_values))``; the test fails
        when it is below ``alpha``.
    names : tuple of str
        One name per individual test (``"t: w[0]"``, ``"KS: log_likelihood"``, ...).
    statistic : ndarray
        Welch t statistics (Kolmogorov-Smirnov D for KS tests).
    p_values : ndarray
        Unadjusted two-sided p-values.
    kernel_value, reference_value : ndarray
        Mean of the statistic under the kernel and under exact sampling (for reversibility
        tests: the antisymmetric mean, and 0).
    ess : ndarray
        Effective sample size of the kernel side of each test (NaN where not defined).
    n_kernel, n_reference : int
        Independent kernel-side units (chains) and reference draws.
    acceptance_rate : float
        Mean acceptance rate the kernel reported, if it did (else NaN).
    """

    test: str
    passed: bool
    alpha: float
    p_value: float
    names: tuple[str, ...]
    statistic: np.ndarray = field(repr=False)
    p_values: np.ndarray = field(repr=False)
    kernel_value: np.ndarray = field(repr=False)
    reference_value: np.ndarray = field(repr=False)
    ess: np.ndarray = field(repr=False)
    n_kernel: int = 0
    n_reference: int = 0
    acceptance_rate: float = np.nan

    def worst(self, k: int = 5) -> list[tuple[str, float]]:
        """The ``k`` individual tests with the smallest p-values, as ``(name, p)``."""
        order = np.argsort(self.p_values)[:k]
        return [(self.names[i], float(self.p_values[i])) for i in order]

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        lines = [
            f"{self.test} test {verdict}: adjusted p = {self.p_value:.3g} (alpha {self.alpha}, "
            f"{len(self.names)} tests, {self.n_kernel} kernel chains, {self.n_reference} "
            f"reference draws, acceptance {self.acceptance_rate:.2f})",
            f"  {'statistic':<32}{'kernel':>12}{'reference':>12}{'stat':>9}{'p':>10}{'ess':>9}",
        ]
        for i in np.argsort(self.p_values)[:8]:
            lines.append(
                f"  {self.names[i]:<32}{self.kernel_value[i]:12.4g}"
                f"{self.reference_value[i]:12.4g}{self.statistic[i]:9.2f}"
                f"{self.p_values[i]:10.2g}{self.ess[i]:9.0f}"
            )
        return "\n".join(lines)

    def raise_if_failed(self) -> KernelTestResult:
        """Raise :class:`VerificationError` (with the report) if the test failed."""
        if not self.passed:
            raise VerificationError(str(self))
        return self


@dataclass(frozen=True)
class DensityCheckResult:
    """Outcome of :meth:`Verifier.check_density`.

    Attributes
    ----------
    passed : bool
    max_error : dict
        Largest error of each check, relative to ``max(1, |value|)``.
    tolerance : float
    n_points : int
    skipped : dict
        Checks that could not run on this model, with the reason.
    """

    passed: bool
    max_error: dict[str, float]
    tolerance: float
    n_points: int
    skipped: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        lines = [f"density consistency {verdict} ({self.n_points} points, tolerance "
                 f"{self.tolerance:g})"]
        for name, err in self.max_error.items():
            flag = "" if err <= self.tolerance else "   <-- exceeds tolerance"
            lines.append(f"  {name:<40}{err:10.2e}{flag}")
        for name, reason in self.skipped.items():
            lines.append(f"  {name:<40}skipped: {reason}")
        return "\n".join(lines)

    def raise_if_failed(self) -> DensityCheckResult:
        """Raise :class:`VerificationError` (with the report) if a check failed."""
        if not self.passed:
            raise VerificationError(str(self))
        return self


# -- two-sample statistics -----------------------------------------------------------------------


def welch(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Welch t-tests of equal means, column by column: ``a`` (n_a, m), ``b`` (n_b, m)."""
    n_a, n_b = len(a), len(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        va, vb = np.var(a, axis=0, ddof=1) / n_a, np.var(b, axis=0, ddof=1) / n_b
        diff = np.mean(a, axis=0) - np.mean(b, axis=0)
        t = diff / np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
        p = 2 * scipy.stats.t.sf(np.abs(t), df)
    constant = (va + vb) == 0  # a constant statistic: equal means pass, different ones fail
    p = np.where(constant, np.where(diff == 0, 1.0, 0.0), p)
    t = np.where(constant, np.where(diff == 0, 0.0, np.inf), t)
    return t, np.where(np.isnan(p), 0.0, p)  # NaN statistics (non-finite states) fail


def one_sample(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided one-sample t-tests of zero mean, column by column."""
    n = len(d)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean, se = np.mean(d, axis=0), np.std(d, axis=0, ddof=1) / np.sqrt(n)
        t = mean / se
        p = 2 * scipy.stats.t.sf(np.abs(t), n - 1)
    p = np.where(se == 0, np.where(mean == 0, 1.0, 0.0), p)
    return np.where(se == 0, 0.0, t), np.where(np.isnan(p), 0.0, p)


def verdict(test, names, statistic, p_values, kernel_value, reference_value, ess, alpha,
            n_kernel, n_reference, acceptance) -> KernelTestResult:
    """Bonferroni-combine the p-values into a :class:`KernelTestResult`, and log it."""
    p_values = np.asarray(p_values, dtype=float)
    adjusted = float(min(1.0, len(p_values) * p_values.min())) if len(p_values) else 1.0
    result = KernelTestResult(
        test=test, passed=adjusted >= alpha, alpha=alpha, p_value=adjusted, names=tuple(names),
        statistic=np.asarray(statistic, dtype=float), p_values=p_values,
        kernel_value=np.asarray(kernel_value, dtype=float),
        reference_value=np.asarray(reference_value, dtype=float),
        ess=np.asarray(ess, dtype=float), n_kernel=n_kernel, n_reference=n_reference,
        acceptance_rate=acceptance,
    )
    (logger.info if result.passed else logger.warning)("%s", result)
    return result


def stack_statistics(values: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    """Names and ``(n, statistics)`` columns of a ``{name: values}`` mapping."""
    names = list(values)
    return names, np.column_stack([np.asarray(values[k], dtype=float) for k in names])


def mean_acceptance(infos: Sequence) -> float:
    """Mean acceptance rate over transition infos that report one (NaN if none do)."""
    rates = [np.mean(i.acceptance_rate) for i in infos if hasattr(i, "acceptance_rate")]
    return float(np.mean(rates)) if rates else np.nan


def check_alpha(alpha: float) -> float:
    """Refuse a false-alarm rate outside (0, 1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"`alpha` must be in (0, 1), got {alpha}.")
    return float(alpha)


class PPStatistics:
    """Indicators ``g <= q`` at fixed quantiles ``q`` of reference statistics: a P-P comparison.

    Bounded statistics keep the normal approximation of every test accurate, even for
    heavy-tailed quantities (e.g. a Student-t marginal, whose square has no fourth moment).
    """

    def __init__(self, base_names: Sequence[str], reference: np.ndarray,
                 quantiles: Sequence[float]):
        levels = np.asarray(quantiles, dtype=float)
        if levels.ndim != 1 or not levels.size or np.any((levels <= 0) | (levels >= 1)):
            raise ValueError(f"`quantiles` must be levels in (0, 1), got {quantiles!r}.")
        self.thresholds = np.quantile(reference, levels, axis=0)  # (levels, statistics)
        self.names = [f"P({name} <= q{100 * level:g})" for name in base_names for level in levels]

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """``(n, statistics)`` values to ``(n, statistics * levels)`` indicators (NaN stays)."""
        below = (values[:, :, None] <= self.thresholds.T[None]).astype(float)
        below[np.isnan(values)] = np.nan
        return below.reshape(len(values), -1)


@dataclass(frozen=True)
class MeanInfo:
    """Transition info of a chain-by-chain step: the chains' mean acceptance rate."""

    acceptance_rate: float


def batched_step(transition: Transition, t: int):
    """``step(rng, x, parts)``: the transition at index ``t`` on all chains at once."""
    def step(rng, x, parts):
        return transition(rng, x, parts, t)

    return step


def scaled_error(ours, theirs) -> float:
    """Largest error relative to ``max(1, |value|)``; NaN where PyMC has NaN counts as -inf."""
    ours = np.asarray(ours, dtype=float)
    theirs = np.asarray(theirs, dtype=float)
    theirs = np.where(np.isnan(theirs), -np.inf, theirs)  # NaN densities count as -inf here too
    if ours.shape != theirs.shape:
        return np.inf
    same = (ours == theirs) | (np.isnan(ours) & np.isnan(theirs))
    with np.errstate(invalid="ignore"):
        err = np.abs(ours - theirs) / np.maximum(1.0, np.maximum(np.abs(ours), np.abs(theirs)))
    err = np.where(same, 0.0, err)
    err = np.where(np.isnan(err), np.inf, err)
    return float(np.max(err)) if err.size else 0.0


def typed_point(layout: FlatLayout, initial: Mapping[str, np.ndarray],
                row: np.ndarray) -> dict[str, np.ndarray]:
    """One flat vector as a point with each value variable in its own dtype (ints rounded)."""
    point = {}
    for name, value in layout.unravel(row).items():
        dtype = np.asarray(initial[name]).dtype
        point[name] = (np.rint(value) if np.issubdtype(dtype, np.integer) else value
                       ).astype(dtype)
    return point


def default_statistics(self, max_coordinates: int, with_data: bool) -> Statistics:
    """Build the default statistics of a verifier's model.

    Coordinates (up to ``max_coordinates``), the log prior, the log-likelihood and, ``with_data``,
    the mean and mean square of each observed variable.
    """
    labels = self.layout.coordinate_labels()[:max_coordinates]

    def statistics(x, data, parts):
        out = {label: x[:, d] for d, label in enumerate(labels)}
        out["log_prior"] = parts.log_prior
        out["log_likelihood"] = parts.log_likelihood
        if with_data:
            for name, values in data.items():
                flat = np.asarray(values, dtype=float).reshape(len(x), -1)
                out[f"mean({name})"] = flat.mean(axis=1)
                out[f"mean({name}^2)"] = (flat**2).mean(axis=1)
        return out

    return statistics
