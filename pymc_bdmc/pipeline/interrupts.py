"""Ctrl-C during a run: nothing before the forward run ends, the lower bound after it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import contextmanager

from pymc_bdmc.pipeline.progress import StepCounter

__all__ = ["no_bound_if_interrupted", "reverse_interrupted"]

logger = logging.getLogger("pymc_bdmc")


@contextmanager
def no_bound_if_interrupted(done: StepCounter, n_steps: int | Callable[[], int],
                            algorithm: str = "AIS"):
    """Re-raise Ctrl-C before the forward run reaches beta = 1, saying that nothing is valid.

    Parameters
    ----------
    done : StepCounter
        Steps done per phase (``"forward"`` once the forward run has started).
    n_steps : int or callable
        Steps of the forward run, for the message (a callable where the pilot may still change
        them, read when the interrupt comes).
    algorithm : str, default "AIS"
        Name of the forward algorithm, for the message.

    Yields
    ------
    None
    """
    try:
        yield
    except KeyboardInterrupt:
        total = n_steps() if callable(n_steps) else n_steps
        where = (f"during forward {algorithm} at step {done['forward']} of {total}"
                 if "forward" in done else "during pilot tuning")
        logger.warning("Interrupted %s: no bound is valid before the forward run reaches "
                       "beta = 1, so nothing is returned.", where)
        raise


def reverse_interrupted(run: str, unit: str, reached: int, total: int) -> str:
    """Warn that a reverse run was interrupted; return the note stored in the result.

    Parameters
    ----------
    run : str
        E.g. ``"reverse AIS"``.
    unit : str
        E.g. ``"step"``.
    reached, total : int
        Where the run stopped.

    Returns
    -------
    str
        The value of ``evidence.attrs["interrupted"]``.
    """
    logger.warning(
        "Interrupted during %s (%s %d of %d). Returning the finished forward run: `lower` is a "
        "valid stochastic lower bound; `upper` and `gap` are NaN.", run, unit, reached, total,
    )
    return f"{run} at {unit} {reached} of {total}; upper bound and gap not computed"
