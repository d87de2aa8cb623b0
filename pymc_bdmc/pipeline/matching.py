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
also a choice by the data alone. So are candidates whose simulation raised (numpy refuses a
Poisson rate above about 1e19): that is a choice by their parameters, but it changes nothing
where the likelihood of the kept data vanishes at those parameters, as it does for such a rate
or for parameters the model's checks refuse.

**The default guard.** ``match_data=None`` keeps the plain prior-predictive draw of the BDMC
paper unless its data overflow or lie far out, more than :data:`OUTLIER_FACTOR` times farther
from the real data than the median of 100 other draws (:func:`guarded_draw`); then the nearest
of those is taken. The rule reads the simulated data sets only, so the argument above holds for
it too. An observed ``pm.AR`` whose coefficient has a ``Normal(0, 1)`` prior drew an explosive
series of order 1e83 on one of three seeds, where the sandwich was off by 1e167 nats.

What matching cannot do: reach real data that the prior predictive almost never produces (a
data set 12 prior standard deviations out is not among 100 candidates). The summaries' distance
in robust standard deviations is recorded, so a poor match shows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.errors import BDMCInputError, SimulatedDataOverflow
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator

__all__ = ["DEFAULT_CANDIDATES", "OUTLIER_FACTOR", "MatchedDraw", "data_summaries",
           "guarded_draw", "matched_draw", "n_candidates"]

logger = logging.getLogger("pymc_bdmc")

#: Prior-predictive data sets drawn by ``match_data=True``.
DEFAULT_CANDIDATES = 100

#: ``match_data=None`` (the default) replaces a draw whose data lie more than this many times
#: farther from the real data than the median candidate's (and more than this many robust sds).
OUTLIER_FACTOR = 10.0


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
    redrawn : int or None
        From :func:`guarded_draw`: 1 where the first draw was replaced, else 0.
    """

    truth: JointDraw
    n_candidates: int
    distance: float
    median_distance: float
    redrawn: int | None = None

    def attrs(self) -> dict:
        """Return the result attributes that say how the data set was chosen."""
        attrs = {"data_matched": self.n_candidates, "data_match_distance": self.distance,
                 "data_match_median_distance": self.median_distance}
        return attrs if self.redrawn is None else {**attrs, "data_redrawn": self.redrawn}


def n_candidates(match_data) -> int:
    """Return the number of candidates ``match_data`` asks for (0: no matching).

    Parameters
    ----------
    match_data : bool, int or None
        ``False`` (or 0) and ``None`` (one draw, guarded: :func:`guarded_draw`), ``True``
        (:data:`DEFAULT_CANDIDATES`) or a number of at least 2.

    Returns
    -------
    int
    """
    if match_data is True:
        return DEFAULT_CANDIDATES
    if match_data is None or match_data is False or match_data == 0:  # None: guarded_draw
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


def _candidates(simulator: ModelSimulator, n: int, rng: np.random.Generator) -> list:
    """``n`` joint draws, less those whose simulation failed (module doc: why that is exact)."""
    draws, failure = [], None
    for _ in range(n):
        try:
            draws.append(simulator.draw_joint(rng))
        except BDMCInputError as err:
            failure = err
    if not draws:
        raise failure
    return draws


def _distances(draws: list, real: Mapping[str, np.ndarray],
               others: tuple = ()) -> tuple[np.ndarray, np.ndarray] | None:
    """Distances of ``draws``' data (and of ``others``') from ``real``, in the draws' robust sds.

    None where no summary varies across the draws, or the real data cannot be summarised like
    simulated ones (observations that are an expression).
    """
    summaries = np.stack([data_summaries(d.observed) for d in draws])
    target = data_summaries(real)
    if target.shape != summaries.shape[1:] or not np.all(np.isfinite(target)):
        return None
    centre = np.median(summaries, axis=0)
    spread = 1.4826 * np.median(np.abs(summaries - centre), axis=0)
    varies = spread > 0
    if not varies.any():
        return None

    def distance(rows):
        with np.errstate(over="ignore"):  # an explosive series is infinitely far: fine
            scaled = (rows[:, varies] - target[varies]) / spread[varies]
            return np.sqrt(np.mean(scaled**2, axis=1))

    extra = (np.stack([data_summaries(d.observed) for d in others]) if others
             else np.zeros((0, summaries.shape[1])))
    return distance(summaries), distance(extra)


def matched_draw(simulator: ModelSimulator, real: Mapping[str, np.ndarray], n: int,
                 rng: np.random.Generator) -> MatchedDraw:
    """Draw ``n`` pairs from the prior predictive; keep the one whose data are nearest ``real``.

    Each summary (:func:`data_summaries`) is scaled by the candidates' robust spread (median
    absolute deviation); summaries that do not vary across candidates are left out. Candidates
    whose simulation failed are dropped.

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
    draws = _candidates(simulator, n, rng)
    measured = _distances(draws, real)
    if measured is None:
        logger.debug("Data matching: the candidates' summaries do not vary, or the real data "
                    "cannot be summarised like them; using the first.")
        return MatchedDraw(draws[0], n, 0.0, 0.0)
    distances = measured[0]
    best = int(np.argmin(distances))
    logger.debug("Data matching: of %d simulated data sets, the nearest to the real data is "
                "%.2f robust sds away on its summaries (the median one: %.2f).",
                len(draws), distances[best], np.median(distances))
    return MatchedDraw(draws[best], n, float(distances[best]), float(np.median(distances)))


