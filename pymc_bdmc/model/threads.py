"""A second core inside one batched density call: compiled code that releases the GIL, split rows.

Where a batched density's rows cannot depend on which rows share the call, :class:`RowSplit`
evaluates the second half of a large call in a helper thread while this thread evaluates the
first, and joins them: the same numbers to the last bit, in less time. That holds for a loop
over chains (``batching == "blockwise"``, :mod:`pymc_bdmc.model.batching`: each row is the same
per-chain function, as checked when compiled) and for a vectorized graph that calls neither
BLAS nor LAPACK and whose validation rows agree whole and split (:func:`row_split`). Calls
split only inside a sampling call that may use more than one core (:func:`density_threads`),
never in worker processes, whose chains already share the cores.

Numba code holds Python's GIL unless compiled to release it, so the densities' mode links with
:class:`GilReleasingNumbaLinker`: the same code, released around each call, cached by PyTensor
under keys of its own (:func:`gil_releasing`).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
from pytensor.compile.mode import Mode
from pytensor.link.numba.linker import NumbaLinker  # does not import Numba (0.3 s)

from pymc_bdmc.model.inner_graphs import nodes_within

__all__ = ["MIN_SPLIT_ROWS", "SPLIT_SECONDS", "GilReleasingNumbaLinker", "RowSplit",
           "density_threads", "gil_releasing", "row_split"]

#: Batches of fewer rows are evaluated in one piece.
MIN_SPLIT_ROWS = 8
#: A call is split where its rows would take at least this long in one piece.
SPLIT_SECONDS = 3e-4
#: Unsplit calls timed before calls are split (the fastest one is the estimate).
_TIMED_CALLS = 3
#: Operations that call BLAS or LAPACK (matrix products, solves, factorizations), by name or
#: by the module that defines them.
_BLAS_OP_NAMES = re.compile(r"Dot|Gemm|Gemv|Ger|MatMul|Matmul|Solve|Cholesky|Kron")
_BLAS_OP_MODULES = re.compile(r"\.(blas|linalg|slinalg|nlinalg|sparse)\b")
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
        # Imported here: they import Numba, which `import pymc_bdmc` does not need.
        from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
        from pytensor.link.numba.dispatch.basic import numba_njit

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
        Compiled from one batch input, the rows (any further inputs are shared variables),
        such that each row's values do not depend on the batch (:func:`row_split`).

    Only where ``fn`` is Numba code that releases the GIL (otherwise :attr:`splits` is False and
    calls go to ``fn``). A call is split where its rows would take at least
    :data:`SPLIT_SECONDS` in one piece, judged from the fastest of the first unsplit calls: a
    thread's hand-off costs tens of microseconds. The split is exact, so this timing decides
    the speed only, never a number.
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
        self._row_seconds: list[float] = []  # per row, of the first unsplit calls

    @property
    def splits(self) -> bool:
        """Whether large calls in a context allowing two threads are split."""
        return self._jitted is not None

    def __call__(self, x: np.ndarray):
        """``fn(x)``: the outputs for the rows of ``x``, each of them stacked over rows."""
        rows = x.shape[0]
        if self._jitted is None or rows < MIN_SPLIT_ROWS or _THREADS.get() < 2:
            return self.fn(x)
        if len(self._row_seconds) < _TIMED_CALLS:
            started = time.perf_counter()
            outputs = self.fn(x)
            self._row_seconds.append((time.perf_counter() - started) / rows)
            return outputs
        if rows * min(self._row_seconds) < SPLIT_SECONDS:
            return self.fn(x)
        return self.split(x)

    def split(self, x: np.ndarray, at: int | None = None):
        """``fn(x)`` with the rows from ``at`` (default: half of them) in the helper thread."""
        shared = [cell[0] for cell in self._shared_cells]
        at = x.shape[0] // 2 if at is None else at
        second = _pool().submit(self._jitted, x[at:], *shared)
        first = self._jitted(x[:at], *shared)
        return [np.concatenate([a, b]) for a, b in zip(first, second.result(), strict=True)]


def _uses_blas(fn) -> bool:
    """Whether ``fn``'s graph (inner graphs too) calls BLAS or LAPACK, which may block by rows.

    A row's value from a matrix product or a solve with many right-hand sides can depend on how
    many rows share the call (kernels for whole blocks of rows and for the remainder sum in
    other orders).
    """
    for node in nodes_within(fn.maker.fgraph):
        for op in (node.op, getattr(node.op, "core_op", None)):
            kind = type(op)
            if op is not None and (_BLAS_OP_NAMES.search(kind.__name__)
                                   or _BLAS_OP_MODULES.search(kind.__module__)):
                return True
    return False


def row_split(fn, batching: str, points: np.ndarray) -> RowSplit | None:
    """Return a :class:`RowSplit` of a batched density, or None where rows may depend on the batch.

    A loop over chains (``"blockwise"``) runs one per-chain function on each row. A vectorized
    graph qualifies where it calls neither BLAS nor LAPACK (:func:`_uses_blas`) and the
    validation ``points`` (several rows) give the same values to the bit whole and split at two
    places.
    """
    wrapped = RowSplit(fn)
    if not wrapped.splits:
        return None
    if batching == "blockwise":
        return wrapped
    if batching != "vectorized" or len(points) < 3 or _uses_blas(fn):
        return None
    rows = np.concatenate([points, points[::-1], points[:1]])
    whole = [np.array(out, copy=True) for out in fn(rows)]
    for at in (len(rows) // 2, len(rows) // 2 + 1):
        for out, joined in zip(whole, wrapped.split(rows, at), strict=True):
            if not np.array_equal(out, joined, equal_nan=True):
                return None
    return wrapped
