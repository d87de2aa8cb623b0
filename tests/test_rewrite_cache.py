"""Rewritten graphs kept on disk: the same function, faster, and never another graph's."""

import logging
import subprocess
import sys

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from kernel_models import walk_model

from pymc_bdmc.model import rewrite_cache
from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.model.rewrite_cache import compile_function, graph_key


def _points(density):
    rng = np.random.default_rng(3)
    return rng.normal(scale=0.5, size=(5, density.n_dim))


def test_a_cached_rewrite_gives_the_same_function_to_the_last_bit(cache_dir, caplog):
    first = compiled_model(walk_model(), cache=False).density
    assert len(list(cache_dir.glob("*.pkl"))) >= 1
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc.model.density"):
        again = compiled_model(walk_model(), cache=False).density
    assert "loaded from the cache" in caplog.text
    x = _points(first)
    for a, b in zip(first._parts_fn(x), again._parts_fn(x), strict=True):
        np.testing.assert_array_equal(a, b)
    # The same final graph, so the same Numba code.
    assert (pytensor.dprint(first._parts_fn, file="str")
            == pytensor.dprint(again._parts_fn, file="str"))


def test_other_data_of_the_same_shape_reuse_the_graph_and_read_their_own_values(cache_dir,
                                                                                caplog):
    compiled_model(walk_model(), cache=False)
    other = np.linspace(3.0, -1.0, 12)
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc.model.density"):
        cached = compiled_model(walk_model(other), cache=False).density
    assert "loaded from the cache" in caplog.text
    rewrite_cache_off = pytest.MonkeyPatch()
    rewrite_cache_off.setattr(rewrite_cache, "CACHE_DIR", "off")
    try:
        fresh = compiled_model(walk_model(other), cache=False).density
    finally:
        rewrite_cache_off.undo()
    x = _points(cached)
    for a, b in zip(cached._parts_fn(x), fresh._parts_fn(x), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_key_tells_apart_wiring_constants_and_operation_parameters():
    a, b = pt.vector("a"), pt.vector("b")

    def key(inputs, outputs):
        return graph_key(inputs, outputs)[0]

    p, q = pt.vector("p"), pt.vector("q")
    assert key([a, b], [a - b]) == key([p, q], [p - q])  # other variables, the same graph
    assert key([a, b], [a - b]) != key([a, b], [b - a])  # the same operations, other wiring
    assert key([a], [a + 1.0]) != key([a], [a + 2.0])
    assert key([a], [pt.sum(a, axis=0)]) != key([a], [pt.max(a, axis=0)])
    assert key([a], [pt.exp(a)]) != key([b], [pt.exp(pt.cast(b, "float32"))])
    shared = pytensor.shared(np.zeros(3))
    other_values = pytensor.shared(np.ones(3))
    assert key([a], [a * shared]) == key([a], [a * other_values])  # data enter by type
    assert key([a], [a * shared]) != key([a], [a * pytensor.shared(np.zeros((3, 2)))[:, 0]])
    assert key([a], [a * shared]) != key([a], [a * pytensor.shared(np.zeros(3, "float32"))])


def test_graphs_the_key_cannot_describe_compile_as_usual(cache_dir):
    a = pt.vector("a")
    free = pt.vector("free")  # neither an input nor shared
    assert graph_key([a], [a + free]) is None
    draws = pm.Normal.dist(size=3)  # a random generator among the roots
    assert graph_key([], [draws]) is None
    fn = compile_function([], [draws])
    first, second = fn()[0], fn()[0]
    assert first.shape == (3,) and not np.array_equal(first, second)  # its updates kept
    # Another mode is not cached.
    compile_function([a], [pt.exp(a)], mode="FAST_COMPILE")
    assert not list(cache_dir.glob("*.pkl"))


def test_an_unreadable_record_means_a_normal_compilation(cache_dir, caplog):
    a = pt.vector("a")
    compile_function([a], [pt.log1p(pt.exp(a))])
    (record,) = cache_dir.glob("*.pkl")
    record.write_bytes(b"not a graph")
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc.model.density"):
        fn = compile_function([a], [pt.log1p(pt.exp(a))])
    assert "unusable" in caplog.text
    np.testing.assert_allclose(fn(np.array([0.0, 1.0]))[0], np.log1p(np.exp([0.0, 1.0])))


def test_the_key_is_the_same_in_another_process():
    code = ("import numpy as np, pymc as pm, pytensor.tensor as pt\n"
            "from pymc_bdmc.model.rewrite_cache import graph_key\n"
            "with pm.Model() as m:\n"
            "    s = pm.HalfNormal('s', 1.0)\n"
            "    pm.Normal('y', pt.cumsum(pm.Normal('z', 0, s, shape=4)), 1.0,\n"
            "              observed=np.arange(4.0))\n"
            "out = m.logp()\n"
            "print(graph_key(m.value_vars, [out, *pm.pytensorf.gradient(out, m.value_vars)])[0])\n")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True).stdout.strip() for _ in range(2)}
    assert len(keys) == 1 and len(keys.pop()) == 40


