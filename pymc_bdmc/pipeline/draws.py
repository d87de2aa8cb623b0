"""Exact draws that runs start from: prior draws, and the simulated ``(theta*, y*)`` of BDMC."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pymc as pm

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.cache import observed_values
from pymc_bdmc.model.checks import (
    check_finite_start,
    unsampleable_prior_message,
    unsimulable_data_message,
)
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import JointDraw, ModelSimulator
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.pipeline.matching import guarded_draw, matched_draw, n_candidates
from pymc_bdmc.pipeline.seeding import rewind

__all__ = ["SIMULATED_DATA_HINT", "PilotDraws", "PossibleStarts", "draw_prior",
           "generating_values", "only_impossible_data", "possible_prior_start",
           "possible_run_starts", "possible_starts", "prior_start", "prior_start_blocks",
           "reverse_possible_mass", "simulate_truth"]

logger = logging.getLogger("pymc_bdmc")

#: Prior draws at which the data are possible that :func:`possible_starts` counts (the
#: relative noise of its estimate is about ``sqrt((1 - P) / n)``), and the most it draws.
POSSIBLE_DRAWS, MAX_POSSIBLE_DRAWS = 256, 1 << 16


def simulate_truth(simulator: ModelSimulator, model: pm.Model,
                   streams: Mapping[str, np.random.Generator],
                   match_data: bool | int | None) -> tuple[JointDraw, dict]:
    """``(theta*, y*)`` from the prior predictive, chosen as ``match_data`` says.

    Parameters
    ----------
    simulator : ModelSimulator
    model : pm.Model
        Holds the real data that matching and the guard compare with.
    streams : mapping
        The run's streams (:func:`~pymc_bdmc.pipeline.seeding.streams`): ``"simulate"`` for
        the draw, or the matched candidates, and ``"candidates"`` for the guard's.
    match_data : bool, int or None
        ``False``: one draw. ``None``: one draw, guarded against data far from the real data
        (:func:`~pymc_bdmc.pipeline.matching.guarded_draw`). ``True`` or a number: the nearest
        of that many (:func:`~pymc_bdmc.pipeline.matching.matched_draw`).

    Returns
    -------
    tuple
        ``(JointDraw, attrs)``, the attrs saying how the data were chosen (empty for one
        unguarded draw).
    """
    n = n_candidates(match_data)
    try:
        if n:
            chosen = matched_draw(simulator, observed_values(model), n, streams["simulate"])
        elif match_data is None:
            chosen = guarded_draw(simulator, observed_values(model), streams["simulate"],
                                  streams["candidates"])
        else:
            return simulator.draw_joint(streams["simulate"]), {}
    except NotImplementedError as err:
        # The prior itself, or only the data? A throwaway stream leaves the run's untouched.
        draw_prior(simulator, 1, np.random.default_rng(0))
        raise BDMCInputError(unsimulable_data_message(str(err))) from err
    return chosen.truth, chosen.attrs()


def draw_prior(simulator: ModelSimulator, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` exact prior draws, or a :class:`BDMCInputError` if the prior cannot be sampled.

    Parameters
    ----------
    simulator : ModelSimulator
    n : int
    rng : numpy.random.Generator

    Returns
    -------
    numpy.ndarray
        Shape (n, n_dim).
    """
    try:
        return simulator.draw_prior(n, rng)
    except NotImplementedError as err:
        raise BDMCInputError(unsampleable_prior_message([], str(err))) from err


