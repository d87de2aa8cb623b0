"""Simplexes and mixtures vectorize with no per-chain loops (``model/native_batching.py``)."""

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import vectorize_graph
from pytensor.graph.traversal import applys_between, graph_inputs
from pytensor.tensor.blockwise import Blockwise, BlockwiseWithCoreShape

from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.native_batching import inline_symbolic, join_along_batch


def _loops(outputs) -> list:
    return [node.op for node in applys_between(graph_inputs(outputs), outputs)
            if isinstance(node.op, Blockwise | BlockwiseWithCoreShape)]


def test_a_simplex_like_graph_and_its_gradient_batch_natively_with_the_same_values():
    # A stick of free coordinates joined with a constant, through a logsumexp: as PyMC's
    # simplex transform builds it. Vectorized as it stands, the join and the logsumexp (and
    # its derivative) each loop over chains.
    x = pt.vector("x", shape=(2,))
    joined = pt.concatenate([x, pt.zeros((1,))])
    density = pt.logsumexp(joined) - 0.5 * (joined**2).sum()
    outputs = [density, pytensor.grad(density, x)]
    batch = pt.matrix("batch", shape=(None, 2))

    looped = vectorize_graph(outputs, replace={x: batch})
    assert len(_loops(looped)) >= 2
    native = join_along_batch(vectorize_graph(inline_symbolic(outputs), replace={x: batch}))
    assert [type(op.core_op).__name__ for op in _loops(native)] in ([], ["Split"])

    rows = np.random.default_rng(0).normal(size=(5, 2)) * [1.0, 30.0]
    expected = pytensor.function([batch], looped, mode="FAST_COMPILE")(rows)
    got = pytensor.function([batch], native, mode="FAST_COMPILE")(rows)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-13)


def test_a_dirichlet_weighted_mixture_vectorizes_with_no_loop_over_chains(cache_dir):
    # Its simplex's join and logsumexp, and the mixture's own logsumexp, were Blockwise loops:
    # seconds of Numba compile time each on a model's first run.
    rng = np.random.default_rng(1)
    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(3))
        mu = pm.Normal("mu", 0.0, 3.0, shape=3)
        pm.NormalMixture("y", w=w, mu=mu, sigma=1.0, observed=[-2.0, 0.1, 0.5, 3.0])
    density = ModelDensity(model)
    assert density.batching == "vectorized"
    assert _loops(density._parts_fn.maker.fgraph.outputs) == []
    points = rng.normal(scale=0.5, size=(4, density.n_dim))
    parts = density.parts(points)
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    for i, row in enumerate(points):
        point = density.layout.unravel(row)
        np.testing.assert_allclose(parts.log_prior[i] + parts.log_likelihood[i], logp(point),
                                   rtol=1e-10)
        np.testing.assert_allclose(parts.grad_log_prior[i] + parts.grad_log_likelihood[i],
                                   dlogp(point), rtol=1e-10)
