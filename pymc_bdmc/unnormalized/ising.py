# ruff: noqa: RUF001, RUF002, RUF003  (γ is the paper's un-normalised density)
"""Ising fields on a free-boundary grid: statistics, exact normaliser, exact and MCMC simulation.

Spins ``y`` in {-1, +1} on an ``H x W`` grid. The un-normalised likelihood is

    log γ(y | η) = η₁ s₁(y) + η₂ s₂(y),

with ``s₁`` the sum of ``y_i y_j`` over horizontal and vertical neighbour pairs and ``s₂`` the sum
over the two diagonals of every 2 x 2 block (second-order neighbourhood). A first-order model has
``η = (c, 0)``; a second-order model with one coupling has ``η = (c, c)``, with two couplings
``η = (c₁, c₂)`` (Everitt, Johansen, Rowing & Evdemon-Hogan 2017, §2.6.1).

Exact computations use the row transfer matrix: the rows ``r_1..r_H`` (each one of ``2^W`` states)
form a Markov chain with ``p(r) ∝ Π_i h(r_i) Π_i T(r_i, r_{i+1})``, where ``h`` holds the
within-row pairs and ``T`` the pairs between consecutive rows. Forward filtering gives
``Z(η) = Σ α_H`` and backward sampling gives exact draws at any ``η`` (ordered phase included).
The grid is transposed when that makes rows shorter, so the cost is ``O(H · 4^min(H, W))``
time and ``O(4^min(H, W))`` memory per ``η`` (measured: about 20 ms at width 10; about 4 s and
450 MB peak at width 12); ``min(H, W) <= MAX_EXACT_WIDTH`` is accepted. Wider first-order
grids are still sampled exactly, by coupling from the past
(:func:`~pymc_bdmc.unnormalized.cftp.ising_cftp`: monotone heat-bath Gibbs from the all-up and
all-down fields), but only at couplings ``>= 0`` and with no exact normaliser. Wider
second-order grids need ``exact=False``: Swendsen-Wang sweeps (valid for couplings of either
sign), whose draws are only approximately from ``f(·|η)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.cftp import ising_cftp

__all__ = [
    "MAX_ENUMERATION_SITES",
    "MAX_EXACT_WIDTH",
    "IsingSimulator",
    "check_spins",
    "enumerated_log_partition",
    "ising_enumerate",
    "ising_natural",
    "ising_pseudo_likelihood_estimate",
    "ising_statistics",
]

MAX_EXACT_WIDTH = 12
MAX_ENUMERATION_SITES = 20
NEIGHBOURHOODS = ("first", "second")
#: Pseudo-likelihood estimates beyond this size are taken to run off to infinity (no maximum).
MAX_PSEUDO_LIKELIHOOD_ETA = 50.0


def check_spins(y, name: str = "y") -> np.ndarray:
    """Return ``y`` as an int64 array of shape (..., H, W), or raise if it is not a spin field."""
    arr = np.asarray(y)
    if arr.ndim < 2:
        raise BDMCInputError(f"Ising data {name!r} must have shape (H, W), got shape {arr.shape}.")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise BDMCInputError(f"Ising data {name!r} must be numeric spins in {{-1, +1}}.")
    bad = ~np.isin(arr, (-1, 1))
    if bad.any():
        values = np.unique(arr[bad])[:5].tolist()
        raise BDMCInputError(
            f"Ising data {name!r} must contain only spins -1 and +1; found {values} "
            f"({int(bad.sum())} entries). Recode 0/1 data as 2*y - 1."
        )
    return arr.astype(np.int64)


def ising_natural(coupling, neighbourhood: str = "first") -> np.ndarray:
    """Map a user's ``coupling`` to the natural parameters ``η = (η₁, η₂)`` of (s₁, s₂).

    ``coupling`` has shape (...,) or (..., 1) for one coupling, (..., 2) for separate nearest and
    diagonal couplings (second order only).
    """
    if neighbourhood not in NEIGHBOURHOODS:
        raise BDMCInputError(f"`neighbourhood` must be 'first' or 'second', got {neighbourhood!r}.")
    c = np.asarray(coupling, dtype=float)
    if c.ndim >= 1 and c.shape[-1] == 2:
        if neighbourhood == "first":
            raise BDMCInputError("A first-order Ising model has one coupling, got two.")
        return c
    if c.ndim >= 1 and c.shape[-1] == 1:
        c = c[..., 0]
    second = c if neighbourhood == "second" else np.zeros_like(c)
    return np.stack([c, second], axis=-1)


def ising_statistics(y) -> np.ndarray:
    """Sufficient statistics ``(s₁, s₂)`` of spin fields ``y`` of shape (..., H, W)."""
    y = np.asarray(y)
    s1 = ((y[..., :, 1:] * y[..., :, :-1]).sum((-1, -2))
          + (y[..., 1:, :] * y[..., :-1, :]).sum((-1, -2)))
    s2 = ((y[..., 1:, 1:] * y[..., :-1, :-1]).sum((-1, -2))
          + (y[..., 1:, :-1] * y[..., :-1, 1:]).sum((-1, -2)))
    return np.stack([s1, s2], axis=-1).astype(float)


def ising_pseudo_likelihood_estimate(y, neighbourhood: str = "first",
                                     max_iter: int = 100) -> np.ndarray:
    """Natural parameters ``η`` maximising the pseudo-likelihood of one field (Besag 1975).

    Given the other spins, ``p(y_i | y_-i) ∝ exp(y_i h_i)`` with ``h_i = η · N_i``, ``N_i`` the
    sums of site ``i``'s nearest and diagonal neighbours (free boundary). The log
    pseudo-likelihood ``Σ_i [y_i h_i - log 2cosh(h_i)]`` is concave in ``η``, so Newton's method
    finds its maximum; it needs no simulation and no normaliser, which makes it a check on
    estimates that do. A first-order model's second entry is 0. NaN where no finite maximum
    exists (e.g. a field with all spins equal).
    """
    if neighbourhood not in NEIGHBOURHOODS:
        raise BDMCInputError(f"`neighbourhood` must be 'first' or 'second', got {neighbourhood!r}.")
    spins = check_spins(y).astype(float)
    if spins.ndim != 2:
        raise BDMCInputError(f"One field of shape (H, W) is needed, got shape {spins.shape}.")
    padded = np.pad(spins, 1)  # zeros outside: free boundary
    nearest = padded[:-2, 1:-1] + padded[2:, 1:-1] + padded[1:-1, :-2] + padded[1:-1, 2:]
    diagonal = padded[:-2, :-2] + padded[:-2, 2:] + padded[2:, :-2] + padded[2:, 2:]
    features = np.stack([nearest.ravel(), diagonal.ravel()], axis=1)
    if neighbourhood == "first":
        features = features[:, :1]
    target = spins.ravel()
    eta = np.zeros(features.shape[1])
    for _ in range(max_iter):
        slope = np.tanh(features @ eta)
        gradient = features.T @ (target - slope)
        curvature = (features * (1.0 - slope**2)[:, None]).T @ features
        try:
            step = np.linalg.solve(curvature, gradient)
        except np.linalg.LinAlgError:
            return np.full(2, np.nan)
        eta = eta + step
        if not np.all(np.abs(eta) < MAX_PSEUDO_LIKELIHOOD_ETA):  # running off to infinity
            return np.full(2, np.nan)
        if np.max(np.abs(step)) < 1e-10:
            break
    return np.concatenate([eta, np.zeros(2 - eta.size)])


def ising_enumerate(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """All spin fields of a tiny grid, reduced to distinct statistics and their multiplicities.

    Returns ``(stats, log_count)`` with ``stats`` of shape (S, 2): then
    ``log Z(η) = logsumexp(stats @ η + log_count)`` for any ``η``. A brute-force oracle, limited
    to ``H * W <= MAX_ENUMERATION_SITES``.
    """
    h, w = (int(s) for s in shape)
    if h * w > MAX_ENUMERATION_SITES:
        raise BDMCInputError(f"Enumeration of a {h}x{w} grid ({2 ** (h * w)} fields) is too large.")
    codes = np.arange(2 ** (h * w), dtype=np.int64)
    bits = (codes[:, None] >> np.arange(h * w)) & 1
    stats = ising_statistics((2 * bits - 1).reshape(-1, h, w))
    unique, counts = np.unique(stats, axis=0, return_counts=True)
    return unique, np.log(counts)


def _row_states(width: int) -> np.ndarray:
    codes = np.arange(2 ** width)
    return (2 * ((codes[:, None] >> np.arange(width)) & 1) - 1).astype(float)


@lru_cache(maxsize=4)
def _pair_counts(width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Statistics of one row and of two consecutive rows, for every row state (η-free).

    Cached as int8 (|counts| <= 2 W) so that each new η costs one multiply-add and one exp
    over the 4^W pairs of rows instead of three matrix products.
    """
    states = _row_states(width)
    within = (states[:, 1:] * states[:, :-1]).sum(1)
    nearest = states @ states.T
    diagonal = states[:, :-1] @ states[:, 1:].T + states[:, 1:] @ states[:, :-1].T
    return within, nearest.astype(np.int8), diagonal.astype(np.int8)