@dataclass(frozen=True)
class PossibleStarts:
    """How the forward chains' starts were restricted to where the data are possible.

    Where a start draw makes the data impossible, the chain would carry zero weight from its
    first step, and reverse chains never reach that mass of the start (at any ``beta > 0`` the
    path's densities are zero there). :func:`possible_starts` gives such chains draws where the
    data are possible instead, and estimates that mass ``P``: ``forward_offset`` (``log`` of an
    unbiased estimate of ``P``) goes on every forward log weight and ``reverse_offset`` (``log``
    of an unbiased estimate of ``1 / P``) on every reverse one, which keeps both stochastic
    bounds. Both are 0 where every start was possible or ``P`` could not be estimated.
    """

    forward_offset: float = 0.0
    reverse_offset: float = 0.0
    attrs: Mapping = field(default_factory=dict)

    def apply(self, forward, reverse=None):
        """Return the runs (AIS or SMC) with the offsets on their log weights."""
        def shifted(run, offset):
            if run is None or offset == 0.0:
                return run
            names = {f.name for f in dataclasses.fields(run)} & _SHIFTED
            return dataclasses.replace(run, **{n: getattr(run, n) + offset for n in names})
        return shifted(forward, self.forward_offset), shifted(reverse, self.reverse_offset)


#: A run's log-weight fields that estimate ``log p(y)`` (or its inverse) as a whole.
_SHIFTED = frozenset({"log_weight", "mean_log_weight", "particle_log_weight"})


def _draw_possible(draw, parts_fn, rng: np.random.Generator, wanted: int):
    """Draw from the start until ``wanted`` draws make the data possible.

    Returns ``(possible, drawn)``: those draws, in order, and ``M``, the draws it took; or
    ``(None, (possible found + 1) / drawn)`` past :data:`MAX_POSSIBLE_DRAWS` draws.
    """
    found, drawn, batch = [], 0, 1024
    while drawn < MAX_POSSIBLE_DRAWS:
        x = draw(batch, rng)
        ok = np.isfinite(parts_fn(x).log_likelihood)
        count = sum(len(f) for f in found)
        if count + ok.sum() >= wanted:
            last = int(np.flatnonzero(np.cumsum(ok) == wanted - count)[0])
            found.append(x[:last + 1][ok[:last + 1]])
            return np.concatenate(found), drawn + last + 1
        found.append(x[ok])
        drawn += batch
    return None, (sum(len(f) for f in found) + 1) / drawn


def possible_starts(x0: np.ndarray, log_likelihood: np.ndarray, draw, parts_fn,
                    rng: np.random.Generator, where: str = "prior draws",
                    announce: bool = True) -> tuple[np.ndarray, PossibleStarts]:
    """Replace start draws at which the data are impossible by draws at which they are possible.

    ``draw(n, rng)`` draws from the path's start (the prior, or a fitted base), here from
    ``rng``, a stream of its own; ``parts_fn`` gives the model's densities. It draws until
    ``r = max(POSSIBLE_DRAWS, k)`` draws make the data possible, ``k`` the chains to replace,
    which take the first ``k`` of them (exact draws of the start restricted to where the data
    are possible). With ``M`` draws in all, ``(r - 1) / (M - 1)`` and ``M / r`` are unbiased
    estimates of ``P`` and ``1 / P`` (negative binomial sampling), independent of the values the
    chains start from, and so of their weights. Nothing is drawn where every start is possible;
    past :data:`MAX_POSSIBLE_DRAWS` draws the starts are kept, those chains carry zero weight
    (a valid but looser lower bound) and the user is warned (both messages only with
    ``announce``).

    Returns
    -------
    tuple
        ``(x0, PossibleStarts)``: ``x0`` itself where nothing was replaced.
    """
    impossible = np.flatnonzero(~np.isfinite(log_likelihood))
    if impossible.size == 0:
        return x0, PossibleStarts()
    wanted = max(POSSIBLE_DRAWS, impossible.size)
    possible, drawn = _draw_possible(draw, parts_fn, rng, wanted)
    if possible is None:
        logger.log(
            logging.WARNING if announce else logging.DEBUG,
            "The log-likelihood is -inf at %d of %d %s, and at nearly all of %d further draws: "
            "the data are impossible there, or the likelihood underflows. Chains started there "
            "carry zero weight from the first step on, which keeps the bounds valid; where most "
            "do, the estimate rests on few chains. A prior that puts less mass there avoids it.",
            impossible.size, len(x0), where, MAX_POSSIBLE_DRAWS)
        return x0, PossibleStarts(attrs={"possible_start_mass_below": drawn})
    x0 = x0.copy()
    x0[impossible] = possible[:impossible.size]
    logger.log(
        logging.INFO if announce else logging.DEBUG,
        "The data are impossible at %d of %d %s: those chains start instead from draws at "
        "which they are possible (%.3g of the start's mass, from %d draws), and both bounds "
        "account for that mass.", impossible.size, len(x0), where, wanted / drawn, drawn)
    return x0, PossibleStarts(
        float(np.log((wanted - 1) / (drawn - 1))), float(np.log(drawn / wanted)),
        {"possible_start_mass": wanted / drawn, "possible_start_draws": drawn,
         "possible_starts_redrawn": int(impossible.size)})


