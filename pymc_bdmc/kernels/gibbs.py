"""Vectorized Gibbs updates of discrete variables over many chains: chromatic Gibbs sampling.

The tempered density is a sum of elementwise terms (each variable's log-density elements,
log-Jacobians included, and ``beta`` times each likelihood element). A Gibbs update of one
discrete coordinate needs only the terms that depend on it, and two coordinates that share no
term are conditionally independent, so they can be drawn at the same time. So:

1. **Dependencies** (once, at build time). Each discrete coordinate is moved to every other
   value of its support at a few valid states; the elementwise terms that change are the ones it
   touches.
2. **Colors.** Coordinates that touch a common term conflict; a greedy coloring of that conflict
   graph groups the coordinates into colors whose members touch disjoint sets of terms (the
   binary-attributes matrix ``Z`` of ``Y = Z A + noise`` gets one color per attribute column:
   the rows are independent given ``A``).
3. **Sweep.** For each color, one batched evaluation of the terms with every coordinate of the
   color at every value of its support (``x_j -> lower_j + (x_j - lower_j + r) mod size_j``,
   ``r = 0, ..., m - 1``), in every chain, gives each coordinate's conditional log-density of
   every value (the sum of the terms it touches); one uniform per coordinate and chain draws
   from it exactly. A sweep over ``C`` colors costs ``C`` batched evaluations of ``m`` times
   the chains, whatever the number of coordinates.

A coordinate without a fixed small support (a Poisson count; :mod:`pymc_bdmc.model.discrete`)
is drawn from a *window* of ``W`` consecutive values holding the current one at a uniformly
drawn position, from the conditional restricted to it (values outside the support have density
zero). Each window holding ``x`` is equally likely, and ``P(x -> x') = sum over windows holding
both of pi(x') / (W pi(window))``: ``pi(x) P(x -> x')`` is symmetric, so the update is
reversible, as an exact Gibbs update is.

Each color's update is an exact Gibbs update of a block of conditionally independent
coordinates (or its window form), so it is reversible with respect to the tempered density; a
sweep visits the colors in a fixed order and its reversal visits them in the opposite order
(``reverse=True``). Nothing is tuned: the kernel is a fixed function of ``beta``.

A dependency that changes no term at any of the test states would be missed (a term moved only
at values of another discrete variable that no test state holds); the test states are prior
draws (continuous parameters in general position). The sampler checks, before building the
kernel, that the terms add up to the model's own densities there, and after, that each color's
conditionals are the model's at other prior draws; a coordinate whose conditional is not is
given every term (``pymc_bdmc.pipeline.discrete.gibbs_kernel``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from pymc_bdmc.model.discrete import DiscreteCoordinates

__all__ = ["BoundSweep", "ChromaticGibbs", "GibbsColor", "OwnedTerms", "TermsFn", "shifted_values"]

#: ``x -> (prior_terms, likelihood_terms)``, batched over chains.
TermsFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
#: ``(color, x, beta, uniforms) -> x_new``: one color's update, e.g. compiled.
ColorUpdate = Callable[["GibbsColor", np.ndarray, float, np.ndarray], np.ndarray]

#: Rows per batched evaluation while finding dependencies (bounds memory, not results).
_PROBE_ROWS = 256
#: Largest padding (entries per touched term) at which the compiled color update is used.
_MAX_PADDING = 4.0
#: Relative change of a term counted as a dependency (round-off of batched products is ~1e-15).
_CHANGE_RTOL = 1e-9


@dataclass(frozen=True)
class OwnedTerms:
    """Which terms each coordinate of a color touches, grouped for a fast per-coordinate sum.

    Attributes
    ----------
    order : ndarray of int, shape (nnz,)
        Term positions, grouped by the coordinate that touches them (at most one per term).
    starts : ndarray of int, shape (c,)
        Where each coordinate's group begins in ``order``.
    empty : ndarray of bool, shape (c,)
        Coordinates that touch no term of this kind (their sum is 0).
    padded : ndarray of int, shape (c, w)
        The same groups as rows of a rectangle (``w`` the largest group), padded with the
        group's first term (or term 0) where ``valid`` is False: a form compiled code can
        gather and sum without scatter-adds.
    valid : ndarray of bool, shape (c, w)
    """

    order: np.ndarray
    starts: np.ndarray
    empty: np.ndarray
    padded: np.ndarray
    valid: np.ndarray

    @classmethod
    def from_touched(cls, touched: sp.csr_matrix) -> OwnedTerms:
        """From a (c, n_terms) 0/1 matrix whose columns have at most one nonzero."""
        counts = np.diff(touched.indptr)
        order = np.asarray(touched.indices, dtype=np.int64)
        starts = np.asarray(touched.indptr[:-1], dtype=np.int64)
        width = max(int(counts.max(initial=0)), 1)
        valid = np.arange(width)[None, :] < counts[:, None]
        position = np.where(valid, starts[:, None] + np.arange(width)[None, :], 0)
        padded = order[position] if len(order) else np.zeros_like(position)
        return cls(order, starts, counts == 0, padded.astype(np.int64), valid)

    @property
    def padding(self) -> float:
        """Entries of :attr:`padded` per term actually touched (1 when perfectly balanced)."""
        return self.valid.size / max(int(self.valid.sum()), 1)

    def sums(self, terms: np.ndarray) -> np.ndarray:
        """Per row of ``terms`` (rows, n_terms), each coordinate's sum of the terms it touches."""
        order = self.order
        if len(order) and order[-1] - order[0] + 1 == len(order) and np.all(np.diff(order) == 1):
            gathered = terms[:, order[0]:order[-1] + 1]  # a run of terms: a view, not a copy
        else:
            gathered = terms[:, order]
        if not self.empty.any():
            return np.add.reduceat(gathered, self.starts, axis=1)
        # reduceat sums up to the next start, so it must see the nonempty groups only.
        sums = np.zeros((len(terms), len(self.starts)))
        if len(self.order):
            sums[:, ~self.empty] = np.add.reduceat(gathered, self.starts[~self.empty], axis=1)
        return sums


