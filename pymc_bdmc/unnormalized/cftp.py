# ruff: noqa: RUF002  (η is the paper's natural parameter)
"""Coupling from the past (Propp & Wilson 1996) for the ferromagnetic first-order Ising model.

Exact draws from ``f(y | c) ∝ exp(c s₁(y))`` on a free-boundary ``H x W`` grid of any size, for
a coupling ``c >= 0`` (``s₁`` is the sum of ``y_i y_j`` over horizontal and vertical neighbour
pairs, as in :mod:`pymc_bdmc.unnormalized.ising`).

One time step is a heat-bath Gibbs sweep in checkerboard order: first every site with ``i + j``
even, then every odd site (each colour class is conditionally independent given the other, so
the update is vectorised over sites). Site ``i`` becomes ``+1`` when ``u_i < σ(2 c n_i)``, with
``n_i`` the sum of its neighbours and ``u_i`` uniform. With ``c >= 0`` this update is monotone:
if ``x <= x'`` site-wise then the updated states keep the order for the same ``u``. So chains
from the all-down and all-up states sandwich every other chain, and once they meet every start
has coalesced.

The sampler starts both chains at time ``-T`` (``T = 1, 2, 4, ...``) and runs them to time 0;
if they have not met, ``T`` doubles and the random numbers of the time steps ``-T_old .. -1`` are
*reused*, new ones drawn only for the earlier steps (the condition for the output to be exactly
``f``). To store no uniforms, each block of time steps ``[-2T, -T)`` keeps only the seed of its
own generator and regenerates them. Draws are independent (each has its own random numbers and
its own ``T``) but are run together as one array.

The expected coalescence time grows with the coupling and, near and above the critical coupling
``log(1 + √2)/2 ≈ 0.441``, with the grid (exponentially in its side in the ordered phase); the
number of sweeps is capped by ``max_sweeps`` and an error is raised beyond it. Negative couplings
(antiferromagnets) break the monotonicity and are refused.
"""

from __future__ import annotations

import logging

import numpy as np
from scipy.special import expit

from pymc_bdmc.errors import BDMCInputError

__all__ = ["DEFAULT_MAX_SWEEPS", "ising_cftp"]

_log = logging.getLogger(__name__)

DEFAULT_MAX_SWEEPS = 2 ** 16


def _neighbour_sum(x: np.ndarray) -> np.ndarray:
    """Sum of the first-order neighbours of every site of fields ``x`` (n, H, W), free boundary."""
    out = np.zeros_like(x)
    out[:, 1:, :] += x[:, :-1, :]
    out[:, :-1, :] += x[:, 1:, :]
    out[:, :, 1:] += x[:, :, :-1]
    out[:, :, :-1] += x[:, :, 1:]
    return out


def _sweep(x: np.ndarray, u: np.ndarray, coupling: float, colours: list[np.ndarray]) -> None:
    """One heat-bath checkerboard sweep of ``x`` (n, H, W) in place, driven by ``u`` (n, H, W)."""
    for colour in colours:
        p_up = expit(2.0 * coupling * _neighbour_sum(x))
        x[:, colour] = np.where(u[:, colour] < p_up[:, colour], 1.0, -1.0)


def ising_cftp(shape, coupling: float, size: int, rng: np.random.Generator,
               max_sweeps: int = DEFAULT_MAX_SWEEPS) -> np.ndarray:
    """Exact draws from the first-order Ising model at ``coupling >= 0`` by coupling from the past.

    Parameters
    ----------
    shape : tuple of int
        Grid shape ``(H, W)``, free boundary.
    coupling : float
        The nearest-neighbour coupling ``c`` (natural parameter of ``s₁``); must be ``>= 0``.
    size : int
        Number of independent draws.
    rng : numpy.random.Generator
        Source of the per-block seeds.
    max_sweeps : int, default ``DEFAULT_MAX_SWEEPS``
        Largest start time ``T`` tried; beyond it a :class:`BDMCInputError` is raised.

    Returns
    -------
    numpy.ndarray
        int64 spins of shape ``(size, H, W)``.

    Raises
    ------
    BDMCInputError
        For a negative or non-finite coupling, or when some draw has not coalesced by
        ``max_sweeps``.
    """
    h, w = (int(s) for s in shape)
    coupling = float(coupling)
    if not np.isfinite(coupling) or coupling < 0:
        raise BDMCInputError(
            f"Coupling from the past needs a ferromagnetic coupling >= 0 (the heat-bath update "
            f"is monotone only then), got {coupling}. For a negative coupling on a grid too wide "
            "for the transfer matrix use `exact=False` (Swendsen-Wang)."
        )
    size = int(size)
    ii, jj = np.indices((h, w))
    colours = [(ii + jj) % 2 == 0, (ii + jj) % 2 == 1]
    out = np.empty((size, h, w))
    active = np.arange(size)
    seeds: list[int] = []  # seeds[k]: time steps [-2^k, -2^(k-1)) (k = 0: step -1)
    horizon = 1
    while active.size:
        if horizon > max_sweeps:
            raise BDMCInputError(
                f"Coupling from the past did not coalesce within {max_sweeps} sweeps for "
                f"{active.size} of {size} draws (coupling {coupling} on a {h}x{w} grid, near or "
                "above the critical coupling 0.441). Use `exact=False` (Swendsen-Wang)."
            )
        seeds.append(int(rng.integers(2 ** 63)))
        n = active.size
        upper = np.ones((n, h, w))
        lower = -np.ones((n, h, w))
        for k in range(len(seeds) - 1, -1, -1):  # oldest block first, forward in time
            block = np.random.default_rng(seeds[k])
            steps = 1 if k == 0 else 2 ** (k - 1)
            for _ in range(steps):
                # Uniforms for all `size` draws, so that a draw's numbers do not depend on
                # which other draws are still active.
                u = block.random((size, h, w))[active]
                _sweep(upper, u, coupling, colours)
                _sweep(lower, u, coupling, colours)
        done = (upper == lower).all(axis=(1, 2))
        out[active[done]] = upper[done]
        active = active[~done]
        _log.debug("CFTP: T = %d, %d draws still to coalesce.", horizon, active.size)
        horizon *= 2
    return out.astype(np.int64)
