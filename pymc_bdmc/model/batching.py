"""Compiling a per-chain graph over a batch of chains, and the picklable hot path.

:func:`compile_batched` vectorizes a graph of one flat vector ``x`` over rows of a matrix, checks
the batched function against the per-chain one (values, and independence of the chains), and
falls back to ``Blockwise(OpFromGraph)`` where vectorizing fails. :class:`BatchedParts` is the
hot path of a :class:`~pymc_bdmc.model.density.ModelDensity` alone, for worker processes. The
compiled kernels (fused HMC transition, Gibbs color update) are built on these graphs through
builders the kernel modules register (:func:`register_fused_kernel`): the model layer does not
import the kernels.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.logprob.utils import CheckParameterValue
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.mode import Mode
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.link.vm import VMLinker
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.shape import Shape, Shape_i

from pymc_bdmc.model.batched_records import choice_record, load_choice, note_choice
from pymc_bdmc.model.layout import DensityParts
from pymc_bdmc.model.native_batching import inline_symbolic, join_along_batch
from pymc_bdmc.model.rewrite_cache import compile_function, compiled_marker, note_compiled

__all__ = [
    "COMPILE_LOCK",
    "FUSED_KERNELS",
    "ONE_SHOT_MODE",
    "PER_ROW_LIMIT",
    "REFERENCE_MODE",
    "SCALE_MAP",
    "BatchedParts",
    "checks_to_switches",
    "compile_batched",
    "compile_pair_batched",
    "compile_per_row",
    "compile_scale_map",
    "factorizes_per_chain",
    "join_value_inputs",
    "register_fused_kernel",
    "without_stack_traces",
]

logger = logging.getLogger("pymc_bdmc.model.density")

#: Backend for functions called only a handful of times (validation references, constraining
#: results): Python-mode compilation takes a fraction of a second, where a cold Numba
#: compilation of the same graph can take tens of seconds.
ONE_SHOT_MODE = "FAST_COMPILE"

#: Backend of the per-chain reference a vectorized graph is checked against: Python thunks and
#: no graph rewrites at all (only PyMC's own parameter checks), compiled with no C++ compiler
#: configured: a fraction of :data:`ONE_SHOT_MODE`'s compile time, for a few points.
REFERENCE_MODE = Mode(linker=VMLinker(use_cloop=False, c_thunks=False), optimizer=None)

#: Held while this package compiles a PyTensor function. PyTensor compilation is not thread-safe
#: (pymc-devs/pymc#7819), and threaded executors (a ``ThreadPoolExecutor``, Dask's threaded
#: workers) compile their chains' densities in several threads of one process. Processes need no
#: lock: each has its own compiler, and PyTensor's on-disk caches lock across processes.
COMPILE_LOCK = threading.RLock()


@contextlib.contextmanager
def without_stack_traces():
    """Build graphs here with no creation trace on each node (and the compile lock held).

    PyTensor records where each node was created, walking the Python stack past its own frames
    for every node: a quarter of building a model's batched graphs (PyMC's logp, gradients,
    vectorizing) on the suite's models. The traces only decorate error messages about nodes
    built here; the graphs and their values are the same. The flag is global, so threads that
    build graphs take turns: each restores what it found.
    """
    with COMPILE_LOCK, pytensor.config.change_flags(traceback__limit=0):
        yield


def join_value_inputs(point: Mapping[str, np.ndarray], outputs: list, inputs: list):
    """Rewrite ``outputs`` as functions of one flat vector of the ``inputs``' values.

    As PyMC's ``join_nonshared_inputs``, except that a scalar is ``x[i]``, not
    ``x[i:i + 1].reshape(())``. Vectorized, the reshaped slice becomes a ``(chains, 1)`` column
    whose static shape PyTensor's rewrites lose (``(chains, ?)``), and Numba then refuses to
    broadcast it against a ``(chains, n)`` likelihood: every model with a scalar intercept next
    to ``X @ beta`` fell back to the per-chain ``Blockwise`` loop (docs/performance.md).

    Parameters
    ----------
    point : mapping
        Values of the inputs (their shapes and sizes), by name.
    outputs : list of TensorVariable
    inputs : list of TensorVariable
        The value variables, in the order of the flat vector.

    Returns
    -------
    tuple
        ``(new_outputs, x)``.
    """
    raveled = pt.concatenate([pt.as_tensor(var).ravel() for var in inputs])
    # Its length is known: slices of it then have static shapes, and the rewrites fold the
    # shape arithmetic a vectorized gradient would otherwise carry (and Numba compile).
    size = sum(int(np.prod(np.shape(point[var.name]), dtype=int)) for var in inputs)
    x = pt.vector("joined_inputs", dtype=raveled.dtype, shape=(size,))
    replace, start = {}, 0
    for var in inputs:
        shape = np.shape(point[var.name])
        size = int(np.prod(shape, dtype=int))
        value = x[start] if shape == () else x[start:start + size].reshape(shape)
        replace[var] = var.type.filter_variable(value.astype(var.dtype))
        start += size
    return graph_replace(list(outputs), replace, strict=False), x


def carries_shape_arithmetic(outputs: list) -> bool:
    """Whether a graph computes with its tensors' shapes (see :func:`fold_static_shapes`)."""
    return any(isinstance(node.op, Shape | Shape_i)
               for node in applys_between(graph_inputs(outputs), outputs))


