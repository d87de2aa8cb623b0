"""The frozen annealing plan: the schedule and kernels every measured run follows.

AIS and reverse AIS are valid for any fixed sequence of temperatures and transition kernels, but
not for kernels tuned on the measured chains' own history. The pilot
(:mod:`pymc_bdmc.kernels.tuning`) tunes everything once, on its own population, and freezes it
into an :class:`AnnealingPlan`; forward runs apply the plan's kernels in order, reverse runs in
reverse order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pymc_bdmc.kernels.base import Transition
from pymc_bdmc.kernels.base_distribution import GaussianBase
from pymc_bdmc.kernels.gibbs import BoundSweep, ChromaticGibbs
from pymc_bdmc.kernels.hmc import HMCInfo, HMCParams, PartsFn, hmc_step
from pymc_bdmc.model.density import DensityParts

if TYPE_CHECKING:
    from pymc_bdmc.kernels.fused_hmc import FusedHMC
    from pymc_bdmc.kernels.scale_moves import ScaleMoves

__all__ = ["GRADIENT_COST", "AnnealingPlan", "sweep_outweighs_transition"]

#: What one gradient evaluation counts for, in evaluations of the model's elementwise terms at
#: one state, when deciding where a step's Gibbs sweep goes (on counts, not timings, so that
#: results do not depend on the machine).
GRADIENT_COST = 2


def sweep_outweighs_transition(gibbs: ChromaticGibbs, n_leapfrog: int) -> bool:
    """Whether a sweep costs more than a transition of ``n_leapfrog`` leapfrog steps.

    States per chain at which the sweep evaluates the terms, against the transition's
    gradients counted :data:`GRADIENT_COST` each.
    """
    return gibbs.states_per_sweep > GRADIENT_COST * n_leapfrog


@dataclass(frozen=True)
class AnnealingPlan:
    """Frozen schedule and HMC kernels: everything the measured runs do, fixed in advance.

    Attributes
    ----------
    betas : ndarray, shape (n_steps + 1,)
        Inverse temperatures, ``betas[0] = 0`` and ``betas[-1] = 1``.
    step_size : ndarray, shape (n_steps + 1,)
        HMC step size of the kernel targeting ``betas[t]``; NaN at ``t = 0`` (the prior is
        sampled exactly). The kernel at ``t = n_steps`` (the posterior) is used only to spread
        reverse chains out from the exact sample.
    inv_mass : ndarray, shape (n_steps + 1, n_dim)
        Diagonal inverse mass matrix of that kernel.
    n_leapfrog : int
    jitter : float
    transitions_per_step : int
        HMC transitions applied at each temperature (a power of a reversible kernel is
        reversible, so reverse runs stay valid).
    mass_factors : ndarray, shape (n_factors, n_dim, n_dim) or (n_factors, n_dim), optional
        Lower-triangular factors ``L`` of dense inverse mass matrices ``L L^T``, measured by the
        pilot where the population was strongly correlated; or, on a path from a base fitted
        from the curvature, the scales ``w`` of a diagonal metric in its principal coordinates
        (the factor ``A diag(w)``, :mod:`pymc_bdmc.kernels.pilot_metrics`).
    mass_index : ndarray of int, shape (n_steps + 1,), optional
        Which of ``mass_factors`` the kernel at each step uses; -1 for the diagonal
        ``inv_mass``. (``inv_mass`` holds the diagonal of the dense mass matrix used, and the
        population's variances with principal scales.)
    base : GaussianBase, optional
        Where the path starts: None for the prior, or a fitted normalised base distribution
        (:mod:`pymc_bdmc.kernels.base_distribution`). Runs then start from its exact draws and
        evaluate the densities through :meth:`path_parts`.
    scale_moves : bool, default False
        Whether each step also makes the model's scale moves
        (:mod:`pymc_bdmc.kernels.scale_moves`) between or around its HMC transitions.
    reparameterized : bool, default False
        Whether the plan acts on the model's other parameterisation
        (:mod:`pymc_bdmc.model.reparameterize`), as a search that certified there froze it.
    """

    betas: np.ndarray
    step_size: np.ndarray
    inv_mass: np.ndarray
    n_leapfrog: int
    jitter: float
    transitions_per_step: int = 1
    mass_factors: np.ndarray | None = None
    mass_index: np.ndarray | None = None
    base: GaussianBase | None = None
    scale_moves: bool = False
    reparameterized: bool = False

    @property
    def is_dense(self) -> bool:
        """Whether any step's kernel uses a dense mass matrix."""
        return self.mass_index is not None and bool(np.any(self.mass_index >= 0))

    @property
    def principal_metrics(self) -> bool:
        """Whether the dense metrics are scales in the base's principal coordinates.

        Such a plan runs only on the path from its base (:mod:`~.pilot_metrics`).
        """
        return self.is_dense and self.mass_factors.ndim == 2

    @property
    def n_steps(self) -> int:
        """Number of annealing steps (one fewer than temperatures)."""
        return len(self.betas) - 1

    @property
    def n_dim(self) -> int:
        """Dimension of the flat unconstrained space the kernels act on."""
        return self.inv_mass.shape[1]

    @classmethod
    def from_result(cls, result) -> AnnealingPlan:
        """The frozen plan a result was produced with (its ``annealing`` group).

        Reusing it (``sample_ais(plan=...)``) runs exactly the same kernels on other data, e.g.
        the plan certified by BDMC on simulated data applied to the real data. A plan whose
        path starts at a fitted base distribution (``base``) stays valid on other data but
        starts near the posterior of the data it was fitted on, so it suits those data only.
        """
        ann = result["annealing"]
        dense = "mass_factor" in ann
        base = None
        if "base_basis" in ann:
            base = GaussianBase(*(ann[name].values.copy() for name in (
                "base_mean", "base_scale", "base_basis", "base_eigenvalue")))
        elif "base_factor" in ann:  # results of versions that stored a dense Cholesky factor
            factor = ann["base_factor"].values
            base = GaussianBase.from_covariance(ann["base_mean"].values.copy(), factor @ factor.T)
        return cls(
            betas=ann["beta"].values.copy(),
            step_size=ann["step_size"].values.copy(),
            inv_mass=ann["inverse_mass"].values.copy(),
            n_leapfrog=int(ann.attrs["n_leapfrog"]),
            jitter=float(ann.attrs["step_size_jitter"]),
            transitions_per_step=int(ann.attrs.get("transitions_per_step", 1)),
            mass_factors=ann["mass_factor"].values.copy() if dense else None,
            mass_index=ann["mass_index"].values.copy() if dense else None,
            base=base,
            scale_moves=bool(ann.attrs.get("scale_moves", 0)),
            reparameterized=bool(ann.attrs.get("reparameterized", 0)),
        )

    def path_parts(self, parts_fn: PartsFn) -> PartsFn:
        """The batched densities of this plan's path, from the model's ``parts_fn``."""
        return parts_fn if self.base is None else self.base.parts_fn(parts_fn)

    def start(self, rng: np.random.Generator, n: int) -> np.ndarray | None:
        """``n`` exact draws from the base distribution, or None for a path from the prior."""
        return None if self.base is None else self.base.sample(rng, n)

    def kernel(self, t: int) -> HMCParams:
        """The frozen HMC parameters of the transition targeting ``betas[t]``."""
        if not 0 < t <= self.n_steps:
            raise IndexError(f"No transition is defined at step {t} of {self.n_steps}.")
        factor = None
        if self.mass_index is not None and self.mass_index[t] >= 0:
            factor = self.mass_factors[self.mass_index[t]]
        return HMCParams(float(self.step_size[t]), self.inv_mass[t], self.n_leapfrog, self.jitter,
                         factor)

    def sweep_between_transitions(self, gibbs: ChromaticGibbs | None) -> bool:
        """Whether each step is ``HMC.., sweep, ..HMC`` rather than ``sweep, HMC.., sweep``.

        Only a sweep that is reversible by itself (one color) can stand alone in the middle of
        a palindrome, and only without scale moves (which take the middle). It then saves a
        sweep a step; with an odd number of transitions per step it costs one more transition,
        which it is worth where a sweep evaluates the terms at more states per chain than
        :data:`GRADIENT_COST` times a transition's leapfrog steps (a switchpoint over a
        hundred years: one sweep of a hundred states against a few gradients).
        """
        if gibbs is None or not gibbs.reversible or self.scale_moves:
            return False
        return (self.transitions_per_step % 2 == 0
                or sweep_outweighs_transition(gibbs, self.n_leapfrog))

    def hmc_transitions_per_step(self, gibbs: ChromaticGibbs | None = None) -> int:
        """HMC transitions a step makes (one more where an odd number surrounds a sweep)."""
        n = self.transitions_per_step
        return n + n % 2 if self.sweep_between_transitions(gibbs) else n

    def sweeps_per_step(self, gibbs: ChromaticGibbs | None) -> int:
        """Gibbs sweeps a step makes: none without discrete coordinates, else one or two."""
        if gibbs is None:
            return 0
        return 1 if self.sweep_between_transitions(gibbs) else 2

    def transition(self, parts_fn: PartsFn, fused: FusedHMC | None = None,
                   discrete: BoundSweep | None = None,
                   moves: ScaleMoves | None = None) -> Transition:
        """The plan's kernels as a :class:`~pymc_bdmc.kernels.base.Transition`.

        With ``fused`` (the compiled transition on the same densities) each HMC transition is
        one compiled call; the kernels and their random draws are the same. With ``discrete``
        (Gibbs sweeps of the discrete coordinates, which the plan's zero inverse masses pin
        during HMC), each step is a palindrome: ``HMC transitions, sweep, HMC transitions``
        where :meth:`sweep_between_transitions` says so, else ``sweep, HMC transitions,
        reversed sweep``. Either is reversible, so reverse runs apply the same kernel. With
        ``moves`` (the model's scale moves, used where :attr:`scale_moves` is set), they go in
        the middle of an even number of HMC transitions, or before and after an odd number
        (palindromes again). Their proposals scale with the plan's inverse mass.
        ``parts_fn`` must be the path's (:meth:`path_parts`).
        """
        if discrete is not None and self.sweep_between_transitions(discrete.gibbs):
            return self._sweep_between(parts_fn, fused, discrete)

        def apply(rng, x, parts, t):
            beta = float(self.betas[t])
            if discrete is not None:
                x = discrete(rng, x, beta, False)
                parts = parts_fn(x)
            if moves is None:
                x, parts, info = self._hmc(rng, x, parts, beta, self.kernel(t), parts_fn, fused)
            else:
                x, parts, info = self._hmc_and_moves(rng, x, parts, t, parts_fn, fused, moves)
            if discrete is not None:
                x = discrete(rng, x, beta, True)
                parts = parts_fn(x)
            return x, parts, info

        return apply

    def _sweep_between(self, parts_fn, fused, discrete) -> Transition:
        n_transitions = self.hmc_transitions_per_step(discrete.gibbs)

        def apply(rng, x, parts, t):
            beta = float(self.betas[t])

            def middle(x, parts):
                x = discrete(rng, x, beta, False)
                return x, parts_fn(x)

            return self._hmc(rng, x, parts, beta, self.kernel(t), parts_fn, fused, middle,
                             n_transitions)

        return apply

    def observation_transition(
        self,
        weighted_parts_fn: Callable[[np.ndarray, np.ndarray], DensityParts],
        observation_weights: Callable[[int], np.ndarray],
    ) -> Transition:
        """Kernels for data-point tempering, ``f_t = p(x) prod_i p(y_i | x)^(m_t,i)``.

        The plan's ``betas`` are then only where its kernels were tuned (e.g. the fraction of
        observations included at each stage); the kernel at ``t`` runs HMC on ``f_t``.

        Parameters
        ----------
        weighted_parts_fn : callable
            ``(x, m) -> DensityParts`` of ``p(x) prod_i p(y_i | x)^(m_i)``, e.g.
            :meth:`pymc_bdmc.model.density.ModelDensity.weighted_parts`.
        observation_weights : callable
            ``t -> m_t``, the per-observation weights of target ``t``.
        """

        def apply(rng, x, parts, t):
            weights = observation_weights(t)

            def parts_fn(q):
                return weighted_parts_fn(q, weights)

            # The incoming densities may belong to another target: HMC needs f_t's gradient.
            return self._hmc(rng, x, parts_fn(x), 1.0, self.kernel(t), parts_fn)

        return apply

    def _hmc_and_moves(self, rng, x, parts, t, parts_fn, fused, moves):
        # A palindrome of reversible kernels is reversible. With an even number of HMC
        # transitions the moves go in the middle (H P H, P = g1..gk..g1: one move per step for
        # one group); otherwise around them (S H S~, S = g1..gk).
        beta, sd = float(self.betas[t]), np.sqrt(self.inv_mass[t])
        if self.transitions_per_step % 2 == 0:
            def middle(x, parts):
                return moves.palindrome(rng, x, parts, beta, sd, parts_fn)[:2]

            return self._hmc(rng, x, parts, beta, self.kernel(t), parts_fn, fused, middle)
        x, parts, _ = moves.sweep(rng, x, parts, beta, sd, parts_fn)
        x, parts, info = self._hmc(rng, x, parts, beta, self.kernel(t), parts_fn, fused)
        x, parts, _ = moves.sweep(rng, x, parts, beta, sd, parts_fn, reverse=True)
        return x, parts, info

    def _hmc(self, rng, x, parts, beta, params, parts_fn, fused=None, middle=None,
             n_transitions=None):
        """``n_transitions`` (the plan's by default) HMC transitions, ``middle`` halfway."""
        n_transitions = n_transitions or self.transitions_per_step

        def step(x, parts):
            if fused is not None:  # the same kernel, compiled (dense or not, either path)
                return fused.step(rng, x, parts, beta, params, self.base)
            return hmc_step(rng, x, parts, beta, params, parts_fn)

        x, parts, info = step(x, parts)
        for i in range(1, n_transitions):
            if middle is not None and i == n_transitions // 2:
                x, parts = middle(x, parts)
            x, parts, more = step(x, parts)
            info = HMCInfo(info.acceptance_rate + more.acceptance_rate,
                           info.accepted | more.accepted, info.divergent | more.divergent)
        if n_transitions > 1:
            info = HMCInfo(info.acceptance_rate / n_transitions, info.accepted, info.divergent)
        return x, parts, info
