"""Scale moves: Metropolis-Hastings on a hyper-parameter that carries its Gaussian children.

In a centred hierarchy or a random walk, a small scale pins its children, and HMC tuned on the
bulk of the posterior cannot leave the funnel's neck: at BDMC's exact posterior sample
``theta*`` deep in a neck, reverse chains accepted nothing (issue "Hard geometry", seed 4 of
the random walks). A scale move proposes a random-walk step of one hyper-parameter in its
unconstrained space and moves the children with it so that their standardised residuals stay
put (:mod:`pymc_bdmc.model.location_scale`). The children's conditional prior then cancels
against the map's Jacobian, so the move climbs out of a neck as freely as the prior and the
likelihood allow.

Validity: each move is a Metropolis-Hastings step whose proposal is a symmetric random walk on
the hyper-parameter followed by a deterministic map that is undone by the opposite step, with
acceptance ratio ``f(x') / f(x) * |J|``; it is reversible with respect to any target ``f`` it
is given. The step sizes are frozen in the plan (from the pilot population's spread), never
adapted on the measured chains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.model.density import DensityParts
from pymc_bdmc.model.location_scale import ScaleGroup

__all__ = ["SCALE_MOVE_STEP", "ScaleMoves", "scale_moves_for"]

#: Proposal standard deviation of a scale move, in units of the pilot population's standard
#: deviation of the hyper-parameter at that temperature (scaled by ``1 / sqrt(size)`` for a
#: vector hyper-parameter): large enough to leave a neck in a few accepted moves.
SCALE_MOVE_STEP = 1.5

#: ``(chains, 2 n) -> (moved (chains, groups, n), log_jacobian (chains, groups))``: the batched
#: map of every group (:meth:`pymc_bdmc.model.density.ModelDensity.location_scale_map`).
ScaleMap = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class ScaleMoves:
    """One scale move per group, applied in turn.

    Parameters
    ----------
    groups : tuple of ScaleGroup
    scale_map : callable
        The batched map of the groups' moves.
    """

    groups: tuple[ScaleGroup, ...]
    scale_map: ScaleMap

    def sweep(self, rng: np.random.Generator, x: np.ndarray, parts: DensityParts, beta: float,
              sd: np.ndarray, parts_fn: Callable[[np.ndarray], DensityParts],
              reverse: bool = False) -> tuple[np.ndarray, DensityParts, np.ndarray]:
        """Apply each group's move once (in reverse order if ``reverse``).

        ``sd`` holds per-coordinate standard deviations of the hyper-parameters' spread at this
        temperature (e.g. the square root of the plan's inverse mass). Returns the new states,
        their densities and each group's acceptance rate over the chains.
        """
        order = list(range(len(self.groups)))
        return self._moves(rng, x, parts, beta, sd, parts_fn, order[::-1] if reverse else order)

    def palindrome(self, rng: np.random.Generator, x: np.ndarray, parts: DensityParts,
                   beta: float, sd: np.ndarray, parts_fn: Callable[[np.ndarray], DensityParts]
                   ) -> tuple[np.ndarray, DensityParts, np.ndarray]:
        """Apply the moves of groups ``1..k..1`` (``2k - 1`` moves): reversible on its own.

        Returns the new states, their densities and each group's mean acceptance rate.
        """
        order = list(range(len(self.groups)))
        return self._moves(rng, x, parts, beta, sd, parts_fn, order + order[-2::-1])

    def _moves(self, rng, x, parts, beta, sd, parts_fn, order):
        accepted = np.zeros(len(self.groups))
        counts = np.zeros(len(self.groups))
        for g in order:
            x, parts, ok = self.move(rng, x, parts, beta, sd, parts_fn, g)
            accepted[g] += ok.mean()
            counts[g] += 1
        return x, parts, accepted / np.maximum(counts, 1)

    def move(self, rng, x, parts, beta, sd, parts_fn, g):
        """One group's move; returns the states, densities and which chains accepted."""
        coords = self.groups[g].coordinates
        step = SCALE_MOVE_STEP / np.sqrt(coords.size) * sd[coords]
        proposed = x.copy()
        proposed[:, coords] += step * rng.standard_normal(size=(len(x), coords.size))
        moved, log_jacobian = self.scale_map(np.concatenate([x, proposed], axis=1))
        new = moved[:, g]
        new_parts = parts_fn(new)
        with np.errstate(invalid="ignore", over="ignore"):
            log_ratio = (new_parts.tempered_logp(beta) - parts.tempered_logp(beta)
                         + log_jacobian[:, g])
            # NaN (a non-finite proposal) compares False: rejected.
            accepted = np.log(rng.uniform(size=len(x))) < log_ratio
        return np.where(accepted[:, None], new, x), parts.take(accepted, new_parts), accepted


def scale_moves_for(density) -> ScaleMoves | None:
    """Build the scale moves of a model's densities, or None for a model without scale groups.

    ``density`` is a ``ModelDensity`` or a ``BatchedParts`` (in worker processes).
    """
    groups = density.location_scale_groups
    return ScaleMoves(groups, density.location_scale_map) if groups else None
