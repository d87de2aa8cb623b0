"""Graph passes that keep ``vectorize_graph`` from wrapping ops in per-chain ``Blockwise`` loops.

``vectorize_graph`` batches an op natively where PyTensor knows how (elementwise ops,
reductions, most indexing); anything else becomes a ``Blockwise`` that loops over the chains,
whose Numba implementation costs seconds of compile time each on a model's first run (a
simplex's ``logsumexp`` and its gradient: most of a Dirichlet model's compilation) and runs
slower. Two ops PyMC's graphs carry need no loop:

* :func:`inline_symbolic`: PyTensor's symbolic ops (``logsumexp``, ``logaddexp``, ``xlogy``
  and their derivatives) are small graphs of primitive ops, which PyTensor itself inlines
  before fusing them. Inlined before vectorizing, their primitive ops batch natively.
* :func:`join_along_batch`: a join of a batched tensor with an unbatched one (a simplex's
  last coordinate, a constant) has no native rule; joining both broadcast to the batch is one.
"""

from __future__ import annotations

import pytensor.tensor as pt
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.tensor.basic import Join
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.rewriting.ofg import inline_symbolic_for_fusion

__all__ = ["inline_symbolic", "join_along_batch"]


def _rewritten(outputs: list, rewriter) -> list:
    """Return ``outputs`` with ``rewriter`` applied to every node (new ones too), on a copy."""
    fgraph = FunctionGraph(outputs=list(outputs), clone=True, copy_inputs=False)
    dfs_rewriter(rewriter).rewrite(fgraph)
    return list(fgraph.outputs)


def inline_symbolic(outputs: list) -> list:
    """Return ``outputs`` with PyTensor's fusible symbolic ops replaced by their inner graphs."""
    return _rewritten(outputs, inline_symbolic_for_fusion)


@node_rewriter([Blockwise])
def _join_along_batch(fgraph, node):
    if not isinstance(node.op.core_op, Join):
        return None
    batch_ndim = node.op.batch_ndim(node)
    # Each batch extent from an input that is not broadcastable there (all such agree).
    batch_shape = [next((tensor.shape[i] for tensor in node.inputs
                         if not tensor.type.broadcastable[i]), 1) for i in range(batch_ndim)]
    broadcast = [pt.broadcast_to(tensor, (*batch_shape, *tensor.shape[batch_ndim:]))
                 for tensor in node.inputs]
    joined = Join(node.op.core_op.axis + batch_ndim)(*broadcast)
    return [node.outputs[0].type.filter_variable(joined)]


def join_along_batch(outputs: list) -> list:
    """Return vectorized ``outputs`` with each ``Blockwise`` join made one join along the batch."""
    return _rewritten(outputs, _join_along_batch)
