"""The :class:`Verifier` (one model, compiled once) and the function interface of the checks."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pymc as pm
from pymc.model import modelcontext

from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.tuning import tune_plan
from pymc_bdmc.model.density import FlatLayout, ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.schedules import ADAPTIVE, make_schedule
from pymc_bdmc.verification import density as density_checks
from pymc_bdmc.verification import geweke as geweke_tests
from pymc_bdmc.verification import invariance as kernel_tests
from pymc_bdmc.verification.common import (
    DensityCheckResult,
    ExactSampler,
    KernelTestResult,
    VerificationError,
)
from pymc_bdmc.verification.per_chain import ConditionalSimulator, PerChainDensity

__all__ = [
    "Verifier",
    "check_density_consistency",
    "geweke_test",
    "invariance_test",
    "reversibility_test",
]


class Verifier:
    """Density and kernel checks for one model, compiling what they need once.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the ``with`` context when omitted (and ``density`` is not given).
    density : ModelDensity, optional
        A compiled density of the model to check (and to reuse); built when omitted.
    potentials_in_likelihood : bool, default False
        Whether the density counts ``pm.Potential`` terms as likelihood (as in
        ``sample_ais(potentials_in_likelihood=True)``).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`.

    Examples
    --------
    >>> import pymc as pm
    >>> from pymc_bdmc.verification import Verifier
    >>> with pm.Model() as model:
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.2])
    >>> verifier = Verifier(model)
    >>> verifier.check_density(random_seed=0).passed
    True
    >>> plan = verifier.hmc_plan(n_steps=10, random_seed=0)
    >>> verifier.geweke(plan.transition, t=plan.n_steps, n_chains=50, n_iterations=20,
    ...                 random_seed=0).passed
    True
    """

    def __init__(self, model: pm.Model | None = None, *, density: ModelDensity | None = None,
                 potentials_in_likelihood: bool = False, compile_kwargs: dict | None = None):
        if density is None:
            model = modelcontext(model)
            density = ModelDensity(model, potentials_in_likelihood=potentials_in_likelihood,
                                   compile_kwargs=compile_kwargs)
        self.model = density.model
        self.density = density
        self.potentials_in_likelihood = potentials_in_likelihood
        self._simulator: ModelSimulator | None = None
        self._per_chain: PerChainDensity | None = None
        self._conditional: ConditionalSimulator | None = None
        self._references: dict[str, Callable] = {}

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def layout(self) -> FlatLayout:
        """Layout of the flat unconstrained vector."""
        return self.density.layout

    @property
    def simulator(self) -> ModelSimulator:
        """Exact prior and joint sampler of the model (compiled on first use)."""
        if self._simulator is None:
            self._simulator = ModelSimulator(self.model, self.layout,
                                             compile_kwargs=self.density.compile_kwargs)
        return self._simulator

    def prior_draws(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` exact prior draws, shape (n, n_dim)."""
        return self.simulator.draw_prior(n, rng)

    def flatten(self, draws: np.ndarray | Mapping[str, np.ndarray]) -> np.ndarray:
        """Flat ``(n, n_dim)`` vectors from draws keyed by value-variable name (or as given)."""
        if not isinstance(draws, Mapping):
            return np.asarray(draws, dtype=float)
        missing = set(self.layout.names) - set(draws)
        if missing:
            raise VerificationError(f"Exact draws lack value variables {sorted(missing)}; "
                                    f"expected {list(self.layout.names)}.")
        n = len(next(iter(draws.values())))
        return np.concatenate(
            [np.asarray(draws[name], dtype=float).reshape(n, -1) for name in self.layout.names],
            axis=1,
        )

    def _sampler(self, beta: float, exact_sampler: ExactSampler | None) -> ExactSampler:
        if exact_sampler is not None:
            return exact_sampler
        if beta == 0:
            return self.prior_draws
        raise VerificationError(
            f"No exact sampler for beta = {beta}: pass `exact_sampler` (exact draws of "
            "p(x) p(y|x)^beta, e.g. AnalyticModel.sample_tempered for the models in "
            "pymc_bdmc.known_evidence). Only the prior (beta = 0) can be sampled for any model; "
            "use the Geweke test at beta = 1."
        )

    def _draw(self, sampler: ExactSampler, n: int, rng: np.random.Generator) -> np.ndarray:
        x = self.flatten(sampler(n, rng))
        if x.shape != (n, self.layout.size):
            raise VerificationError(f"The exact sampler returned shape {x.shape}, expected "
                                    f"{(n, self.layout.size)}.")
        return x

    def hmc_plan(self, n_steps: int = 20, *, schedule="linear", pilot_chains: int = 64,
                 n_leapfrog: int = 3, transitions_per_step: int = 2, target_accept: float = 0.9,
                 step_size_jitter: float = 0.5, random_seed=None) -> AnnealingPlan:
        """A frozen HMC plan tuned on the model's data, as ``sample_ais`` would build it.

        Parameters
        ----------
        n_steps : int, default 20
        schedule : str or array_like, default "linear"
            As for :func:`pymc_bdmc.sample_ais` (``"adaptive"`` included).
        pilot_chains : int, default 64
        n_leapfrog, transitions_per_step, target_accept, step_size_jitter
            As for :func:`pymc_bdmc.sample_ais`.
        random_seed : optional

        Returns
        -------
        AnnealingPlan
            Its ``transition`` is a kernel factory for the tests; its kernel at
            ``t = plan.n_steps`` targets the posterior.
        """
        rng = np.random.default_rng(random_seed)
        betas = make_schedule(schedule, n_steps)
        x = self.prior_draws(pilot_chains, rng)
        plan, _ = tune_plan(
            rng, x, self.density.parts(x), self.density.parts,
            schedule=ADAPTIVE if isinstance(schedule, str) and schedule == ADAPTIVE else betas,
            n_steps=len(betas) - 1, n_leapfrog=n_leapfrog, target_accept=target_accept,
            jitter=step_size_jitter, transitions_per_step=transitions_per_step,
        )
        return plan

    # -- the checks, one module each ---------------------------------------------------------------
    check_density = density_checks.check_density
    _geweke_machinery = geweke_tests.geweke_machinery
    geweke = geweke_tests.geweke
    invariance = kernel_tests.invariance
    reversibility = kernel_tests.reversibility


def check_density_consistency(model: pm.Model | None = None, **kwargs) -> DensityCheckResult:
    """Exact checks of a model's compiled densities; see :meth:`Verifier.check_density`.

    Parameters
    ----------
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.check_density`.

    Returns
    -------
    DensityCheckResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.check_density(**kwargs)


def geweke_test(kernel, *, t: int, model: pm.Model | None = None, **kwargs) -> KernelTestResult:
    """Geweke joint-distribution test of a kernel; see :meth:`Verifier.geweke`.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition`` (with ``set_data``, a
        ``Transition``).
    t : int
        Index at which the transition is called; its target must be the posterior.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.geweke`.

    Returns
    -------
    KernelTestResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.geweke(kernel, t=t, **kwargs)


