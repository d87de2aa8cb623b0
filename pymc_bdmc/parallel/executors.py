"""Where chains run: this process, local worker processes, or a user's executor or Dask cluster.

Everything is reduced to one interface, ``submit(fn, *args) -> future`` with ``future.result()``,
which :class:`concurrent.futures.Executor` and :class:`dask.distributed.Client` both provide.
Local pools are kept for the life of the process and reused across calls, so their workers
compile a model once, not once per call.
"""

from __future__ import annotations

import atexit
import functools
import logging
import multiprocessing
import multiprocessing.context as mp_context_module
import os
import sys
import types
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.parallel.allocator import retain_freed_memory

__all__ = ["Workers", "local_cores", "local_pool", "mp_context", "resolve_workers",
           "shutdown_pools"]

logger = logging.getLogger(__name__)

_POOLS: dict[int, ProcessPoolExecutor] = {}


class _UserMainHidden:
    """Hide the user's ``__main__`` while a worker process is launched.

    ``spawn`` and ``forkserver`` workers re-import the parent's ``__main__`` (by path, or by
    module name under ``python -m``) before running anything, so an unguarded script would run
    again in every worker: its data loading, prints, file writes and sampling calls. Workers need
    nothing from it (models travel as pickled graphs, and ``cloudpickle`` carries a user's
    functions by value), so while a worker's start-up data are prepared ``__main__`` is a blank
    module, as in a notebook, and there is nothing to re-import.
    """

    def __enter__(self):
        self._main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")

    def __exit__(self, *exc_info):
        if self._main is None:
            del sys.modules["__main__"]
        else:
            sys.modules["__main__"] = self._main


@functools.cache
def _without_user_main(popen_class: type) -> type:
    class Popen(popen_class):
        def _launch(self, process_obj):
            with _UserMainHidden():
                super()._launch(process_obj)

    return Popen


class _SpawnWorker(mp_context_module.SpawnProcess):
    @staticmethod
    def _Popen(process_obj):
        if sys.platform == "win32":
            from multiprocessing.popen_spawn_win32 import Popen
        else:
            from multiprocessing.popen_spawn_posix import Popen
        return _without_user_main(Popen)(process_obj)


class _SpawnContext(mp_context_module.SpawnContext):
    Process = _SpawnWorker


if sys.platform != "win32":

    class _ForkServerWorker(mp_context_module.ForkServerProcess):
        @staticmethod
        def _Popen(process_obj):
            from multiprocessing.popen_forkserver import Popen

            return _without_user_main(Popen)(process_obj)

    class _ForkServerContext(mp_context_module.ForkServerContext):
        Process = _ForkServerWorker


def mp_context():
    """Start method for local workers; they never import or run the user's ``__main__``.

    Like PyMC, forkserver where available (fork is unsafe once threads exist), else spawn. Both
    would normally re-run an unguarded script in every worker; these contexts do not (see
    :class:`_UserMainHidden`). The fork server imports this package once, so workers fork with
    PyMC already imported. (The preload has no effect if this process's fork server was already
    started by someone else.)
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return _SpawnContext()
    from multiprocessing import forkserver

    context = _ForkServerContext()
    context.set_forkserver_preload(["pymc_bdmc"])
    # Started now, so that launching a worker hides ``__main__`` only for a moment.
    forkserver.ensure_running()
    return context


def _start_worker(threads: int) -> None:
    # Each worker's BLAS would otherwise start one thread per core: 2 workers x 2 threads on
    # 2 cores ran a BLAS-bound model 2.5x slower than one process (benchmarks/scaling.py).
    from threadpoolctl import threadpool_limits  # a PyMC dependency

    threadpool_limits(limits=threads, user_api="blas")
    retain_freed_memory()


def local_pool(cores: int) -> ProcessPoolExecutor:
    """A pool of ``cores`` local worker processes, created once and reused.

    Each worker's BLAS gets its share of the machine's cores (at least one thread), and its
    ``malloc`` keeps freed memory (:func:`~pymc_bdmc.parallel.allocator.retain_freed_memory`).
    """
    pool = _POOLS.get(cores)
    if pool is None or getattr(pool, "_broken", False):
        threads = max(1, (os.cpu_count() or 1) // cores)
        pool = ProcessPoolExecutor(max_workers=cores, mp_context=mp_context(),
                                   initializer=_start_worker, initargs=(threads,))
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


def local_cores(cores: int | None) -> int:
    """``cores`` as given (checked by its caller), or this machine's core count for None."""
    return (os.cpu_count() or 1) if cores is None else cores


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
    cores = local_cores(cores)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise BDMCInputError(f"`cores` must be a positive integer or None, got {cores!r}.")
    if cores == 1:
        return IN_PROCESS
    return Workers(cores, local_pool(cores).submit, f"{cores} local processes")
