"""Random streams attached to blocks of chains, so that results do not depend on how chains are split.

The chains of a run are cut into consecutive *blocks* of :data:`STREAM_BLOCK` chains, each with
its own generator spawned from the run's stream. Every random draw a kernel makes for a batch of
chains is assembled from the generators of the blocks in that batch, each drawing for its own
chains only. A block therefore sees the same random numbers whether it runs alone, next to other
blocks in one batched call, or in another process, and work can be split across processes (or
batches, to bound memory) at block boundaries without changing any chain's randomness.

Blocks rather than single chains carry the streams because each draw costs one generator call per
block: a block of 8 keeps that cost small next to the batched model evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["STREAM_BLOCK", "BlockedGenerator", "ChainBlocks"]

#: Chains per random stream (the unit in which chains can be split across batches or processes).
STREAM_BLOCK = 8


@dataclass(frozen=True)
class ChainBlocks:
    """The blocks of a run's chains and one generator per block.

    Attributes
    ----------
    sizes : tuple of int
        Number of chains in each block (all :data:`STREAM_BLOCK` but possibly the last).
    generators : tuple of numpy.random.Generator
        One independent generator per block.
    """

    sizes: tuple[int, ...]
    generators: tuple[np.random.Generator, ...]

    @classmethod
    def spawn(cls, rng: np.random.Generator, n_chains: int,
              block: int = STREAM_BLOCK) -> ChainBlocks:
        """Cut ``n_chains`` into blocks and give each a child stream of ``rng``."""
        sizes = tuple(min(block, n_chains - start) for start in range(0, n_chains, block))
        return cls(sizes, tuple(rng.spawn(len(sizes))))

    @property
    def n_chains(self) -> int:
        """Total number of chains."""
        return sum(self.sizes)

    def __len__(self) -> int:
        return len(self.sizes)

    def chain_slice(self, first: int, stop: int) -> slice:
        """The chains of blocks ``first..stop-1``."""
        return slice(sum(self.sizes[:first]), sum(self.sizes[:stop]))

    def subset(self, first: int, stop: int) -> ChainBlocks:
        """Blocks ``first..stop-1`` (their generators are shared, not copied)."""
        return ChainBlocks(self.sizes[first:stop], self.generators[first:stop])

    def groups(self, max_chains: int | None, n_groups: int = 1) -> list[tuple[int, int]]:
        """Split the blocks into consecutive groups ``(first, stop)`` of whole blocks.

        At least ``n_groups`` groups (if there are that many blocks), each of at most
        ``max_chains`` chains where a single block allows it.
        """
        per_group = -(-len(self) // max(1, min(n_groups, len(self))))
        if max_chains is not None:
            per_group = max(1, min(per_group, max_chains // max(self.sizes)))
        return [(first, min(first + per_group, len(self)))
                for first in range(0, len(self), per_group)]

    def generator(self) -> BlockedGenerator:
        """A generator-like object drawing for all chains of these blocks at once."""
        return BlockedGenerator(self.sizes, self.generators)


class BlockedGenerator:
    """Draws for a batch of chains, each block of chains from its own generator.

    Implements the part of :class:`numpy.random.Generator` the kernels use, for draws whose
    leading dimension is the batch of chains: ``uniform(low, high, size)`` and
    ``standard_normal(size)``. Anything else raises, rather than silently mixing streams.

    Draws are buffered: each block fills its own rows of a per-kind buffer of
    :data:`BUFFER_DRAWS` numbers per chain from its own generator, and a request takes the next
    columns. One slice then serves all chains, instead of one generator call per block on every
    request (which cost as much as the model call on small models). A block's numbers depend only
    on its generator and on the sequence of requests, which is the same however chains are
    grouped, so grouping still changes nothing.
    """

    #: Numbers per chain fetched at once for each kind of draw.
    BUFFER_DRAWS = 512

    def __init__(self, sizes: Sequence[int], generators: Sequence[np.random.Generator]):
        if len(sizes) != len(generators):
            raise ValueError("One generator per block is needed.")
        self._sizes = tuple(int(s) for s in sizes)
        self._generators = tuple(generators)
        self.n_chains = sum(self._sizes)
        self._buffers: dict[str, list] = {}  # kind -> [array (chains, BUFFER_DRAWS), next column]

    def _shape(self, size) -> tuple[int, ...]:
        shape = () if size is None else (size,) if isinstance(size, int | np.integer) else tuple(size)
        if not shape or shape[0] != self.n_chains:
            raise ValueError(
                f"Draws must have one row per chain ({self.n_chains}), got size {size!r}."
            )
        return shape

    def _per_block(self, kind: str, width: int) -> np.ndarray:
        """``width`` fresh numbers per chain, shape (chains, width), each block's from its own."""
        def draw(g, shape):
            return g.standard_normal(shape) if kind == "normal" else g.random(shape)

        if 2 * width > self.BUFFER_DRAWS:  # a buffer would serve one request: draw directly
            return np.concatenate([draw(g, (n, width))
                                   for g, n in zip(self._generators, self._sizes, strict=True)])
        buffer = self._buffers.get(kind)
        if buffer is None or buffer[1] + width > self.BUFFER_DRAWS:
            buffer = self._buffers[kind] = [
                np.concatenate([draw(g, (n, self.BUFFER_DRAWS))
                                for g, n in zip(self._generators, self._sizes, strict=True)]), 0]
        values, start = buffer
        buffer[1] = start + width
        return values[:, start:start + width].copy()

    def uniform(self, low=0.0, high=1.0, size=None) -> np.ndarray:
        """Uniform draws on ``[low, high)``; ``size`` leads with the number of chains."""
        shape = self._shape(size)
        unit = self._per_block("uniform", math.prod(shape[1:])).reshape(shape)
        return low + (high - low) * unit

    def standard_normal(self, size=None) -> np.ndarray:
        """Standard normal draws; ``size`` leads with the number of chains."""
        shape = self._shape(size)
        return self._per_block("normal", math.prod(shape[1:])).reshape(shape)
