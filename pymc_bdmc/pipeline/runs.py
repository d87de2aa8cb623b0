"""The measured runs: forward, then reverse, each with its progress row, and Ctrl-C handling.

Every driver runs its forward and reverse runs through :func:`forward_and_reverse`, whatever
runs them (an :class:`~pymc_bdmc.parallel.annealing.AnnealingRunner`, or the algorithm called
in this process): the progress rows, the step counts that interrupt messages quote, and the
rule that an interrupted reverse run still returns the finished forward run are the same for
all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.parallel.annealing import AnnealingRunner, DensityRecipe
from pymc_bdmc.parallel.executors import Workers
from pymc_bdmc.pipeline.interrupts import reverse_interrupted
from pymc_bdmc.pipeline.progress import StepCounter, phase
from pymc_bdmc.pipeline.timing import timed

__all__ = ["RunFn", "forward_and_reverse", "start_runner"]

logger = logging.getLogger("pymc_bdmc")

#: ``run(on_step, on_group) -> run result``: one direction's run, reporting each step done here
#: (``on_step()``) or each group of ``n`` steps done elsewhere (``on_group(n)``).
RunFn = Callable[[Callable[[], None], Callable[[int], None]], object]


def forward_and_reverse(progress, done: StepCounter, total: int, forward: RunFn,
                        reverse: RunFn | None = None, *, algorithm: str = "AIS",
                        reverse_label: str | None = None, unit: str = "step",
                        cancel: Callable[[], None] | None = None,
                        forward_label: str | None = None):
    """Run ``forward``, then ``reverse`` (if given); Ctrl-C during ``reverse`` keeps ``forward``.

    Parameters
    ----------
    progress : pymc progress bar
    done : StepCounter
        Counts the steps of each direction (for interrupt messages).
    total : int
        Steps of each direction's progress row.
    forward, reverse : callable
        ``run(on_step, on_group)``; ``reverse`` None for a forward run only.
    algorithm : str, default "AIS"
        Names the progress rows (``"Forward AIS"``) and the interrupted run (``"reverse AIS"``).
    reverse_label : str, optional
        The reverse run's progress row, if not ``"Reverse <algorithm>"``.
    unit : str, default "step"
        What ``total`` counts, for the interrupt message.
    cancel : callable, optional
        Called when the reverse run is interrupted (e.g. to cancel work on other processes).
    forward_label : str, optional
        The forward run's progress row, if not ``"Forward <algorithm>"``.

    Returns
    -------
    tuple
        ``(forward run, reverse run or None, interrupted note or None)``.
    """
    with phase(progress, forward_label or f"Forward {algorithm}", total) as advance, \
            timed("forward"):
        forward_run = forward(done.counting("forward", advance),
                              done.counting_groups("forward", advance))
    if reverse is None:
        return forward_run, None, None
    try:
        with phase(progress, reverse_label or f"Reverse {algorithm}", total) as advance, \
                timed("reverse"):
            reverse_run = reverse(done.counting("reverse", advance),
                                  done.counting_groups("reverse", advance))
    except KeyboardInterrupt:  # the finished forward run is still a valid lower bound
        if cancel is not None:
            cancel()
        return forward_run, None, reverse_interrupted(f"reverse {algorithm}", unit,
                                                      done["reverse"], total)
    return forward_run, reverse_run, None


def start_runner(density: ModelDensity, workers: Workers, chains_per_batch: int | None, blocks,
                 what: str = "chains"):
    """The runner of a call's groups of chains (here or on ``workers``), and those groups.

    Parameters
    ----------
    density : ModelDensity
        This process's densities; workers compile their own from its recipe.
    workers : Workers
    chains_per_batch : int or None
    blocks : ChainBlocks
        The forward run's blocks (the reverse run is grouped the same way).
    what : str, default "chains"
        What the blocks hold, for the log message.

    Returns
    -------
    tuple
        ``(AnnealingRunner, groups)``.
    """
    runner = AnnealingRunner(density, lambda: DensityRecipe.from_density(density), workers,
                             chains_per_batch)
    groups = runner.groups(blocks)
    if not workers.local:
        logger.debug("Running %d groups of %s per direction on %s.", len(groups), what,
                    workers.description)
    return runner, groups
