"""The Gibbs update of one color (:mod:`pymc_bdmc.kernels.gibbs`) compiled into one function.

A color's update in NumPy is about a dozen array operations around one batched evaluation of
the elementwise terms (building the candidate states, gathering and summing each coordinate's
terms, the inverse-CDF draw); on models of a few hundred parameters they cost several times the
evaluation itself. Here they are one compiled PyTensor function, the same for every color: the
color (its coordinates, supports and the terms each coordinate touches) is an input, so the
function compiles once per model and widest support.

It is the same kernel, not an approximation: the uniforms are drawn in NumPy from the chains'
own streams exactly as :meth:`~pymc_bdmc.kernels.gibbs.ChromaticGibbs.sweep` draws them, and
the draws agree with the NumPy update (``tests/test_gibbs.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.replace import vectorize_graph

from pymc_bdmc.kernels.gibbs import GibbsColor
from pymc_bdmc.model.batching import checks_to_switches, register_fused_kernel

__all__ = ["FusedColorUpdate"]


class FusedColorUpdate:
    """One compiled Gibbs update of a color, for supports of at most ``n_values`` values.

    Parameters
    ----------
    x : TensorVariable
        The flat parameter vector the per-chain terms graph is a function of.
    terms : sequence of two TensorVariable
        Per-chain ``[prior_terms, likelihood_terms]`` (vectors), whose vectorized version was
        validated against the per-chain graph.
    n_values : int
        Widest support of any color; narrower supports are padded with impossible values.
    compile_fn : callable
        ``(inputs, outputs) -> function`` (the owning density's compiler and settings).
    count : callable, optional
        Called after each update (cost accounting: one batched evaluation of the terms).
    """

    def __init__(self, x, terms, n_values: int, compile_fn: Callable,
                 count: Callable[[], None] | None = None):
        self.n_values = int(n_values)
        self._fn = compile_fn(*_color_update_graph(x, checks_to_switches(list(terms)),
                                                   self.n_values))
        self._count = count

    def __call__(self, color: GibbsColor, x: np.ndarray, beta: float,
                 uniforms: np.ndarray) -> np.ndarray:
        """Redraw the color's coordinates in every chain of ``x`` (chains, n_dim); a new array."""
        prior, lik = color.prior_terms, color.likelihood_terms
        (new,) = self._fn(np.ascontiguousarray(x, dtype=float), np.float64(beta),
                       color.coords, color.lower, color.size, prior.padded, prior.valid,
                       lik.padded, lik.valid, np.ascontiguousarray(uniforms, dtype=float))
        if self._count is not None:
            self._count()
        return new


def _color_update_graph(x, terms, n_values: int):
    """Build one color's update graph (see ``ChromaticGibbs.conditional_logits``)."""
    states = pt.matrix("x_batch", dtype=x.dtype)
    beta = pt.scalar("beta", dtype=x.dtype)
    coords = pt.vector("coords", dtype="int64")
    lower, n_support = pt.vector("lower", dtype=x.dtype), pt.vector("size", dtype="int64")
    size = pt.cast(n_support, x.dtype)
    padded = [pt.matrix(f"{kind}_terms", dtype="int64") for kind in ("prior", "likelihood")]
    valid = [pt.matrix(f"{kind}_valid", dtype="bool") for kind in ("prior", "likelihood")]
    uniforms = pt.matrix("uniforms", dtype=x.dtype)  # (chains, c)

    # Coordinates along the leading axis, so every indexing is a plain row gather or set.
    by_coordinate = states.T  # (n_dim, chains)
    offset = by_coordinate[coords] - lower[:, None]  # (c, chains)

    def shifted(r):  # each value moved r places around its support (r < size: one wrap)
        moved = offset + r
        return lower[:, None] + pt.switch(moved >= size[:, None], moved - size[:, None], moved)

    # Rows r * chains + k: chain k with the color's coordinates shifted r places.
    candidates = pt.concatenate(
        [pt.set_subtensor(by_coordinate[coords], shifted(r)).T for r in range(n_values)], axis=0)
    prior, lik = vectorize_graph(list(terms), replace={x: candidates})  # (m * chains, P or L)

    n_coords, n_rows = coords.shape[0], candidates.shape[0]

    def owned_sums(values, terms, mask):  # (c, m * chains): each coordinate's terms summed
        gathered = values.T[terms.ravel()].reshape((n_coords, -1, n_rows))  # (c, w, rows)
        return pt.sum(pt.switch(mask[:, :, None], gathered, 0.0), axis=1)

    # At beta = 0 the prior alone, also where the data are impossible (0 * -inf).
    logits = (owned_sums(prior, padded[0], valid[0])
              + pt.switch(pt.gt(beta, 0), beta * owned_sums(lik, padded[1], valid[1]), 0.0))
    logits = logits.reshape((n_coords, n_values, states.shape[0])).dimshuffle(1, 2, 0)
    beyond = pt.arange(n_values)[:, None, None] >= size[None, None, :]
    logits = pt.switch(pt.isnan(logits) | beyond, -np.inf, logits)  # (m, chains, c)

    # Inverse-CDF draw, as kernels.gibbs._draw_shift; shift 0 where no value is possible.
    top = pt.max(logits, axis=0)
    finite = pt.isfinite(top)
    cumulative = pt.cumsum(pt.exp(logits - pt.switch(finite, top, 0.0)), axis=0)
    shift = pt.sum(cumulative <= (uniforms * cumulative[-1])[None], axis=0)
    shift = pt.switch(finite, pt.minimum(shift, n_values - 1), 0).T  # (c, chains)
    moved = offset + shift
    new = lower[:, None] + pt.switch(moved >= size[:, None], moved - size[:, None], moved)
    inputs = [states, beta, coords, lower, n_support, padded[0], valid[0], padded[1], valid[1],
              uniforms]
    return inputs, [pt.set_subtensor(by_coordinate[coords], new).T]


register_fused_kernel("gibbs", FusedColorUpdate)  # ModelDensity.fused_gibbs builds this
