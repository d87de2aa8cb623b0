"""Collapsed discrete-latent form of the clustering and binary-attribute benchmark models.

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

__all__ = ["CollapsedLinearGaussian"]


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
