"""What the un-normalised estimators share: the compiled prior and ``η(θ)``, the exchange pilot.

:class:`CompiledPrior` compiles ``log p(θ)`` (with the Jacobian), the natural parameters
``η(θ)`` and the constrained values once over the model's unconstrained parameters. The
exchange pilot (:func:`exchange_pilot`) samples ``p(θ | y)`` and gives the proposal and ``θ̂``
of SAVIS, MAVIS, ABC and synthetic likelihood.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pymc as pm
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.layout import FlatLayout
from pymc_bdmc.pipeline.progress import phase
from pymc_bdmc.unnormalized.ergm import ERGMSimulator
from pymc_bdmc.unnormalized.exchange import exchange_sampler
from pymc_bdmc.unnormalized.ising import IsingSimulator, ising_pseudo_likelihood_estimate

__all__ = ["PILOT_DRIFT_TOLERANCE", "CompiledPrior", "exact_log_partition", "exchange_pilot",
           "observed_field", "pilot_drift_check", "reference_normaliser"]

logger = logging.getLogger("pymc_bdmc")

#: An inexact simulator's exchange pilot is taken to have drifted where its posterior mean of a
#: natural parameter is further than this from the data's maximum pseudo-likelihood estimate
#: (whose own spread on 10 x 10 fields is 0.1-0.15; drifted pilots reached couplings of 13-20).
PILOT_DRIFT_TOLERANCE = 1.0


def observed_field(model: pm.Model, name: str) -> np.ndarray:
    """Return the observed data of the un-normalised variable ``name``."""
    return np.asarray(model.rvs_to_values[model[name]].eval())


def reference_normaliser(sim) -> tuple[np.ndarray, float] | None:
    """Return a natural parameter with a known normaliser (uniform field or graph), if any."""
    if isinstance(sim, IsingSimulator):
        return np.zeros(2), sim.shape[0] * sim.shape[1] * math.log(2.0)
    if isinstance(sim, ERGMSimulator):
        k = len(sim.statistic_names)
        return np.zeros(k), sim.n_nodes * (sim.n_nodes - 1) / 2 * math.log(2.0)
    return None


def exact_log_partition(sim, eta) -> float | None:
    """``log Z(η)`` where the simulator knows it exactly, else None."""
    try:
        return float(sim.log_partition(eta))
    except (AttributeError, BDMCInputError):
        return None


class CompiledPrior:
    """``log p(θ)`` (with Jacobian), ``η(θ)`` and the constrained values, on a flat ``θ``."""

    def __init__(self, model: pm.Model, name: str, compile_kwargs: dict | None):
        point = model.initial_point()
        values = [model.rvs_to_values[rv] for rv in model.free_RVs]
        self.layout = FlatLayout.from_point([v.name for v in values], point)
        eta = model.replace_rvs_by_values([model[name].owner.inputs[2]])[0]
        log_prior = model.logp(vars=model.free_RVs, jacobian=True, sum=True)
        self.names = [v.name for v in (*model.free_RVs, *model.deterministics)]
        constrained = model.replace_rvs_by_values([*model.free_RVs, *model.deterministics])
        outputs, flat = join_nonshared_inputs(point, [log_prior, eta, *constrained], values)
        kwargs = dict(compile_kwargs or {})
        self._log_prior = compile_pytensor([flat], outputs[0], **kwargs)
        self._natural = compile_pytensor([flat], outputs[1], **kwargs)
        self._constrained = compile_pytensor([flat], outputs[2:], **kwargs)
        self.theta0 = np.concatenate([np.ravel(point[v.name]) for v in values]).astype(float)

    def log_prior(self, theta) -> float:
        """``log p(θ)`` with the Jacobian, at a flat unconstrained ``θ``."""
        return float(self._log_prior(np.asarray(theta, dtype=float)))

    def natural(self, theta) -> np.ndarray:
        """Return the natural parameters ``η(θ)``."""
        return np.atleast_1d(np.asarray(self._natural(np.asarray(theta, dtype=float)), float))

    def constrained(self, theta) -> list[np.ndarray]:
        """Return the free variables and Deterministics at ``θ``, constrained."""
        return [np.asarray(v) for v in self._constrained(np.asarray(theta, dtype=float))]


def exchange_pilot(compiled, sim, stats_y, rngs, pilot_draws, pilot_tune, progress):
    """Exchange pilot: a tuning run at a small step, then a run at ``2.38/√d`` posterior sd."""
    theta0 = compiled.theta0
    d = len(theta0)
    with phase(progress, "Exchange pilot", pilot_tune + pilot_draws) as advance:
        tune = exchange_sampler(sim, stats_y, compiled.natural, compiled.log_prior, theta0,
                                pilot_tune, rngs["pilot_init"], step_size=0.1, burn_in=0,
                                on_step=advance)
        cov = np.atleast_2d(np.cov(tune.theta, rowvar=False))
        if not np.all(np.isfinite(cov)) or np.any(np.diag(cov) <= 0):
            chol = 0.1 * np.eye(d)
        else:
            chol = 2.38 / np.sqrt(d) * np.linalg.cholesky(cov + 1e-12 * np.eye(d))
        chain = exchange_sampler(sim, stats_y, compiled.natural, compiled.log_prior,
                                 tune.theta[-1], pilot_draws, rngs["pilot"], step_size=chol,
                                 burn_in=0, on_step=advance)
    logger.debug("Exchange pilot: acceptance %.2f, posterior mean %s (unconstrained).",
              chain.acceptance_rate, np.round(chain.pilot(), 3).tolist())
    return chain


def pilot_drift_check(sim, data: np.ndarray, eta_hat: np.ndarray) -> dict:
    """Compare an inexact Ising pilot's ``η̂`` with the maximum pseudo-likelihood estimate.

    With approximate simulation the exchange pilot can drift to couplings the data do not
    support (``docs/performance.md``, un-normalised likelihoods), and every estimate built on it
    is then wrong. The pseudo-likelihood estimate needs no simulation. Returns auxiliary
    variables (``eta_pseudo_likelihood``, ``pilot_drift``) for inexact Ising simulators, after
    logging a warning where the pilot drifted; an empty dict otherwise.
    """
    if not isinstance(sim, IsingSimulator) or sim.exact:
        return {}
    eta_pl = ising_pseudo_likelihood_estimate(data, sim.neighbourhood)
    distance = float(np.max(np.abs(np.asarray(eta_hat, dtype=float) - eta_pl)))
    drifted = bool(np.isfinite(distance) and distance > PILOT_DRIFT_TOLERANCE)
    if drifted:
        logger.warning(
            "The exchange pilot's natural parameters %s are %.1f from the data's maximum "
            "pseudo-likelihood estimate %s: with inexact simulation (exact=False, %d sweeps per "
            "draw) the pilot has likely drifted, and this evidence is unreliable. Raise `sweeps` "
            "in pmb.Ising(...), or use an exact simulator where the grid allows.",
            np.round(eta_hat, 2).tolist(), distance, np.round(eta_pl, 2).tolist(), sim.sweeps)
    return {"eta_pseudo_likelihood": ("natural", eta_pl), "pilot_drift": int(drifted)}
