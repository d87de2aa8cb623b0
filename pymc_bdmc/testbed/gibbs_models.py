"""Gibbs-sampler forms of the benchmark models, with computable transition probabilities.

The Chib-Murray-Salakhutdinov estimator (:mod:`.chib`) needs a Markov operator whose probability
(or density) of moving to a given state can be evaluated, and its reverse operator. Each class
here gives the model's log joint ``log p(h, y)`` over a flat latent vector ``h``, exact prior
draws of ``h`` and such an operator (:meth:`gibbs`), as in the BDMC paper's experiments
(Grosse, Ghahramani & Adams 2015, §6.1).

Clustering and binary attributes: collapsed discrete latents
-------------------------------------------------------------

Both models are linear-Gaussian given a discrete matrix ``Z`` (``N x K``):
``Y = Z A + noise`` with ``a_kj ~ N(0, sigma_a^2)`` and ``y_ij ~ N((Z A)_ij, sigma_n^2)``. For the
clustering model row ``i`` of ``Z`` is the one-hot indicator of ``z_i`` (and ``A`` the cluster
centres), for the binary-attribute model ``Z`` holds the attributes. Integrating ``A`` out, the
columns of ``Y`` are independent, ``y_j ~ N(0, C_Z)`` with ``C_Z = sigma_n^2 I + sigma_a^2 Z Z'``,
so the *collapsed* joint ``log p(Z, Y) = log p(Z) + sum_j log N(y_j | 0, C_Z)`` is exact and
cheap. This is the representation the BDMC paper's samplers work in (Grosse, Ghahramani & Adams
2015, §6.1: "the cluster centers were collapsed out", "the feature matrix A was collapsed out"),
and what the Chib-Murray-Salakhutdinov estimator (:mod:`.chib`) runs its Gibbs sampler on.

Woodbury's identity keeps each evaluation at ``O(N K^2 + N K D)``: with
``M = I_K + (sigma_a^2 / sigma_n^2) Z'Z`` and ``G = Z'Y``,

``log det C_Z = N log sigma_n^2 + log det M`` and
``sum_j y_j' C_Z^-1 y_j = (||Y||^2 - (sigma_a^2 / sigma_n^2) tr(G' M^-1 G)) / sigma_n^2``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import logsumexp

__all__ = ["BlockGibbs", "CollapsedLinearGaussian", "LowRankGibbs"]


@dataclass(frozen=True, eq=False)
class CollapsedLinearGaussian:
    """``log p(h, Y)`` of ``Y = Z(h) A + noise`` with ``A`` integrated out, for discrete ``h``.

    The latent state ``h`` is a flat integer vector of ``n_sites`` entries, each taking
    ``n_values`` values: for ``kind="assignment"`` one cluster label per row (``n_sites = N``,
    ``n_values = K``), for ``kind="binary"`` the entries of ``Z`` in row-major order
    (``n_sites = N K``, ``n_values = 2``).

    Attributes
    ----------
    y : ndarray, shape (N, D)
    sigma_a, sigma_noise : float
        Prior standard deviation of the entries of ``A``, noise standard deviation.
    n_components : int
        ``K``: clusters or attributes.
    kind : {"assignment", "binary"}
    log_weights : ndarray, shape (K,), optional
        ``assignment``: log mixing weights (default equal).
    p_attribute : float, optional
        ``binary``: prior probability of each attribute.
    """

    y: np.ndarray
    sigma_a: float
    sigma_noise: float
    n_components: int
    kind: Literal["assignment", "binary"]
    log_weights: np.ndarray | None = None
    p_attribute: float | None = None

    def __post_init__(self):
        if self.kind not in ("assignment", "binary"):
            raise ValueError(f"`kind` must be 'assignment' or 'binary', got {self.kind!r}.")
        if self.kind == "assignment" and self.log_weights is None:
            object.__setattr__(self, "log_weights",
                               np.full(self.n_components, -np.log(self.n_components)))
        if self.kind == "binary" and not (self.p_attribute is not None
                                          and 0 < self.p_attribute < 1):
            raise ValueError("A binary model needs `p_attribute` in (0, 1).")

    @property
    def n_obs(self) -> int:
        """``N``: rows of ``Y``."""
        return self.y.shape[0]

    @property
    def n_sites(self) -> int:
        """Length of the latent vector ``h``."""
        return self.n_obs * (self.n_components if self.kind == "binary" else 1)

    @property
    def n_values(self) -> int:
        """Values each latent entry takes."""
        return 2 if self.kind == "binary" else self.n_components

    def design(self, h: np.ndarray) -> np.ndarray:
        """``Z`` for a batch of latent vectors ``h`` (B, n_sites): shape (B, N, K)."""
        h = np.asarray(h)
        if self.kind == "binary":
            return h.reshape(h.shape[0], self.n_obs, self.n_components).astype(float)
        return np.eye(self.n_components)[h]

    def log_prior(self, h: np.ndarray) -> np.ndarray:
        """``log p(h)`` for a batch, shape (B,)."""
        h = np.asarray(h)
        if self.kind == "binary":
            p = self.p_attribute
            return (h * np.log(p) + (1 - h) * np.log1p(-p)).sum(axis=1)
        return self.log_weights[h].sum(axis=1)

    def log_likelihood(self, h: np.ndarray) -> np.ndarray:
        """``log p(Y | h)`` with ``A`` integrated out, for a batch, shape (B,)."""
        z = self.design(h)
        n, d = self.y.shape
        s2, ratio = self.sigma_noise**2, (self.sigma_a / self.sigma_noise) ** 2
        m = np.eye(self.n_components) + ratio * np.einsum("bnk,bnl->bkl", z, z)
        g = np.einsum("bnk,nd->bkd", z, self.y)
        _, logdet_m = np.linalg.slogdet(m)
        quad = (np.sum(self.y**2) - ratio * np.einsum("bkd,bkd->b", g, np.linalg.solve(m, g)))
        logdet_c = n * np.log(s2) + logdet_m
        return -0.5 * (n * d * np.log(2 * np.pi) + d * logdet_c + quad / s2)

    def log_joint(self, h: np.ndarray) -> np.ndarray:
        """``log p(h, Y)``, shape (B,)."""
        h = np.asarray(h)
        return self.log_prior(h) + self.log_likelihood(h)

    def sample_prior(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of ``h`` from its prior, shape (n, n_sites)."""
        if self.kind == "binary":
            return (rng.random((n, self.n_sites)) < self.p_attribute).astype(np.int64)
        w = np.exp(self.log_weights - logsumexp(self.log_weights))
        return rng.choice(self.n_components, size=(n, self.n_sites), p=w)

    def gibbs(self):
        """Return the systematic-scan single-site Gibbs sampler (:class:`.chib.DiscreteGibbs`)."""
        from pymc_bdmc.testbed.chib import DiscreteGibbs

        return DiscreteGibbs(self.log_joint, self.n_sites, self.n_values)

    def log_evidence_enumerated(self, max_states: int = 200_000, batch: int = 4096) -> float:
        """Exact ``log p(Y) = logsumexp_h log p(h, Y)`` by summing over every ``h``.

        Parameters
        ----------
        max_states : int, default 200000
            Refuse when ``n_values ** n_sites`` exceeds it.
        batch : int, default 4096

        Returns
        -------
        float
        """
        n_states = self.n_values**self.n_sites
        if n_states > max_states:
            raise ValueError(f"{self.n_values}**{self.n_sites} latent states are too many to "
                             f"enumerate (max_states={max_states}).")
        states = itertools.product(range(self.n_values), repeat=self.n_sites)
        parts = []
        while chunk := list(itertools.islice(states, batch)):
            parts.append(logsumexp(self.log_joint(np.array(chunk))))
        return float(logsumexp(parts))