def guarded_draw(simulator: ModelSimulator, real: Mapping[str, np.ndarray],
                 rng: np.random.Generator, candidates_rng: np.random.Generator,
                 n: int = DEFAULT_CANDIDATES,
                 factor: float = OUTLIER_FACTOR) -> MatchedDraw:
    """One prior-predictive draw, replaced by the nearest of ``n`` where it is an outlier.

    The draw from ``rng`` is kept unless its data overflow, or lie more than ``factor`` times
    farther from ``real`` than the median of ``n`` other draws (from ``candidates_rng``, in
    their robust sds): then the nearest of those ``n`` is taken, as ``match_data=n`` would.
    Either way the choice is a function of the simulated data sets alone, so the kept
    parameters are an exact posterior sample given the kept data (module doc). Such a draw, a
    series from an explosive AR coefficient among stationary ones, certifies the estimator on
    data unlike anything it will be used on, and often only to within astronomical numbers.

    Returns
    -------
    MatchedDraw
        With ``redrawn`` set, and ``n_candidates`` 0 where the first draw was kept (the
        distances are NaN where there was nothing to compare).
    """
    try:
        plain, overflow = simulator.draw_joint(rng), None
    except SimulatedDataOverflow as err:
        plain, overflow = None, err
    try:
        draws = _candidates(simulator, n, candidates_rng)
    except BDMCInputError:
        if overflow is not None:
            raise overflow from None
        draws = []
    measured = _distances(draws, real, () if plain is None else (plain,)) if draws else None
    if measured is None:  # nothing to compare: the first finite draw, by the data alone
        return (MatchedDraw(plain, 0, np.nan, np.nan, redrawn=0) if plain is not None
                else MatchedDraw(draws[0], n, np.nan, np.nan, redrawn=1))
    distances, plain_distance = measured
    median = float(np.median(distances))
    if plain is not None and plain_distance[0] <= factor * max(median, 1.0):
        return MatchedDraw(plain, 0, float(plain_distance[0]), median, redrawn=0)
    best = int(np.argmin(distances))
    reason = ("overflow floating point" if plain is None else
              f"lie {plain_distance[0]:.3g} robust sds from yours on their summaries, more than "
              f"{factor:g} times the median of {len(draws)} other simulated data sets "
              f"({median:.2f})")
    logger.debug("The data simulated from the model %s; certifying instead on the nearest of "
                "those %d (%.2f robust sds away), as `match_data` does. The choice depends on "
                "the simulated data alone, so the sandwich stays exact; `match_data=False` "
                "keeps the first draw.", reason, len(draws), distances[best])
    return MatchedDraw(draws[best], n, float(distances[best]), median, redrawn=1)
