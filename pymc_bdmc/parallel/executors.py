"""Where chains run: this process, local worker processes, or a user's executor or Dask cluster.

Everything is reduced to one interface, ``submit(fn, *args) -> future`` with ``future.result()``,
which :class:`concurrent.futures.Executor` and :class:`dask.distributed.Client` both provide.
Local pools are kept for the life of the process and reused across calls, so their workers
compile a model once, not once per call.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from pymc_bdmc.errors import BDMCInputError

__all__ = ["Workers", "local_pool", "mp_context", "resolve_workers", "shutdown_pools"]

logger = logging.getLogger(__name__)

_POOLS: dict[int, ProcessPoolExecutor] = {}


def mp_context():
    """Like PyMC: forkserver where available (fork is unsafe once threads exist).

    The server imports this package once, so workers fork with PyMC already imported. (Not
    ``__main__``: an unguarded script would run inside the server.) This has no effect if this
    process's forkserver was already started by someone else.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["pymc_bdmc"])
    return context


def _limit_blas_threads(threads: int) -> None:
    # Each worker's BLAS would otherwise start one thread per core: 2 workers x 2 threads on
    # 2 cores ran a BLAS-bound model 2.5x slower than one process (benchmarks/scaling.py).
    from threadpoolctl import threadpool_limits  # a PyMC dependency

    threadpool_limits(limits=threads, user_api="blas")


def local_pool(cores: int) -> ProcessPoolExecutor:
    """A pool of ``cores`` local worker processes, created once and reused.

    Each worker's BLAS gets its share of the machine's cores (at least one thread).
    """
    pool = _POOLS.get(cores)
    if pool is None or getattr(pool, "_broken", False):
        threads = max(1, (os.cpu_count() or 1) // cores)
        pool = ProcessPoolExecutor(max_workers=cores, mp_context=mp_context(),
                                   initializer=_limit_blas_threads, initargs=(threads,))
        _POOLS[cores] = pool
    return pool


@atexit.register
def shutdown_pools() -> None:
    """Stop the local worker pools (also done at interpreter exit)."""
    while _POOLS:
        _, pool = _POOLS.popitem()
        pool.shutdown(wait=False, cancel_futures=True)


def _is_dask_client(executor) -> bool:
    return type(executor).__module__.split(".")[0] == "distributed" and hasattr(
        executor, "scheduler_info"
    )


@dataclass(frozen=True)
class Workers:
    """Resolved place to run chains.

    Attributes
    ----------
    n_workers : int
        Parallel slots; 1 with ``submit`` None means "in this process".
    submit : callable or None
        ``submit(fn, *args) -> future`` for remote execution.
    description : str
        For logs and result attributes.
    """

    n_workers: int
    submit: Callable[..., Any] | None
    description: str

    @property
    def local(self) -> bool:
        """Whether chains run in this process."""
        return self.submit is None


IN_PROCESS = Workers(1, None, "this process")


def resolve_workers(cores: int | None, executor=None) -> Workers:
    """Turn the user's ``cores`` / ``executor`` arguments into :class:`Workers`.

    Parameters
    ----------
    cores : int or None
        Local worker processes; ``None`` means all cores (``os.cpu_count()``).
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Overrides ``cores``.
    """
    if executor is not None:
        if _is_dask_client(executor):
            info = executor.scheduler_info()
            n = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()) or 1

            def submit(fn, *args):
                # pure=False: tasks with equal arguments must still run (and never be cached).
                return executor.submit(fn, *args, pure=False)

            return Workers(n, submit, f"Dask cluster ({n} worker threads)")
        if isinstance(executor, Executor):
            n = getattr(executor, "_max_workers", None) or os.cpu_count() or 1
            return Workers(n, executor.submit, f"{type(executor).__name__} ({n} workers)")
        raise BDMCInputError(
            "`executor` must be a concurrent.futures.Executor or a dask.distributed.Client, "
            f"got {type(executor).__name__}."
        )
    if cores is None:
        cores = os.cpu_count() or 1
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise BDMCInputError(f"`cores` must be a positive integer or None, got {cores!r}.")
    if cores == 1:
        return IN_PROCESS
    return Workers(cores, local_pool(cores).submit, f"{cores} local processes")
