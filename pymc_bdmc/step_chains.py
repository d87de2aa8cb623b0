"""Running annealing chains driven by PyMC step methods, in this process or on workers.

PyMC step methods advance one chain at a time in Python, so each chain is one task for the
workers every other run uses (:mod:`pymc_bdmc.parallel.executors`: local processes, any
``concurrent.futures`` executor, a Dask cluster). Every task carries the pickled
:class:`StepRunnerRecipe` and plan; each worker process (and thread) builds the tempered clone
and the step methods once per call, then runs whole chains: a chain is forward or reverse AIS
over every temperature, with its own random stream. Streams are attached to chains, not to
workers, so the result of a given seed does not depend on where the chains run.
"""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import cloudpickle
import numpy as np
import pymc as pm

from pymc_bdmc.algorithms.ais import AISRun, ais_forward, ais_reverse
from pymc_bdmc.kernels.pymc_steps import (
    StepPlan,
    StepSpec,
    StepSweep,
    StepTransition,
    point_parts,
)
from pymc_bdmc.model.density import COMPILE_LOCK, DensityParts, FlatLayout
from pymc_bdmc.model.tempered import TemperedClone
from pymc_bdmc.parallel.executors import IN_PROCESS, Workers
from pymc_bdmc.parallel.worker_cache import WorkerCache, quiet_pymc_in_workers

