"""Vectorized Hamiltonian Monte Carlo over many chains at one inverse temperature.

One transition: fresh Gaussian momentum, ``n_leapfrog`` leapfrog steps with a diagonal mass
matrix, and a Metropolis accept/reject per chain. Each leapfrog step is one batched model call for
all chains.

The kernel leaves ``log p(x) + beta log p(y|x)`` invariant and is reversible for any fixed
parameters. The per-chain step size is drawn uniformly from ``step_size * [1 - jitter, 1 + jitter]``
independently of the state, so the transition is a mixture of reversible kernels and stays
reversible. It never adapts to its own chain's past: that is what keeps AIS and reverse AIS bounds
valid (step sizes come from a separate pilot run, see :mod:`pymc_bdmc.kernels.tuning`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.linalg import blas

from pymc_bdmc.model.density import DensityParts

__all__ = ["HMCInfo", "HMCParams", "draw_transition_noise", "hmc_step", "momentum_from_normals",
           "started_finite"]

PartsFn = Callable[[np.ndarray], DensityParts]

#: Energy error (nats) beyond which a trajectory is counted as divergent.
DIVERGENCE_THRESHOLD = 1000.0


@dataclass(frozen=True, slots=True)
class HMCParams:
    """Frozen parameters of one HMC transition.

    Attributes
    ----------
    step_size : float
        Nominal leapfrog step size.
    inv_mass : ndarray, shape (n_dim,)
        Diagonal of the inverse mass matrix (roughly the target's marginal variances).
    n_leapfrog : int
        Leapfrog steps per transition.
    jitter : float
        Relative half-width of the uniform step-size jitter, in [0, 1).
    mass_factor : ndarray, shape (n_dim, n_dim) or (n_dim,), optional
        A dense inverse mass matrix ``L L^T`` (roughly the target's covariance), given by its
        lower-triangular factor ``L``; ``inv_mass`` is then its diagonal. Rows and columns of
        coordinates HMC must not move are zero. A vector ``w`` is the factor ``L = A diag(w)``
        with ``A`` the principal factor of the path's Gaussian base
        (:meth:`~pymc_bdmc.kernels.base_distribution.GaussianBase.principal`): a diagonal
        metric in the base's principal coordinates, for paths from a base only.
    """

    step_size: float
    inv_mass: np.ndarray
    n_leapfrog: int
    jitter: float = 0.2
    mass_factor: np.ndarray | None = None


@dataclass(frozen=True, slots=True)
class HMCInfo:
    """Per-chain diagnostics of one transition (recorded, never fed back into the kernel)."""

    acceptance_rate: np.ndarray
    accepted: np.ndarray
    divergent: np.ndarray


def draw_transition_noise(rng, shape: tuple[int, int], params: HMCParams):
    """The random numbers of one transition, in a fixed order from the chains' streams.

    Per-chain jittered step sizes, standard normals for the momentum (shape ``shape``) and
    the uniforms of the accept/reject. Every implementation of the kernel (NumPy here, the
    compiled :mod:`pymc_bdmc.kernels.fused_hmc`) draws through this, so they stay one kernel.
    """
    n_chains = shape[0]
    eps = params.step_size * rng.uniform(1.0 - params.jitter, 1.0 + params.jitter, n_chains)
    return eps, rng.standard_normal(shape), rng.uniform(size=n_chains)


def momentum_from_normals(normals: np.ndarray, inv_mass: np.ndarray) -> np.ndarray:
    """Momentum ``N(0, M)`` from standard normals; zero where ``inv_mass`` is 0.

    A zero inverse mass pins a coordinate (a discrete one, updated by Gibbs steps instead):
    it has no momentum, no drift and no kinetic energy.
    """
    if np.all(inv_mass > 0):
        return normals / np.sqrt(inv_mass)
    scale = np.sqrt(inv_mass)
    return np.divide(normals, scale, out=np.zeros_like(normals), where=scale > 0)


def hmc_step(
    rng: np.random.Generator,
    x: np.ndarray,
    parts: DensityParts,
    beta: float,
    params: HMCParams,
    parts_fn: PartsFn,
) -> tuple[np.ndarray, DensityParts, HMCInfo]:
    """Apply one HMC transition at inverse temperature ``beta`` to every chain.

    Parameters
    ----------
    rng : numpy.random.Generator
    x : ndarray, shape (chains, n_dim)
        Current states.
    parts : DensityParts
        Densities and gradients at ``x`` (reused, not recomputed).
    beta : float
        Inverse temperature of the target.
    params : HMCParams
    parts_fn : callable
        Batched model evaluation ``x -> DensityParts``.

    Returns
    -------
    x_new, parts_new, info
    """
    if params.mass_factor is not None:
        if params.mass_factor.ndim == 1:
            return _principal_hmc_step(rng, x, parts, beta, params, parts_fn)
        return _dense_hmc_step(rng, x, parts, beta, params, parts_fn)
    inv_mass = params.inv_mass
    eps, normals, uniforms = draw_transition_noise(rng, x.shape, params)
    eps = eps[:, None]
    momentum = momentum_from_normals(normals, inv_mass)
    kinetic0 = 0.5 * np.sum(momentum**2 * inv_mass, axis=1)
    logp0 = parts.tempered_logp(beta)

    with np.errstate(invalid="ignore", over="ignore"):
        drift = eps * inv_mass  # (chains, n_dim), fixed for the whole trajectory
        p = momentum + 0.5 * eps * parts.tempered_grad(beta)
        q = x
        for i in range(params.n_leapfrog):
            q = q + drift * p  # a new array: x and earlier positions stay untouched
            new = parts_fn(q)
            grad = new.tempered_grad(beta)
            grad *= eps if i < params.n_leapfrog - 1 else 0.5 * eps
            p += grad
        kinetic1 = 0.5 * np.sum(p**2 * inv_mass, axis=1)
        logp1 = new.tempered_logp(beta)
        log_ratio = (logp1 - kinetic1) - (logp0 - kinetic0)
    return _accept(x, q, parts, new, logp1, log_ratio, uniforms)


def _dense_hmc_step(rng, x, parts, beta, params, parts_fn):
    """:func:`hmc_step` with a dense inverse mass matrix ``L L^T``.

    The momentum is kept in whitened coordinates ``r = L^T p ~ N(0, I)``: the kinetic energy is
    ``|r|^2 / 2``, a position update moves ``q`` by ``eps L r`` and a gradient kick adds
    ``eps L^T grad`` to ``r``. This is the leapfrog integrator of ``H = U(q) + p^T L L^T p / 2``
    written in ``r``, so it is volume-preserving and reversible, and the kernel is exact. The
    draws are those of the diagonal kernel (``r`` is the standard normals).
    """
    factor = params.mass_factor
    eps, r, uniforms = draw_transition_noise(rng, x.shape, params)
    eps = eps[:, None]
    kinetic0 = 0.5 * np.sum(r**2, axis=1)
    logp0 = parts.tempered_logp(beta)

    times = times_lower if is_lower_triangular(factor) else times_general
    with np.errstate(invalid="ignore", over="ignore"):
        r = r + 0.5 * eps * times(parts.tempered_grad(beta), factor)
        q = x
        for i in range(params.n_leapfrog):
            q = q + eps * times(r, factor, transposed=True)
            new = parts_fn(q)
            kick = times(new.tempered_grad(beta), factor)
            r = r + (eps if i < params.n_leapfrog - 1 else 0.5 * eps) * kick
        kinetic1 = 0.5 * np.sum(r**2, axis=1)
        logp1 = new.tempered_logp(beta)
        log_ratio = (logp1 - kinetic1) - (logp0 - kinetic0)
    return _accept(x, q, parts, new, logp1, log_ratio, uniforms)


def is_lower_triangular(matrix: np.ndarray, block: int = 128) -> bool:
    """Whether a square ``matrix`` is zero above its diagonal (read in blocks of rows).

    A fraction of a millisecond at a thousand coordinates, where ``np.triu`` would copy the
    whole matrix.
    """
    n = matrix.shape[0]
    for start in range(0, n, block):
        stop = min(start + block, n)
        if np.any(matrix[start:stop, stop:]) or np.any(
                np.triu(matrix[start:stop, start:stop], 1)):
            return False
    return True


def times_general(rows: np.ndarray, factor: np.ndarray, transposed: bool = False) -> np.ndarray:
    """``rows @ factor``, or ``rows @ factor.T``."""
    return rows @ (factor.T if transposed else factor)


def times_lower(rows: np.ndarray, factor: np.ndarray, transposed: bool = False) -> np.ndarray:
    """:func:`times_general` for a lower-triangular ``factor`` (a dense metric's Cholesky factor).

    BLAS's triangular product skips the zero half: 2.5 times faster than the general product
    at a thousand coordinates (``benchmarks/dense_metric.py``). ``factor.T`` is the
    Fortran-ordered upper triangle that BLAS reads without a copy.
    """
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    upper = np.asarray(factor, dtype=np.float64).T
    return blas.dtrmm(1.0, upper, rows.T, lower=0, trans_a=int(transposed)).T


def _principal_hmc_step(rng, x, parts, beta, params, parts_fn):
    """:func:`_dense_hmc_step` with ``L = A diag(w)``, ``A`` the path base's principal factor.

    In principal coordinates ``z = A^{-1} (x - mean)`` the base is standard normal and the
    metric diagonal: a move is ``z += eps w r``, a kick adds ``eps w A^T grad`` with
    ``A^T grad log f_beta = beta A^T grad log(p(x) p(y|x)) - (1 - beta) z``. The same
    trajectories as the dense form with that ``L`` (exact arithmetic), at two products with the
    base's basis per leapfrog step instead of three (two for ``L``, one for the base's density).
    ``parts_fn`` must be a :class:`~pymc_bdmc.kernels.base_distribution.RebasedParts`.
    """
    base = getattr(parts_fn, "base", None)
    if base is None:
        raise ValueError("A principal-coordinate metric needs a path from a fitted base.")
    model_parts, scales = parts_fn.model_parts, params.mass_factor
    eps, r, uniforms = draw_transition_noise(rng, x.shape, params)
    eps = eps[:, None]
    kinetic0 = 0.5 * np.sum(r**2, axis=1)
    logp0 = parts.tempered_logp(beta)

    def kick(z, joint_grad):
        return scales * (beta * base.principal_gradient(joint_grad) - (1.0 - beta) * z)

    with np.errstate(invalid="ignore", over="ignore"):
        z = base.principal(x)
        r = r + 0.5 * eps * kick(z, parts.grad_log_prior + parts.grad_log_likelihood)
        for i in range(params.n_leapfrog):
            z = z + eps * scales * r
            q = base.from_principal(z)
            model = model_parts(q)
            joint_grad = model.grad_log_prior + model.grad_log_likelihood
            r = r + (eps if i < params.n_leapfrog - 1 else 0.5 * eps) * kick(z, joint_grad)
        log_q = base.log_norm - 0.5 * np.sum(z**2, axis=1)
        grad_q = base.gradient_at_principal(z)
        new = DensityParts(log_q, model.log_prior + model.log_likelihood - log_q, grad_q,
                           joint_grad - grad_q)
        kinetic1 = 0.5 * np.sum(r**2, axis=1)
        logp1 = new.tempered_logp(beta)
        log_ratio = (logp1 - kinetic1) - (logp0 - kinetic0)
    return _accept(x, q, parts, new, logp1, log_ratio, uniforms)


def started_finite(parts: DensityParts) -> np.ndarray:
    """Chains whose current densities are finite (others carry zero weight: no transition)."""
    return np.isfinite(parts.log_prior) & np.isfinite(parts.log_likelihood)


def _accept(x, q, parts, new, logp1, log_ratio, uniforms):
    """Metropolis accept/reject of the proposals ``q`` (shared by both mass-matrix forms)."""
    with np.errstate(invalid="ignore", over="ignore"):
        # Only finite proposals can be accepted: a NaN energy, or a +inf density (a singularity
        # hit by round-off), would otherwise be accepted and then never left.
        log_ratio = np.where(np.isnan(log_ratio) | ~np.isfinite(logp1), -np.inf, log_ratio)
        accepted = np.log(uniforms) < log_ratio
        acceptance_rate = np.exp(np.minimum(log_ratio, 0.0))
    # A chain at impossible data (zero weight from its first step) cannot move: not a divergence.
    divergent = ~(log_ratio > -DIVERGENCE_THRESHOLD) & started_finite(parts)
    x_new = np.where(accepted[:, None], q, x)
    return x_new, parts.take(accepted, new), HMCInfo(acceptance_rate, accepted, divergent)
