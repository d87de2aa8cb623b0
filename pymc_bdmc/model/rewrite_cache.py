"""Rewritten graphs kept on disk, so that a model's functions skip PyTensor's rewrites next time.

Compiling a model's batched density with Numba spends most of its time in PyTensor's graph
rewrites (canonicalisation, stabilisation, fusion, in-place): 0.3-1 s a graph on this
project's suite models, where the compiled code itself already comes from Numba's disk cache.
Rewriting is a deterministic function of the graph, so :func:`compile_function` keeps each
rewritten graph beside PyTensor's caches (:data:`CACHE_DIR`), under a key of the graph *before*
rewriting (:func:`graph_key`), and a later compilation of the same graph, in this process or
another, links the stored graph without rewriting it again. The function is the same: the same
final graph, so the same Numba code and the same numbers to the last bit.

The key is the graph's full structure: every operation (as pickled, so with all its
parameters), how the nodes are wired, each variable's type, the constants' values, the versions
of Python, PyTensor, PyMC, Numba, NumPy and this package, the compilation mode and the PyTensor
flags that steer rewriting. Shared variables (the observed data) enter by type only, so the
same model on other data of the same shape reuses its graph. A record that cannot be read, or a
graph the key cannot describe (free variables, random generators, updates), only means a
normal compilation.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import logging
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor
from pymc.pytensorf import compile as compile_pytensor
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.executor import Function
from pytensor.compile.mode import Mode, get_mode
from pytensor.compile.ops import DeepCopyOp
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, NominalVariable, Variable
from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.graph.rewriting.basic import SequentialGraphRewriter
from pytensor.graph.traversal import io_toposort
from pytensor.misc.frozendict import frozendict
from pytensor.tensor.sharedvar import TensorSharedVariable

from pymc_bdmc.model.inner_graphs import nodes_within
from pymc_bdmc.model.threads import gil_releasing
from pymc_bdmc.version import __version__

__all__ = ["CACHE_DIR", "HOT_MODE_EXCLUDES", "MAX_RECORDS", "MAX_RECORD_BYTES", "cache_enabled",
           "compile_function", "compiled_before", "compiled_marker", "environment", "graph_key",
           "hot_mode", "load_rewritten", "note_compiled", "rewrite_record", "write_record"]

logger = logging.getLogger("pymc_bdmc.model.density")

#: Where rewritten graphs are kept (``PYMC_BDMC_REWRITE_CACHE`` overrides it; ``off`` disables).
CACHE_DIR = Path(os.environ.get("PYMC_BDMC_REWRITE_CACHE",
                                Path(pytensor.config.base_compiledir) / "pymc_bdmc_rewrites"))

#: Graphs whose record would be larger (large constant data) are not kept.
MAX_RECORD_BYTES = 16 * 2**20
#: Past this many records, the least recently used tenth is removed.
MAX_RECORDS = 2000

_FORMAT = 1
# PyTensor flags that change what the rewrites produce.
_FLAGS = ("floatX", "cast_policy", "optimizer", "optimizer_including", "optimizer_excluding",
          "optimizer_requiring", "optdb__position_cutoff", "optdb__max_use_ratio",
          "numba__fastmath", "tensor__insert_inplace_optimizer_validate_nb")


def cache_enabled() -> bool:
    """Whether rewritten graphs are kept (``PYMC_BDMC_REWRITE_CACHE`` is not ``off``)."""
    return str(CACHE_DIR).lower() not in ("off", "0", "")


class _KeyPickler(pickle.Pickler):
    """Pickles operations for the key, with what is process-local in them left out.

    Variables inside operations lose their automatic names; inner graphs (an ``OpFromGraph``'s,
    a ``Scan``'s) are described by their own :func:`graph_key`, since a ``FunctionGraph``'s
    state holds timings and traversal-ordered bookkeeping; compiled functions an operation keeps
    are left out, and so are a ``frozendict``'s cached hash (set once it is hashed, absent from
    a graph unpickled in a helper or worker), the private attributes of an ``OpFromGraph`` and
    of variables
    (caches filled when asked for shapes, gradients or a constant's unique value, which would
    otherwise key one graph two ways in one process).
    """

    def reducer_override(self, obj):
        if isinstance(obj, OpFromGraph):
            state = {k: v for k, v in obj.__dict__.items()
                     if not k.startswith("_") or k == "_init_kwargs"}
            return object.__new__, (type(obj),), state
        if isinstance(obj, AbstractFunctionGraph):  # frozen ones too
            inner = graph_key(obj.inputs, obj.outputs)
            if inner is None:
                raise pickle.PicklingError("an inner graph the key cannot describe")
            return str, (f"inner graph {inner[0]}",)
        if isinstance(obj, Function):
            return str, ("compiled function",)
        if isinstance(obj, frozendict):  # by its items: not whether its hash was asked for
            return frozendict, (dict(obj),)
        # Nominal variables (inner graphs' inputs) are named by position already.
        if isinstance(obj, Variable) and not isinstance(obj, NominalVariable):
            state = {k: v for k, v in obj.__dict__.items()
                     if k not in ("auto_name", "tag") and not k.startswith("_")}
            return object.__new__, (type(obj),), state
        return NotImplemented


def _op_bytes(op) -> bytes:
    """Return an operation's bytes for the key: by value, whatever objects its attributes share.

    Without pickle's memo, two equal operations give the same bytes where one shares an object
    between attributes and the other holds equal copies (as after unpickling in a helper).
    """
    buffer = io.BytesIO()
    pickler = _KeyPickler(buffer, protocol=5)
    pickler.fast = True
    pickler.dump(op)
    return buffer.getvalue()


def _constant_bytes(constant: Constant) -> bytes:
    data = constant.data
    if isinstance(data, np.ndarray | np.generic):
        array = np.asarray(data)
        return f"{array.dtype.str}{array.shape}".encode() + array.tobytes()
    return pickle.dumps(data, protocol=5)


def graph_key(inputs, outputs, extra: str = "") -> tuple[str, list] | None:
    """Return the key of ``outputs(inputs)`` before rewriting, and its shared variables in order.

    ``extra`` (the mode, say) enters the key too. None where the graph has a root that is neither
    an input, a constant nor a tensor shared variable (a random generator, a free variable), or
    an operation that cannot be pickled: such graphs are compiled as usual.
    """
    digest = hashlib.sha256(extra.encode())
    token: dict[Variable, str] = {}
    for i, variable in enumerate(inputs):
        token[variable] = f"i{i}"
        digest.update(f"i{i}:{variable.type};".encode())
    shared: list[SharedVariable] = []
    try:
        for n, node in enumerate(io_toposort(list(inputs), list(outputs))):
            for variable in node.inputs:
                if variable in token:
                    continue
                if isinstance(variable, Constant):
                    token[variable] = f"c{len(token)}"
                    digest.update(f"{token[variable]}:{variable.type}:".encode())
                    digest.update(_constant_bytes(variable))
                elif isinstance(variable, TensorSharedVariable):
                    token[variable] = f"s{len(shared)}"
                    shared.append(variable)
                    digest.update(f"{token[variable]}:{variable.type};".encode())
                else:
                    return None
            digest.update(_op_bytes(node.op))
            digest.update(",".join(token[v] for v in node.inputs).encode())
            for k, out in enumerate(node.outputs):
                token[out] = f"n{n}.{k}"
                digest.update(f"->{out.type};".encode())
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return None
    for out in outputs:
        if out not in token:  # an output that is an input or constant itself
            return None
        digest.update(f"out:{token[out]};".encode())
    return digest.hexdigest()[:40], shared


def environment(mode) -> str:
    """Describe what a graph compiled in ``mode`` depends on besides itself: versions and flags."""
    flags = ";".join(f"{f}={getattr(pytensor.config, f, None)}" for f in _FLAGS)
    try:
        model = pm.modelcontext(None)
        check_bounds = model.check_bounds
    except TypeError:
        check_bounds = True
    return (f"format={_FORMAT};python={sys.version_info[:3]};pytensor={pytensor.__version__};"
            f"pymc={pm.__version__};"
            f"numba={_numba_version()};numpy={np.__version__};pymc_bdmc={__version__};"
            f"mode={_mode_description(get_mode(mode))};check_bounds={check_bounds};{flags}")


@functools.cache
def _numba_version() -> str:
    """Numba's version, without importing it (0.7 s) before a Numba function is compiled."""
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _mode_description(mode: Mode) -> str:
    """Describe a mode by its linker and the rewrites it asks for (its ``str`` holds addresses)."""
    query = mode.provided_optimizer
    parts = [type(mode.linker).__qualname__]
    for name in ("include", "exclude", "require"):
        parts.append(f"{name}={sorted(map(str, getattr(query, name, ()) or ()))}")
    return ",".join(parts)


