"""Plots of evidence results (matplotlib; install with ``pip install pymc-bdmc[plot]``).

Every function takes an optional ``ax`` (or ``axes``) and returns what it drew on, in the manner
of ArviZ's matplotlib backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def plot_bounds(results: Mapping[int, object] | Sequence, truth: float | None = None, ax=None):
    """Bounds against the number of annealing steps: the BDMC convergence figure.

    Parameters
    ----------
    results : mapping of n_steps to result, or sequence of results
        Runs with increasing ``n_steps`` (read from each result's attrs when a sequence).
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
    if not isinstance(results, Mapping):
        results = {int(r["evidence"].attrs["n_steps"]): r for r in results}
    steps = np.array(sorted(results))
    ev = [results[n]["evidence"] for n in steps]
    for name, se, color, label in (("lower", "lower_se", "C0", "lower (forward AIS)"),
                                   ("upper", "upper_se", "C3", "upper (reverse AIS)")):
        values = np.array([float(e[name]) for e in ev])
        if np.all(np.isnan(values)):
            continue
        errors = np.array([float(e[se]) for e in ev])
        ax.errorbar(steps, values, yerr=errors, marker="o", capsize=3, color=color, label=label)
    if truth is not None:
        ax.axhline(truth, color="k", ls="--", lw=1, label="exact")
    ax.set(xscale="log", xlabel="annealing steps", ylabel="log p(y)", title="BDMC bounds")
    ax.legend()
    return ax


def plot_compare(table: pd.DataFrame, ax=None):
    """Forest plot of log evidence per model from :func:`pymc_bdmc.compare`.

    A sandwich is drawn as an interval between its bounds; a lower bound alone as an arrow
    pointing up the scale (it says nothing about how much higher the evidence may be).

    Parameters
    ----------
    table : pandas.DataFrame
        The output of :func:`pymc_bdmc.compare`.
    ax : matplotlib Axes, optional
        Where to draw; a new figure when omitted.

    Returns
    -------
    matplotlib Axes
    """
    plt = _plt()
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.6 * len(table) + 1.2), layout="constrained")
    y = np.arange(len(table))[::-1]
    for yi, (name, row) in zip(y, table.iterrows(), strict=True):
        if row["kind"] == "sandwich":
            ax.plot([row["lower"], row["upper"]], [yi, yi], color="C0", lw=3)
            ax.plot(row["log_evidence"], yi, "o", color="C0")
        else:
            ax.errorbar(row["lower"], yi, xerr=[[0], [0]], fmt=">", color="C1")
            ax.plot(row["lower"], yi, ">", color="C1", ms=9)
    ax.set_yticks(y, table.index)
    ax.set(xlabel="log evidence", title="model comparison (> : lower bound only)")
    return ax
