"""Annealing schedules: inverse temperatures ``0 = beta_0 < ... < beta_T = 1``.

A schedule of ``n_steps`` annealing steps has ``n_steps + 1`` inverse temperatures. The
intermediate densities are ``log p(x) + beta_t * log p(y | x)`` (geometric averages of prior and
posterior).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.checks import check_positive_int

__all__ = ["geometric", "linear", "make_schedule", "sigmoid"]

ScheduleName = Literal["adaptive", "sigmoid", "linear", "geometric"]

#: Placed by the pilot run at equal thermodynamic length (see :mod:`pymc_bdmc.kernels.tuning`).
ADAPTIVE = "adaptive"


def linear(n_steps: int) -> np.ndarray:
    """Equally spaced inverse temperatures.

    Parameters
    ----------
    n_steps : int
        Number of annealing steps.

    Returns
    -------
    ndarray, shape (n_steps + 1,)
        ``0, 1/n_steps, ..., 1``.
    """
    return np.linspace(0.0, 1.0, check_positive_int(n_steps, "n_steps") + 1)


def geometric(n_steps: int, start: float = 1e-5) -> np.ndarray:
    """``0`` followed by ``n_steps`` geometrically spaced values from ``start`` to 1.

    Parameters
    ----------
    n_steps : int
        Number of annealing steps.
    start : float, default 1e-5
        First non-zero inverse temperature, in (0, 1).

    Returns
    -------
    ndarray, shape (n_steps + 1,)
        ``[0, 1]`` when ``n_steps == 1``.
    """
    n_steps = check_positive_int(n_steps, "n_steps")
    if not 0 < start < 1:
        raise BDMCInputError(f"`start` of a geometric schedule must be in (0, 1), got {start}.")
    if n_steps == 1:
        return np.array([0.0, 1.0])
    return np.concatenate([[0.0], np.geomspace(start, 1.0, n_steps)])


def sigmoid(n_steps: int, delta: float = 4.0) -> np.ndarray:
    """The sigmoidal schedule of Grosse, Ghahramani & Adams (2015, §6.2).

    ``b_t = sigmoid(delta * (2 t / T - 1))`` rescaled so that ``beta_0 = 0`` and ``beta_T = 1``;
    it puts more intermediate distributions near both ends of the path.

    Parameters
    ----------
    n_steps : int
        Number of annealing steps.
    delta : float, default 4.0
        Steepness; larger values crowd more temperatures near 0 and 1.

    Returns
    -------
    ndarray, shape (n_steps + 1,)
        From exactly 0 to exactly 1.
    """
    n_steps = check_positive_int(n_steps, "n_steps")
    if not delta > 0:
        raise BDMCInputError(f"`delta` of a sigmoid schedule must be positive, got {delta}.")
    raw = 1.0 / (1.0 + np.exp(-delta * (2.0 * np.arange(n_steps + 1) / n_steps - 1.0)))
    beta = (raw - raw[0]) / (raw[-1] - raw[0])
    beta[0], beta[-1] = 0.0, 1.0
    return beta


_NAMED = {"sigmoid": sigmoid, "linear": linear, "geometric": geometric}


def make_schedule(schedule: ScheduleName | Sequence[float] | np.ndarray,
                  n_steps: int | None) -> np.ndarray:
    """Resolve a schedule name or validate a user array of inverse temperatures.

    Parameters
    ----------
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like
        A named schedule of ``n_steps`` steps, or the inverse temperatures themselves. For
        ``"adaptive"`` a linear placeholder is returned; the pilot run replaces it.
    n_steps : int or None
        Number of annealing steps; must match ``len(schedule) - 1`` when an array is given.

    Returns
    -------
    ndarray
        Non-decreasing inverse temperatures from exactly 0 to exactly 1.
    """
    if isinstance(schedule, str):
        if schedule not in (*_NAMED, ADAPTIVE):
            raise BDMCInputError(
                f"Unknown schedule {schedule!r}; use one of {sorted([*_NAMED, ADAPTIVE])} or an "
                "array of betas."
            )
        if n_steps is None:
            raise BDMCInputError("`n_steps` is required with a named schedule.")
        if schedule == ADAPTIVE:  # placeholder of the right length; the pilot places the betas
            return linear(n_steps)
        return _NAMED[schedule](n_steps)

    beta = np.asarray(schedule, dtype=float)
    if beta.ndim != 1 or beta.size < 2:
        raise BDMCInputError("A schedule array must be 1-D with at least two values (0 and 1).")
    if n_steps is not None and n_steps != beta.size - 1:
        raise BDMCInputError(
            f"`n_steps`={n_steps} does not match the schedule array ({beta.size - 1} steps)."
        )
    if not np.all(np.isfinite(beta)):
        raise BDMCInputError("The schedule contains non-finite values.")
    if beta[0] != 0.0 or beta[-1] != 1.0:
        raise BDMCInputError(
            f"A schedule must start at exactly 0 and end at exactly 1, got {beta[0]} ... {beta[-1]}."
        )
    if np.any(np.diff(beta) < 0):
        raise BDMCInputError("The schedule must be non-decreasing (monotone in beta).")
    return beta.copy()