#: Rewrites the hot mode leaves out. Numba's fusion of indexed reads into elementwise loops
#: runs after the in-place rewrites, and with an in-place ``AdvancedIncSubtensor`` it can read
#: a buffer already overwritten (a wrong gradient; docs/performance.md). Without the in-place
#: form it cannot.
HOT_MODE_EXCLUDES = ("local_inplace_AdvancedIncSubtensor",)


def hot_mode() -> Mode:
    """Return the densities' mode: PyTensor's default without :data:`HOT_MODE_EXCLUDES`.

    Linked so that the compiled code releases the GIL (:func:`~.threads.gil_releasing`).
    """
    return gil_releasing(get_mode(None).excluding(*HOT_MODE_EXCLUDES))


def compile_function(inputs, outputs, **kwargs):
    """``pymc.pytensorf.compile(inputs, outputs, **kwargs)`` in :func:`hot_mode`, cached on disk.

    Without a ``mode``, the graph compiles in :func:`hot_mode` and its rewrites are cached,
    with no keyword but ``on_unused_input``: one-shot and reference modes rewrite little, and a
    mode of the user's is compiled as given. Call under the compile lock.
    """
    if "mode" in kwargs:
        return compile_pytensor(inputs, outputs, **kwargs)
    mode = hot_mode()
    if not cache_enabled() or set(kwargs) - {"on_unused_input"}:
        return compile_pytensor(inputs, outputs, mode=mode, **kwargs)
    inputs, outputs = list(inputs), list(outputs)
    described = graph_key(inputs, outputs, environment(mode))
    if described is None:
        return compile_pytensor(inputs, outputs, mode=mode, **kwargs)
    key, shared = described
    path = CACHE_DIR / f"{key}.pkl"
    if path.exists():
        fn = _load(path, inputs, shared, kwargs)
        if fn is not None:
            return fn
    fn = compile_pytensor(inputs, outputs, mode=mode, **kwargs)
    if _store(path, fn, inputs, shared):
        # Link the graph as later processes will, from the record, with its array constants
        # laid out as unpickling lays them out: PyTensor's Numba cache key holds a constant's
        # strides, and a constant folded into a view (strides of its base array) would
        # otherwise make the next process compile the whole function with Numba once more.
        _contiguous_constants(fn.maker.fgraph)
        return _load(path, inputs, shared, kwargs) or fn
    return fn


