"""One progress bar per call, its stages, and counting the steps done (for interrupt messages).

A call shows a single bar whose stage changes as the call goes: the pilot, the forward run, the
reverse run (with the attempt, in a length search, and the data, in ``calibrate``), and at the
end the result. Stages are opened with :func:`phase` and :func:`pilot_phase`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

__all__ = ["StageProgress", "StepCounter", "phase", "pilot_phase", "progress_enabled"]


class StageProgress:
    """A single progress bar whose stage (description and length) changes through a call.

    It has the interface of PyMC's simple progress bars (``add_task``, ``advance``,
    ``update``), so each stage's code opens its "task" as before; every new task replaces the
    last on the same bar.

    Parameters
    ----------
    enabled : bool
        Show the bar (else every method does nothing).
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.prefix = ""
        self._bar = None
        self._task = None

    def __enter__(self) -> StageProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            # On stderr, as the log: a script's output stays what it prints.
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True))
            self._bar.__enter__()
            self._task = self._bar.add_task("Compiling", total=None)
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
            self._bar = None

    def add_task(self, description: str, completed: int = 0, total: int | None = None) -> int:
        """Start a stage on the bar (it replaces the last one)."""
        if self._bar is not None:
            # update, not reset: the elapsed time is the call's
            self._bar.update(self._task, total=total, completed=completed,
                             description=self.prefix + description)
        return 0

    def advance(self, task_id: int | None = None, advance: int = 1) -> None:
        """Advance the current stage."""
        if self._bar is not None:
            self._bar.advance(self._task, advance)

    def update(self, task_id: int | None = None, refresh: bool = False,
               completed: int = 0) -> None:
        """Set how far the current stage is."""
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, refresh=refresh)

    def finish(self, summary: str) -> None:
        """Show the call's result on the bar."""
        if self._bar is not None:
            total = self._bar.tasks[0].total or 1
            self._bar.update(self._task, description=summary, total=total, completed=total)


def progress_enabled(progressbar: bool) -> bool:
    """Whether to show progress: asked for, and not on CI (environment variable ``CI``).

    Parameters
    ----------
    progressbar : bool
        The user's ``progressbar`` argument.

    Returns
    -------
    bool
    """
    return bool(progressbar) and not os.environ.get("CI")


@contextmanager
def phase(progress, description: str, total: int):
    """A progress row of ``total`` units; yields a function that advances it by one.

    Parameters
    ----------
    progress : pymc progress bar
        From :func:`pymc.progress_bar.create_simple_progress`.
    description : str
    total : int

    Yields
    ------
    callable
    """
    task = progress.add_task(description, completed=0, total=total)

    def advance():
        progress.advance(task)

    yield advance


@contextmanager
def pilot_phase(progress):
    """The pilot's progress row; yields ``report(beta)``.

    The pilot's length is not known in advance: progress is shown in ``sqrt(beta)``, which moves
    roughly evenly along a typical path.

    Parameters
    ----------
    progress : pymc progress bar

    Yields
    ------
    callable
    """
    task = progress.add_task("Pilot tuning", completed=0, total=100)

    def report(beta: float):
        progress.update(task, refresh=False, completed=round(100 * np.sqrt(beta)))

    yield report


class StepCounter(dict):
    """Annealing steps completed per phase, for messages about interrupted runs."""

    def counting(self, phase: str, advance):
        """A callback counting one step of ``phase`` and advancing its progress row.

        Parameters
        ----------
        phase : str
        advance : callable

        Returns
        -------
        callable
        """
        self[phase] = 0

        def step():
            self[phase] += 1
            advance()

        return step

    def counting_groups(self, phase: str, advance):
        """Like :meth:`counting`, for a group of ``n`` steps finished elsewhere at once.

        Parameters
        ----------
        phase : str
        advance : callable

        Returns
        -------
        callable
        """
        self.setdefault(phase, 0)

        def group(n: int):
            self[phase] += n
            for _ in range(n):
                advance()

        return group
