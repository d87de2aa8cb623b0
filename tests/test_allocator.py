"""The process's malloc keeps freed memory while chains run (pymc_bdmc.parallel.allocator).

Each check runs in a fresh interpreter, since the setting is per process and made once.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

import pymc_bdmc.parallel.allocator as allocator

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the thresholds are glibc malloc's",
)

# Loads the module from its file (not the package, whose import takes seconds), then reports
# whether the setting was made and whether a live 16 MiB block sits in mmapped memory
# (mallinfo2's hblkhd) or in the heap.
_PROBE = """
import ctypes, importlib.util, json, sys
spec = importlib.util.spec_from_file_location("allocator", sys.argv[1])
allocator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocator)

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)
made = allocator.retain_freed_memory()
again = allocator.retain_freed_memory()
before = libc.mallinfo2().hblkhd
block = libc.malloc(16 * 1024 * 1024)
mapped = libc.mallinfo2().hblkhd - before
libc.free(block)
print(json.dumps({"made": made, "again": again, "mapped": mapped}))
"""


def _probe(**environment) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    env.pop(allocator.OPT_OUT_VARIABLE, None)
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", _PROBE, str(Path(allocator.__file__))],
                          capture_output=True, text=True, env=env, timeout=60, check=True)
    return json.loads(done.stdout)


def test_large_blocks_come_from_the_heap_once_set():
    report = _probe()
    assert report["made"] and report["again"]
    assert report["mapped"] == 0


def test_glibc_defaults_map_the_same_block():
    # Without the setting the same block is mmapped (and unmapped when freed): what the
    # setting avoids. This also shows that the probe can tell the two apart.
    report = _probe(**{allocator.OPT_OUT_VARIABLE: "0"})
    assert not report["made"]
    assert report["mapped"] >= 16 * 1024 * 1024


def test_a_users_own_malloc_settings_are_left_alone():
    report = _probe(MALLOC_TRIM_THRESHOLD_="65536")
    assert not report["made"]
    assert report["mapped"] >= 16 * 1024 * 1024