def fold_static_shapes(outputs: list) -> list:
    """Canonicalize a per-chain graph with its shapes folded to constants where they are static.

    A gradient carries shape arithmetic (a join's gradient splits by its inputs' lengths).
    Vectorized as it stands, it becomes batched ``Blockwise`` ops on shapes that the final
    rewrites no longer fold, and each costs Numba compile time; folded first, the split is one
    plain op along the chains' axis. The pass costs a build some hundredths of a second, so it
    is worth running only on graphs that :func:`carries_shape_arithmetic`.
    """
    return list(rewrite_graph(outputs, include=("ShapeOpt", "canonicalize"), clone=True))


def checks_to_switches(outputs: list) -> list:
    """Replace PyMC's parameter checks by per-chain ``switch(conditions, logp, -inf)``.

    PyMC guards log-densities with ``CheckParameterValue`` nodes, turned into ``-inf`` switches
    at compile time. In a vectorized graph that rewrite reduces the conditions over the whole
    batch, so one chain with an invalid parameter (e.g. a scale that underflowed to 0 in a
    divergent proposal) sets *every* chain's density to ``-inf``. Chains would then reject
    each other's moves, which couples them and breaks the validity of every weight. Done on
    the per-chain graph before vectorizing, each chain keeps its own condition. Checks nested
    in a check's value (a mixture's weights around its components' scales) are replaced in
    later rounds: a replacement keeps its value's graph as it was.
    """
    outputs = list(outputs)
    while True:
        replacements = {}
        for node in applys_between(graph_inputs(outputs), outputs):
            if isinstance(node.op, CheckParameterValue) and node.op.can_be_replaced_by_ninf:
                value, *conditions = node.inputs
                condition = pt.all(pt.stack([pt.all(c) for c in conditions]))
                switched = pt.switch(condition, value, -np.inf)
                replacements[node.outputs[0]] = pt.cast(switched, node.outputs[0].dtype)
        if not replacements:
            return outputs
        outputs = list(graph_replace(outputs, replacements, strict=False))


def poison_rows(point: np.ndarray, movable: np.ndarray | None = None) -> np.ndarray:
    """Rows with NaN and extreme coordinates, where model checks fail or values overflow.

    Only ``movable`` coordinates (default: all) are poisoned: a discrete coordinate outside
    its support can index out of bounds in compiled code, which is no test of independence.
    """
    rows = []
    movable = np.arange(point.size) if movable is None else np.asarray(movable)
    if movable.size == 0:
        return point[None, :].copy()
    coordinates = movable[np.unique(np.linspace(0, movable.size - 1,
                                                min(movable.size, 16)).astype(int))]
    for value in (np.nan, -1e4, 1e4, -800.0, 800.0):
        for i in coordinates:
            row = point.copy()
            row[i] = value
            rows.append(row)
    return np.stack(rows)


