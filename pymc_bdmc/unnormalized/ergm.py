# ruff: noqa: RUF001, RUF002, RUF003  (γ is the paper's un-normalised density)
"""Exponential random graph models on undirected simple graphs.

``y`` is a symmetric 0/1 adjacency matrix with a zero diagonal on ``n`` nodes and
``log γ(y | θ) = θ · s(y)`` with statistics chosen by name:

* ``"edges"``: ``Σ_{i<j} y_ij``;
* ``"two_stars"``: ``Σ_i C(d_i, 2)`` with ``d_i`` the degree of node ``i``;
* ``"triangles"``: ``tr(y³) / 6``.

With edges only the dyads are independent Bernoulli(logit⁻¹ θ) and
``log Z(θ) = C(n, 2) log(1 + e^θ)``, so simulation is exact. Any other statistic needs
``exact=False``: a Gibbs sampler over dyads using change statistics (Everitt et al. 2017, §2.4;
Caimo & Friel 2011), whose draws are only approximately from ``f(·|θ)``. Tiny graphs
(``n <= MAX_ENUMERATION_NODES``) can be enumerated for an exact ``log Z``, as a test oracle.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, logsumexp

from pymc_bdmc.errors import BDMCInputError

__all__ = [
    "ERGM_STATISTICS",
    "MAX_ENUMERATION_NODES",
    "ERGMSimulator",
    "check_adjacency",
    "ergm_statistics",
]

ERGM_STATISTICS = ("edges", "two_stars", "triangles")
MAX_ENUMERATION_NODES = 6


def check_statistics(statistics) -> tuple[str, ...]:
    """Return ``statistics`` as a tuple of known, distinct names, or raise."""
    if isinstance(statistics, str):
        statistics = (statistics,)
    stats = tuple(statistics)
    unknown = [s for s in stats if s not in ERGM_STATISTICS]
    if not stats or unknown or len(set(stats)) != len(stats):
        raise BDMCInputError(
            f"ERGM `statistics` must be distinct names from {ERGM_STATISTICS}, got {stats}."
        )
    return stats


def check_adjacency(y, name: str = "y") -> np.ndarray:
    """Return ``y`` as an int64 adjacency matrix (..., n, n), or raise.

    It must be the adjacency matrix of an undirected simple graph: square, 0/1, symmetric,
    zero diagonal.
    """
    arr = np.asarray(y)
    if arr.ndim < 2 or arr.shape[-1] != arr.shape[-2] or arr.shape[-1] < 2:
        raise BDMCInputError(
            f"ERGM data {name!r} must be a square adjacency matrix of at least 2 nodes, got "
            f"shape {arr.shape}."
        )
    if arr.dtype != bool and not np.issubdtype(arr.dtype, np.number):
        raise BDMCInputError(f"ERGM data {name!r} must be a numeric 0/1 adjacency matrix.")
    if not np.isin(arr, (0, 1)).all():
        raise BDMCInputError(f"ERGM data {name!r} must contain only 0 and 1 (a binary matrix).")
    if (arr != np.swapaxes(arr, -1, -2)).any():
        raise BDMCInputError(
            f"ERGM data {name!r} is not symmetric; the model is for undirected graphs."
        )
    if np.diagonal(arr, axis1=-2, axis2=-1).any():
        raise BDMCInputError(f"ERGM data {name!r} has a non-zero diagonal (self-loops).")
    return arr.astype(np.int64)


def ergm_statistics(y, statistics=ERGM_STATISTICS) -> np.ndarray:
    """Return the named statistics of adjacency matrices ``y`` (..., n, n), shape (..., k)."""
    y = np.asarray(y, dtype=float)
    degree = y.sum(-1)
    values = {
        "edges": lambda: degree.sum(-1) / 2.0,
        "two_stars": lambda: (degree * (degree - 1) / 2.0).sum(-1),
        "triangles": lambda: np.einsum("...ij,...jk,...ki->...", y, y, y) / 6.0,
    }
    return np.stack([values[s]() for s in check_statistics(statistics)], axis=-1)


def _change_statistics(y: np.ndarray, i: int, j: int, statistics) -> np.ndarray:
    """``s(y with ij on) - s(y with ij off)`` for graphs ``y`` (m, n, n), shape (m, k)."""
    out = []
    for s in statistics:
        if s == "edges":
            out.append(np.ones(len(y)))
        elif s == "two_stars":
            out.append((y[:, i].sum(1) - y[:, i, j] + y[:, j].sum(1) - y[:, j, i]).astype(float))
        else:
            out.append(np.einsum("mk,mk->m", y[:, i], y[:, j]).astype(float))
    return np.stack(out, axis=1)


class ERGMSimulator:
    """Simulator of an ERGM on ``n`` nodes.

    Parameters
    ----------
    n_nodes : int
    statistics : sequence of str
        Names from :data:`ERGM_STATISTICS`.
    exact : bool, optional
        ``None`` (default) or ``True``: exact simulation, available for ``("edges",)`` only and
        refused otherwise. ``False``: Gibbs sweeps over all dyads from an empty graph; every
        result that uses these draws is inexact.
    sweeps : int, default 200
        Gibbs sweeps per draw when ``exact=False``.
    """

    def __init__(self, n_nodes: int, statistics=("edges",), exact: bool | None = None,
                 sweeps: int = 200):
        if int(n_nodes) < 2:
            raise BDMCInputError(f"An ERGM needs at least 2 nodes, got {n_nodes}.")
        self.n_nodes = int(n_nodes)
        self.statistic_names = check_statistics(statistics)
        edges_only = self.statistic_names == ("edges",)
        if (exact is None or exact) and not edges_only:
            raise BDMCInputError(
                f"No exact sampler for an ERGM with statistics {self.statistic_names} (only "
                "edges-only models are simulated exactly). Pass `exact=False` to use Gibbs "
                "sweeps; results are then flagged inexact."
            )
        self.exact = bool(exact is None or exact)
        if int(sweeps) < 1:
            raise BDMCInputError(f"`sweeps` must be a positive integer, got {sweeps}.")
        self.sweeps = int(sweeps)
        self.dyads = np.stack(np.triu_indices(self.n_nodes, 1), axis=1)

    def statistics(self, y) -> np.ndarray:
        """Statistics of adjacency matrices of shape (..., n, n)."""
        return ergm_statistics(y, self.statistic_names)

    def log_gamma(self, y, theta) -> np.ndarray:
        """``log γ(y | θ) = θ · s(y)``."""
        return (self.statistics(y) * np.asarray(theta, dtype=float)).sum(-1)

    def log_partition(self, theta) -> np.ndarray:
        """Return the exact ``log Z(θ)`` for ``θ`` of shape (..., k).

        Closed form for edges only, enumeration for ``n <= MAX_ENUMERATION_NODES``.
        """
        theta = np.asarray(theta, dtype=float)
        if self.statistic_names == ("edges",):
            return len(self.dyads) * np.logaddexp(0.0, theta[..., 0])
        if self.n_nodes > MAX_ENUMERATION_NODES:
            raise BDMCInputError(
                f"No exact normaliser for an ERGM with {self.statistic_names} on "
                f"{self.n_nodes} > {MAX_ENUMERATION_NODES} nodes."
            )
        stats, log_count = self._enumerated()
        return logsumexp(np.einsum("...k,sk->...s", theta, stats) + log_count, axis=-1)

    def _enumerated(self):
        n_dyads = len(self.dyads)
        codes = np.arange(2 ** n_dyads, dtype=np.int64)
        bits = (codes[:, None] >> np.arange(n_dyads)) & 1
        graphs = np.zeros((len(codes), self.n_nodes, self.n_nodes))
        graphs[:, self.dyads[:, 0], self.dyads[:, 1]] = bits
        graphs += np.swapaxes(graphs, 1, 2)
        stats, counts = np.unique(self.statistics(graphs), axis=0, return_counts=True)
        return stats, np.log(counts)

    def sample(self, theta, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` draws from ``f(· | θ)`` at one ``θ`` (shape (k,)), as int64 (size, n, n)."""
        theta = np.asarray(theta, dtype=float).reshape(len(self.statistic_names))
        if not self.exact:
            start = np.zeros((size, self.n_nodes, self.n_nodes), dtype=np.int64)
            return self.mcmc(start, theta, rng, self.sweeps)
        bits = rng.random((size, len(self.dyads))) < expit(theta[0])
        y = np.zeros((size, self.n_nodes, self.n_nodes), dtype=np.int64)
        y[:, self.dyads[:, 0], self.dyads[:, 1]] = bits
        return y + np.swapaxes(y, 1, 2)

    def mcmc(self, y, theta, rng: np.random.Generator, sweeps: int = 1) -> np.ndarray:
        """Apply ``sweeps`` systematic Gibbs sweeps over the dyads of each graph in ``y``.

        ``y`` has shape (m, n, n); each sweep leaves ``f(·|θ)`` invariant.
        """
        y = np.array(y, dtype=np.int64, copy=True)
        theta = np.asarray(theta, dtype=float)
        # One dyad at a time, all graphs at once: the Python loop is over sweeps x dyads only.
        for _ in range(int(sweeps)):
            for i, j in self.dyads:
                p_on = expit(_change_statistics(y, i, j, self.statistic_names) @ theta)
                on = (rng.random(len(y)) < p_on).astype(np.int64)
                y[:, i, j] = y[:, j, i] = on
        return y