def reverse_possible_mass(draw, parts_fn, rng: np.random.Generator) -> PossibleStarts:
    """Estimate the reverse runs' share of :func:`possible_starts` alone, replacing no start.

    For SMC, whose resampling leaves particles where the data are impossible behind, while its
    reverse runs never reach that mass: ``log(M / r)`` on their weights, ``r`` =
    :data:`POSSIBLE_DRAWS`.
    """
    possible, drawn = _draw_possible(draw, parts_fn, rng, POSSIBLE_DRAWS)
    if possible is None:
        return PossibleStarts(attrs={"possible_start_mass_below": drawn})
    return PossibleStarts(0.0, float(np.log(drawn / POSSIBLE_DRAWS)),
                          {"possible_start_mass": POSSIBLE_DRAWS / drawn,
                           "possible_start_draws": drawn})


def prior_start(simulator: ModelSimulator, density: ModelDensity, n: int,
                rng: np.random.Generator, impossible_note: str | None = None):
    """``n`` exact prior draws and their densities (:func:`check_finite_start` says when refused).

    Parameters
    ----------
    simulator : ModelSimulator
    density : ModelDensity
    n : int
    rng : numpy.random.Generator
    impossible_note : str, optional
        Added to the refusal where the data are impossible at every draw.

    Returns
    -------
    tuple
        ``(x, DensityParts)``.
    """
    x = draw_prior(simulator, n, rng)
    parts = density.parts(x)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model,
                       impossible_data="allow", impossible_note=impossible_note)
    return x, parts


def only_impossible_data(parts, x: np.ndarray) -> bool:
    """Whether the data are impossible at some of the states ``x`` and all else is finite."""
    impossible = ~np.isfinite(parts.log_likelihood)
    return bool(impossible.any() and np.all(parts.log_likelihood[impossible] == -np.inf)
                and np.all(np.isfinite(parts.log_prior)) and np.all(np.isfinite(x)))


def possible_run_starts(x0: np.ndarray, parts0, draw, parts_fn, rng: np.random.Generator,
                        layout, model: pm.Model, where: str = "prior draws",
                        impossible_note: str | None = None,
                        check: bool = True) -> tuple[np.ndarray, PossibleStarts]:
    """Check a run's start draws, and restrict them to where the data are possible.

    :func:`possible_starts` where the data are impossible at some draws (at all of them too)
    and all else is finite. With ``check`` (prior draws; a fitted base's draws are not
    checked), :func:`check_finite_start` then refuses anything else that is not finite, and
    data impossible at every draw where no draws could replace them.
    """
    possible = PossibleStarts()
    if only_impossible_data(parts0, x0):
        x, possible = possible_starts(x0, parts0.log_likelihood, draw, parts_fn, rng, where)
        if x is not x0:
            return x, possible
    if check:
        check_finite_start(parts0, where, layout, x0, model=model, impossible_data="allow",
                           impossible_note=impossible_note)
    return x0, possible


