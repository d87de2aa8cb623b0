"""Keep freed memory in the process's heap while chains run (glibc's ``malloc`` only).

Every call of a compiled batched density allocates its intermediates afresh and frees them at
the end. glibc's ``malloc`` hands blocks above its ``mmap`` threshold back to the kernel when
they are freed, and trims the top of its heap once more than its trim threshold is free there;
both thresholds start at 128 KiB and only grow as far as the largest single block freed. A
model whose evaluation holds several such blocks at once (an 80-point latent GP at 32 chains:
its Cholesky factors and their gradients, ``(32, 80, 80)`` arrays of 1.6 MB each) then gets its
memory back from the kernel as fresh, zeroed pages on every call. Measured (one BLAS thread,
``tq.latent_gp(80)``): 11-17 ms per 32-chain call, against 7 ms with the heap kept; ``python3
benchmarks/profile_walk.py --model gp --length 80 --steps 100`` took 27.9 s instead of 41.0 s,
with the same result to the last digit.

:func:`retain_freed_memory` sets both thresholds to the ceilings of glibc's own dynamic
adjustment (32 MiB for ``mmap``, twice that for trimming), once per process: in this package's
local worker processes, and in the user's process when a sampling function starts. It changes
no result, only where freed memory waits: a process keeps up to 64 MiB of freed heap instead of
returning it. It is skipped where the C library is not glibc, where the user already tuned
``malloc`` through its environment variables (``MALLOC_*_``, ``GLIBC_TUNABLES``), and where
``PYMC_BDMC_RETAIN_HEAP=0``. Dask workers are left alone: their memory policy is Dask's.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform

__all__ = ["MMAP_THRESHOLD", "OPT_OUT_VARIABLE", "TRIM_THRESHOLD", "retain_freed_memory"]

logger = logging.getLogger(__name__)

#: Blocks up to this size come from the heap (glibc's ``DEFAULT_MMAP_THRESHOLD_MAX`` on 64 bits).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: The heap is trimmed only when more than this is free at its top (glibc: twice the above).
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD
#: Set to ``0`` to keep glibc's default behaviour.
OPT_OUT_VARIABLE = "PYMC_BDMC_RETAIN_HEAP"

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                  "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES")

_done = False


def retain_freed_memory() -> bool:
    """Raise glibc's ``mmap`` and trim thresholds for this process (once; see the module).

    Returns
    -------
    bool
        Whether this process now runs with the raised thresholds.
    """
    global _done
    if _done:
        return True
    if os.environ.get(OPT_OUT_VARIABLE, "1") == "0":
        return False
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success. The trim threshold goes first: the larger mmap threshold
    # is only useful with a heap that is not trimmed after every call.
    if mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
        return False
    if mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) != 1:
        return False
    _done = True
    logger.debug("glibc malloc: mmap threshold %d, trim threshold %d bytes.", MMAP_THRESHOLD,
                 TRIM_THRESHOLD)
    return True
