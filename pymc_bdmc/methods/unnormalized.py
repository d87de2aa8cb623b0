# ruff: noqa: RUF002  (θ̂ and η are the paper's notation)
"""Evidence of models with un-normalised likelihoods (Everitt et al. 2017), as driver methods.

* :class:`ExchangeImportance`: an exchange-algorithm pilot gives ``θ̂`` and a Gaussian proposal;
  SAVIS or MAVIS (:mod:`pymc_bdmc.unnormalized.importance`) then estimate ``p(y)`` with each
  ``1/Z(θ_n)`` replaced by an unbiased estimate anchored at ``Z(θ̂)``.
* :class:`RandomWeightSMC`: Ising fields, one row of data at a time from exact prior draws, with
  no pilot and no ``Z(θ̂)`` (:mod:`pymc_bdmc.unnormalized.smc`).
* :class:`SummaryStatistic`: ABC or synthetic likelihood with the pilot's proposal, a number
  about a summary ``S(y)`` for Bayes factors only (:mod:`pymc_bdmc.unnormalized.summary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.methods.protocol import Job, Launch, Outcome, Problem, RunLabels, SharedPilot
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.pipeline.auto_steps import Attempt
from pymc_bdmc.pipeline.compile import timed_build
from pymc_bdmc.pipeline.progress import phase
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.resampling import systematic_resample
from pymc_bdmc.unnormalized.importance import mavis, normaliser_bounds, savis
from pymc_bdmc.unnormalized.pilot import (
    CompiledPrior,
    exact_log_partition,
    exchange_pilot,
    observed_field,
    pilot_drift_check,
)
from pymc_bdmc.unnormalized.results import evidence_dataset, posterior_dataset, result_tree
from pymc_bdmc.unnormalized.smc import IsingRowPath, random_weight_smc
from pymc_bdmc.unnormalized.summary import abc_evidence, synthetic_likelihood_evidence

__all__ = ["ExchangeImportance", "RandomWeightSMC", "SummaryStatistic"]



@dataclass(frozen=True)
class Pilot:
    """The exchange pilot's chain, its ``θ̂`` and ``η(θ̂)``, and its drift check."""

    chain: object
    theta_hat: np.ndarray
    eta_hat: np.ndarray
    drift: dict


class _Unnormalized:
    """What the three estimators share: the compiled prior, the pilot, the proposal's draws.

    Parameters
    ----------
    method : str
        ``"savis"``, ``"mavis"``, ``"rwsmc"``, ``"abc"`` or ``"sl"``.
    name : str
        The un-normalised observed variable.
    sim : object
        Its simulator (:func:`pymc_bdmc.unnormalized.distributions.unnormalized_simulator`).
    opts : dict
        The estimator's checked settings (draws, pilot sizes, auxiliary draws, ...).
    """

    def __init__(self, method: str, name: str, sim, opts: dict):
        self.method, self.name, self.sim, self.opts = method, name, sim, opts
        self.labels = RunLabels(algorithm=method.upper(), forward_label=method.upper())

    def prepare(self, job: Job) -> Problem:
        """Compile ``log p(θ)`` and ``η(θ)``; the data's statistics."""
        compiled, seconds = timed_build(lambda: CompiledPrior(job.model, self.name,
                                                              job.compile_kwargs))
        data = observed_field(job.model, self.name)
        return Problem(compiled, self.sim, None, seconds,
                       extra={"data": data, "stats": np.asarray(self.sim.statistics(data),
                                                                dtype=float)})

    def other_form(self, job: Job, problem: Problem) -> Problem | None:
        """The models run as written."""
        return None

    def _pilot(self, job: Job, problem: Problem, progress) -> Pilot:
        compiled = problem.density
        chain = exchange_pilot(compiled, self.sim, problem.extra["stats"], job.streams,
                               self.opts["pilot_draws"], self.opts["pilot_tune"], progress)
        theta_hat = chain.pilot()
        eta_hat = compiled.natural(theta_hat)
        return Pilot(chain, theta_hat, eta_hat,
                     pilot_drift_check(self.sim, problem.extra["data"], eta_hat))

    def _proposal_draws(self, job: Job, problem: Problem, chain):
        """The importance proposal and its draws, their ``η`` and log prior densities."""
        compiled, draws = problem.density, self.opts["draws"]
        q = chain.proposal(scale=self.opts["proposal_scale"])
        theta = np.asarray(q.rvs(size=draws, random_state=job.streams["forward"]), dtype=float)
        theta = theta.reshape(draws, -1)
        eta = np.array([compiled.natural(t) for t in theta])
        log_prior = np.array([compiled.log_prior(t) for t in theta])
        return theta, eta, log_prior, q.logpdf(theta).reshape(-1)


    def _pilot_tree(self, job: Job, problem: Problem, pilot: Pilot, evidence: xr.Dataset,
                    auxiliary: xr.Dataset) -> xr.DataTree:
        chain = pilot.chain
        posterior = posterior_dataset(job.model, problem.density, chain.theta,
                                      {"sampler": "exchange algorithm (pilot)",
                                       "acceptance_rate": float(chain.acceptance_rate)})
        return result_tree(job.model, self.name, posterior, evidence, auxiliary)


