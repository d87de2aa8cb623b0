"""Batched compilations' choices kept on disk, so that a later one loads its function directly.

:func:`~pymc_bdmc.model.batching.compile_batched` vectorizes a per-chain graph or loops over
chains around it, then checks its choice against the per-chain graph before use. Where the
function's rewritten graph is already on disk (:mod:`~pymc_bdmc.model.rewrite_cache`), that
work (vectorizing, building the loop's inner graph, keying the result, compiling the reference
and calling both) is most of what a compilation costs: a tenth to half a second a model.

The choice is a deterministic function of the per-chain graph, of the points and data it was
checked at, of the versions and flags (:func:`~pymc_bdmc.model.rewrite_cache.environment`) and of
the code that chooses (``batching.py``, whose source enters the key). So once made, it is
recorded beside the rewritten graphs (:func:`note_choice`), and a later compilation of the same
graph, at the same points and on the same data, links the recorded rewritten graph directly
(:func:`load_choice`): the same final graph, so the same function and the same numbers to the
last bit. Anything missing or unreadable only means the choice is made again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pymc_bdmc.model import rewrite_cache

__all__ = ["ChoiceRecord", "choice_record", "load_choice", "note_choice"]

logger = logging.getLogger("pymc_bdmc.model.density")

_FORMAT = 1


@functools.cache
def _chooser_digest() -> str:
    """Digest of the code that makes the choice: a change to it makes every record stale.

    Where the source cannot be read (an installation without it), the package's version stands
    in for it (``rewrite_cache.environment`` holds it too).
    """
    digest = hashlib.sha256()
    try:
        for module in ("batching.py", "native_batching.py"):
            digest.update(Path(__file__).with_name(module).read_bytes())
    except OSError:
        return "unread"
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class ChoiceRecord:
    """Where a batched compilation's choice is recorded, and the graph's shared variables.

    ``shared`` are the per-chain graph's shared variables in
    :func:`~pymc_bdmc.model.rewrite_cache.graph_key`'s order: the record names the batched
    function's own by their positions here.
    """

    path: Path
    shared: list


def choice_record(inputs, outputs, checked_at, options: str) -> ChoiceRecord | None:
    """Return where the choice for ``outputs(inputs)`` checked at ``checked_at`` is recorded.

    ``checked_at`` are the arrays the choice was checked with (points, values of further
    inputs, the coordinates the checks may move); the shared variables' current values enter
    the key too. ``options`` describes whatever else the caller passed to the compilation.
    None where nothing is recorded: the cache is off, or the graph has no key.
    """
    if not rewrite_cache.cache_enabled():
        return None
    mode = rewrite_cache.hot_mode()
    described = rewrite_cache.graph_key(
        list(inputs), list(outputs),
        f"{rewrite_cache.environment(mode)};batched;format={_FORMAT};"
        f"chooser={_chooser_digest()};{options}")
    if described is None:
        return None
    key, shared = described
    digest = hashlib.sha256(key.encode())
    for value in (*checked_at, *(variable.get_value(borrow=True) for variable in shared)):
        array = np.ascontiguousarray(value)
        digest.update(f"{array.dtype.str}{array.shape};".encode())
        digest.update(array.tobytes())
    directory = Path(rewrite_cache.CACHE_DIR) / "batched"
    return ChoiceRecord(directory / f"{digest.hexdigest()[:40]}.json", shared)


def load_choice(record: ChoiceRecord | None, inputs, **kwargs):
    """Return ``(function, batching)`` as recorded at ``record``; None where it cannot be.

    ``inputs`` are the batched function's inputs (the batch of rows first). Call under the
    compile lock.
    """
    if record is None or not record.path.exists():
        return None
    try:
        choice = json.loads(record.path.read_text())
        shared = [record.shared[position] for position in choice["shared"]]
        fn = rewrite_cache.load_rewritten(choice["record"], inputs, shared, **kwargs)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
        logger.debug("Recorded batching choice unusable (%s); choosing again.", err)
        return None
    if fn is None:
        return None
    fn.trust_input = True
    logger.debug("Batching choice %r loaded from the cache (%s).", choice["batching"],
                 record.path.name)
    return fn, choice["batching"]


def note_choice(record: ChoiceRecord | None, fn, batching: str) -> None:
    """Record that ``fn`` (kept by the rewrite cache, or nothing is recorded) was the choice."""
    kept = None if record is None else rewrite_cache.rewrite_record(fn)
    if kept is None:
        return
    key, shared = kept
    position = {id(variable): j for j, variable in enumerate(record.shared)}
    if any(id(variable) not in position for variable in shared):
        return
    choice = {"batching": batching, "record": key,
              "shared": [position[id(variable)] for variable in shared]}
    try:
        rewrite_cache.write_record(record.path, json.dumps(choice).encode())
    except OSError as err:
        logger.debug("Batching choice not recorded (%s).", err)