@dataclass(frozen=True)
class _TransferModel:
    """Log-potentials of one row (``log_h``) and of two consecutive rows (``log_t``)."""

    log_h: np.ndarray
    log_t: np.ndarray

    @classmethod
    def build(cls, eta: np.ndarray, width: int) -> _TransferModel:
        within, nearest, diagonal = _pair_counts(width)
        log_t = eta[0] * nearest
        if eta[1] != 0.0:
            log_t += eta[1] * diagonal
        return cls(eta[0] * within, log_t)

    def forward(self, height: int) -> tuple[np.ndarray, float, np.ndarray]:
        """Normalised forward messages (height, S), ``log Z`` and the scaled transfer matrix."""
        shift = self.log_t.max()
        t = np.exp(self.log_t - shift)  # one shift for all rows keeps T's entries <= 1
        h = np.exp(self.log_h - self.log_h.max())
        alpha = np.empty((height, len(h)))
        log_z = self.log_h.max() * height + shift * (height - 1)
        a = h
        for i in range(height):
            if i > 0:
                a = (alpha[i - 1] @ t) * h
            total = a.sum()
            alpha[i] = a / total
            log_z += np.log(total)
        return alpha, float(log_z), t


class IsingSimulator:
    """Simulator and exact normaliser of a free-boundary Ising field.

    Parameters
    ----------
    shape : tuple of int
        Grid shape ``(H, W)``.
    neighbourhood : {"first", "second"}
    exact : bool, optional
        ``None`` (default) or ``True``: exact sampling, by the transfer matrix when
        ``min(H, W) <= MAX_EXACT_WIDTH``, else (first order only) by coupling from the past,
        which refuses negative couplings when sampling; a wider second-order grid is refused
        with a :class:`BDMCInputError`. ``False``: Swendsen-Wang sweeps from a uniform random
        start; every result that uses these draws is inexact.
    sweeps : int, default 500
        Swendsen-Wang sweeps per draw when ``exact=False``.
    """

    def __init__(self, shape, neighbourhood: str = "first", exact: bool | None = None,
                 sweeps: int = 500):
        if len(shape) != 2 or min(int(s) for s in shape) < 1:
            raise BDMCInputError(
                f"An Ising grid needs a shape (H, W) of positive sizes, got {shape}."
            )
        if neighbourhood not in NEIGHBOURHOODS:
            raise BDMCInputError(
                f"`neighbourhood` must be 'first' or 'second', got {neighbourhood!r}."
            )
        self.shape = (int(shape[0]), int(shape[1]))
        self.neighbourhood = neighbourhood
        narrow = min(self.shape)
        self.exact = bool(exact is None or exact)
        self.cftp = self.exact and narrow > MAX_EXACT_WIDTH
        if self.cftp and neighbourhood != "first":
            raise BDMCInputError(
                f"A {self.shape[0]}x{self.shape[1]} second-order Ising grid is too large for "
                f"exact transfer-matrix sampling (needs min(H, W) <= {MAX_EXACT_WIDTH}; coupling "
                "from the past covers first-order grids only). Pass `exact=False` to use "
                "Swendsen-Wang sweeps; results are then flagged inexact."
            )
        if int(sweeps) < 1:
            raise BDMCInputError(f"`sweeps` must be a positive integer, got {sweeps}.")
        self.sweeps = int(sweeps)
        self._cache: tuple | None = None  # (η, forward messages, log Z, transposed, T)

    # -- exact transfer matrix -------------------------------------------------------------
    def _transfer(self, eta: np.ndarray):
        key = (float(eta[0]), float(eta[1]))
        if self._cache is None or self._cache[0] != key:
            h, w = self.shape
            transposed = w > h  # run the chain over the longer side: rows of min(H, W) spins
            tm = _TransferModel.build(np.asarray(key), min(h, w))
            alpha, log_z, t = tm.forward(max(h, w))
            self._cache = (key, alpha, log_z, transposed, t)
        return self._cache[1:]

    def log_partition(self, eta) -> np.ndarray:
        """Exact ``log Z(η)`` for natural parameters of shape (..., 2) (exact simulators only)."""
        if min(self.shape) > MAX_EXACT_WIDTH:
            raise BDMCInputError(f"No exact normaliser for a {self.shape} grid.")
        eta = np.asarray(eta, dtype=float)
        flat = eta.reshape(-1, 2)
        out = np.array([self._transfer(e)[1] for e in flat])
        return out.reshape(eta.shape[:-1])

    def statistics(self, y) -> np.ndarray:
        """``(s₁, s₂)`` of fields of shape (..., H, W)."""
        return ising_statistics(y)

    def log_gamma(self, y, eta) -> np.ndarray:
        """``log γ(y | η) = η · s(y)``."""
        return (self.statistics(y) * np.asarray(eta, dtype=float)).sum(-1)

    def sample(self, eta, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` draws from ``f(· | η)`` at one ``η`` (shape (2,)), as int64 (size, H, W)."""
        eta = np.asarray(eta, dtype=float).reshape(2)
        if not self.exact:
            start = rng.choice(np.array([-1, 1]), size=(size, *self.shape))
            return self.mcmc(start, eta, rng, self.sweeps)
        if self.cftp:
            if eta[1] != 0.0:
                raise BDMCInputError("Coupling from the past samples first-order fields only.")
            return ising_cftp(self.shape, eta[0], size, rng)
        alpha, _, transposed, t = self._transfer(eta)
        n_rows = alpha.shape[0]
        states = _row_states(min(self.shape)).astype(np.int64)
        rows = np.empty((size, n_rows), dtype=np.int64)
        rows[:, -1] = _categorical(np.broadcast_to(alpha[-1], (size, alpha.shape[1])), rng)
        for i in range(n_rows - 2, -1, -1):
            # p(r_i | r_{i+1}) ∝ α_i(r_i) T(r_i, r_{i+1})
            rows[:, i] = _categorical(alpha[i][None, :] * t[:, rows[:, i + 1]].T, rng)
        fields = states[rows]  # (size, long side, short side)
        return np.swapaxes(fields, 1, 2) if transposed else fields

    # -- Swendsen-Wang ---------------------------------------------------------------------
    def mcmc(self, y, eta, rng: np.random.Generator, sweeps: int = 1) -> np.ndarray:
        """Apply ``sweeps`` Swendsen-Wang updates to each field in ``y`` (n, H, W).

        Each update leaves ``f(·|η)`` invariant: a pair with coupling ``J`` is bonded with
        probability ``1 - exp(-2|J|)`` when ``J y_i y_j > 0``, and every cluster of bonded sites
        is then flipped with probability 1/2 (Swendsen & Wang 1987).
        """
        y = np.array(y, dtype=np.int64, order="C", copy=True)  # C order: reshape gives views
        eta = np.asarray(eta, dtype=float).reshape(2)
        pairs = _pairs(self.shape)
        couplings = np.concatenate([np.full(len(p), eta[k]) for k, p in enumerate(pairs)])
        i, j = (np.concatenate([p[:, c] for p in pairs]) for c in (0, 1))
        keep = couplings != 0.0
        i, j, couplings = i[keep], j[keep], couplings[keep]
        p_bond = -np.expm1(-2.0 * np.abs(couplings))
        n_sites = self.shape[0] * self.shape[1]
        n_fields = len(y)
        spins = y.reshape(-1)
        flat = spins.reshape(n_fields, n_sites)
        # All fields form one block-diagonal graph, so one connected_components call per sweep.
        offset = (np.arange(n_fields) * n_sites)[:, None]
        gi, gj = (i + offset).ravel(), (j + offset).ravel()
        total = n_fields * n_sites
        for _ in range(int(sweeps)):
            satisfied = couplings * flat[:, i] * flat[:, j] > 0
            bonded = (satisfied & (rng.random(satisfied.shape) < p_bond)).ravel()
            graph = coo_matrix((np.ones(bonded.sum()), (gi[bonded], gj[bonded])),
                               shape=(total, total))
            n_comp, labels = connected_components(graph, directed=False)
            flip = rng.random(n_comp) < 0.5
            spins[flip[labels]] *= -1
        return y


def _pairs(shape: tuple[int, int]) -> list[np.ndarray]:
    """Flat-index site pairs: [nearest (horizontal + vertical), diagonal]."""
    h, w = shape
    idx = np.arange(h * w).reshape(h, w)
    nearest = np.concatenate([
        np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
        np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1),
    ])
    diagonal = np.concatenate([
        np.stack([idx[:-1, :-1].ravel(), idx[1:, 1:].ravel()], 1),
        np.stack([idx[:-1, 1:].ravel(), idx[1:, :-1].ravel()], 1),
    ])
    return [nearest, diagonal]


def _categorical(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of non-negative ``weights`` (n, S), by inverse CDF."""
    cdf = np.cumsum(weights, axis=1)
    u = rng.random(len(cdf)) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(1), cdf.shape[1] - 1)


def enumerated_log_partition(stats: np.ndarray, log_count: np.ndarray, eta) -> np.ndarray:
    """``log Z(η)`` from :func:`ising_enumerate` output, for ``η`` of shape (..., 2)."""
    eta = np.asarray(eta, dtype=float)
    return logsumexp(np.einsum("...k,sk->...s", eta, stats) + log_count, axis=-1)