def compiled_marker(inputs, outputs, label: str) -> Path | None:
    """Where compiling ``outputs(inputs)`` as ``label`` is recorded (:func:`note_compiled`).

    Taken before compiling: compiling keeps state in the graph's operations, which the key
    would see. None where nothing can be recorded: the cache is off, or the graph has no key
    (:func:`graph_key`).
    """
    if not cache_enabled():
        return None
    described = graph_key(list(inputs), list(outputs), f"{environment(hot_mode())};{label}")
    return None if described is None else CACHE_DIR / "compiled" / f"{described[0]}.{label}"


def compiled_before(marker: Path | None) -> bool | None:
    """Whether what ``marker`` records was compiled on this machine; None where unknown."""
    return None if marker is None else marker.exists()


def note_compiled(marker: Path | None) -> None:
    """Record, in a file of no bytes at ``marker``, that its graph was compiled."""
    if marker is None:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError as err:
        logger.debug("Not recorded as compiled (%s).", err)


def _fresh_strides(array: np.ndarray) -> tuple[int, ...]:
    """Return the strides of a new C-ordered array of ``array``'s shape and dtype (not empty)."""
    strides, step = [], array.itemsize
    for extent in reversed(array.shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _contiguous_constants(fgraph) -> None:
    """Give every array constant of ``fgraph`` and its inner graphs the strides of a fresh copy.

    The values, dtype and shape stay: only the memory layout of views (a transposed or
    broadcast array a rewrite folded) changes. Constants of inner graphs are shared by equal
    graphs (PyTensor interns them), so the copy is made in place.
    """
    for node in nodes_within(fgraph):
        for variable in node.inputs:
            data = getattr(variable, "data", None)
            if (isinstance(variable, Constant) and isinstance(data, np.ndarray)
                    and data.size and data.strides != _fresh_strides(data)):
                variable.data = np.array(data, order="C", copy=True)


def _roots(fn, inputs, shared) -> list[str] | None:
    """Each of ``fn``'s graph inputs as ``"i<k>"`` (an input) or ``"s<k>"`` (a shared variable)."""
    tokens = {id(v): f"i{k}" for k, v in enumerate(inputs)}
    tokens.update((id(v), f"s{k}") for k, v in enumerate(shared))
    roots = [tokens.get(id(spec.variable)) for spec in fn.maker.inputs]
    return None if None in roots else roots


def _store(path: Path, fn, inputs, shared) -> bool:
    """Keep ``fn``'s rewritten graph at ``path``; whether it was kept."""
    fgraph = fn.maker.fgraph
    if fgraph.update_mapping or len(fgraph.inputs) != len(fn.maker.inputs):
        return False
    constant_bytes = sum(np.asarray(v.data).nbytes for v in fgraph.variables
                         if isinstance(v, Constant) and isinstance(v.data, np.ndarray | np.generic))
    if constant_bytes > MAX_RECORD_BYTES:  # large data as constants: not worth a record
        return False
    roots = _roots(fn, inputs, shared)
    if roots is None:
        return False
    # insert_deepcopy runs again after the (skipped) rewrites of a cached compilation.
    outputs = [out.owner.inputs[0] if out.owner is not None and isinstance(out.owner.op, DeepCopyOp)
               else out for out in fgraph.outputs]
    position = {id(v): j for j, v in enumerate(fgraph.inputs)}

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            j = position.get(id(obj))
            return None if j is None else j

    buffer = io.BytesIO()
    try:
        pickle.dump(roots, buffer, protocol=5)  # read first: what each persistent id stands for
        Pickler(buffer, protocol=5).dump(outputs)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        logger.debug("Rewritten graph not kept (%s).", err)
        return False
    if buffer.tell() > MAX_RECORD_BYTES:
        return False
    try:
        write_record(path, buffer.getvalue())
    except OSError as err:
        logger.debug("Rewritten graph not kept (%s).", err)
        return False
    return True


def write_record(path: Path, data: bytes) -> None:
    """Write a record of this cache at once (a reader sees the old one or the new), and prune.

    Records of ``path``'s kind (its suffix) past :data:`MAX_RECORDS` in its directory are pruned,
    the least recently used tenth. Raises ``OSError`` where the cache cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(data)
    os.replace(partial, path)
    _prune(path.parent, f"*{path.suffix}")


def _prune(directory: Path, pattern: str) -> None:
    """Remove the least recently used tenth of the records ``pattern`` names, past too many."""
    records = list(directory.glob(pattern))
    if len(records) <= MAX_RECORDS:
        return

    def last_used(record):
        try:
            return record.stat().st_mtime
        except OSError:
            return 0.0

    for record in sorted(records, key=last_used)[:max(1, len(records) // 10)]:
        record.unlink(missing_ok=True)


def rewrite_record(fn) -> tuple[str, list] | None:
    """``(key, shared)`` of the rewritten graph ``fn`` was linked from; None where none was kept.

    ``shared`` are the graph's shared variables in :func:`graph_key`'s order.
    """
    return getattr(getattr(fn, "maker", None), "bdmc_rewrite_record", None)


def load_rewritten(key: str, inputs, shared, **kwargs):
    """Link the rewritten graph kept under ``key`` (a function's :func:`rewrite_record`).

    ``inputs`` and ``shared`` stand where the graph's inputs and shared variables stood when it
    was kept, in :func:`graph_key`'s order. None where there is no such record or it cannot be
    used. Call under the compile lock.
    """
    path = CACHE_DIR / f"{key}.pkl"
    if not cache_enabled() or not path.exists():
        return None
    return _load(path, inputs, shared, kwargs)


def _load(path: Path, inputs, shared, kwargs):
    """Link a stored rewritten graph into a function; None where the record cannot be used.

    The function's :func:`rewrite_record` is ``(key, shared)``: what :func:`load_rewritten` takes.
    """
    try:
        with path.open("rb") as stream:
            record_roots: list = []

            class Unpickler(pickle.Unpickler):
                def persistent_load(self, pid):
                    return record_roots[pid]

            for token in pickle.load(stream):
                record_roots.append((inputs if token[0] == "i" else shared)[int(token[1:])])
            outputs = Unpickler(stream).load()
        # No rewrites at all (a rewriter object, not a query, so not even the linker's
        # required ones: they ran before the graph was stored).
        mode = Mode(linker=hot_mode().linker, optimizer=SequentialGraphRewriter())
        fn = pytensor.function(inputs, outputs, mode=mode, accept_inplace=True, **kwargs)
    except Exception as err:  # an unusable record means: compile as usual
        logger.debug("Cached rewritten graph %s unusable (%s); rewriting.", path.name, err)
        return None
    logger.debug("Rewritten graph loaded from the cache (%s).", path.name)
    fn.maker.bdmc_rewrite_record = (path.stem, list(shared))
    try:
        os.utime(path)  # recently used: kept when the cache is pruned
    except OSError:
        pass
    return fn