@dataclass(frozen=True)
class GibbsColor:
    """Coordinates updated together, and the terms each of them touches.

    Attributes
    ----------
    coords : ndarray of int, shape (c,)
        Positions in the flat vector.
    lower, size : ndarray, shape (c,)
        Supports: ``lower, ..., lower + size - 1``; for a window coordinate, the window's width
        and the support's least value (``-inf`` where the distribution fixes none).
    prior_terms, likelihood_terms : OwnedTerms
        The prior and likelihood terms each coordinate touches: each term is touched by at most
        one coordinate of the color, which is what makes them conditionally independent.
    window : ndarray of bool, shape (c,)
        Coordinates drawn from a random window of ``size`` values (module docstring).
    """

    coords: np.ndarray
    lower: np.ndarray
    size: np.ndarray
    prior_terms: OwnedTerms
    likelihood_terms: OwnedTerms
    window: np.ndarray | None = None

    def __post_init__(self):
        if self.window is None:
            object.__setattr__(self, "window", np.zeros(len(self.coords), dtype=bool))

    def lower_at(self, current: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        """Each chain's lowest candidate value, shape (chains, c), from ``current`` (chains, c).

        A window starts ``offsets`` (integers below ``size``; 0 where None) below the current
        value; a fixed support at its own lower bound.
        """
        below = 0 if offsets is None else offsets
        return np.where(self.window, current - below, self.lower)

    @property
    def max_size(self) -> int:
        """Size of the widest support in the color."""
        return int(self.size.max())


def _changed(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        same = np.isclose(new, old, rtol=_CHANGE_RTOL, atol=1e-12, equal_nan=True)
    return ~same


def shifted_values(values: np.ndarray, lower: np.ndarray, size: np.ndarray, r) -> np.ndarray:
    """Each value moved ``r`` places around its support (cyclically)."""
    offset = values - lower + r
    if np.ndim(r) == 0 and r < size.min():  # one wrap at most: cheaper than a float modulo
        return lower + np.where(offset >= size, offset - size, offset)
    return lower + np.mod(offset, size)


def _greedy_coloring(conflicts: sp.csr_matrix) -> np.ndarray:
    """Smallest free color per coordinate, in coordinate order."""
    n = conflicts.shape[0]
    colors = np.full(n, -1)
    for j in range(n):
        neighbours = conflicts.indices[conflicts.indptr[j]:conflicts.indptr[j + 1]]
        used = set(colors[neighbours].tolist())
        color = 0
        while color in used:
            color += 1
        colors[j] = color
    return colors


@dataclass(frozen=True)
class ChromaticGibbs:
    """A frozen chromatic Gibbs sweep over the discrete coordinates (see module doc).

    Build it with :meth:`build`; it holds only NumPy and SciPy arrays, so it pickles to worker
    processes, where it runs on their own compiled terms function.

    Attributes
    ----------
    colors : tuple of GibbsColor
        In sweep order.
    n_prior_terms, n_terms : int
        Number of prior terms (they come first) and of all terms.
    pinned : ndarray of int
        Every discrete coordinate (those with one value included): gradient kernels must
        leave them alone.
    """

    colors: tuple[GibbsColor, ...]
    n_prior_terms: int
    n_terms: int
    pinned: np.ndarray

    @classmethod
    def build(cls, coordinates: DiscreteCoordinates, terms_fn: TermsFn,
              points: np.ndarray, touch_all=()) -> ChromaticGibbs:
        """Find which terms each coordinate touches at ``points`` and color the coordinates.

        Parameters
        ----------
        coordinates : DiscreteCoordinates
            The discrete coordinates and their supports.
        terms_fn : callable
            Batched elementwise terms (e.g. :meth:`~pymc_bdmc.model.density.ModelDensity.terms`).
        points : ndarray, shape (n_points, n_dim)
            Valid states with continuous parameters in general position (prior draws); two or
            three are enough.
        touch_all : sequence of int, optional
            Flat indices of coordinates taken to touch every term, whatever the probes show:
            their conditionals come from the whole density (exact; each gets a color of its
            own), for coordinates whose terms depend on other discrete values.

        Returns
        -------
        ChromaticGibbs
        """
        points = np.atleast_2d(np.asarray(points, dtype=float))
        prior0, lik0 = terms_fn(points)
        base = np.concatenate([prior0, lik0], axis=1)
        n_prior, n_terms = prior0.shape[1], base.shape[1]
        movable = np.flatnonzero(coordinates.size > 1)
        index, lower, size = (coordinates.index[movable], coordinates.lower[movable],
                              coordinates.size[movable])
        window = np.asarray(coordinates.window)[movable]
        # touched[j, e]: term e changes when coordinate j moves to another value of its support
        # (any value, at any of the points). Every value is tried: a switchpoint's term of year
        # t changes only where the switchpoint crosses t, which one shift would mostly miss.
        owner = np.repeat(np.arange(len(movable)), size - 1)
        shifts = np.concatenate([np.arange(1, m) for m in size]) if len(size) else owner
        touched = sp.csr_matrix((len(movable), n_terms), dtype=np.int64)
        for b, point in enumerate(points):
            start_at = np.where(window, point[index], lower)  # a window from the point's value
            for start in range(0, len(owner), _PROBE_ROWS):
                rows_of = owner[start:start + _PROBE_ROWS]
                rows = np.repeat(point[None, :], len(rows_of), axis=0)
                rows[np.arange(len(rows)), index[rows_of]] = shifted_values(
                    point[index[rows_of]], start_at[rows_of], size[rows_of],
                    shifts[start:start + _PROBE_ROWS])
                moved = np.concatenate(terms_fn(rows), axis=1)
                changed = sp.csr_matrix(_changed(moved, base[b][None, :]), dtype=np.int64)
                by_owner = sp.csr_matrix((np.ones(len(rows_of), dtype=np.int64),
                                          (rows_of, np.arange(len(rows_of)))),
                                         shape=(len(movable), len(rows_of)))
                touched = touched + by_owner @ changed
        everywhere = np.flatnonzero(np.isin(index, np.asarray(touch_all, dtype=np.int64)))
        if everywhere.size:
            touched = touched + sp.csr_matrix(
                (np.ones(everywhere.size * n_terms, dtype=np.int64),
                 (np.repeat(everywhere, n_terms), np.tile(np.arange(n_terms), everywhere.size))),
                shape=touched.shape)
        touched.data[:] = 1
        colors = _greedy_coloring(sp.csr_matrix(touched @ touched.T))
        built = []
        for color in range(colors.max() + 1 if len(colors) else 0):
            members = np.flatnonzero(colors == color)
            owned = sp.csr_matrix(touched[members])  # (c, n_terms), sorted indices per row
            owned.sort_indices()
            built.append(GibbsColor(index[members].astype(np.int64),
                                    lower[members].astype(float), size[members].astype(np.int64),
                                    OwnedTerms.from_touched(owned[:, :n_prior]),
                                    OwnedTerms.from_touched(owned[:, n_prior:]),
                                    window[members]))
        return cls(tuple(built), n_prior, n_terms, np.asarray(coordinates.index))

    @property
    def n_coordinates(self) -> int:
        """Number of coordinates updated per sweep."""
        return sum(len(c.coords) for c in self.colors)

    @property
    def evaluations_per_sweep(self) -> int:
        """Batched term evaluations per sweep (one per color, on all values at once)."""
        return len(self.colors)

    @property
    def max_size(self) -> int:
        """Widest support of any color (the candidate values per coordinate in an update)."""
        return max((color.max_size for color in self.colors), default=1)

    @property
    def states_per_sweep(self) -> int:
        """States per chain at which a sweep evaluates the terms (each color's widest support)."""
        return sum(color.max_size for color in self.colors)

    @property
    def reversible(self) -> bool:
        """Whether one sweep is reversible by itself: one color, an exact block update.

        A sweep over several colors is not (its reversal visits them in the other order).
        """
        return len(self.colors) == 1

    @property
    def fusable(self) -> bool:
        """Whether the compiled color update suits these colors.

        It gathers each coordinate's terms as a rectangle; where one coordinate touches far
        more terms than the others, the padding would cost more than the NumPy sum. Without
        colors (every discrete variable has one value) there is nothing to compile.
        """
        return bool(self.colors) and all(
            max(color.prior_terms.padding, color.likelihood_terms.padding) <= _MAX_PADDING
            and not color.window.any() for color in self.colors)

    def bound_to(self, terms_fn: TermsFn, update: ColorUpdate | None = None) -> BoundSweep:
        """Bind the sweep to ``terms_fn``, as ``(rng, x, beta, reverse) -> x_new``.

        The form :meth:`pymc_bdmc.kernels.plan.AnnealingPlan.transition` takes. ``update``
        is a compiled color update (:meth:`~pymc_bdmc.model.density.ModelDensity.fused_gibbs`)
        to run instead of the NumPy one.
        """
        return BoundSweep(self, terms_fn, update)

    @staticmethod
    def conditional_logits(color: GibbsColor, x: np.ndarray, beta: float,
                           terms_fn: TermsFn, lower: np.ndarray | None = None) -> np.ndarray:
        """Conditional log-densities of every value of the color's coordinates, per chain.

        Returns an array of shape (m, chains, c): entry ``[r, k, j]`` is, up to a constant per
        ``(k, j)``, the tempered log-density of chain ``k`` with coordinate ``j`` shifted ``r``
        places around its support (``-inf`` past a narrower support, and for NaN densities).
        ``lower`` (chains, c): each chain's lowest value (:meth:`GibbsColor.lower_at`; the
        supports' own where omitted).
        """
        n_chains = len(x)
        m = color.max_size
        lower = color.lower if lower is None else lower
        # Every chain at every value of the color's coordinates, in one batched call:
        # rows r * n_chains + k hold chain k with each coordinate shifted r places.
        candidates = np.repeat(x[None], m, axis=0)
        values = shifted_values(x[None, :, color.coords], lower, color.size,
                                np.arange(1, m)[:, None, None])
        # A window's values below the support have density zero. The model is evaluated at the
        # current value there instead: the value could make every element of another term -inf
        # (a negative count as a Binomial's trials), and with it other coordinates' conditionals.
        below = values < np.where(color.window, color.lower, -np.inf)
        if below.any():
            values = np.where(below, x[None, :, color.coords], values)
        candidates[1:, :, color.coords] = values
        prior, lik = terms_fn(candidates.reshape(m * n_chains, -1))
        with np.errstate(invalid="ignore"):
            logits = color.prior_terms.sums(prior)
            if beta > 0:  # at beta = 0 the prior alone, also where the data are impossible
                logits = logits + beta * color.likelihood_terms.sums(lik)
        logits = logits.reshape(m, n_chains, -1)
        logits = np.where(np.isnan(logits), -np.inf, logits)
        if below.any():
            logits[1:][below] = -np.inf
        if m > color.size.min():  # values past a narrower support do not exist
            beyond = np.arange(m)[:, None, None] >= color.size[None, None, :]
            logits = np.where(beyond, -np.inf, logits)
        return logits

    def sweep(self, rng, x: np.ndarray, beta: float, terms_fn: TermsFn,
              reverse: bool = False,
              update: ColorUpdate | None = None) -> tuple[np.ndarray, np.ndarray]:
        """One sweep at inverse temperature ``beta`` for every chain.

        Parameters
        ----------
        rng : numpy.random.Generator or BlockedGenerator
            Draws one uniform per coordinate and chain, color by color.
        x : ndarray, shape (chains, n_dim)
        beta : float
        terms_fn : callable
        reverse : bool, default False
            Visit the colors in reverse order (the sweep's reversal).
        update : callable, optional
            ``(color, x, beta, uniforms) -> x_new``, a compiled color update
            (:class:`~pymc_bdmc.kernels.fused_gibbs.FusedColorUpdate`) used in place of the
            NumPy one (``terms_fn`` is then unused); it takes the same uniforms.

        Returns
        -------
        x_new : ndarray
            New states (a new array).
        moved : ndarray of bool, shape (chains,)
            Chains whose discrete values changed.
        """
        x = np.array(x, dtype=float)
        start = x.copy()
        n_chains = len(x)
        for color in (reversed(self.colors) if reverse else self.colors):
            uniforms = rng.uniform(size=(n_chains, len(color.coords)))
            if update is not None and not color.window.any():
                x = update(color, x, beta, uniforms)
                continue
            current = x[:, color.coords]
            offsets = None
            if color.window.any():  # where each window starts below the current value
                offsets = np.floor(rng.uniform(size=uniforms.shape) * color.size)
            lower = color.lower_at(current, offsets)
            logits = self.conditional_logits(color, x, beta, terms_fn, lower)
            x[:, color.coords] = shifted_values(current, lower, color.size,
                                                _draw_shift(logits, uniforms))
        return x, np.any(x != start, axis=1)


@dataclass(frozen=True)
class BoundSweep:
    """A sweep bound to a terms function: ``sweep(rng, x, beta, reverse) -> x_new``.

    Attributes
    ----------
    gibbs : ChromaticGibbs
        The kernel (its colors say what a sweep costs and whether it is reversible).
    terms_fn : callable
    update : callable, optional
        A compiled color update (see :meth:`ChromaticGibbs.sweep`).
    """

    gibbs: ChromaticGibbs
    terms_fn: TermsFn
    update: ColorUpdate | None = None

    def __call__(self, rng, x: np.ndarray, beta: float, reverse: bool) -> np.ndarray:
        """One sweep of every chain of ``x`` at ``beta`` (colors reversed with ``reverse``)."""
        return self.gibbs.sweep(rng, x, beta, self.terms_fn, reverse, self.update)[0]


def _draw_shift(logits: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Inverse-CDF draws from ``softmax(logits)`` over axis 0; shift 0 where none is finite."""
    top = logits.max(axis=0)
    finite = np.isfinite(top)
    with np.errstate(invalid="ignore", over="ignore"):
        weights = np.exp(logits - np.where(finite, top, 0.0))
    cumulative = np.cumsum(weights, axis=0)
    target = uniforms * cumulative[-1]
    shift = np.sum(cumulative <= target[None], axis=0)
    shift = np.minimum(shift, len(logits) - 1)
    return np.where(finite, shift, 0)
