"""What compiling a model's kernels cost on this machine, remembered across sessions.

PyTensor keeps compiled functions on disk, so the second compilation of a model's densities
takes a second where the first took tens: measured on four batched random walks (164
coordinates), 26 s with empty caches and 1.1 s for the same model rebuilt later. Whether the
fused HMC kernel pays for its own compilation was judged from the model's compilation time
(:func:`pymc_bdmc.pipeline.execution.use_fused_kernel`), and a warm cache made that look
nearly free: the kernel's first compilation then made a run predicted at 18 s take 60 s.

So this module keeps, per graph (:func:`graph_signature`: its operations, types and constants,
not the data), the longest compilation measured, and which forms of the fused kernel have been
compiled on this machine (and are therefore on PyTensor's disk cache). Records live beside
PyTensor's own caches (:data:`RECORD_DIR`), one small file each, and are advisory: a missing or
unreadable record only means "unknown", never an error, and they affect how a run is executed,
never its results.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytensor
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import io_toposort

__all__ = ["RECORD_DIR", "fused_form", "graph_signature", "kernel_compiled",
           "mark_kernel_compiled", "record_compile_seconds"]

#: Where the records are kept (``PYMC_BDMC_COMPILE_RECORDS`` overrides it).
RECORD_DIR = Path(os.environ.get("PYMC_BDMC_COMPILE_RECORDS",
                                 Path(pytensor.config.base_compiledir) / "pymc_bdmc_records"))


def graph_signature(outputs, extra: str = "") -> str:
    """Return a hash of a graph's structure: operations, types and constants (not shared values).

    Two builds of the same model (say one per data set, or a notebook cell run again) share
    it; a different model, or the same one with another constant, does not. ``extra`` (e.g.
    the compilation mode) is hashed too.
    """
    digest = hashlib.sha256(extra.encode())
    outputs = list(outputs)
    for node in io_toposort([], outputs):
        digest.update(str(node.op).encode())
        for variable in node.inputs:
            digest.update(str(variable.type).encode())
            if isinstance(variable, Constant):
                digest.update(np.asarray(variable.data).tobytes())
    for variable in outputs:
        digest.update(str(variable.type).encode())
    return digest.hexdigest()[:32]


def record_compile_seconds(signature: str, seconds: float) -> float:
    """Record ``seconds`` for ``signature``; return the longest recorded (a cold compilation)."""
    path = RECORD_DIR / f"{signature}.seconds"
    try:
        recorded = float(path.read_text())
    except (OSError, ValueError):
        recorded = 0.0
    if seconds > recorded:
        _write(path, repr(float(seconds)))
    return max(float(seconds), recorded)


def fused_form(*, dense: bool = False, base: bool = False, principal: bool = False) -> str:
    """Return the record's name of one form of the fused HMC kernel."""
    return f"hmc-dense{int(dense)}-base{int(base)}-principal{int(principal)}"


def kernel_compiled(signature: str, form: str) -> bool:
    """Whether the compiled kernel ``form`` of the graph ``signature`` was built on this machine."""
    return (RECORD_DIR / f"{signature}-{form}.compiled").exists()


def mark_kernel_compiled(signature: str, form: str) -> None:
    """Remember that kernel ``form`` of ``signature`` is compiled (and so on PyTensor's cache)."""
    _write(RECORD_DIR / f"{signature}-{form}.compiled", "")


def _write(path: Path, text: str) -> None:
    # Atomic (another process may read it meanwhile); a read-only disk loses the record only.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError:
        pass
