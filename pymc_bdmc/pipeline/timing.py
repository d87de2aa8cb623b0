"""Where a call's time goes: named stages, timed where they run, recorded in the result.

The driver opens a clock per call (:func:`call_clock`); the stages time themselves with
:func:`timed` (compile, simulate, pilot, the pilot's fitted paths and equilibrations, timing the
kernels, the forward and reverse runs), and the result's ``evidence`` attributes get one
``time_<stage>`` per stage, summed over a length search's attempts. A search's ``max_time``
counts the call's wall time less its compilation (:func:`budget_clock`).
"""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["budget_clock", "call_clock", "peak_memory_mb", "timed"]

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


def budget_clock() -> float:
    """``time.perf_counter()`` less the current call's compilation so far: a search's clock.

    A search's ``max_time`` counts on it: what compiling costs depends on this machine's caches
    (tens of seconds cold, about one warm), not on the model, and a cold call must run the same
    search as a warm one with the same seed. At the call's start (no compilation yet) it reads
    as ``time.perf_counter()``.
    """
    clock = _CLOCK.get()
    return time.perf_counter() - (0.0 if clock is None else clock.get("compile", 0.0))


def peak_memory_mb() -> tuple[float, float]:
    """Peak resident memory (MB) of this process, and of its largest finished child process.

    Both are high-water marks since the process started (``getrusage``), not of one call alone;
    workers that are still alive (a reused pool) are not counted until they end.
    """
    scale = 1.0 / 2**20 if sys.platform == "darwin" else 1.0 / 2**10  # bytes on macOS, KiB
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale
    return float(own), float(children)
