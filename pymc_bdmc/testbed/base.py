"""The common estimator interface of the testbed, and the machinery estimators share.

Every estimator is a function ``estimator(problem, budget, seed) -> EstimateResult``. This module
holds that interface (:class:`EstimateResult`, :class:`EstimatorSpec`, :func:`as_problem`), the
per-model cache of compiled densities, the estimator random streams and the pilot-tuned annealing
plan; the estimators themselves live in :mod:`.estimators`, :mod:`.chib`, :mod:`.nested` and
:mod:`.quadrature`, and are registered in :data:`pymc_bdmc.testbed.estimators.ESTIMATORS`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pymc as pm

from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.tuning import PilotResult, tune_plan
from pymc_bdmc.known_evidence import AnalyticModel
from pymc_bdmc.model.checks import check_normalized
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.schedules import ADAPTIVE, make_schedule
from pymc_bdmc.testbed.problem import Problem

__all__ = [
    "AIS_CHAINS",
    "COMPILE_KWARGS",
    "Bias",
    "EstimateResult",
    "EstimatorSpec",
    "as_problem",
]

Bias = Literal["lower", "upper", "neither"]

#: Compilation settings of every density the testbed compiles (and of PyMC's samplers it wraps).
COMPILE_KWARGS: dict = {"mode": "FAST_RUN"}

#: Chains of the annealing estimators (forward and reverse AIS, harmonic-mean chains).
AIS_CHAINS = 16


@dataclass(frozen=True)
class EstimateResult:
    """One evidence estimate.

    Attributes
    ----------
    log_evidence : float
        The estimate of ``log p(y)`` (NaN if the estimator failed; see ``info["error"]``).
    seconds : float
        Wall time of the estimate, compilation excluded for the testbed's own densities.
    info : dict
        Estimator-specific diagnostics (budget meaning, ESS, compile time, ...).
    """

    log_evidence: float
    seconds: float
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EstimatorSpec:
    """An estimator with its bias direction and the meaning of its budget.

    Attributes
    ----------
    fn : callable
        ``fn(problem, budget, seed) -> EstimateResult``.
    bias : {"lower", "upper", "neither"}
    budget_unit : str
        What one unit of budget buys.
    base_budget : int
        Budget at level 1 of :func:`pymc_bdmc.testbed.runner.compare_estimators`.
    needs_generating_point : bool
        Whether it needs ``theta*`` (simulated data).
    needs_gibbs_model : bool
        Whether it needs the problem's Gibbs form
        (:attr:`~pymc_bdmc.testbed.models.Problem.gibbs_model`), as the Chib-style estimator
        does.
    """

    fn: Callable[..., EstimateResult]
    bias: Bias
    budget_unit: str
    base_budget: int
    needs_generating_point: bool = False
    needs_gibbs_model: bool = False

    def applies_to(self, problem: Problem) -> bool:
        """Whether ``problem`` has what this estimator needs."""
        return ((not self.needs_generating_point or problem.generating_point is not None)
                and (not self.needs_gibbs_model or problem.gibbs_model is not None))


def as_problem(obj) -> Problem:
    """Wrap a ``pm.Model`` or :class:`~pymc_bdmc.known_evidence.AnalyticModel` as a Problem.

    Parameters
    ----------
    obj : Problem, pm.Model or AnalyticModel
        Returned unchanged if it is a Problem already.

    Returns
    -------
    Problem
        Without ``generating_point`` (the data are not known to be simulated); with the exact
        ``log_evidence`` of an AnalyticModel's own data.

    Raises
    ------
    BDMCInputError
        If the model has an un-normalised likelihood (or prior), before anything is compiled:
        every testbed estimator treats the logp as normalised
        (:func:`~pymc_bdmc.model.checks.check_normalized`).
    """
    if isinstance(obj, Problem):
        problem = obj
    elif isinstance(obj, AnalyticModel):
        problem = Problem("analytic", obj.model, None, obj.log_evidence())
    elif isinstance(obj, pm.Model):
        problem = Problem("model", obj)
    else:
        raise TypeError(
            f"Expected a Problem, pm.Model or AnalyticModel, got {type(obj).__name__}."
        )
    check_normalized(problem.model)
    return problem


_CACHE: dict[int, tuple[pm.Model, ModelDensity, ModelSimulator, float]] = {}


def compiled_problem(problem: Problem) -> tuple[ModelDensity, ModelSimulator, float]:
    key = id(problem.model)
    if key not in _CACHE:
        start = time.perf_counter()
        density = ModelDensity(problem.model, compile_kwargs=COMPILE_KWARGS)
        simulator = ModelSimulator(problem.model, density.layout)
        _CACHE[key] = (problem.model, density, simulator, time.perf_counter() - start)
    _, density, simulator, seconds = _CACHE[key]
    return density, simulator, seconds


_ESTIMATOR_STREAM = 0xE57


def estimator_rng(seed: int) -> np.random.Generator:
    # Estimator streams are keyed apart from the data simulation: a problem simulated with
    # seed s must not share its draws with an estimator run with seed s.
    return np.random.default_rng([int(seed), _ESTIMATOR_STREAM])


def check_budget(budget) -> int:
    budget = int(budget)
    if budget < 1:
        raise ValueError(f"`budget` must be a positive integer, got {budget}.")
    return budget


def log_likelihood_batched(density: ModelDensity, x: np.ndarray, batch: int = 512) -> np.ndarray:
    return np.concatenate([density.parts(x[i:i + batch]).log_likelihood
                           for i in range(0, len(x), batch)])


def pilot_plan(density: ModelDensity, simulator: ModelSimulator, rng: np.random.Generator,
               n_steps: int, pilot_chains: int = 32, schedule: str = "sigmoid",
               transitions_per_step: int = 2) -> tuple[AnnealingPlan, PilotResult]:
    """Tune and freeze a plan of ``n_steps`` HMC steps (3 leapfrog steps, jitter 0.5).

    The kernels are the paper's: diagonal mass matrices, a fixed trajectory length.

    ``schedule`` is ``"sigmoid"`` (the paper's, §6.2) or ``"adaptive"`` (equal thermodynamic
    length from the pilot, as :func:`pymc_bdmc.sample_bdmc` does by default).
    """
    x_pilot = simulator.draw_prior(pilot_chains, rng)
    betas = ADAPTIVE if schedule == ADAPTIVE else make_schedule(schedule, n_steps)
    return tune_plan(rng, x_pilot, density.parts(x_pilot), density.parts, schedule=betas,
                     n_steps=n_steps, n_leapfrog=3, target_accept=0.9, jitter=0.5,
                     transitions_per_step=transitions_per_step, dense=False)
