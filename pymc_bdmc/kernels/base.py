"""The interface between annealing algorithms and transition kernels."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from pymc_bdmc.model.density import DensityParts

__all__ = ["KernelInfo", "Transition"]


class KernelInfo(Protocol):
    """Per-chain diagnostics every kernel reports."""

    acceptance_rate: np.ndarray
    divergent: np.ndarray


class Transition(Protocol):
    """A frozen kernel sequence: ``transition(rng, x, parts, t)`` leaves ``f_t`` invariant.

    ``x`` has shape (chains, n_dim) and ``parts`` holds the densities at ``x``; the call returns
    the new states, their densities and a :class:`KernelInfo`. Each ``t``'s kernel must leave
    ``f_t`` invariant and must not depend on the chains' past: that is what both bounds need.
    It should also be reversible with respect to ``f_t`` (or the caller must apply the
    reversal), so that the reverse run, which applies the same kernels in reverse order, is the
    exact time reversal of the forward run. :mod:`pymc_bdmc.verification` tests invariance and
    reversibility.
    """

    def __call__(self, rng: np.random.Generator, x: np.ndarray, parts: DensityParts,
                 t: int) -> tuple[np.ndarray, DensityParts, KernelInfo]: ...