def factorizes_per_chain(outputs) -> bool:
    """Whether a vectorized graph applies linear algebra to each chain's own matrices.

    Vectorized, a Cholesky factor, triangular solve, inverse or determinant of a matrix that
    depends on the chain's parameters (a GP's covariance, an LKJ factor) becomes a loop over
    chains of its own, with the arithmetic around it on stacks of matrices. Looping over chains
    once, around the whole per-chain graph, then compiles faster and runs as fast or faster
    (``benchmarks/batching_forms.py``), so :func:`compile_batched` prefers it there.
    """
    return any(isinstance(node.op, Blockwise)
               and type(node.op.core_op).__module__.startswith("pytensor.tensor.linalg")
               and _batched_matrix(node)
               for node in applys_between(graph_inputs(outputs), outputs))


def _batched_matrix(node) -> bool:
    """Whether a ``Blockwise`` node has a matrix input of its own for each chain.

    A shared matrix (a fixed covariance's factor solved against each chain's vector) keeps
    batch dimensions of size 1: that is one factor, and the vectorized graph suits it.
    """
    for variable, signature in zip(node.inputs, node.op.inputs_sig, strict=True):
        batch = variable.type.shape[:variable.type.ndim - len(signature)]
        if len(signature) >= 2 and any(extent != 1 for extent in batch):
            return True
    return False


def compile_batched(compile_fn, x, outputs, points: np.ndarray,
                    extra_inputs=(), extra_values=(), movable=None, remember: bool = False,
                    keyed_by=None, before_choosing=None, **kwargs):
    """Compile ``outputs(x)`` over a batch of ``x`` rows: one call for all chains.

    ``vectorize_graph`` gives the fastest graph where the model's linear algebra is shared by all
    chains (:func:`factorizes_per_chain`), but it is checked against the per-chain graph at
    ``points`` before use, and for independence of the chains (valid rows must not change
    next to NaN and extreme rows); where it fails or disagrees (it mis-broadcasts some PyMC
    graphs), a ``Blockwise(OpFromGraph)`` loops over chains inside the compiled function
    instead. ``compile_fn(inputs, outputs, **kwargs)`` compiles (functions called rarely are
    better served by :func:`compile_per_row`). ``extra_inputs`` are further inputs
    shared by all chains (not batched), passed after the batch of ``x``; ``extra_values`` are
    values of them used to validate the batched graph; ``movable`` are the coordinates the
    independence check may set to NaN or extremes (default all; not discrete ones). With
    ``remember`` (only where ``compile_fn`` compiles in the hot mode, with no mode of the
    user's), the choice is recorded, and a choice recorded before for the same graph, points
    and data is loaded without vectorizing or checking again (:mod:`.batched_records`). The
    record is keyed by ``keyed_by`` where given: ``(graph, how)``, a graph of which ``outputs``
    is a deterministic function and what that function is (the densities before their
    gradients, ``"with gradients"``), and ``outputs`` may then be a function that builds them,
    called only where no recorded choice is loaded. Where none is, ``before_choosing()`` (if
    given) may have it made elsewhere (a helper interpreter, :mod:`.first_compile`): where it
    returns True, the record is looked up again. Returns ``(function, batching)``.
    """
    extra_inputs, extra_values = list(extra_inputs), list(extra_values)
    batch_x = pt.matrix("x_batch", dtype=x.dtype, shape=(None, x.type.shape[0]))
    record = None
    if remember and "mode" not in kwargs:
        checked_at = [points, *extra_values,
                      np.arange(points.shape[1]) if movable is None else movable]
        key_graph, derived = (outputs, "") if keyed_by is None else keyed_by
        record = choice_record([x, *extra_inputs], key_graph, checked_at,
                               f"{sorted(kwargs.items())!r};outputs {derived}")
        with COMPILE_LOCK:
            loaded = load_choice(record, [batch_x, *extra_inputs], **kwargs)
        if loaded is None and before_choosing is not None and before_choosing():
            with COMPILE_LOCK:
                loaded = load_choice(record, [batch_x, *extra_inputs], **kwargs)
        if loaded is not None:
            return loaded
    if callable(outputs):
        outputs = outputs()
    fn, batching = _choose_batched(compile_fn, x, batch_x, outputs, points, extra_inputs,
                                   extra_values, movable, kwargs)
    note_choice(record, fn, batching)
    return fn, batching


