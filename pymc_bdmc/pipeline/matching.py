"""Data-matched simulation: certify on a simulated data set that resembles the real one.

BDMC's certificate is about data drawn from the model's prior predictive, and real data in its
tails make a longer, harder path than typical simulated data. BREAD (Grosse, Ancha & Roy 2016)
simulates from a model whose hyperparameters are held at estimates from the real data, which
changes the model (``calibrate(fix=...)`` does that). Here the full model is kept: draw ``K``
independent pairs ``(theta_k, y_k)`` from the prior predictive, and keep the pair whose data
are nearest the real data by a few summaries.

**Why ``theta*`` stays an exact posterior sample.** The pairs are independent, so given all
the data sets ``theta_k`` depends on ``y_k`` alone: ``p(theta_k | y_1, ..., y_K) =
p(theta_k | y_k)``. The selected index ``k*`` is a function of ``(y_1, ..., y_K)`` (and the
real data, fixed), never of the parameters, so ``theta_(k*)`` given the selected data is
distributed as ``p(theta | y_(k*))``. Reverse AIS from it bounds ``log p(y_(k*))`` from above,
forward AIS from below, as for any simulated data set: the sandwich is exact, and it is about
data like the real data. Candidates whose simulated data are not finite are dropped, which is
also a choice by the data alone.

What matching cannot do: reach real data that the prior predictive almost never produces (a
data set 12 prior standard deviations out is not among 100 candidates). The summaries' distance
in robust standard deviations is recorded, so a poor match shows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.model.checks import BDMCInputError
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator

__all__ = ["DEFAULT_CANDIDATES", "MatchedDraw", "data_summaries", "matched_draw",
           "n_candidates"]

logger = logging.getLogger("pymc_bdmc")

#: Prior-predictive data sets drawn by ``match_data=True``.
DEFAULT_CANDIDATES = 100


@dataclass(frozen=True)
class MatchedDraw:
    """The selected joint draw and how near its data are to the real data.

    Attributes
    ----------
    truth : JointDraw
    n_candidates : int
        Data sets drawn (finite ones among them were compared).
    distance : float
        Root mean square, over the summaries, of the selected data's distance from the real
        data in robust standard deviations of the candidates.
    median_distance : float
        The same for the median candidate: what an unmatched draw would typically give.
    """

    truth: JointDraw
    n_candidates: int
    distance: float
    median_distance: float


def n_candidates(match_data) -> int:
    """Return the number of candidates ``match_data`` asks for (0: no matching).

    Parameters
    ----------
    match_data : bool or int
        ``False`` (or 0), ``True`` (:data:`DEFAULT_CANDIDATES`) or a number of at least 2.

    Returns
    -------
    int
    """
    if match_data is True:
        return DEFAULT_CANDIDATES
    if match_data is False or match_data is None or match_data == 0:
        return 0
    if isinstance(match_data, (int, np.integer)) and match_data >= 2:
        return int(match_data)
    raise BDMCInputError(f"`match_data` must be True, False or a number of candidate data sets "
                         f"of at least 2, got {match_data!r}.")


def data_summaries(observed: Mapping[str, np.ndarray]) -> np.ndarray:
    """Summaries of a data set: per observed variable, mean, sd and roughness.

    Roughness is the mean absolute difference of neighbours along the last axis (time, for a
    series), which separates a smooth series from a noisy one of the same spread.

    Parameters
    ----------
    observed : mapping
        One array per observed variable, in a fixed order of names.

    Returns
    -------
    numpy.ndarray
    """
    values = []
    for name in sorted(observed):
        y = np.asarray(observed[name], dtype=float)
        values += [y.mean(), y.std()]
        if y.ndim and y.shape[-1] > 1:
            values.append(np.abs(np.diff(y, axis=-1)).mean())
    return np.array(values)


def matched_draw(simulator: ModelSimulator, real: Mapping[str, np.ndarray], n: int,
                 rng: np.random.Generator) -> MatchedDraw:
    """Draw ``n`` pairs from the prior predictive; keep the one whose data are nearest ``real``.

    Each summary (:func:`data_summaries`) is scaled by the candidates' robust spread (median
    absolute deviation); summaries that do not vary across candidates are left out.

    Parameters
    ----------
    simulator : ModelSimulator
    real : mapping
        The real observed data, by observed variable.
    n : int
        Candidates to draw.
    rng : numpy.random.Generator

    Returns
    -------
    MatchedDraw
    """
    draws, failure = [], None
    for _ in range(n):
        try:
            draws.append(simulator.draw_joint(rng))
        except BDMCInputError as err:  # non-finite simulated data: dropped, by the data alone
            failure = err
    if not draws:
        raise failure
    summaries = np.stack([data_summaries(d.observed) for d in draws])
    target = data_summaries(real)
    centre = np.median(summaries, axis=0)
    spread = 1.4826 * np.median(np.abs(summaries - centre), axis=0)
    varies = spread > 0
    if not varies.any():
        logger.info("Data matching: the candidates' summaries do not vary; using the first.")
        return MatchedDraw(draws[0], n, 0.0, 0.0)
    scaled = (summaries[:, varies] - target[varies]) / spread[varies]
    distances = np.sqrt(np.mean(scaled**2, axis=1))
    best = int(np.argmin(distances))
    logger.info("Data matching: of %d simulated data sets, the nearest to the real data is "
                "%.2f robust sds away on its summaries (the median one: %.2f).",
                len(draws), distances[best], np.median(distances))
    return MatchedDraw(draws[best], n, float(distances[best]), float(np.median(distances)))
