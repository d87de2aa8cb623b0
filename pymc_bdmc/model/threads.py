"""A second core inside one batched density call: compiled code that releases the GIL, split rows.

A model whose chains each factorize a matrix of their own (a latent GP's Cholesky) is compiled as
a loop over chains (``batching == "blockwise"``, :mod:`pymc_bdmc.model.batching`): every row is
the same per-chain function, so a row's values cannot depend on which rows share the call
(checked when compiled). :class:`RowSplit` evaluates the second half of a large enough batch in
a helper thread while this thread evaluates the first, and joins them: the same numbers to the
last bit, in less time. It runs only inside a call that may use more than one core
(:func:`density_threads`), never in worker processes, whose chains already share the cores.

Numba code holds Python's GIL unless compiled to release it, so the densities' mode links with
:class:`GilReleasingNumbaLinker`: the same code, released around each call, cached by PyTensor
under keys of its own (:func:`gil_releasing`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
from pytensor.compile.mode import Mode
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
from pytensor.link.numba.dispatch.basic import numba_njit
from pytensor.link.numba.linker import NumbaLinker

__all__ = ["MIN_SPLIT_ROWS", "GilReleasingNumbaLinker", "RowSplit", "density_threads",
           "gil_releasing"]

#: Batches of fewer rows are evaluated in one piece (a thread's hand-off costs tens of us).
MIN_SPLIT_ROWS = 8
#: Suffix of the cache keys of functions compiled to release the GIL.
_KEY_SUFFIX = "_nogil"

#: Threads a batched density call may use in this context (set by each sampling call).
_THREADS: ContextVar[int] = ContextVar("pymc_bdmc_density_threads", default=1)

_POOL: ThreadPoolExecutor | None = None
_POOL_PID: int | None = None
_POOL_LOCK = threading.Lock()


class GilReleasingNumbaLinker(NumbaLinker):
    """PyTensor's Numba linker, whose compiled functions release the GIL while they run.

    The compiled code is the same; its cache key gets a suffix of its own, so that a function
    cached before by PyTensor's own linker (which holds the GIL) is never loaded in its place.
    """

    def jit_compile(self, fn_and_cache):
        """Compile the graph's function as PyTensor does, with ``nogil=True``."""
        fn, cache_key = fn_and_cache
        key = CACHED_SRC_FUNCTIONS.get(fn.py_func)
        if key is not None and not key.endswith(_KEY_SUFFIX):
            CACHED_SRC_FUNCTIONS[fn.py_func] = key + _KEY_SUFFIX
        return numba_njit(fn.py_func, final_function=True, cache=cache_key is not None,
                          nogil=True)


def gil_releasing(mode: Mode) -> Mode:
    """``mode`` linked by :class:`GilReleasingNumbaLinker` where it links with PyTensor's Numba.

    Any other linker (a user's mode, the C or Python backends) is kept as it is.
    """
    if type(mode.linker) is not NumbaLinker:
        return mode
    return Mode(linker=GilReleasingNumbaLinker(), optimizer=mode.provided_optimizer,
                db=mode.optdb)


@contextmanager
def density_threads(n: int) -> Iterator[None]:
    """Let batched density calls in this context use ``n`` threads (1 or 2)."""
    token = _THREADS.set(max(1, min(int(n), 2)))
    try:
        yield
    finally:
        _THREADS.reset(token)


def _pool() -> ThreadPoolExecutor:
    """Return the helper thread's pool, started once per process (again after a fork)."""
    global _POOL, _POOL_PID
    with _POOL_LOCK:
        if _POOL is None or _POOL_PID != os.getpid():
            _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pymc_bdmc_density")
            _POOL_PID = os.getpid()
        return _POOL


class RowSplit:
    """A compiled batched function of one batch of rows, split across two threads when it pays.

    Parameters
    ----------
    fn : pytensor Function
        Compiled from one batch input, the rows (any further inputs are shared variables), by
        a loop over rows, so that each row's values do not depend on the batch.

    Only where ``fn`` is Numba code that releases the GIL; otherwise calls go to ``fn`` as
    they are (:meth:`splits`).
    """

    def __init__(self, fn):
        self.fn = fn
        vm = getattr(fn, "vm", None)
        jitted = getattr(vm, "jit_fn", None)
        cells = getattr(vm, "inputs", None)
        releases = bool(getattr(jitted, "targetoptions", {}).get("nogil"))
        # The compiled function is pure: called directly on the rows and the shared variables'
        # current values, it shares no storage with another call (``fn``'s storage is not
        # thread-safe).
        one_batch = sum(not spec.implicit for spec in fn.maker.inputs) == 1
        self._jitted = (jitted if releases and one_batch and cells is not None
                        and len(fn.maker.inputs) == len(cells) else None)
        self._shared_cells = list(cells[1:]) if self._jitted is not None else []

    @property
    def splits(self) -> bool:
        """Whether calls in a context allowing two threads are split."""
        return self._jitted is not None

    def __call__(self, x: np.ndarray):
        """``fn(x)``: the outputs for the rows of ``x``, each of them stacked over rows."""
        if (self._jitted is None or x.shape[0] < MIN_SPLIT_ROWS or _THREADS.get() < 2):
            return self.fn(x)
        shared = [cell[0] for cell in self._shared_cells]
        half = x.shape[0] // 2
        second = _pool().submit(self._jitted, x[half:], *shared)
        first = self._jitted(x[:half], *shared)
        return [np.concatenate([a, b]) for a, b in zip(first, second.result(), strict=True)]