def _choose_batched(compile_fn, x, batch_x, outputs, points, extra_inputs, extra_values,
                    movable, kwargs):
    """:func:`compile_batched`'s choice between the vectorized graph and the loop over chains."""
    per_chain = inline_symbolic(checks_to_switches(outputs))
    try:
        vectorized = join_along_batch(vectorize_graph(per_chain, replace={x: batch_x}))
    except Exception as err:  # any failure means: use the safe fallback
        logger.debug("vectorize_graph failed (%s); looping over chains.", err)
        return _checked_loop(compile_fn, x, batch_x, outputs, extra_inputs, kwargs, points,
                             extra_values), "blockwise"
    if factorizes_per_chain(vectorized):
        try:
            return _checked_loop(compile_fn, x, batch_x, outputs, extra_inputs, kwargs, points,
                                 extra_values), "blockwise"
        except Exception as err:  # the vectorized graph may still serve
            logger.debug("The loop over chains failed (%s); trying the vectorized graph.", err)
    if carries_shape_arithmetic(per_chain):
        try:
            vectorized = join_along_batch(
                vectorize_graph(fold_static_shapes(per_chain), replace={x: batch_x}))
        except Exception as err:  # the graph as it is still serves
            logger.debug("Folding its shapes failed (%s); vectorizing the graph as it is.", err)
    try:
        fn = compile_fn([batch_x, *extra_inputs], vectorized, **kwargs)
        _check_vectorized(fn, compile_fn, x, extra_inputs, outputs, kwargs, points,
                          extra_values, movable)
        return fn, "vectorized"
    except Exception as err:  # any failure means: use the safe fallback
        logger.debug("vectorize_graph unusable (%s); using Blockwise(OpFromGraph).", err)
    return _checked_loop(compile_fn, x, batch_x, outputs, extra_inputs, kwargs, points,
                         extra_values), "blockwise"


def _checked_loop(compile_fn, x, batch_x, outputs, extra_inputs, kwargs, points, extra_values):
    """Return :func:`_compile_loop`'s function, checked by :func:`_check_repeatable`.

    Numba compiles at the first call: a failure shows here, not in the runs.
    """
    fn = _compile_loop(compile_fn, x, batch_x, outputs, extra_inputs, kwargs)
    _check_repeatable(fn, points, extra_values)
    return fn


def _check_repeatable(fn, points, extra_values) -> None:
    """Raise ``ValueError`` unless ``fn`` gives each of ``points`` the same values twice.

    The loop over chains runs one compiled per-chain function on every row, so a row's values
    cannot depend on the batch, unless the compiled code reads memory a call before left
    behind (see ``rewrite_cache.HOT_MODE_EXCLUDES``): such a function would not be one kernel.
    The second batch holds the points in reverse order, and one more row.
    """
    first = fn(points, *extra_values)
    second = fn(np.concatenate([points[::-1], points[:1]]), *extra_values)
    for a, b in zip(first, second, strict=True):
        if not np.allclose(np.asarray(b)[len(points) - 1::-1], a, rtol=1e-12, atol=1e-12,
                           equal_nan=True):
            raise ValueError(
                "the compiled densities give a point other values in another batch: a "
                "miscompilation (please report it); compile_kwargs={'mode': 'FAST_COMPILE'} "
                "compiles them without Numba")


