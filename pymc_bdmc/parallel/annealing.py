"""Forward and reverse AIS over many chains, in batches, here or in worker processes.

The chains are cut into groups of whole stream blocks (:mod:`pymc_bdmc.parallel.streams`). Each
group runs the whole annealing path as one batched computation, either in this process (groups
one after another, which bounds memory for very many chains) or as a task on a worker. A worker
receives a pickled :class:`DensityRecipe` (the symbolic graph of the batched densities, not the
PyMC model: custom distributions do not always survive pickling) and compiles it once, on its
first task; later tasks, directions and calls on the same model reuse that compilation.

Because every group carries its own random streams, a seed gives the same chains whatever the
grouping. The only differences are floating-point round-off where the model's batched linear
algebra rounds differently for a different number of rows (BLAS kernels block by rows).
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import cloudpickle
import numpy as np
from threadpoolctl import threadpool_limits

from pymc_bdmc.algorithms.ais import AISRun, ais_forward, ais_reverse, merge_runs
from pymc_bdmc.kernels.gibbs import ChromaticGibbs
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.scale_moves import scale_moves_for
from pymc_bdmc.model.density import BatchedParts, ModelDensity
from pymc_bdmc.parallel.executors import Workers
from pymc_bdmc.parallel.streams import ChainBlocks
from pymc_bdmc.parallel.worker_cache import WorkerCache, quiet_pymc_in_workers

__all__ = ["AnnealingRunner", "DensityRecipe", "GroupTask", "run_group"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DensityRecipe:
    """What a worker needs to compile a model's densities, pickled once per call.

    Attributes
    ----------
    payload : bytes
        ``cloudpickle`` of the density's :class:`~pymc_bdmc.model.density.BatchedParts`.
    key : str
        Digest of ``payload``: workers compile each distinct recipe once.
    """

    payload: bytes
    key: str

    @classmethod
    def from_density(cls, density: ModelDensity) -> DensityRecipe:
        """Pickle the hot path of ``density`` (its graph and compilation settings)."""
        payload = cloudpickle.dumps(density.batched_parts())
        return cls(payload, hashlib.sha256(payload).hexdigest())

    def build(self) -> BatchedParts:
        """Compile the densities (in the calling process)."""
        return cloudpickle.loads(self.payload).compile()


# Per process and thread, the densities of the last few recipes.
_COMPILED: WorkerCache[BatchedParts] = WorkerCache(4)


def _density_for(recipe: DensityRecipe) -> BatchedParts:
    def build() -> BatchedParts:
        quiet_pymc_in_workers()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return recipe.build()

    return _COMPILED.get(recipe.key, build)


@dataclass(frozen=True)
class GroupTask:
    """One group of chains to anneal in one direction.

    Attributes
    ----------
    direction : {"forward", "reverse"}
    start : ndarray
        Forward: the group's exact prior draws, shape (chains, n_dim). Reverse: the exact
        posterior sample every chain starts from, shape (n_dim,).
    blocks : ChainBlocks
        The group's chains and their random streams.
    plan : AnnealingPlan
    observed : mapping, optional
        Observed data to condition on (BDMC's simulated data); None keeps the model's.
    spread_transitions : int
        Reverse only: kernel steps at ``beta = 1`` before annealing down.
    fused_kernel : bool
        Run each HMC transition as one compiled function
        (:class:`~pymc_bdmc.kernels.fused_hmc.FusedHMC`), and each Gibbs color update too
        (:class:`~pymc_bdmc.kernels.fused_gibbs.FusedColorUpdate`): the same kernels, less
        Python.
    gibbs : ChromaticGibbs, optional
        Gibbs sweeps of the discrete coordinates around each step's HMC transitions.
    """

    direction: Literal["forward", "reverse"]
    start: np.ndarray
    blocks: ChainBlocks
    plan: AnnealingPlan
    observed: Mapping[str, np.ndarray] | None = None
    spread_transitions: int = 0
    fused_kernel: bool = False
    gibbs: ChromaticGibbs | None = None

    @property
    def n_stages(self) -> int:
        """Annealing steps the group runs (for progress)."""
        return self.plan.n_steps

    def run(self, density: ModelDensity | BatchedParts, on_step: Callable[[], None] | None = None):
        """Run on ``density``: ``(run, (model calls, term calls))`` (see :func:`run_group`)."""
        return run_group(self, density, on_step)


def run_group(task: GroupTask, density: ModelDensity | BatchedParts,
              on_step: Callable[[], None] | None = None) -> tuple[AISRun, tuple[int, int]]:
    """Run one group on ``density``; return the run and the batched calls it made.

    The calls are ``(model calls, term calls)``: densities with gradients, and the elementwise
    terms of Gibbs sweeps. BLAS runs on one thread meanwhile, as in ``pm.sample``: a group's
    matrices (dense mass matrices, a fitted base) are small, and on 2 cores BLAS threads made
    a 201-coordinate random walk's AIS run 2x slower (workers already use every core).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _run_group(task, density, on_step)


def _run_group(task, density, on_step):
    if task.observed is not None:
        density.set_observed(task.observed)
    calls_before = density.n_evaluations, density.n_term_evaluations
    rng = task.blocks.generator()
    fused = density.fused_hmc() if task.fused_kernel else None
    discrete = None
    if task.gibbs is not None:
        update = (density.fused_gibbs(task.gibbs.max_size)
                  if task.fused_kernel and task.gibbs.fusable else None)
        discrete = task.gibbs.bound_to(density.terms, update)
    parts_fn = task.plan.path_parts(density.parts)  # the prior's path, or a fitted base's
    moves = scale_moves_for(density) if task.plan.scale_moves else None
    transition = task.plan.transition(parts_fn, fused, discrete, moves)
    if task.direction == "forward":
        run = ais_forward(rng, task.start, parts_fn(task.start), task.plan.betas,
                          transition, on_step=on_step)
    else:
        run = ais_reverse(rng, task.start, task.blocks.n_chains, task.plan.betas, transition,
                          parts_fn, on_step=on_step,
                          spread_transitions=task.spread_transitions)
    return run, (density.n_evaluations - calls_before[0],
                 density.n_term_evaluations - calls_before[1])


def _run_remote(recipe: DensityRecipe, task):
    return task.run(_density_for(recipe))


class AnnealingRunner:
    """Runs forward and reverse AIS groups for one call of a sampler.

    Parameters
    ----------
    density : ModelDensity
        This process's compiled densities (used for in-process groups).
    recipe : callable
        Returns the :class:`DensityRecipe` for workers (called at most once, when needed).
    workers : Workers
    chains_per_batch : int, optional
        Most chains evaluated together in one batched call (bounds memory). Default: all the
        chains of a worker in one batch.
    """

    def __init__(self, density: ModelDensity, recipe: Callable[[], DensityRecipe],
                 workers: Workers, chains_per_batch: int | None = None):
        self.density = density
        self._recipe_fn = recipe
        self._recipe: DensityRecipe | None = None
        self.workers = workers
        self.chains_per_batch = chains_per_batch
        self.model_calls = 0  # batched model calls made by workers (this process counts its own)
        self.term_calls = 0  # batched term calls (Gibbs sweeps) made by workers
        self._warned = False

    def groups(self, blocks: ChainBlocks) -> list[tuple[int, int]]:
        """How ``blocks`` are grouped into batches/tasks."""
        return blocks.groups(self.chains_per_batch, self.workers.n_workers)

    def submit(self, direction: Literal["forward", "reverse"], blocks: ChainBlocks,
               start: np.ndarray, plan: AnnealingPlan, *,
               observed: Mapping[str, np.ndarray] | None = None,
               spread_transitions: int = 0,
               fused_kernel: bool = False,
               gibbs: ChromaticGibbs | None = None) -> list[GroupTask | object]:
        """Start the groups of one direction; returns tasks (local) or futures (remote)."""
        tasks = []
        for first, stop in self.groups(blocks):
            part = start if direction == "reverse" else start[blocks.chain_slice(first, stop)]
            tasks.append(GroupTask(direction, part, blocks.subset(first, stop), plan,
                                   observed, spread_transitions, fused_kernel, gibbs))
        return self.submit_tasks(tasks)

    def submit_tasks(self, tasks: list) -> list:
        """Start prepared tasks (anything with ``run(density, on_step)`` and ``n_stages``)."""
        if self.workers.local:
            return tasks
        if self._recipe is None:
            self._recipe = self._recipe_fn()
        try:
            return [_Remote(task, self.workers.submit(_run_remote, self._recipe, task))
                    for task in tasks]
        except Exception as err:  # noqa: BLE001  (any failure to start: run here instead)
            # Workers could not be started (a fork server or pool that died as it started, an
            # executor shut down): the tasks carry their own streams, so running them here
            # gives the same numbers.
            logger.warning("Could not start work on %s (%s: %s); running the chains in this "
                           "process.", self.workers.description, type(err).__name__, err)
            return tasks

    def collect(self, pending: list, on_step: Callable[[], None] | None = None,
                on_group: Callable[[int], None] | None = None, merge=merge_runs):
        """Run (local) or wait for (remote) the groups of :meth:`submit`; merge them in order.

        ``on_step`` is called after every local annealing step, ``on_group`` with the number
        of steps a finished remote group represents; ``merge`` combines the groups' runs.
        """
        runs = []
        for item in pending:
            if not isinstance(item, _Remote):
                run, _ = item.run(self.density, on_step=on_step)
            else:
                try:
                    run, calls = item.future.result()
                except Exception as err:  # noqa: BLE001  (a worker's fault: run the group here)
                    # A worker died (killed, out of memory, its pool or fork server gone) or
                    # its executor failed. The group's streams are in its task, so running it
                    # here changes nothing; an error of the run itself is raised here again.
                    if not self._warned:
                        logger.warning(
                            "Work on %s failed (%s: %s); running its chains in this process "
                            "(same results, one core).", self.workers.description,
                            type(err).__name__, err)
                        self._warned = True
                    run, _ = item.task.run(self.density, on_step=on_step)
                    calls = (0, 0)  # counted by this process's density
                else:
                    if on_group is not None:
                        on_group(item.task.n_stages)
                self.model_calls += calls[0]
                self.term_calls += calls[1]
            runs.append(run)
        return merge(runs)

    @staticmethod
    def cancel(pending: list) -> None:
        """Cancel remote groups that have not started."""
        for item in pending:
            if isinstance(item, _Remote):
                item.future.cancel()


@dataclass(frozen=True)
class _Remote:
    """A group submitted to a worker, with its task kept for a local re-run."""

    task: GroupTask
    future: object