def possible_prior_start(simulator: ModelSimulator, density: ModelDensity, n: int,
                         rng: np.random.Generator, impossible_note: str | None = None,
                         parts_fn=None):
    """:func:`prior_start` restricted to where the data are possible, for a pilot.

    Draws at which the data are impossible are replaced by further draws of ``rng`` at which
    they are possible (:func:`possible_starts`): a pilot's particles there carry no weight, and
    it tunes its kernels on the rest. Its estimates of ``log p(y)`` from such draws need
    ``log_mass``, the log of an unbiased estimate of the prior's mass where the data are
    possible (0 where nothing was replaced). ``parts_fn`` evaluates the densities
    (``density.parts`` by default; PyMC's step methods bring their own).

    Returns
    -------
    tuple
        ``(x, DensityParts, log_mass)``.
    """
    parts_fn = density.parts if parts_fn is None else parts_fn
    x = draw_prior(simulator, n, rng)
    x, parts, log_mass = _restricted_pilot_draws(
        x, parts_fn(x), lambda k, r: draw_prior(simulator, k, r), parts_fn, rng)
    check_finite_start(parts, "prior draws", density.layout, x, model=simulator.model,
                       impossible_data="allow", impossible_note=impossible_note)
    return x, parts, log_mass


def _restricted_pilot_draws(x: np.ndarray, parts, draw, parts_fn, rng: np.random.Generator):
    """Restrict a pilot's draws ``x`` (densities ``parts``) to where the data are possible.

    The replacements continue the pilot's own stream ``rng`` (:func:`possible_starts`, without
    messages: the runs' starts announce it). Returns ``(x, parts, log_mass)``, ``log_mass`` the
    log of an unbiased estimate of the prior's mass where the data are possible (0 where
    nothing was replaced).
    """
    if only_impossible_data(parts, x):
        restricted, possible = possible_starts(x, parts.log_likelihood, draw, parts_fn, rng,
                                               announce=False)
        if restricted is not x:
            return restricted, parts_fn(restricted), possible.forward_offset
    return x, parts, 0.0


#: What a refusal of BDMC's pilot draws adds: the data are simulated, and others may do.
SIMULATED_DATA_HINT = (
    "These are BDMC's simulated data: another `random_seed`, or `match_data=True` (the "
    "simulated data nearest yours), may give data that more prior draws make possible.")


class PilotDraws:
    """Exact prior draws for a pilot, from its own stream, as ``(x, parts, log_mass)``.

    ``draws(n)`` goes on along the stream; ``draws.afresh(n)`` first sets it back to its start,
    so that a pilot re-run on a larger population draws what a call given that population
    (``pilot_chains``) draws. With ``possible``, restricted to where the data are possible
    (:func:`possible_prior_start`); else ``log_mass`` is 0 (:func:`prior_start`).
    """

    def __init__(self, simulator: ModelSimulator, density: ModelDensity,
                 rng: np.random.Generator, possible: bool = False):
        self.simulator, self.density, self.rng = simulator, density, rng
        self.possible = possible

    def __call__(self, n: int):
        """Return ``n`` more draws, their densities and ``log_mass``."""
        return self._draw(n, self.rng)

    def afresh(self, n: int):
        """Return the stream's first ``n`` draws, their densities and ``log_mass``."""
        return self._draw(n, rewind(self.rng))

    def _draw(self, n: int, rng: np.random.Generator):
        if self.possible:
            return possible_prior_start(self.simulator, self.density, n, rng)
        return (*prior_start(self.simulator, self.density, n, rng), 0.0)


def prior_start_blocks(simulator: ModelSimulator, density: ModelDensity,
                       blocks: ChainBlocks):
    """Exact prior draws, each block of chains from its own stream (unchecked).

    :func:`possible_run_starts` checks them and replaces those at which the data are impossible.

    Parameters
    ----------
    simulator : ModelSimulator
    density : ModelDensity
    blocks : ChainBlocks

    Returns
    -------
    tuple
        ``(x, DensityParts)``.
    """
    x = np.concatenate([draw_prior(simulator, n, g)
                        for n, g in zip(blocks.sizes, blocks.generators, strict=True)])
    return x, density.parts(x)


def generating_values(density: ModelDensity, truth: JointDraw) -> dict[str, np.ndarray]:
    """Constrained free variables and Deterministics at ``theta*``, from the same constrain map.

    Parameters
    ----------
    density : ModelDensity
    truth : JointDraw

    Returns
    -------
    dict
    """
    return {k: v[0] for k, v in density.constrain(truth.x[None, :]).items()}
