"""Forward and reverse SMC populations in groups, here or on workers (tempering path).

SMC's populations are independent: resampling mixes particles within a population, never across.
So, like AIS chains (:mod:`pymc_bdmc.parallel.annealing`), they can run in groups of whole
populations, one after another in this process or as tasks on worker processes or a Dask
cluster. Each population is one stream block (:mod:`pymc_bdmc.parallel.streams`): the kernels
draw for its particles from its own generator, and it resamples with that generator too, so a
seed gives the same populations however they are grouped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from pymc_bdmc.algorithms.smc import SMCRun, TemperingPath, smc_forward, smc_reverse
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import scale_moves_for
from pymc_bdmc.model.density import BatchedParts, ModelDensity
from pymc_bdmc.parallel.streams import ChainBlocks

__all__ = ["SMCGroupTask", "population_blocks", "smc_tasks"]


def population_blocks(rng: np.random.Generator, populations: int,
                      particles: int) -> ChainBlocks:
    """One stream block, with its own child generator of ``rng``, per population."""
    return ChainBlocks.spawn(rng, populations * particles, block=particles)


@dataclass(frozen=True)
class SMCGroupTask:
    """Some whole populations to run through SMC in one direction.

    Attributes
    ----------
    direction : {"forward", "reverse"}
    start : ndarray
        Forward: the populations' exact prior draws, shape (populations * particles, n_dim).
        Reverse: the exact posterior sample every particle starts from, shape (n_dim,).
    blocks : ChainBlocks
        One block per population (its particles) with the population's generator.
    plan : AnnealingPlan
        The frozen temperatures and kernels (the tempering path).
    ess_threshold : float
    observed : mapping, optional
        Observed data to condition on (BDMC's simulated data); None keeps the model's.
    spread_transitions : int
        Reverse only: transitions at ``beta = 1`` before the first stage.
    gibbs : ChromaticGibbs, optional
        Gibbs sweeps of the discrete coordinates around each stage's HMC transitions.
    """

    direction: Literal["forward", "reverse"]
    start: np.ndarray
    blocks: ChainBlocks
    plan: AnnealingPlan
    ess_threshold: float
    observed: Mapping[str, np.ndarray] | None = None
    spread_transitions: int = 0
    gibbs: ChromaticGibbs | None = None

    @property
    def n_stages(self) -> int:
        """SMC stages the group runs (for progress)."""
        return self.plan.n_steps

    def run(self, density: ModelDensity | BatchedParts,
            on_step: Callable[[], None] | None = None) -> tuple[SMCRun, tuple[int, int]]:
        """Run on ``density``; return the run and the batched (model, term) calls it made."""
        if self.observed is not None:
            density.set_observed(self.observed)
        calls_before = density.n_evaluations, density.n_term_evaluations
        discrete = None if self.gibbs is None else self.gibbs.bound_to(density.terms)
        moves = scale_moves_for(density) if self.plan.scale_moves else None
        transition = self.plan.transition(density.parts, None, discrete, moves)
        path = TemperingPath(self.plan.betas)
        blocks = self.blocks
        if self.direction == "forward":
            run = smc_forward(blocks.generator(), self.start, density.parts(self.start), path,
                              transition, chains=len(blocks), ess_threshold=self.ess_threshold,
                              on_step=on_step, resample_rngs=blocks.generators)
        else:
            run = smc_reverse(blocks.generator(), self.start, blocks.sizes[0], path, transition,
                              density.parts, chains=len(blocks),
                              ess_threshold=self.ess_threshold,
                              spread_transitions=self.spread_transitions, on_step=on_step,
                              resample_rngs=blocks.generators)
        return run, (density.n_evaluations - calls_before[0],
                     density.n_term_evaluations - calls_before[1])


def smc_tasks(direction: Literal["forward", "reverse"], blocks: ChainBlocks,
              groups: list[tuple[int, int]], start: np.ndarray, plan: AnnealingPlan,
              ess_threshold: float, *, observed: Mapping[str, np.ndarray] | None = None,
              spread_transitions: int = 0,
              gibbs: ChromaticGibbs | None = None) -> list[SMCGroupTask]:
    """One task per group ``(first, stop)`` of populations (see ``ChainBlocks.groups``)."""
    tasks = []
    for first, stop in groups:
        part = start if direction == "reverse" else start[blocks.chain_slice(first, stop)]
        tasks.append(SMCGroupTask(direction, part, blocks.subset(first, stop), plan,
                                  ess_threshold, observed, spread_transitions, gibbs))
    return tasks