def _check_vectorized(fn, compile_fn, x, extra_inputs, outputs, kwargs, points, extra_values,
                      movable) -> None:
    """Raise ``ValueError`` unless the vectorized ``fn`` is the per-chain graph, chain by chain."""
    batched = fn(points, *extra_values)
    _check_per_chain(batched, compile_fn, x, extra_inputs, outputs, kwargs, points,
                     extra_values)
    # Chains must not see each other: valid rows stay put next to invalid ones. Round-off
    # is allowed (BLAS may sum a product over more rows in another order); coupling by
    # extreme or NaN rows is not.
    with np.errstate(all="ignore"):
        poisoned = fn(np.concatenate([points, poison_rows(points[0], movable)]), *extra_values)
    for b, ref in zip(poisoned, batched, strict=True):
        if not np.allclose(b[: len(points)], ref, rtol=1e-9, atol=1e-12, equal_nan=True):
            raise ValueError("a chain's value depends on the other chains in the batch")


def _compile_loop(compile_fn, x, batch_x, outputs, extra_inputs, kwargs):
    """Compile ``outputs(x)`` as a ``Blockwise(OpFromGraph)``: one loop over the batch's rows."""
    # OpFromGraph needs shared variables (our data) as explicit, un-batched inputs.
    shared = [v for v in graph_inputs(outputs) if isinstance(v, SharedVariable)]
    core = OpFromGraph([x, *extra_inputs, *shared], list(outputs), inline=False)

    def dims(prefix, variables):
        return "".join(
            ",(" + ",".join(f"{prefix}{i}_{d}" for d in range(v.ndim)) + ")"
            for i, v in enumerate(variables)
        )

    signature = (f"(n){dims('e', extra_inputs)}{dims('s', shared)}->"
                 f"{dims('o', outputs)[1:]}")
    result = Blockwise(core, signature=signature)(batch_x, *extra_inputs, *shared)
    return compile_fn([batch_x, *extra_inputs],
                      result if isinstance(result, list) else [result], **kwargs)


def _check_per_chain(batched, compile_fn, x, extra_inputs, outputs, kwargs, points,
                     extra_values) -> None:
    """Raise ``ValueError`` unless ``batched`` equals the per-chain graph's values at ``points``.

    The per-chain graph is evaluated in :data:`REFERENCE_MODE` first (no rewrites: it compiles
    in a few hundredths of a second). Unrewritten arithmetic can lose precision where PyMC's
    stabilising rewrites would not, so a disagreement there is checked again in
    :data:`ONE_SHOT_MODE`; where the Python backend cannot run the graph at all (an elementwise
    op of more than 32 inputs, NumPy's limit), in the hot mode, so that such a graph keeps its
    vectorized form.
    """

    def agrees(references) -> bool:
        return all(np.allclose(b[i], s, rtol=1e-8, atol=1e-10, equal_nan=True)
                   for i, reference in enumerate(references)
                   for b, s in zip(batched, reference, strict=True))

    for mode in (REFERENCE_MODE, ONE_SHOT_MODE):
        # Without a C++ compiler, inner functions (an OpFromGraph's, linked by PyTensor in its
        # default VM) get Python thunks too: no compiler probe, no C module lookups.
        flags = {"cxx": ""} if mode is REFERENCE_MODE else {}
        try:
            with COMPILE_LOCK, pytensor.config.change_flags(**flags):
                single = compile_fn([x, *extra_inputs], outputs, **{**kwargs, "mode": mode})
            references = [single(point, *extra_values) for point in points]
        except Exception as err:  # whatever Python mode cannot run
            logger.debug("Per-chain reference in %s failed (%s).", mode, err)
            continue
        if agrees(references):
            return
        if mode == ONE_SHOT_MODE:
            raise ValueError("vectorized graph disagrees with the per-chain graph")
    if kwargs.get("mode") == ONE_SHOT_MODE:
        raise ValueError("the per-chain graph cannot be evaluated in Python mode")
    logger.debug("Per-chain reference in Python mode failed; compiling it hot.")
    single = compile_fn([x, *extra_inputs], outputs, **kwargs)
    if not agrees([single(point, *extra_values) for point in points]):
        raise ValueError("vectorized graph disagrees with the per-chain graph")