# -- low rank: two-block Gibbs with Gaussian conditionals ----------------------------------------

def _gaussian_rows(precision: np.ndarray, rhs: np.ndarray):
    """Per batch ``b``: mean ``P_b^-1 rhs_b`` (rows of rhs) and Cholesky factor of ``P_b``."""
    chol = np.linalg.cholesky(precision)  # (B, K, K)
    mean = np.linalg.solve(precision, np.swapaxes(rhs, 1, 2))  # (B, K, R)
    return np.swapaxes(mean, 1, 2), chol


def _log_gaussian_rows(x: np.ndarray, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    """``sum_r log N(x_br | mean_br, P_b^-1)`` given the Cholesky factor of the precision."""
    k = x.shape[-1]
    # (x - m)' P (x - m) = ||L' (x - m)||^2 with P = L L'
    proj = np.einsum("bkl,brk->brl", chol, x - mean)
    logdet = 2 * np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2)), axis=1)
    n_rows = x.shape[1]
    return (0.5 * n_rows * logdet - 0.5 * np.sum(proj**2, axis=(1, 2))
            - 0.5 * n_rows * k * np.log(2 * np.pi))


def _draw_gaussian_rows(rng, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    # x = m + L^-T z has covariance (L L')^-1 = P^-1
    z = rng.standard_normal(mean.shape)
    return mean + np.swapaxes(np.linalg.solve(np.swapaxes(chol, 1, 2),
                                              np.swapaxes(z, 1, 2)), 1, 2)


@dataclass(frozen=True, eq=False)
class LowRankGibbs:
    """The low-rank model ``Y = U V + noise`` over ``h = (U, V)``, for two-block Gibbs.

    ``u_ik ~ N(0, sigma_u^2)``, ``v_kj ~ N(0, sigma_v^2)``, ``y_ij ~ N(u_i' v_j, sigma_n^2)``.
    Given ``V`` the rows of ``U`` are independent Gaussians (a Bayesian linear regression of each
    row of ``Y`` on ``V'``), and given ``U`` the columns of ``V``: both conditionals, and so the
    density of a sweep ``U | V`` then ``V | U``, are closed form (BDMC paper §6.1: "each of the
    two factors U and V was resampled as a block"). ``h`` is ``U`` then ``V``, each row-major.

    Attributes
    ----------
    y : ndarray, shape (N, D)
    rank : int
    sigma_u, sigma_v, sigma_noise : float
    """

    y: np.ndarray
    rank: int
    sigma_u: float
    sigma_v: float
    sigma_noise: float

    @property
    def n_sites(self) -> int:
        """Length of ``h``: ``N K + K D``."""
        n, d = self.y.shape
        return self.rank * (n + d)

    def split(self, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``U`` (B, N, K) and ``V`` (B, K, D) of a batch of flat states."""
        n, d = self.y.shape
        k = self.rank
        h = np.asarray(h, dtype=float)
        return h[:, :n * k].reshape(-1, n, k), h[:, n * k:].reshape(-1, k, d)

    @staticmethod
    def join(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Flat states from ``U`` (B, N, K) and ``V`` (B, K, D)."""
        return np.concatenate([u.reshape(len(u), -1), v.reshape(len(v), -1)], axis=1)

    def log_joint(self, h: np.ndarray) -> np.ndarray:
        """``log p(U, V, Y)`` (densities), shape (B,)."""
        u, v = self.split(h)
        resid = self.y - u @ v
        return (_log_normal_sum(u, self.sigma_u) + _log_normal_sum(v, self.sigma_v)
                + _log_normal_sum(resid, self.sigma_noise))

    def sample_prior(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` prior draws of ``h``, shape (n, n_sites)."""
        nn, d = self.y.shape
        u = rng.normal(0.0, self.sigma_u, (n, nn, self.rank))
        v = rng.normal(0.0, self.sigma_v, (n, self.rank, d))
        return self.join(u, v)

    def conditional_u(self, v: np.ndarray):
        """Mean (B, N, K) and precision Cholesky (B, K, K) of ``U | V, Y``."""
        s2 = self.sigma_noise**2
        precision = np.eye(self.rank) / self.sigma_u**2 + v @ np.swapaxes(v, 1, 2) / s2
        return _gaussian_rows(precision, np.einsum("bkd,nd->bnk", v, self.y) / s2)

    def conditional_v(self, u: np.ndarray):
        """Mean (B, D, K) and precision Cholesky (B, K, K) of the columns of ``V | U, Y``."""
        s2 = self.sigma_noise**2
        precision = np.eye(self.rank) / self.sigma_v**2 + np.swapaxes(u, 1, 2) @ u / s2
        return _gaussian_rows(precision, np.einsum("bnk,nd->bdk", u, self.y) / s2)

    def gibbs(self) -> BlockGibbs:
        """Return the two-block Gibbs sampler (:class:`BlockGibbs`)."""
        return BlockGibbs(self)


def _log_normal_sum(x: np.ndarray, sd: float) -> np.ndarray:
    axes = tuple(range(1, x.ndim))
    size = np.prod(x.shape[1:])
    return -0.5 * np.sum(x**2, axis=axes) / sd**2 - size * (np.log(sd) + 0.5 * np.log(2 * np.pi))


class BlockGibbs:
    """Two-block Gibbs sweep ``U | V`` then ``V | U`` (reverse: ``V | U`` then ``U | V``).

    The same interface as :class:`.chib.DiscreteGibbs` (``sweep``, ``log_transition``,
    ``log_joint``, ``n_sites``), with transition *densities*: a sweep has no point mass, so the
    CMS identities hold with densities (Murray & Salakhutdinov 2009, App. A). Each block update
    is reversible, so the reverse-order sweep is the reverse operator.
    """

    dtype = float

    def __init__(self, model: LowRankGibbs):
        self.model = model
        self.n_sites = model.n_sites
        self.n_evaluations = 0

    def log_joint(self, h: np.ndarray) -> np.ndarray:
        """``log p(h, y)``, shape (B,)."""
        return self.model.log_joint(h)

    def sweep(self, rng: np.random.Generator, h: np.ndarray, reverse: bool = False) -> np.ndarray:
        """One sweep from each row of ``h``; returns new states."""
        u, v = self.model.split(h)
        self.n_evaluations += 2 * len(u)
        if reverse:
            v = np.swapaxes(_draw_gaussian_rows(rng, *self.model.conditional_v(u)), 1, 2)
            u = _draw_gaussian_rows(rng, *self.model.conditional_u(v))
        else:
            u = _draw_gaussian_rows(rng, *self.model.conditional_u(v))
            v = np.swapaxes(_draw_gaussian_rows(rng, *self.model.conditional_v(u)), 1, 2)
        return self.model.join(u, v)

    def log_transition(self, h_to: np.ndarray, h_from: np.ndarray,
                       reverse: bool = False) -> np.ndarray:
        """``log T(h_to <- h_from)`` (a density) of one sweep, forward or reverse, shape (B,)."""
        u0, v0 = self.model.split(h_from)
        h_to = np.broadcast_to(np.asarray(h_to, dtype=float), (len(u0), self.n_sites))
        u1, v1 = self.model.split(h_to)
        self.n_evaluations += 2 * len(u0)
        if reverse:  # V | U_from, then U | V_to
            return (_log_gaussian_rows(np.swapaxes(v1, 1, 2), *self.model.conditional_v(u0))
                    + _log_gaussian_rows(u1, *self.model.conditional_u(v1)))
        return (_log_gaussian_rows(u1, *self.model.conditional_u(v0))
                + _log_gaussian_rows(np.swapaxes(v1, 1, 2), *self.model.conditional_v(u1)))
