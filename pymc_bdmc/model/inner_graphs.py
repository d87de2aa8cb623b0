"""Walking a compiled graph together with the inner graphs of its operations.

An ``OpFromGraph`` (the loop over chains' per-chain graph), a ``Scan`` or a ``Composite`` keeps a
graph of its own, and a ``Blockwise`` wraps an operation that may keep one: what holds for a
compiled function's graph (the BLAS calls it makes, the memory layout of its constants) has to
hold for those too.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["nodes_within"]


def nodes_within(fgraph) -> Iterator:
    """Yield every apply node of ``fgraph`` and of the inner graphs beneath it, each graph once.

    The inner graphs are those of each node's operation and of a ``Blockwise``'s core operation.
    """
    pending, seen = [fgraph], set()
    while pending:
        graph = pending.pop()
        if id(graph) in seen:
            continue
        seen.add(id(graph))
        for node in graph.toposort():
            yield node
            for op in (node.op, getattr(node.op, "core_op", None)):
                inner = getattr(op, "fgraph", None)
                if inner is not None:
                    pending.append(inner)