def test_a_constant_view_gives_numba_the_key_of_the_next_process(tmp_path):
    # A constant that is a view (here a transposed row, strides (8, 48)) inside an inner graph
    # lies out as a fresh array once unpickled from the record, and PyTensor's Numba cache key
    # holds strides: the first process must link the record's layout, or the next compiles the
    # whole function with Numba again (the GP's 11 s, docs/performance.md).
    code = ("import sys\n"
            "from pathlib import Path\n"
            "import numpy as np, pytensor.tensor as pt\n"
            "from pytensor.compile.builders import OpFromGraph\n"
            "from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key\n"
            "from pymc_bdmc.model import rewrite_cache\n"
            "rewrite_cache.CACHE_DIR = Path(sys.argv[1])\n"
            "x = pt.vector('x', shape=(6,))\n"
            "view = np.arange(6.0).reshape(1, 6).T\n"
            "assert view.strides == (8, 48)\n"
            "core = OpFromGraph([x], [pt.sum(x[:, None] * view)], inline=False)\n"
            "xs = pt.matrix('xs', shape=(None, 6))\n"
            "fn = rewrite_cache.compile_function([xs], [pt.vectorize(core, '(n)->()')(xs)])\n"
            "print(numba_funcify_and_cache_key(fn.maker.fgraph)[1])\n")
    keys = [subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           text=True, check=True).stdout.strip() for _ in range(2)]
    assert len(list(tmp_path.glob("*.pkl"))) == 1  # the second process read the record
    assert keys[0] == keys[1] and len(keys[0]) == 64


def test_the_cache_keeps_the_records_used_last(cache_dir, monkeypatch, caplog):
    monkeypatch.setattr(rewrite_cache, "MAX_RECORDS", 3)
    a = pt.vector("a")
    for shift in range(5):
        compile_function([a], [pt.exp(a) + float(shift)])
    kept = list(cache_dir.glob("*.pkl"))
    assert 1 <= len(kept) <= 3
    # The newest graph is among them.
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc.model.density"):
        compile_function([a], [pt.exp(a) + 4.0])
    assert "loaded from the cache" in caplog.text



def test_compilation_flags_key_another_record(cache_dir):
    a = pt.vector("a")
    compile_function([a], [pt.exp(a) * 2.0 + 1.0])
    with pytensor.config.change_flags(numba__fastmath=False):
        compile_function([a], [pt.exp(a) * 2.0 + 1.0])
    assert len(list(cache_dir.glob("*.pkl"))) == 2


def test_a_graph_sent_to_a_helper_or_a_worker_keeps_its_key():
    # Pickled (a helper interpreter's recipe, a worker's densities), a graph's operations lose
    # the hash their frozendicts cached and the objects their attributes shared: the key must
    # not see either, or a helper's records would never be found by the process it works for.
    import cloudpickle

    with pm.Model() as m:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 5.0)
        theta = pm.Normal("theta", mu, tau, shape=4)
        pm.Normal("y", theta, 10.0, observed=[28.0, 8.0, -3.0, 7.0])
    outputs = [m.varlogp, m.observedlogp]
    for out in outputs:
        hash(out.owner.op)  # asked for its hash, as rewriting does
    before = graph_key(m.value_vars, outputs)[0]
    inputs, outputs = cloudpickle.loads(cloudpickle.dumps((m.value_vars, outputs)))
    assert graph_key(inputs, outputs)[0] == before


def test_what_an_operation_caches_when_asked_for_its_shape_does_not_change_the_key():
    # ``pt.diag`` of a vector is an OpFromGraph that keeps its inner shape graph once a shape
    # is asked for, and a constant keeps its unique value once read: a model built again in a
    # process (a notebook cell run again) must find its record, not be keyed anew.
    a = pt.vector("a", shape=(3,))
    out = pt.diag(pt.exp(a) + 1.0).sum()
    before = graph_key([a], [out])[0]
    pytensor.function([a], pt.diag(pt.exp(a) + 1.0).shape)  # the same operation's shape
    for node in pytensor.graph.traversal.applys_between([a], [out]):
        for variable in node.inputs:
            if isinstance(variable, pytensor.graph.basic.Constant):
                _ = variable.unique_value  # kept once read
    assert graph_key([a], [out])[0] == before


def test_a_models_first_compilation_says_why_it_lasts_once(cache_dir, caplog):
    with caplog.at_level(logging.INFO, logger="pymc_bdmc.model.density"):
        compiled_model(walk_model(), cache=False)
    assert caplog.text.count("first run on this machine") == 1
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="pymc_bdmc.model.density"):
        compiled_model(walk_model(), cache=False)  # the same model, built again
        compiled_model(walk_model(), cache=False, compile_kwargs={"mode": "FAST_COMPILE"})
    assert "first run on this machine" not in caplog.text