__all__ = ["ChainTask", "StepRunner", "StepRunnerRecipe", "StepWork", "run_chains"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepRunnerRecipe:
    """Everything a process needs to build the step methods (picklable with cloudpickle)."""

    model: pm.Model
    layout: FlatLayout
    specs: tuple[StepSpec, ...]
    potentials_in_likelihood: bool = False
    observed: Mapping[str, np.ndarray] | None = None
    compile_kwargs: dict | None = None


class StepRunner:
    """The tempered clone and step methods of one process, and chains run through them."""

    def __init__(self, recipe: StepRunnerRecipe):
        self.recipe = recipe
        self.layout = recipe.layout
        self.clone = TemperedClone(recipe.model, recipe.layout,
                                   potentials_in_likelihood=recipe.potentials_in_likelihood,
                                   observed=recipe.observed,
                                   compile_kwargs=recipe.compile_kwargs)
        self.sweep = StepSweep(recipe.specs, self.clone, recipe.compile_kwargs)

    def parts(self, x: np.ndarray) -> DensityParts:
        """Densities (zero gradients) of flat states ``x``, shape (k, n_dim)."""
        return point_parts(self.clone, [self.layout.to_point(row) for row in np.atleast_2d(x)])

    def run_chain(self, plan: StepPlan, task: ChainTask,
                  on_step: Callable[[], None] | None = None) -> AISRun:
        """Run one forward or reverse AIS chain through the frozen plan."""
        transition = StepTransition(self.sweep, plan, self.layout, task.direction)
        if task.direction == "forward":
            x0 = np.asarray(task.start, dtype=float)[None, :]
            return ais_forward(task.rng, x0, self.parts(x0), plan.betas, transition,
                               on_step=on_step)
        return ais_reverse(task.rng, np.asarray(task.start, dtype=float), 1, plan.betas,
                           transition, self.parts, on_step=on_step,
                           spread_transitions=task.spread_transitions)


@dataclass(frozen=True)
class ChainTask:
    """One chain: its direction, starting state, random stream and reverse spreading."""

    direction: Literal["forward", "reverse"]
    start: np.ndarray
    rng: np.random.Generator
    spread_transitions: int = 0


# -- workers ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepWork:
    """What a worker needs to run chains of one call, sent with every task.

    A generic executor has no pool initializer, so each task carries the ``cloudpickle`` of
    ``(recipe, plan)``; a worker builds a :class:`StepRunner` from it on its first task and
    reuses it for the call's later tasks.

    Attributes
    ----------
    payload : bytes
        ``cloudpickle`` of ``(StepRunnerRecipe, StepPlan)``.
    key : str
        Digest of ``payload``: each process (and thread) builds each distinct recipe once.
    """

    payload: bytes
    key: str

    @classmethod
    def pack(cls, recipe: StepRunnerRecipe, plan: StepPlan) -> StepWork:
        """Pickle ``recipe`` and ``plan`` for workers."""
        payload = cloudpickle.dumps((recipe, plan))
        return cls(payload, hashlib.sha256(payload).hexdigest())


# Per process and thread (compiled functions and step methods are not thread-safe), the
# runners of the last few calls.
_RUNNERS: WorkerCache[tuple[StepRunner, StepPlan]] = WorkerCache(4)


def _runner_for(work: StepWork) -> tuple[StepRunner, StepPlan]:
    def build() -> tuple[StepRunner, StepPlan]:
        quiet_pymc_in_workers()  # PyMC's step-assignment chatter goes nowhere useful there
        # PyTensor compilation is not thread-safe (pymc-devs/pymc#7819): one build at a time.
        with COMPILE_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recipe, plan = cloudpickle.loads(work.payload)
            return StepRunner(recipe), plan

    return _RUNNERS.get(work.key, build)


def _run_remote(work: StepWork, task: ChainTask) -> AISRun:
    runner, plan = _runner_for(work)
    return runner.run_chain(plan, task)


def run_chains(
    recipe: StepRunnerRecipe,
    plan: StepPlan,
    tasks: Sequence[ChainTask],
    *,
    workers: Workers = IN_PROCESS,
    runner: StepRunner | None = None,
    on_chain: Callable[[ChainTask], None] | None = None,
    on_step: Callable[[], None] | None = None,
) -> list[AISRun]:
    """Run ``tasks`` and return their runs in task order.

    Parameters
    ----------
    recipe : StepRunnerRecipe
    plan : StepPlan
    tasks : sequence of ChainTask
    workers : Workers, default this process
        Where chains run (:func:`~pymc_bdmc.parallel.executors.resolve_workers`: local
        processes, an executor or a Dask cluster). In this process chains run on ``runner``
        (built from ``recipe`` if not given); elsewhere every chain is one task, and each worker
        process (or thread) builds its own runner once per call.
    runner : StepRunner, optional
        This process's runner, used for chains run here.
    on_chain : callable, optional
        Called with each task once its chain is done.
    on_step : callable, optional
        Called after every annealing step of a chain run in this process.
    """
    pending: list = list(tasks)
    if not workers.local and len(tasks) > 1:
        work = StepWork.pack(recipe, plan)
        logger.debug("Running %d chains on %s.", len(tasks), workers.description)
        try:
            pending = [workers.submit(_run_remote, work, task) for task in tasks]
        except Exception as err:  # noqa: BLE001  (any failure to start: run here instead)
            # Workers could not be started (or the executor is shut down): each chain carries
            # its own stream, so running it here gives the same numbers.
            logger.warning("Could not start work on %s (%s: %s); running the chains in this "
                           "process.", workers.description, type(err).__name__, err)
            pending = list(tasks)
    runs = []
    warned = False
    try:
        for task, item in zip(tasks, pending):
            run = None
            if item is not task:
                try:
                    run = item.result()
                except Exception as err:  # noqa: BLE001  (a worker's fault: run it here)
                    # A worker died (killed, out of memory, its pool gone) or its executor
                    # failed: the chain's stream is in its task, so running it here gives the
                    # same numbers (an error of the chain itself is raised here again).
                    if not warned:
                        logger.warning("Work on %s failed (%s: %s); running its chains in "
                                       "this process (same results, one core).",
                                       workers.description, type(err).__name__, err)
                        warned = True
            if run is None:
                runner = runner or StepRunner(recipe)
                run = runner.run_chain(plan, task, on_step=on_step)
            runs.append(run)
            if on_chain is not None:
                on_chain(task)
    except BaseException:
        # Interrupted (Ctrl-C) or failed: chains not started yet must not hold the workers
        # (local pools outlive this call).
        for item, task in zip(pending, tasks):
            if item is not task:
                item.cancel()
        raise
    return runs
