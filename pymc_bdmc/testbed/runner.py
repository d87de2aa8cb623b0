"""Run estimators x budgets x trials on a problem and score them against the ground truth."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import xarray as xr

from pymc_bdmc.testbed.estimators import (
    ESTIMATORS,
    EstimatorSpec,
    annealing_run,
    as_problem,
    compiled_problem,
    estimator_rng,
    pilot_plan,
)
from pymc_bdmc.testbed.models import Problem

__all__ = ["compare_estimators", "ground_truth", "plot_estimates", "rmse", "summary_table",
           "time_to_accuracy"]

logger = logging.getLogger(__name__)


def ground_truth(problem: Problem, n_steps: int = 2000, seed: int = 12345, chains: int = 32,
                 schedule: str = "adaptive") -> dict[str, float]:
    """The reference ``log p(y*)``: closed form if known, else a BDMC sandwich.

    The sandwich is :func:`pymc_bdmc.sample_bdmc`'s algorithm on the problem's own
    ``(theta*, y*)``: one pilot (64 prior draws) tunes the HMC kernels and, by default, places
    the ``n_steps`` temperatures at equal thermodynamic length; forward AIS from prior draws and
    reverse AIS from ``theta*`` then run through that *same* frozen plan, ``chains`` chains each.

    Parameters
    ----------
    problem : Problem
    n_steps : int, default 2000
        Annealing steps of the forward and reverse runs.
    seed : int, default 12345
    chains : int, default 32
        Chains per direction.
    schedule : {"adaptive", "sigmoid", "linear", "geometric"}, default "adaptive"

    Returns
    -------
    dict
        ``truth``, ``lower``, ``upper``, ``gap`` and ``method`` (``"closed form"`` or
        ``"bdmc"``). For BDMC, ``truth`` is the midpoint of the sandwich; with probability at
        least 0.95 each, ``log p(y*)`` lies within ``log 20 ~= 3`` nats outside it.
    """
    problem = as_problem(problem)
    if problem.log_evidence is not None:
        value = float(problem.log_evidence)
        return {"truth": value, "lower": value, "upper": value, "gap": 0.0,
                "method": "closed form"}
    if problem.generating_point is None:
        raise ValueError("Ground truth needs closed-form evidence or the generating parameters.")
    density, simulator, _ = compiled_problem(problem)
    plan, _ = pilot_plan(density, simulator, estimator_rng(seed), n_steps, pilot_chains=64,
                         schedule=schedule)
    lower = annealing_run(problem, n_steps, seed + 1, "forward", chains=chains,
                          plan=plan).log_evidence
    upper = annealing_run(problem, n_steps, seed + 2, "reverse", chains=chains,
                          plan=plan).log_evidence
    logger.info("BDMC ground truth of %s: [%.2f, %.2f] (gap %.2f) with %d steps (%s).",
                problem.name, lower, upper, upper - lower, n_steps, schedule)
    if upper < lower - 1.0:
        logger.warning("The BDMC bounds of %s crossed by more than a nat (lower %.2f > upper "
                       "%.2f): each is only a stochastic bound, but this suggests increasing "
                       "n_steps.", problem.name, lower, upper)
    return {"truth": 0.5 * (lower + upper), "lower": lower, "upper": upper,
            "gap": upper - lower, "method": "bdmc"}


def compare_estimators(
    problem,
    estimators: Sequence[str] | None = None,
    levels: Sequence[int] = (1, 4, 16),
    trials: int = 3,
    seed: int = 0,
    truth: dict | None = None,
    truth_steps: int = 2000,
) -> xr.Dataset:
    """Run each estimator at several budgets, several times, and compare with the truth.

    Parameters
    ----------
    problem : Problem, pm.Model or AnalyticModel
        The model on (simulated) data. Estimators needing ``theta*`` are skipped without it,
        and those needing a Gibbs form (CMS) without one.
    estimators : sequence of str, optional
        Names in :data:`~pymc_bdmc.testbed.estimators.ESTIMATORS` (default all).
    levels : sequence of int, default (1, 4, 16)
        Budget multipliers: estimator ``e`` at level ``l`` gets budget
        ``l * ESTIMATORS[e].base_budget``.
    trials : int, default 3
        Independent runs per (estimator, level), with seeds ``seed + trial``.
    seed : int, default 0
    truth : dict, optional
        As returned by :func:`ground_truth` (computed when omitted).
    truth_steps : int, default 2000
        Annealing steps of the BDMC ground truth when it is computed here.

    Returns
    -------
    xarray.Dataset
        Dimensions ``estimator``, ``level`` and ``trial``; variables ``estimate`` and
        ``seconds`` (estimator x level x trial), ``budget`` (estimator x level), ``bias``
        (estimator); attributes ``truth``, ``truth_lower``, ``truth_upper``, ``truth_gap`` and
        ``truth_method``. Failed runs are NaN (logged as warnings).
    """
    problem = as_problem(problem)
    names = list(ESTIMATORS if estimators is None else estimators)
    unknown = set(names) - set(ESTIMATORS)
    if unknown:
        raise ValueError(f"Unknown estimators {sorted(unknown)}; known: {sorted(ESTIMATORS)}.")
    skipped = [n for n in names if not ESTIMATORS[n].applies_to(problem)]
    if skipped:
        logger.info("Skipping %s: %s lacks what they need (theta* or a Gibbs form).",
                    skipped, problem.name)
        names = [n for n in names if n not in skipped]
    truth = ground_truth(problem, truth_steps) if truth is None else truth
    levels = [int(level) for level in levels]
    shape = (len(names), len(levels), trials)
    estimate, seconds = np.full(shape, np.nan), np.full(shape, np.nan)
    budget = np.zeros(shape[:2], dtype=int)
    for i, name in enumerate(names):
        spec: EstimatorSpec = ESTIMATORS[name]
        for j, level in enumerate(levels):
            budget[i, j] = level * spec.base_budget
            for k in range(trials):
                try:
                    result = spec.fn(problem, budget[i, j], seed + k)
                except Exception as err:  # noqa: BLE001 - a failed estimator is a data point
                    logger.warning("%s failed at budget %d: %s", name, budget[i, j], err)
                    continue
                estimate[i, j, k], seconds[i, j, k] = result.log_evidence, result.seconds
            logger.info("%-22s budget %6d: mean %.2f (truth %.2f), %.2f s", name,
                        budget[i, j], np.nanmean(estimate[i, j]), truth["truth"],
                        np.nanmean(seconds[i, j]))
    dims = ("estimator", "level", "trial")
    return xr.Dataset(
        {
            "estimate": (dims, estimate),
            "seconds": (dims, seconds),
            "budget": (dims[:2], budget),
            "bias": (("estimator",), [ESTIMATORS[n].bias for n in names]),
            "budget_unit": (("estimator",), [ESTIMATORS[n].budget_unit for n in names]),
        },
        coords={"estimator": names, "level": levels, "trial": np.arange(trials)},
        attrs={"problem": problem.name, "truth": truth["truth"], "truth_lower": truth["lower"],
               "truth_upper": truth["upper"], "truth_gap": truth["gap"],
               "truth_method": truth["method"]},
    )


def rmse(results: xr.Dataset) -> xr.DataArray:
    """Root mean squared error over trials against ``results.attrs["truth"]`` (nats).

    Parameters
    ----------
    results : xarray.Dataset
        From :func:`compare_estimators`.

    Returns
    -------
    xarray.DataArray
        Per estimator and level.
    """
    return np.sqrt(((results["estimate"] - results.attrs["truth"]) ** 2).mean("trial"))


def time_to_accuracy(results: xr.Dataset, threshold: float = 10.0) -> xr.DataArray:
    """Mean seconds of the cheapest budget whose RMSE is below ``threshold`` nats.

    Parameters
    ----------
    results : xarray.Dataset
        From :func:`compare_estimators`.
    threshold : float, default 10.0
        The paper's accuracy target (§6.4): 10 nats.

    Returns
    -------
    xarray.DataArray
        Per estimator; ``inf`` if no budget reached the threshold.
    """
    error = rmse(results)
    seconds = results["seconds"].mean("trial")
    reached = seconds.where(error < threshold)
    return reached.min("level").fillna(np.inf).rename("seconds_to_accuracy")


def summary_table(results: xr.Dataset, threshold: float = 10.0) -> str:
    """A Markdown table: per estimator, bias direction, error and time at each budget.

    Parameters
    ----------
    results : xarray.Dataset
        From :func:`compare_estimators`.
    threshold : float, default 10.0
        Accuracy target (nats) of the last column, as in :func:`time_to_accuracy`.

    Returns
    -------
    str
        One row per estimator; per level the mean error, the RMSE (both in nats) and the mean
        seconds per estimate.
    """
    error = rmse(results)
    mean_err = (results["estimate"] - results.attrs["truth"]).mean("trial")
    reach = time_to_accuracy(results, threshold)
    lines = ["| estimator | direction | budget unit | "
             + " | ".join(f"level {lvl}: mean err / RMSE / s" for lvl in results.level.values)
             + f" | s to RMSE < {threshold:g} |",
             "|" + "---|" * (4 + results.sizes["level"])]
    for name in results.estimator.values:
        cells = []
        for lvl in results.level.values:
            sel = dict(estimator=name, level=lvl)
            cells.append(f"{float(mean_err.sel(sel)):+.1f} / {float(error.sel(sel)):.1f} / "
                         f"{float(results['seconds'].sel(sel).mean()):.2f}")
        t = float(reach.sel(estimator=name))
        lines.append(f"| {name} | {results['bias'].sel(estimator=name).item()} | "
                     f"{results['budget_unit'].sel(estimator=name).item()} | "
                     + " | ".join(cells) + f" | {'never' if np.isinf(t) else f'{t:.2f}'} |")
    return "\n".join(lines)


def plot_estimates(results: xr.Dataset, ax=None):
    """Mean estimate (and trial range) against mean time, with the ground-truth band.

    Parameters
    ----------
    results : xarray.Dataset
        From :func:`compare_estimators`.
    ax : matplotlib.axes.Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for name in results.estimator.values:
        est = results["estimate"].sel(estimator=name)
        sec = results["seconds"].sel(estimator=name).mean("trial")
        mean = est.mean("trial")
        ax.errorbar(sec, mean, yerr=[mean - est.min("trial"), est.max("trial") - mean],
                    marker="o", capsize=2, label=f"{name} ({results['bias'].sel(estimator=name).item()})")
    lo, hi = results.attrs["truth_lower"], results.attrs["truth_upper"]
    ax.axhspan(min(lo, hi) - 0.5, max(lo, hi) + 0.5, color="0.8", zorder=0,
               label=f"truth ({results.attrs['truth_method']})")
    ax.set_xscale("log")
    ax.set_xlabel("seconds per estimate")
    ax.set_ylabel("log p(y) estimate")
    truth = results.attrs["truth"]
    ax.set_ylim(truth - 60, truth + 40)
    ax.set_title(results.attrs.get("problem", ""))
    ax.legend(fontsize="small", loc="best")
    return ax