#: Rows up to which :func:`compile_per_row` loops over the per-chain graph; a larger batch
#: (held-out cases times chains) is evaluated by one vectorized call instead.
PER_ROW_LIMIT = 256


def compile_per_row(compile_fn, x, outputs, batched: Callable[[], Callable] | None = None,
                    **kwargs) -> Callable[[np.ndarray], list]:
    """Compile ``outputs(x)`` for one row, as a function of a batch that loops over its rows.

    For functions called a handful of times (constraining results): the per-chain graph in
    :data:`ONE_SHOT_MODE` compiles in a fraction of the time of a vectorized one and its
    validation, whose rewrites can outlast every call made on a few rows. Batches of more than
    :data:`PER_ROW_LIMIT` rows go to ``batched()`` (compiled on first need, then kept): a loop
    in Python would cost more there. Where the Python backend cannot run the graph (an
    elementwise op of more than 32 inputs), it is compiled in the default mode instead. The
    function returns one array per output, stacked over the rows.
    """
    single = compile_fn([x], outputs, **{**kwargs, "mode": ONE_SHOT_MODE})
    state = {"single": single, "batched": None}

    def per_row(batch: np.ndarray) -> list:
        if batched is not None and len(batch) > PER_ROW_LIMIT:
            if state["batched"] is None:
                state["batched"] = batched()
            return list(state["batched"](batch))
        try:
            rows = [state["single"](row) for row in batch]
        except Exception as err:  # whatever Python mode cannot run
            if state["single"] is not single:
                raise
            logger.debug("Python mode cannot run this graph (%s); compiling it hot.", err)
            state["single"] = compile_fn([x], outputs, **kwargs)
            rows = [state["single"](row) for row in batch]
        return [np.stack([np.asarray(row[i]) for row in rows]) for i in range(len(outputs))]

    return per_row


def compile_pair_batched(compile_fn, graph, points: np.ndarray, movable=None,
                         remember: bool = False):
    """Compile a graph of one vector ``[x, x_other]`` over a batch of rows.

    ``x`` and ``x_other`` are two points of ``n`` coordinates each; the batched function is
    validated on pairs of distinct ``points`` (see :func:`compile_batched`, and for
    ``remember``). Used for the scale groups' map (:mod:`pymc_bdmc.model.location_scale`).
    """
    z, outputs = graph
    n = points.shape[1]
    pairs = np.concatenate([points, points[::-1]], axis=1)
    movable = np.arange(n) if movable is None else np.asarray(movable)
    # PyTensor's assumption-based linear-algebra rewrites fail on batched Cholesky factors (an
    # MvNormal child's map) and print a traceback; skipping a failed rewrite is what PyTensor
    # does anyway, so only the message is dropped.
    with pytensor.config.change_flags(on_opt_error="ignore"):
        fn, _ = compile_batched(compile_fn, z, outputs, pairs,
                                movable=np.concatenate([movable, movable + n]),
                                remember=remember)
    return fn


#: What :func:`compile_scale_map` records as compiled (:func:`~.rewrite_cache.note_compiled`).
SCALE_MAP = "scale_map"


