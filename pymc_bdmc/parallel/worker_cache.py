"""What a worker builds once and reuses: per process, per thread, a few recent entries.

Workers receive a pickled recipe (compiled densities, or PyMC step methods) with a digest of it.
Building one costs a compilation, so each worker keeps the last few it built and reuses them for
later tasks of the same call and for later calls on the same model. Entries are kept per thread
as well, because compiled functions and step methods are not thread-safe (threaded executors run
several tasks in one process). Building happens outside the cache's lock; compilation itself is
serialized by :data:`pymc_bdmc.model.density.COMPILE_LOCK`.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["WorkerCache", "quiet_pymc_in_workers"]

T = TypeVar("T")


class WorkerCache(Generic[T]):
    """Least-recently-used cache keyed by ``(digest, thread)``.

    Parameters
    ----------
    size : int
        Entries kept per process (over all threads).
    """

    def __init__(self, size: int = 4):
        self._entries: OrderedDict[tuple[str, int], T] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], T]) -> T:
        """The entry of ``key`` for this thread, built with ``build()`` if missing."""
        full_key = (key, threading.get_ident())
        with self._lock:
            entry = self._entries.get(full_key)
            if entry is not None:
                self._entries.move_to_end(full_key)
                return entry
        entry = build()
        with self._lock:
            self._entries[full_key] = entry
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return entry


def quiet_pymc_in_workers() -> None:
    """Silence PyMC's informational logging in worker processes (never in the user's own)."""
    if multiprocessing.parent_process() is not None:
        logging.getLogger("pymc").setLevel(logging.WARNING)
