"""Where a call's time goes: named stages, timed where they run, recorded in the result.

The driver opens a clock per call (:func:`call_clock`); the stages time themselves with
:func:`timed` (compile, simulate, pilot, the pilot's fitted paths and equilibrations, timing the
kernels, the forward and reverse runs), and the result's ``evidence`` attributes get one
``time_<stage>`` per stage, summed over a length search's attempts.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["call_clock", "timed"]

_CLOCK: ContextVar[dict | None] = ContextVar("pymc_bdmc_clock", default=None)


@contextmanager
def call_clock():
    """Collect the stage times of the code inside; yield the dict they are added to."""
    clock: dict[str, float] = {}
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextmanager
def timed(stage: str):
    """Add the time spent inside to ``stage`` of the current call's clock (if any)."""
    clock = _CLOCK.get()
    start = time.perf_counter()
    try:
        yield
    finally:
        if clock is not None:
            clock[stage] = clock.get(stage, 0.0) + time.perf_counter() - start
