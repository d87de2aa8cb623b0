"""Keep the objects a call starts with out of Python's full garbage collections while it runs.

A process that imported PyMC, PyTensor, Numba and ArviZ and built a model holds some 300,000
objects the cyclic garbage collector tracks. Compiling and running a call allocates enough that
a full collection often comes due during it, and each one walks all of them (about 0.2 s),
although nothing the call did made them garbage. :func:`objects_frozen` moves them to the
collector's permanent generation (``gc.freeze``) for the call and back (``gc.unfreeze``) when it
ends, however it ends: the call's own objects are collected as usual. It changes no number,
only when the collector looks at what existed before the call.

Left alone where the collector is disabled, or where objects were frozen since this module was
imported (by the user, or by a call running in another thread, which then unfreezes them).
``gc.unfreeze`` returns every frozen object to the collector, so the few an interpreter may
freeze as it starts (375 in CPython 3.12, none in 3.13) are collected normally after a call.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["objects_frozen"]

#: Objects frozen before any call of this package (by the interpreter as it starts).
_frozen_before = gc.get_freeze_count()


@contextmanager
def objects_frozen() -> Iterator[bool]:
    """Freeze the objects tracked by the garbage collector for the block; unfreeze after it.

    Yields
    ------
    bool
        Whether this block froze them (and unfreezes them when it ends).
    """
    global _frozen_before
    if not gc.isenabled() or gc.get_freeze_count() != _frozen_before:
        yield False
        return
    gc.freeze()
    try:
        yield True
    finally:
        gc.unfreeze()
        _frozen_before = 0