def compile_scale_map(compile_fn, graph, points: np.ndarray, movable=None, marker=None,
                      remember: bool = False):
    """:func:`compile_pair_batched` for the scale groups' map, recorded as compiled.

    The record tells a later process that the map is in the disk caches, so that no helper
    compiles it ahead (:mod:`pymc_bdmc.model.compile_ahead`). ``marker`` is its place
    (:func:`~.rewrite_cache.compiled_marker`), taken from the graph before anything was
    compiled with it; by default, now.
    """
    if marker is None:
        marker = compiled_marker([graph[0]], graph[1], SCALE_MAP)
    fn = compile_pair_batched(compile_fn, graph, points, movable, remember)
    note_compiled(marker)
    return fn


#: Builders of the compiled kernels on a density's graphs, by name (``"hmc"``, ``"gibbs"``).
#: The kernel modules register them (:mod:`pymc_bdmc.kernels.fused_hmc`,
#: :mod:`pymc_bdmc.kernels.fused_gibbs`, both imported with :mod:`pymc_bdmc.kernels`): kernels
#: build on this module, never the other way round.
FUSED_KERNELS: dict[str, Callable] = {}


def register_fused_kernel(name: str, build: Callable) -> None:
    """Register ``build`` as the builder of the compiled kernel ``name`` (``"hmc"``, ``"gibbs"``).

    Parameters
    ----------
    name : str
        ``"hmc"``: ``build(x, outputs, compile_fn, count=...)`` returns a compiled HMC
        transition; ``"gibbs"``: ``build(x, terms, n_values, compile_fn, count=...)`` returns a
        compiled Gibbs color update.
    build : callable
        The builder, typically the kernel's class.
    """
    FUSED_KERNELS[name] = build


def fused_kernel(name: str) -> Callable:
    """The builder registered for the compiled kernel ``name`` (:func:`register_fused_kernel`)."""
    if name not in FUSED_KERNELS:  # importing pymc_bdmc imports pymc_bdmc.kernels
        raise RuntimeError(f"No compiled {name!r} kernel registered: import pymc_bdmc.kernels.")
    return FUSED_KERNELS[name]


def build_fused_hmc(x, outputs, compile_fn, owner):
    """The compiled HMC transition on the graph ``outputs(x)``, counting calls on ``owner``."""
    def count(n_calls: int) -> None:
        owner.n_evaluations += n_calls

    return fused_kernel("hmc")(x, outputs, compile_fn, count=count)


def cached_fused_gibbs(cache: dict, batching: str, terms_graph, n_values: int, compile_fn,
                       owner):
    """A compiled color update per widest support, or None without a vectorized graph."""
    if batching != "vectorized":
        return None
    if n_values not in cache:
        def count() -> None:
            owner.n_term_evaluations += 1

        cache[n_values] = fused_kernel("gibbs")(*terms_graph, n_values, compile_fn,
                                                 count=count)
    return cache[n_values]


def finite_parts(prior, lik, grad_prior, grad_lik) -> DensityParts:
    """The parts of a batch, NaN log densities replaced by ``-inf``."""
    # NaN log densities are treated as impossible states: they can never be accepted.
    # (One cheap test first: a NaN anywhere makes the sum NaN; -inf + inf does too.)
    if np.isnan(prior.sum() + lik.sum()):
        prior = np.where(np.isnan(prior), -np.inf, prior)
        lik = np.where(np.isnan(lik), -np.inf, lik)
    return DensityParts(prior, lik, grad_prior, grad_lik)


