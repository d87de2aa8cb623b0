"""Plots of evidence results (matplotlib; install with ``pip install pymc-bdmc[plot]``).

Every function takes an optional ``ax`` (or ``axes``) and returns what it drew on, in the manner
of ArviZ's matplotlib backend; :func:`plot_compare` draws through ``arviz_plots``' matplotlib
backend, with ArviZ's colours and layout. Nothing here imports matplotlib until a function is
called, so ``pmb.plots`` can be reached without it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["plot_annealing", "plot_bounds", "plot_compare", "plot_log_weights"]


def _plt():
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "pymc_bdmc plots need matplotlib: pip install 'pymc-bdmc[plot]'"
        ) from err
    return plt


def plot_annealing(result, axes=None):
    """Schedule, tuned step sizes and acceptance rates along the annealing path.

    Parameters
    ----------
    result : xarray.DataTree
        A result of :func:`~pymc_bdmc.sample_ais` or :func:`~pymc_bdmc.sample_bdmc`.
    axes : sequence of 3 matplotlib Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    ndarray of matplotlib Axes
        Schedule, step sizes and acceptance rates, in that order.
    """
    plt = _plt()
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(12, 3.2), layout="constrained")
    ann = result["annealing"]
    step = ann["step"].values
    axes[0].plot(step, ann["beta"].values, color="C0")
    axes[0].set(xlabel="step", ylabel="beta", yscale="log", title="schedule")
    axes[1].plot(step, ann["step_size"].values, color="C1")
    axes[1].set(xlabel="step", ylabel="step size", title="frozen HMC step size")
    axes[2].plot(step, ann["acceptance_rate_forward"].values, label="forward", color="C0")
    if "acceptance_rate_reverse" in ann:
        axes[2].plot(step, ann["acceptance_rate_reverse"].values, label="reverse", color="C3",
                     alpha=0.7)
    axes[2].set(xlabel="step", ylabel="mean acceptance", ylim=(0, 1.02), title="acceptance")
    axes[2].legend(loc="lower left")
    return np.asarray(axes)


def plot_log_weights(result, ax=None, bins: int = 20):
    """Distribution of per-chain log weights, forward and (negated) reverse, with the bounds.

    Forward log weights estimate ``log p(y)`` from below, negated reverse log weights from
    above; the vertical lines are the log-mean-exp bounds.

    Parameters
    ----------
    result : xarray.DataTree
        A result of :func:`~pymc_bdmc.sample_ais` or :func:`~pymc_bdmc.sample_bdmc`.
    ax : matplotlib Axes, optional
        Where to draw; a new figure when omitted.
    bins : int, default 20
        Histogram bins per direction.

    Returns
    -------
    matplotlib Axes
    """
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    ev = result["evidence"]
    fwd = ev["log_weight_forward"].values
    ax.hist(fwd[np.isfinite(fwd)], bins=bins, alpha=0.6, color="C0", label="forward log w")
    ax.axvline(float(ev["lower"]), color="C0", lw=2, label="lower bound")
    if "log_weight_reverse" in ev:
        rev = -ev["log_weight_reverse"].values
        ax.hist(rev[np.isfinite(rev)], bins=bins, alpha=0.6, color="C3",
                label="-(reverse log w)")
        ax.axvline(float(ev["upper"]), color="C3", lw=2, label="upper bound")
    ax.set(xlabel="log p(y) estimate per chain", ylabel="chains", title="log weights")
    ax.legend(fontsize="small")
    return ax


def plot_bounds(results, truth: float | None = None, ax=None):
    """Bounds against the number of annealing steps: the BDMC convergence figure.

    Parameters
    ----------
    results : result, mapping of n_steps to result, or sequence of results
        Runs with increasing ``n_steps`` (read from each result's attrs when a sequence). One
        result of :func:`~pymc_bdmc.calibrate` draws the lengths it tried on simulated data
        (its ``calibration`` group); another single result, its one length.
    truth : float, optional
        Exact ``log p(y)``, drawn as a horizontal line when known.
    ax : matplotlib Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib Axes
    """
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    steps, bounds = _bounds_by_length(results)
    for name, color, label in (("lower", "C0", "lower (forward AIS)"),
                               ("upper", "C3", "upper (reverse AIS)")):
        values, errors = bounds[name]
        if np.all(np.isnan(values)):
            continue
        ax.errorbar(steps, values, yerr=None if np.all(np.isnan(errors)) else errors,
                    marker="o", capsize=3, color=color, label=label)
    if truth is not None:
        ax.axhline(truth, color="k", ls="--", lw=1, label="exact")
    ax.set(xscale="log", xlabel="annealing steps", ylabel="log p(y)", title="BDMC bounds")
    ax.legend()
    return ax


def _bounds_by_length(results) -> tuple[np.ndarray, dict]:
    """``(n_steps, {"lower": (values, se), "upper": (values, se)})`` of :func:`plot_bounds`."""
    if hasattr(results, "children") and "evidence" in results.children:  # one result
        if "calibration" in results.children:
            cal = results["calibration"]
            nan = np.full(cal.sizes["attempt"], np.nan)
            return (np.asarray(cal["n_steps"].values),
                    {name: (np.asarray(cal[name].values, dtype=float), nan)
                     for name in ("lower", "upper")})
        results = [results]
    if not isinstance(results, Mapping):
        results = {int(r["evidence"].attrs["n_steps"]): r for r in results}
    steps = np.array(sorted(results))
    ev = [results[n]["evidence"] for n in steps]
    return steps, {name: (np.array([float(e[name]) for e in ev]),
                          np.array([float(e[f"{name}_se"]) if f"{name}_se" in e else np.nan
                                    for e in ev]))
                   for name in ("lower", "upper")}


#: How :func:`plot_compare` draws each kind of result: (line style, marked ends, legend label).
_COMPARE_STYLES = {
    "sandwich": ("-", [0, 1], "sandwich: lower and upper bound"),
    "certified lower bound": ("--", [0], "certified lower bound: + gap measured on simulated data"),
    "lower bound": (":", [1], "lower bound only"),
}
_COMPARE_COLUMNS = ("log_evidence", "lower", "upper", "kind")


def _compare_row(p_be, ax, row, y: float, right: float):
    """Draw one model's interval and point; return the artist that stands for it in a legend."""
    style = _COMPARE_STYLES.get(row["kind"])
    handle = None
    if style is not None:
        linestyle, ends, label = style
        upper = right if row["kind"] == "lower bound" else row["upper"]
        marker = ">" if row["kind"] == "lower bound" else "|"
        handle = p_be.line([row["lower"], upper], [y, y], ax, color="B1", width=2,
                           linestyle=linestyle, marker=marker, markevery=ends, markersize=9,
                           label=label)
    point = p_be.scatter([row["log_evidence"]], [y], ax, color="B1", marker="o", size=30,
                         facecolor="B1" if style else "none", zorder=3,
                         label="_nolegend_" if style else "estimate without bounds")
    return row["kind"], handle if handle is not None else point


def plot_compare(table: pd.DataFrame, ax=None):
    """Each model's log evidence with its interval, from :func:`pymc_bdmc.compare`.

    Drawn in the manner of ArviZ's ``plot_compare`` (with ``arviz_plots``' matplotlib backend
    and its colours): one row per model, best on top at ``y = len(table) - 1`` and the others
    below it at integer positions; a dashed vertical line at the best model's estimate. A point
    marks each model's ``log_evidence``; the line through it is the model's interval, its
    style saying what the interval is:

    * solid, marked at both ends: a sandwich between a lower and an upper bound;
    * dashed, marked at the lower end: a certified lower bound, extended by what its
      calibration measured on simulated data (about the estimator, not a bound);
    * dotted, running off to the right with an arrow: a lower bound alone, which says nothing
      about how much higher the evidence may be;
    * a hollow point and no line: an estimate without bounds (biased, or a summary-statistic
      number).

    Parameters
    ----------
    table : pandas.DataFrame
        The output of :func:`pymc_bdmc.compare`.
    ax : matplotlib Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib Axes

    Raises
    ------
    ValueError
        If ``table`` lacks the columns of :func:`pymc_bdmc.compare` (e.g. an ``az.compare``
        table).
    """
    plt = _plt()
    from arviz_plots.backend import matplotlib as p_be  # after _plt(): it needs matplotlib

    missing = [c for c in _COMPARE_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"plot_compare draws the table of pmb.compare; this one lacks columns "
                         f"{missing}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.6 * len(table) + 2.0), layout="constrained")
    values = table[["lower", "upper", "log_evidence"]].to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    span = float(np.ptp(finite)) if finite.size else 0.0
    right = (float(finite.max()) if finite.size else 0.0) + 0.25 * (span or 1.0)
    y = np.arange(len(table))[::-1]
    handles = {}
    for yi, (_, row) in zip(y, table.iterrows(), strict=True):
        kind, handle = _compare_row(p_be, ax, row, yi, right)
        if kind in handles:
            handle.set_label("_nolegend_")  # one legend entry per kind
        handles.setdefault(kind, handle)
    p_be.vline(float(table["log_evidence"].iloc[0]), ax, color="B2", linestyle="--", width=1)
    p_be.yticks(y, [str(name) for name in table.index], ax)
    p_be.title("Model comparison\nhigher is better", ax)
    summary = (table["kind"] == "summary-statistic").all()
    p_be.xlabel("log summary-statistic evidence" if summary else "log evidence (nats)", ax)
    ax.set_ylim(-0.6, len(table) - 0.4)
    ax.legend(handles=list(handles.values()), loc="upper left", bbox_to_anchor=(0, -0.2),
              fontsize="small", frameon=False)
    return ax