class ExchangeImportance(_Unnormalized):
    """SAVIS or MAVIS after an exchange pilot, anchored at ``Z(θ̂)`` or at its upper bound."""

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> dict:
        """The exchange pilot, then ``log Z(θ̂)``: exact where known, and its bounds."""
        pilot, opts = self._pilot(job, problem, progress), self.opts
        reference = opts["reference"]
        log_z_hat = exact_log_partition(self.sim, pilot.eta_hat)
        bounds = None
        if reference is not None and opts["bound_chains"] > 0:
            with phase(progress, "Bounds on log Z(θ̂)",
                       2 * (opts["bound_bridges"] + 1)) as advance:
                bounds = normaliser_bounds(self.sim, pilot.eta_hat, reference[0], reference[1],
                                           opts["bound_chains"], job.streams["reverse"],
                                           n_bridges=opts["bound_bridges"], on_step=advance)
        if log_z_hat is None and bounds is None:
            raise BDMCInputError("No exact log Z(θ̂) here: pass bound_chains > 0 to bound it.")
        return {"pilot": pilot, "log_z_hat": log_z_hat, "bounds": bounds,
                "log_z_ref": log_z_hat if log_z_hat is not None else bounds.upper}

    def launch(self, job: Job, problem: Problem, tuned: dict, attempt: Attempt,
               s: Settings) -> Launch:
        """Draws from the pilot's proposal, weighted by SAVIS or MAVIS."""
        theta, eta, log_prior, log_q = self._proposal_draws(job, problem, tuned["pilot"].chain)
        args = (self.sim, problem.extra["stats"], eta, log_prior, log_q, tuned["pilot"].eta_hat,
                tuned["log_z_ref"])
        opts, rng = self.opts, job.streams["forward"]

        def forward(on_step, on_group):
            if self.method == "savis":
                return savis(*args, n_aux=opts["n_aux"], rng=rng, on_step=on_step)
            return mavis(*args, n_aux=opts["n_aux"], n_bridges=opts["n_bridges"],
                         sweeps=opts["sweeps"], rng=rng, on_step=on_step)

        return Launch(forward, None, opts["draws"], opts["draws"], s)

    def result(self, job: Job, problem: Problem, tuned: dict, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """The evidence, its certified form, and what the estimator used."""
        result, pilot, bounds = outcome.forward, tuned["pilot"], tuned["bounds"]
        log_z_hat, log_z_ref, opts = tuned["log_z_hat"], tuned["log_z_ref"], self.opts
        # log p̂ = log Â - log_z_ref, with Â unbiased for p(y) Z(θ̂): swap in the upper bound.
        certified = np.nan if bounds is None else result.log_evidence + log_z_ref - bounds.upper
        exact = bool(self.sim.exact) and pilot.chain.exact and result.exact
        evidence = evidence_dataset(
            {"lower": result.log_evidence, "certified_lower": float(certified),
             "relative_se": result.relative_se, "ess": result.ess,
             "log_weight": ("importance_draw", result.log_weights)},
            result.relative_se,
            attrs={"estimate_kind": "unbiased" if exact else "biased", "method": self.method,
                   "exact": int(exact),
                   "log_z_source": "exact" if log_z_hat is not None else "upper_bound"},
        )
        nan = float("nan")
        auxiliary = xr.Dataset(
            {"theta_hat": ("parameter", pilot.theta_hat), "eta_hat": ("natural", pilot.eta_hat),
             "log_z_hat": nan if log_z_hat is None else log_z_hat,
             "log_z_hat_lower": nan if bounds is None else bounds.lower,
             "log_z_hat_upper": nan if bounds is None else bounds.upper,
             "pilot_acceptance_rate": float(pilot.chain.acceptance_rate),
             "n_pilot_draws": len(pilot.chain.theta), "n_importance_draws": opts["draws"],
             "n_aux": result.n_aux, "n_aux_draws": opts["draws"] * result.n_aux,
             "n_bridges": result.n_bridges, "sweeps": result.sweeps,
             "n_bound_chains": opts["bound_chains"], "n_bound_bridges": opts["bound_bridges"],
             **pilot.drift},
            attrs={"exact": int(exact)},
        )
        return self._pilot_tree(job, problem, pilot, evidence, auxiliary)


class RandomWeightSMC(_Unnormalized):
    """Random-weight SMC over the rows of an Ising field, from exact prior draws."""

    def __init__(self, name: str, sim, opts: dict, neighbourhood):
        super().__init__("rwsmc", name, sim, opts)
        self.labels = RunLabels(algorithm="random-weight SMC",
                                forward_label="Random-weight SMC (rows)", unit="row")
        self.neighbourhood = neighbourhood

    def prepare(self, job: Job) -> Problem:
        """Compile the prior and its simulator; the data's row path."""
        problem = super().prepare(job)
        compiled = problem.density
        simulator, seconds = timed_build(lambda: ModelSimulator(job.model, compiled.layout,
                                                                job.compile_kwargs))
        problem.compile_time += seconds
        problem.extra.update(simulator=simulator, path=IsingRowPath(
            problem.extra["data"], self.neighbourhood, exact=self.sim.exact,
            sweeps=self.sim.sweeps))
        return problem

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> None:
        """Random-weight SMC needs no pilot."""
        return None

    def launch(self, job: Job, problem: Problem, tuned: None, attempt: Attempt,
               s: Settings) -> Launch:
        """Exact prior draws, then the rows one at a time."""
        draws, path, compiled = self.opts["draws"], problem.extra["path"], problem.density
        prior = problem.extra["simulator"].draw_prior(draws, job.streams["forward_init"])

        def forward(on_step, on_group):
            return random_weight_smc(path, compiled.natural, compiled.log_prior, prior,
                                     job.streams["forward"], n_aux=self.opts["n_aux"],
                                     n_moves=self.opts["n_moves"], on_step=on_step)

        return Launch(forward, None, path.n_targets, path.n_targets, s)

    def result(self, job: Job, problem: Problem, tuned: None, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """The evidence (unbiased with exact simulation, no normaliser needed), the particles."""
        result, opts, path = outcome.forward, self.opts, problem.extra["path"]
        draws, n_aux = opts["draws"], opts["n_aux"]
        weights = np.exp(result.log_weights - logsumexp(result.log_weights))
        resampled = result.theta[systematic_resample(job.streams["forward"], weights, draws)]
        exact = bool(result.exact)
        evidence = evidence_dataset(
            {"lower": result.log_evidence, "certified_lower": result.log_evidence,
             "relative_se": float("nan"), "ess": float(1.0 / np.sum(weights**2)),
             "log_weight": ("particle", result.log_weights),
             "log_increment": ("row", result.log_increments)},
            float("nan"),
            attrs={"estimate_kind": "unbiased" if exact else "biased", "method": "rwsmc",
                   "exact": int(exact), "log_z_source": "none"},
        )
        auxiliary = xr.Dataset(
            {"n_particles": draws, "n_rows": path.n_targets, "n_aux": n_aux,
             "n_aux_draws": draws * path.n_targets * n_aux, "n_moves": opts["n_moves"],
             "n_resamples": result.n_resamples,
             "acceptance_rate": float(result.acceptance_rate)},
            attrs={"exact": int(exact)},
        )
        posterior = posterior_dataset(job.model, problem.density, resampled,
                                      {"sampler": "random-weight SMC (final particles, "
                                                  "resampled)"})
        return result_tree(job.model, self.name, posterior, evidence, auxiliary)


class SummaryStatistic(_Unnormalized):
    """ABC or synthetic likelihood by importance sampling with the exchange pilot's proposal."""

    def tune(self, job: Job, problem: Problem, attempt: Attempt, s: Settings, progress,
             memo: SharedPilot) -> Pilot:
        """The exchange pilot."""
        return self._pilot(job, problem, progress)

    def launch(self, job: Job, problem: Problem, tuned: Pilot, attempt: Attempt,
               s: Settings) -> Launch:
        """Draws from the pilot's proposal, weighted by simulated summaries."""
        summary_fn = self.opts["summary"][0]
        s_obs = np.atleast_1d(np.asarray(summary_fn(problem.extra["data"][None]),
                                         dtype=float)).reshape(-1)
        _, eta, log_prior, log_q = self._proposal_draws(job, problem, tuned.chain)
        args = (self.sim, summary_fn, s_obs, eta, log_prior, log_q)
        opts, rng = self.opts, job.streams["forward"]

        def forward(on_step, on_group):
            if self.method == "abc":
                return abc_evidence(*args, n_sim=opts["n_sim"], epsilon=opts["epsilon"],
                                    rng=rng, on_step=on_step)
            return synthetic_likelihood_evidence(*args, n_sim=opts["n_sim"], rng=rng,
                                                 on_step=on_step)

        return Launch(forward, None, opts["draws"], opts["draws"], s)

    def result(self, job: Job, problem: Problem, tuned: Pilot, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """The summary-statistic number (not an evidence), and what it used."""
        result, opts, compiled = outcome.forward, self.opts, problem.density
        exact = bool(result.exact and tuned.chain.exact)
        variables = {"lower": result.log_evidence, "relative_se": result.relative_se,
                     "ess": result.ess, "log_weight": ("importance_draw", result.log_weights)}
        if self.method == "abc":
            variables |= {"epsilon": ("statistic", result.epsilon),
                          "acceptance_rate": result.acceptance_rate}
        evidence = evidence_dataset(variables, result.relative_se,
                                    attrs={"estimate_kind": "summary-statistic",
                                           "method": self.method,
                                           "summary": opts["summary"][1], "exact": int(exact)})
        auxiliary = xr.Dataset(
            {"theta_hat": ("parameter", tuned.theta_hat),
             "eta_hat": ("natural", compiled.natural(tuned.theta_hat)),
             "pilot_acceptance_rate": float(tuned.chain.acceptance_rate),
             "n_pilot_draws": len(tuned.chain.theta), "n_importance_draws": opts["draws"],
             "n_sim": result.n_sim, "n_simulations": opts["draws"] * result.n_sim,
             **tuned.drift},
            attrs={"exact": int(exact)},
        )
        return self._pilot_tree(job, problem, tuned, evidence, auxiliary)