class BatchedParts:
    """The hot path of a :class:`ModelDensity` on its own: batched densities and gradients.

    It pickles as its symbolic graph (not as the PyMC model, whose custom distributions may
    not survive pickling) and compiles on first use, so worker processes rebuild exactly the
    function this process runs. Data are set with :meth:`set_observed` without checks: the
    owning :class:`ModelDensity` has checked them. ``scale_map_marker`` is where compiling the
    scale groups' map is recorded, as the owning density keyed it (an unpickled graph keys
    otherwise; :func:`compile_scale_map`).
    """

    def __init__(self, x, outputs, data: Mapping[str, SharedVariable], points: np.ndarray,
                 compile_kwargs: Mapping | None = None, terms_graph: tuple | None = None,
                 movable: np.ndarray | None = None, scale_map: tuple | None = None,
                 scale_map_marker=None):
        self._graph = (x, list(outputs), dict(data), np.asarray(points),
                       dict(compile_kwargs or {}), terms_graph, movable, scale_map,
                       scale_map_marker)
        #: The model's scale groups (:mod:`pymc_bdmc.model.location_scale`), empty if none.
        self.location_scale_groups = () if scale_map is None else scale_map[0]
        self._scale_map_fn = None
        self._fn = None
        self._fused = None
        self._terms_fn = None
        self._terms_batching = None
        self._fused_gibbs = {}
        self.batching = None
        self.n_evaluations = 0
        self.n_term_evaluations = 0

    def __getstate__(self):
        return {"graph": self._graph}

    def __setstate__(self, state):
        self.__init__(*state["graph"])

    def _compile(self, inputs, outputs, **kwargs):
        with COMPILE_LOCK:
            fn = compile_function(inputs, outputs, **{**self._graph[4], **kwargs})
        fn.trust_input = True
        return fn

    def compile(self) -> BatchedParts:
        """Compile (once); returns self."""
        if self._fn is None:
            x, outputs, _, points, _, _, movable, _, _ = self._graph
            with without_stack_traces():
                self._fn, self.batching = compile_batched(
                    self._compile, x, outputs, points, movable=movable,
                    remember=not self._graph[4])
        return self

    def terms(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elementwise log-density terms of a batch (see :meth:`ModelDensity.terms`)."""
        self.n_term_evaluations += 1
        return tuple(self._compile_terms()(np.ascontiguousarray(x, dtype=float)))

    def _compile_terms(self):
        if self._terms_fn is None:
            if self._graph[5] is None:
                raise ValueError("These densities were built without elementwise terms.")
            self._terms_fn, self._terms_batching = compile_batched(
                self._compile, *self._graph[5], self._graph[3], movable=self._graph[6],
                remember=not self._graph[4])
        return self._terms_fn

    def fused_gibbs(self, n_values: int):
        """Return the compiled Gibbs color update (see :meth:`ModelDensity.fused_gibbs`)."""
        self._compile_terms()
        return cached_fused_gibbs(self._fused_gibbs, self._terms_batching, self._graph[5],
                                  n_values, self._compile, self)

    def fused_hmc(self):
        """The compiled HMC transition on these densities (see :meth:`ModelDensity.fused_hmc`)."""
        if self._fused is None and self.compile().batching == "vectorized":
            self._fused = build_fused_hmc(self._graph[0], self._graph[1], self._compile, self)
        return self._fused

    def location_scale_map(self, z: np.ndarray):
        """The batched map of the scale groups' moves (:meth:`ModelDensity.location_scale_map`)."""
        return self._compile_scale_map()(np.ascontiguousarray(z, dtype=float))

    def _compile_scale_map(self):
        if self._scale_map_fn is None:
            _, graph = self._graph[7]
            self._scale_map_fn = compile_scale_map(self._compile, graph, self._graph[3],
                                                   self._graph[6], self._graph[8],
                                                   remember=not self._graph[4])
        return self._scale_map_fn

    def compile_ahead(self) -> None:
        """Compile what a helper compiles ahead (:mod:`pymc_bdmc.model.compile_ahead`): the map."""
        with without_stack_traces():
            self._compile_scale_map()

    def set_observed(self, data: Mapping[str, np.ndarray]) -> None:
        """Condition on new (already checked) observed values."""
        shared = self._graph[2]
        for name, value in data.items():
            shared[name].set_value(np.array(value, dtype=shared[name].dtype, copy=True))

    def parts(self, x: np.ndarray) -> DensityParts:
        """Densities and gradients of a batch ``x`` of shape (chains, n_dim)."""
        self.n_evaluations += 1
        return finite_parts(*self.compile()._fn(np.ascontiguousarray(x, dtype=float)))