def invariance_test(kernel, *, t: int, beta: float, model: pm.Model | None = None,
                    **kwargs) -> KernelTestResult:
    """Invariance test of a kernel from exact starts; see :meth:`Verifier.invariance`.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition``.
    t : int
        Index at which the transition is called.
    beta : float
        Inverse temperature of the transition's target ``p(x) p(y|x)^beta``.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.invariance`.

    Returns
    -------
    KernelTestResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.invariance(kernel, t=t, beta=beta, **kwargs)


def reversibility_test(kernel, *, t: int, beta: float, model: pm.Model | None = None,
                       **kwargs) -> KernelTestResult:
    """Detailed-balance test of a kernel; see :meth:`Verifier.reversibility`.

    Parameters
    ----------
    kernel : callable
        Kernel factory ``kernel(parts_fn) -> Transition``.
    t : int
        Index at which the transition is called.
    beta : float
        Inverse temperature of the transition's target ``p(x) p(y|x)^beta``.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted.
    **kwargs
        ``density``, ``potentials_in_likelihood`` and ``compile_kwargs`` build the
        :class:`Verifier`; the others go to :meth:`Verifier.reversibility`.

    Returns
    -------
    KernelTestResult
    """
    verifier, kwargs = _verifier(model, kwargs)
    return verifier.reversibility(kernel, t=t, beta=beta, **kwargs)


def _verifier(model, kwargs):
    own = {k: kwargs.pop(k) for k in ("density", "potentials_in_likelihood", "compile_kwargs")
           if k in kwargs}
    if "density" not in own:
        model = modelcontext(model)
    return Verifier(model, **own), kwargs
