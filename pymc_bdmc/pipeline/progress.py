"""Progress rows of a run, and counting the annealing steps done (for interrupt messages)."""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

__all__ = ["StepCounter", "phase", "pilot_phase", "progress_enabled"]


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
