"""Running annealing chains driven by PyMC step methods, in this process or in worker processes.

PyMC step methods advance one chain at a time in Python, so chains are distributed over
``cores`` worker processes. Each worker builds the tempered clone and the step methods once (one
compilation per worker) from a picklable :class:`StepRunnerRecipe`, then runs whole chains: a
chain is forward or reverse AIS over every temperature, with its own random stream. Streams are
attached to chains, not to workers, so the result of a given seed does not depend on ``cores``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Literal

import cloudpickle
import numpy as np
import pymc as pm

from pymc_bdmc.algorithms.ais import AISRun, ais_forward, ais_reverse, merge_runs
from pymc_bdmc.kernels.pymc_steps import (
    StepPlan,
    StepSpec,
    StepSweep,
    StepTransition,
    point_parts,
)
from pymc_bdmc.model.density import DensityParts, FlatLayout
from pymc_bdmc.model.tempered import TemperedClone
from pymc_bdmc.parallel.executors import mp_context

__all__ = ["ChainTask", "StepRunner", "StepRunnerRecipe", "run_chains"]

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


# -- worker processes --------------------------------------------------------------------------
_WORKER: dict = {}


def _init_worker(payload: bytes) -> None:
    logging.getLogger("pymc").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    recipe, plan = cloudpickle.loads(payload)
    _WORKER["runner"] = StepRunner(recipe)
    _WORKER["plan"] = plan


def _run_in_worker(index: int, task: ChainTask) -> tuple[int, AISRun]:
    return index, _WORKER["runner"].run_chain(_WORKER["plan"], task)


def run_chains(
    recipe: StepRunnerRecipe,
    plan: StepPlan,
    tasks: Sequence[ChainTask],
    *,
    cores: int = 1,
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
    cores : int, default 1
        Worker processes. With 1, chains run here on ``runner`` (built from ``recipe`` if not
        given); otherwise each of ``min(cores, len(tasks))`` workers builds its own runner once.
    runner : StepRunner, optional
        This process's runner, reused when ``cores == 1``.
    on_chain : callable, optional
        Called with each task once its chain is done.
    on_step : callable, optional
        Called after every annealing step (only when ``cores == 1``).
    """
    if cores <= 1 or len(tasks) <= 1:
        runner = runner or StepRunner(recipe)
        runs = []
        for task in tasks:
            runs.append(runner.run_chain(plan, task, on_step=on_step))
            if on_chain is not None:
                on_chain(task)
        return runs
    payload = cloudpickle.dumps((recipe, plan))
    n_workers = min(cores, len(tasks))
    logger.info("Running %d chains in %d worker processes.", len(tasks), n_workers)
    runs: list[AISRun | None] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=n_workers, mp_context=mp_context(),
                             initializer=_init_worker, initargs=(payload,)) as pool:
        futures = [pool.submit(_run_in_worker, i, task) for i, task in enumerate(tasks)]
        for future in as_completed(futures):
            index, run = future.result()
            runs[index] = run
            if on_chain is not None:
                on_chain(tasks[index])
    return runs
