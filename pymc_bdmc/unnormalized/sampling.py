# ruff: noqa: RUF002, RUF003  (γ, θ̂ and η are the paper's notation)
"""The entry point for the evidence of a PyMC model with an un-normalised likelihood.

:func:`sample_unnormalized_evidence` is thin: it checks the model, compiles ``log p(θ)`` and
``η(θ)`` once over the model's unconstrained parameters, then runs the NumPy estimators of this
subpackage (exchange pilot, SAVIS/MAVIS, normaliser bounds; or random-weight SMC from exact
prior draws) on independent random streams
(:func:`pymc_bdmc.pipeline.seeding.streams`) and assembles an ``xarray.DataTree``.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pymc as pm
import xarray as xr
from pymc.backends.arviz import coords_and_dims_for_inferencedata
from pymc.progress_bar import create_simple_progress
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs
from scipy.special import logsumexp

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.layout import FlatLayout
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.pipeline.progress import phase, progress_enabled
from pymc_bdmc.pipeline.seeding import streams
from pymc_bdmc.resampling import systematic_resample
from pymc_bdmc.results.datatree import named_dataset
from pymc_bdmc.unnormalized.distributions import unnormalized_simulator
from pymc_bdmc.unnormalized.ergm import ERGMSimulator, ergm_statistics
from pymc_bdmc.unnormalized.exchange import exchange_sampler
from pymc_bdmc.unnormalized.importance import mavis, normaliser_bounds, savis
from pymc_bdmc.unnormalized.ising import (
    IsingSimulator,
    ising_pseudo_likelihood_estimate,
    ising_statistics,
)
from pymc_bdmc.unnormalized.marker import unnormalized_likelihoods, unnormalized_variables
from pymc_bdmc.unnormalized.smc import IsingRowPath, random_weight_smc
from pymc_bdmc.unnormalized.summary import abc_evidence, synthetic_likelihood_evidence

__all__ = ["METHODS", "PILOT_DRIFT_TOLERANCE", "pilot_drift_check", "sample_unnormalized_evidence"]

#: Accepted values of ``method``.
METHODS = ("auto", "savis", "mavis", "rwsmc", "abc", "sl")

#: Methods whose result is a summary-statistic number, not an evidence (Bayes factors only).
SUMMARY_METHODS = ("abc", "sl")

#: Simulations per importance draw when ``n_sim`` is not given.
N_SIM = {"abc": 50, "sl": 50}

#: Auxiliary draws per particle and target of random-weight SMC when ``n_aux`` is not given:
#: its row ratios are heavy-tailed, and on a 4x4 field 16 draws cut the spread of log p̂ from
#: 0.16 to 0.08 nats at 1000 particles, where more particles barely help.
RWSMC_N_AUX = 16

_log = logging.getLogger("pymc_bdmc")


def _check_model(model: pm.Model) -> str:
    """Return the name of the one un-normalised observed variable, or raise."""
    names = unnormalized_likelihoods(model)
    observed = [rv.name for rv in model.observed_RVs]
    if len(observed) != 1 or names != observed:
        raise BDMCInputError(
            "sample_unnormalized_evidence needs a model with exactly one observed variable, "
            "whose likelihood is un-normalised (pmb.Ising, pmb.ERGM, pmb.ExponentialFamily); "
            f"this model has observed variables {observed}, of which {names} are un-normalised. "
            "For normalised likelihoods use pmb.sample_ais, pmb.sample_bdmc or "
            "pmb.sample_smc_evidence."
        )
    latent = [n for n in unnormalized_variables(model) if n not in names]
    if latent:
        raise BDMCInputError(f"Free variables {latent} have un-normalised densities: the prior "
                             "must be normalised.")
    if model.potentials:
        raise BDMCInputError(
            f"Potentials {[p.name for p in model.potentials]} make the prior un-normalised; "
            "sample_unnormalized_evidence needs a prior made of PyMC distributions only."
        )
    if not model.free_RVs:
        raise BDMCInputError("The model has no free parameters: there is nothing to integrate.")
    discrete = [rv.name for rv in model.free_RVs
                if model.rvs_to_values[rv].dtype.startswith(("int", "uint", "bool"))]
    if discrete:
        raise BDMCInputError(f"Free variables {discrete} are discrete; the exchange pilot and "
                             "the importance proposal need continuous parameters.")
    return names[0]


def _reference(sim) -> tuple[np.ndarray, float] | None:
    """Return a natural parameter with a known normaliser (uniform field or graph), if any."""
    if isinstance(sim, IsingSimulator):
        return np.zeros(2), sim.shape[0] * sim.shape[1] * math.log(2.0)
    if isinstance(sim, ERGMSimulator):
        k = len(sim.statistic_names)
        return np.zeros(k), sim.n_nodes * (sim.n_nodes - 1) / 2 * math.log(2.0)
    return None


def _exact_log_partition(sim, eta) -> float | None:
    try:
        return float(sim.log_partition(eta))
    except (AttributeError, BDMCInputError):
        return None


class _Compiled:
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
        return float(self._log_prior(np.asarray(theta, dtype=float)))

    def natural(self, theta) -> np.ndarray:
        return np.atleast_1d(np.asarray(self._natural(np.asarray(theta, dtype=float)), float))

    def constrained(self, theta) -> list[np.ndarray]:
        return [np.asarray(v) for v in self._constrained(np.asarray(theta, dtype=float))]


def _pilot(compiled, sim, stats_y, rngs, pilot_draws, pilot_tune, progress):
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
    _log.info("Exchange pilot: acceptance %.2f, posterior mean %s (unconstrained).",
              chain.acceptance_rate, np.round(chain.pilot(), 3).tolist())
    return chain


#: An inexact simulator's exchange pilot is taken to have drifted where its posterior mean of a
#: natural parameter is further than this from the data's maximum pseudo-likelihood estimate
#: (whose own spread on 10 x 10 fields is 0.1-0.15; drifted pilots reached couplings of 13-20).
PILOT_DRIFT_TOLERANCE = 1.0


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
        _log.warning(
            "The exchange pilot's natural parameters %s are %.1f from the data's maximum "
            "pseudo-likelihood estimate %s: with inexact simulation (exact=False, %d sweeps per "
            "draw) the pilot has likely drifted, and this evidence is unreliable. Raise `sweeps` "
            "in pmb.Ising(...), or use an exact simulator where the grid allows.",
            np.round(eta_hat, 2).tolist(), distance, np.round(eta_pl, 2).tolist(), sim.sweeps)
    return {"eta_pseudo_likelihood": ("natural", eta_pl), "pilot_drift": int(drifted)}


def _evidence_dataset(variables: dict, lower_se: float, attrs: dict) -> xr.Dataset:
    """Build the ``evidence`` group: the layout of every pymc_bdmc result, then extras.

    ``lower`` is ``log p̂``; ``lower_se`` its standard error (to first order the relative
    standard error of ``p̂``). Nothing here bounds ``log p(y)`` from above, so ``upper``,
    ``gap`` and their standard errors are NaN, as in a forward-only AIS result.
    """
    nan = float("nan")
    core = {"lower": variables.pop("lower"), "upper": nan, "gap": nan, "gap_se": nan,
            "lower_se": float(lower_se), "upper_se": nan}
    return xr.Dataset(core | variables, attrs=attrs)


def _observed_dataset(model, name) -> xr.Dataset:
    """Build the ``observed_data`` group: the data the evidence refers to, in model dims."""
    coords, dims = coords_and_dims_for_inferencedata(model)
    return named_dataset({name: _observed(model, name)}, dims, coords)


def _tree(model, name, posterior: xr.Dataset, evidence: xr.Dataset,
          auxiliary: xr.Dataset) -> xr.DataTree:
    return xr.DataTree.from_dict({"posterior": posterior,
                                  "observed_data": _observed_dataset(model, name),
                                  "evidence": evidence, "auxiliary": auxiliary})


def _pilot_tree(model, name, compiled, chain, evidence: xr.Dataset,
                auxiliary: xr.Dataset) -> xr.DataTree:
    """Assemble the result of an estimator piloted by the exchange algorithm."""
    posterior = _posterior(model, compiled, chain.theta,
                           {"sampler": "exchange algorithm (pilot)",
                            "acceptance_rate": float(chain.acceptance_rate)})
    return _tree(model, name, posterior, evidence, auxiliary)


def _posterior(model, compiled, theta, attrs) -> xr.Dataset:
    rows = [compiled.constrained(t) for t in theta]
    data = {}
    for i, name in enumerate(compiled.names):
        values = np.stack([r[i] for r in rows])[None]
        dims = list(model.named_vars_to_dims.get(name, ()))
        dims += [f"{name}_dim_{j}" for j in range(len(dims), values.ndim - 2)]
        data[name] = (["chain", "draw", *dims], values)
    coords = {k: v for k, v in model.coords.items() if v is not None}
    used = {d for _, (dims, _) in data.items() for d in dims}
    coords = {k: list(v) for k, v in coords.items() if k in used}
    ds = xr.Dataset(data, coords={"chain": [0], "draw": np.arange(len(theta)), **coords})
    ds.attrs.update(attrs)
    return ds


def _summary(sim, summary):
    """Return the summary ``S`` (data sets (M, ...) -> (M, k)) and the name results record."""
    if summary is not None:
        if not callable(summary):
            raise BDMCInputError(f"`summary` must be callable, got {type(summary).__name__}.")
        return summary, getattr(summary, "__qualname__", repr(summary))
    if isinstance(sim, IsingSimulator):
        return ising_statistics, "Ising pair sums (nearest, diagonal)"
    if isinstance(sim, ERGMSimulator):
        return ergm_statistics, "ERGM (edges, two_stars, triangles)"
    name = getattr(sim.op.statistic, "__qualname__", repr(sim.op.statistic))
    return sim.statistics, f"ExponentialFamily statistic {name}"


def _check_args(method, draws, pilot_draws, pilot_tune, n_aux, n_bridges, sweeps, n_moves,
                bound_chains, bound_bridges, proposal_scale, n_sim):
    if method not in METHODS:
        raise BDMCInputError(f"`method` must be one of {METHODS}, got {method!r}.")
    counts = dict(draws=draws, pilot_draws=pilot_draws, pilot_tune=pilot_tune, n_aux=n_aux,
                  sweeps=sweeps, n_sim=n_sim)
    for key, value in counts.items():
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise BDMCInputError(f"`{key}` must be a positive integer, got {value!r}.")
    for key, value in dict(n_bridges=n_bridges, n_moves=n_moves, bound_chains=bound_chains,
                           bound_bridges=bound_bridges).items():
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise BDMCInputError(f"`{key}` must be a non-negative integer, got {value!r}.")
    if not np.isfinite(proposal_scale) or proposal_scale <= 0:
        raise BDMCInputError(f"`proposal_scale` must be positive, got {proposal_scale!r}.")
    if method == "rwsmc" and draws < 2:
        raise BDMCInputError(f"Random-weight SMC needs `draws` >= 2 particles, got {draws}.")


def sample_unnormalized_evidence(
    method: str = "auto",
    *,
    draws: int = 1000,
    pilot_draws: int = 1000,
    pilot_tune: int = 300,
    n_aux: int | None = None,
    n_bridges: int = 10,
    sweeps: int = 1,
    n_moves: int = 2,
    n_sim: int | None = None,
    epsilon=0.0,
    summary=None,
    bound_chains: int = 64,
    bound_bridges: int = 200,
    proposal_scale: float = 1.5,
    model: pm.Model | None = None,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
) -> xr.DataTree:
    """Estimate ``log p(y)`` for a model whose likelihood has an intractable normaliser.

    The model has one observed :class:`~pymc_bdmc.Ising`, :class:`~pymc_bdmc.ERGM` or
    :class:`~pymc_bdmc.ExponentialFamily` variable, ``f(y | θ) = γ(y | θ) / Z(θ)``. An
    exchange-algorithm pilot samples ``p(θ | y)`` and gives ``θ̂`` (its mean) and a Gaussian
    importance proposal ``q`` (its covariance times ``proposal_scale²``), both on the model's
    unconstrained parameters. SAVIS or MAVIS then estimates ``p(y)`` from ``draws`` proposals,
    each ``1/Z(θ_n)`` replaced by an unbiased estimate anchored at ``Z(θ̂)``
    (Everitt et al. 2017, §2.1; :mod:`pymc_bdmc.unnormalized.importance`).

    ``method="rwsmc"`` (Ising fields only) needs neither the pilot nor ``Z(θ̂)``: random-weight
    SMC adds the data one row at a time to ``draws`` particles drawn from the prior, replaces
    each intractable ratio ``Z_{t-1}(θ)/Z_t(θ)`` by an unbiased estimate and moves the particles
    by exchange steps (Everitt et al. 2017, §3; :mod:`pymc_bdmc.unnormalized.smc`).

    Parameters
    ----------
    method : {"auto", "savis", "mavis", "rwsmc", "abc", "sl"}, default "auto"
        ``"auto"`` is SAVIS when the simulator is exact, else MAVIS. ``"rwsmc"``: random-weight
        SMC with row-by-row data tempering, for :class:`~pymc_bdmc.Ising` likelihoods.
        ``"abc"`` and ``"sl"``: ABC and synthetic-likelihood importance sampling with the
        pilot's proposal, which estimate a summary-statistic number for Bayes factors, *not*
        ``p(y)`` (:mod:`pymc_bdmc.unnormalized.summary`).
    draws : int, default 1000
        Importance draws ``θ_n ~ q``; for ``"rwsmc"``, particles (exact prior draws).
    pilot_draws : int, default 1000
        Exchange draws kept for the pilot (the ``posterior`` group).
    pilot_tune : int, default 300
        Exchange iterations at step size 0.1 first, discarded, from the model's initial point;
        their covariance sets the pilot's random-walk step (``2.38/√d`` times its Cholesky
        factor).
    n_aux : int, optional
        Auxiliary chains per ``θ_n`` (the paper's ``M``); default 1. For ``"rwsmc"``, auxiliary
        draws per particle and row for each ratio estimate; default :data:`RWSMC_N_AUX` (16).
    n_bridges : int, default 10
        Intermediate bridges for MAVIS (ignored by SAVIS).
    sweeps : int, default 1
        MCMC sweeps per MAVIS bridge.
    n_moves : int, default 2
        Exchange moves per particle and row for ``"rwsmc"`` (ignored by the other methods).
    n_sim : int, optional
        Simulations per importance draw for ``"abc"`` and ``"sl"`` (default 50).
    epsilon : float or array_like, default 0.0
        ABC tolerance on each statistic of the summary (sup-norm); 0 asks for an exact match,
        which on integer-valued sufficient statistics makes ABC's Bayes factors exact.
    summary : callable, optional
        For ``"abc"`` and ``"sl"``: maps data sets of shape (M, ...) to summaries (M, k).
        Default: both Ising pair sums ``(s₁, s₂)`` whatever the neighbourhood (so first- and
        second-order models share it), all three ERGM statistics, or a user family's
        ``statistic``. Only results with the same summary can be compared.
    bound_chains : int, default 64
        Forward and reverse y-space annealing chains bounding ``log Z(θ̂)``
        (:func:`~pymc_bdmc.unnormalized.normaliser_bounds`, from the uniform field or graph);
        0 skips the bounds and the certified estimate. Not used by ``"rwsmc"``.
    bound_bridges : int, default 200
        Bridges of those chains.
    proposal_scale : float, default 1.5
        Widens the proposal's standard deviations.
    model : pm.Model, optional
        Defaults to the model on the context stack.
    random_seed : int, sequence, SeedSequence or Generator, optional
        Split into independent child streams for the pilot, the importance run and the bounds
        (:func:`pymc_bdmc.pipeline.seeding.streams`); a fixed seed gives identical results.
    progressbar : bool, default True
        Show one progress row per stage (exchange pilot, bounds on ``log Z(θ̂)``, the importance
        draws or SMC rows), with PyMC's progress bar; never in CI (environment variable
        ``CI``), as for the other drivers.
    compile_kwargs : dict, optional
        Passed to PyTensor's compilation of ``log p(θ)``, ``η(θ)`` and the constrained values.

    Returns
    -------
    xarray.DataTree
        ``posterior`` (chain=1, draw): the pilot's draws of the free variables and
        Deterministics, constrained. ``observed_data``: the observed variable's data, which
        the evidence refers to. ``evidence``, in the layout of every result (``lower``,
        ``upper``, ``gap``, ``gap_se``, ``lower_se``, ``upper_se``): ``lower`` (``log p̂(y)``)
        and ``lower_se`` (equal to ``relative_se``, its first-order standard error); ``upper``,
        ``gap`` and their standard errors are NaN (no upper bound). Then ``certified_lower``
        (the same importance weights with the upper bound on ``log Z(θ̂)`` in place of its
        exact value; NaN with ``bound_chains=0``), ``relative_se`` (of ``p̂(y)``), ``ess`` and
        ``log_weight`` (dim ``importance_draw``); attrs ``estimate_kind`` (``"unbiased"`` with exact
        simulation, ``"biased"`` with ``exact=False``), ``method``, ``exact``,
        ``log_z_source``. ``auxiliary``: ``theta_hat`` (unconstrained, dim ``parameter``),
        ``eta_hat`` (dim ``natural``), ``log_z_hat`` (exact, NaN if unavailable) and
        ``log_z_hat_lower``/``log_z_hat_upper``, ``pilot_acceptance_rate`` and the numbers of
        draws, auxiliary chains, bridges and sweeps; attr ``exact``.

        With ``method="rwsmc"``: ``posterior`` holds the final particles resampled to equal
        weights (systematic); ``evidence`` has the same core fields, ``lower_se`` NaN (one run
        gives no standard error), and ``certified_lower`` (equal to ``lower``),
        ``relative_se`` (NaN), ``ess`` (of the final weights),
        ``log_weight`` (dim ``particle``) and ``log_increment`` (dim ``row``: the log mean
        incremental weight of each row, summing to ``lower``); ``auxiliary`` has the numbers of
        particles, rows, auxiliary draws, exchange moves and resampling events and the moves'
        ``acceptance_rate``.

        With ``method="abc"`` or ``"sl"``: ``posterior`` and ``observed_data`` as for SAVIS;
        ``evidence`` has the same core fields, ``lower`` being ``log p̂_ε(S(y))`` or the log
        synthetic evidence (not ``log p(y)``), then ``relative_se``, ``ess``, ``log_weight``
        (dim ``importance_draw``) and for ABC ``epsilon`` (dim ``statistic``) and
        ``acceptance_rate``; attrs ``estimate_kind`` =
        ``"summary-statistic"``, ``method``, ``summary`` (the summary's name), ``exact``.
        ``auxiliary``: ``theta_hat``, ``eta_hat``, ``pilot_acceptance_rate`` and the numbers
        of draws and simulations.

    Raises
    ------
    BDMCInputError
        Before any sampling, for an unknown ``method``, bad counts, or a model without exactly
        one observed variable with an un-normalised likelihood, with Potentials, discrete or
        un-normalised free variables, or with neither an exact ``Z(θ̂)`` nor a reference for
        bounding it (a user's :class:`~pymc_bdmc.ExponentialFamily`).

    Notes
    -----
    **In what sense ``lower`` is a lower bound.** ``p̂(y) = exp(lower)`` is an *unbiased*
    estimate of ``p(y)`` when the simulator is exact and ``Z(θ̂)`` is exact (Ising transfer
    matrix, edges-only ERGM): ``E[p̂(y)] = p(y)``. ``lower`` is the log of that unbiased
    estimate, so ``E[lower] <= log p(y)`` (Jensen) and ``P(lower > log p(y) + b) < e^{-b}``
    (Markov): a stochastic lower bound, not a deterministic one. It is *not* a bound on each
    run; single runs land above ``log p(y)`` often, by small amounts.

    With ``method="rwsmc"`` and exact simulation, ``exp(lower)`` is unbiased for ``p(y)``
    without any normaliser (the path starts at ``Z_0 = 1``), so ``certified_lower`` equals
    ``lower`` (``log_z_source="none"``).

    ``certified_lower`` replaces the exact ``log Z(θ̂)`` by ``U``, the reverse-annealing
    stochastic upper bound, with ``exp(-U)`` an independent unbiased estimate of ``1/Z(θ̂)``;
    ``exp(certified_lower)`` is then again unbiased for ``p(y)`` and rests on no plugged-in
    normaliser. When no exact ``Z(θ̂)`` exists but a bound does, ``lower`` equals
    ``certified_lower`` (``log_z_source="upper_bound"``). With ``exact=False`` (Swendsen-Wang
    or Gibbs simulation) neither guarantee holds; the ``exact`` attribute says so.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> y = np.array([[1, 1, -1], [1, 1, -1], [-1, 1, -1]])
    >>> with pm.Model():
    ...     c = pm.Normal("c", 0.2, 0.5)
    ...     _ = pmb.Ising("y", c, observed=y)
    ...     result = pmb.sample_unnormalized_evidence(draws=200, pilot_draws=200,
    ...                                               bound_chains=8, random_seed=1,
    ...                                               progressbar=False)
    >>> result["evidence"].attrs["method"]
    'savis'
    >>> bool(np.isfinite(result["evidence"]["lower"]))
    True
    """
    if n_aux is None:
        n_aux = RWSMC_N_AUX if method == "rwsmc" else 1
    if n_sim is None:
        n_sim = N_SIM.get(method, 1)
    _check_args(method, draws, pilot_draws, pilot_tune, n_aux, n_bridges, sweeps, n_moves,
                bound_chains, bound_bridges, proposal_scale, n_sim)
    model = pm.modelcontext(model)
    name = _check_model(model)
    sim = unnormalized_simulator(name, model)
    opts = dict(draws=int(draws), pilot_draws=int(pilot_draws), pilot_tune=int(pilot_tune),
                n_aux=int(n_aux), n_bridges=int(n_bridges), sweeps=int(sweeps),
                n_moves=int(n_moves), n_sim=int(n_sim), epsilon=epsilon,
                bound_chains=int(bound_chains), bound_bridges=int(bound_bridges),
                proposal_scale=float(proposal_scale))
    if method == "rwsmc":
        if not isinstance(sim, IsingSimulator):
            raise BDMCInputError(
                f"method='rwsmc' tempers an Ising field row by row; {name!r} is not a pmb.Ising "
                "likelihood. Use method='savis' or 'mavis'."
            )
        run = _rwsmc
    elif method in SUMMARY_METHODS:
        opts["summary"] = _summary(sim, summary)
        run = _summary_evidence
    else:
        opts["reference"] = reference = _reference(sim)
        if method == "auto":
            method = "savis" if sim.exact else "mavis"
        if method == "mavis" and reference is None:
            raise BDMCInputError("MAVIS needs an MCMC kernel for its bridges, which a user's "
                                 "ExponentialFamily does not have; use method='savis'.")
        # Ising and ERGM have a reference; a user's family needs its own `log_partition=`
        # (not probed at η = 0, which may lie outside its natural parameter space).
        if reference is None and getattr(getattr(sim, "op", None), "log_partition", None) is None:
            raise BDMCInputError(
                f"{name!r} has neither an exact normaliser nor a reference with a known one, so "
                "Z(θ̂) cannot be anchored; sample_unnormalized_evidence supports pmb.Ising and "
                "pmb.ERGM, and a user's pmb.ExponentialFamily only when it is given "
                "`log_partition=`."
            )
        run = _importance
    # NullSimpleProgress.__enter__ returns None, so keep our own reference to the bar.
    progress = create_simple_progress(progress_enabled(progressbar))
    with progress:
        tree = run(model, name, sim, method, opts, random_seed, compile_kwargs, progress)
    ev = tree["evidence"]
    _log.info("sample_unnormalized_evidence: %s, log %s = %.3f (%s).", method.upper(),
              "p̂(S(y))" if method in SUMMARY_METHODS else "p̂(y)", float(ev["lower"]),
              ev.attrs["estimate_kind"])
    return tree


def _observed(model, name) -> np.ndarray:
    return np.asarray(model.rvs_to_values[model[name]].eval())


def _importance(model, name, sim, method, opts, random_seed, compile_kwargs,
                progress) -> xr.DataTree:
    """Exchange pilot, bounds on log Z(θ̂), then SAVIS or MAVIS."""
    reference = opts["reference"]
    compiled = _Compiled(model, name, compile_kwargs)
    stats_y = np.asarray(sim.statistics(_observed(model, name)), dtype=float)
    rngs = streams(random_seed)

    chain = _pilot(compiled, sim, stats_y, rngs, opts["pilot_draws"], opts["pilot_tune"],
                   progress)
    theta_hat = chain.pilot()
    eta_hat = compiled.natural(theta_hat)
    drift = pilot_drift_check(sim, _observed(model, name), eta_hat)
    log_z_hat = _exact_log_partition(sim, eta_hat)
    bounds = None
    if reference is not None and opts["bound_chains"] > 0:
        with phase(progress, "Bounds on log Z(θ̂)", 2 * (opts["bound_bridges"] + 1)) as advance:
            bounds = normaliser_bounds(sim, eta_hat, reference[0], reference[1],
                                       opts["bound_chains"], rngs["reverse"],
                                       n_bridges=opts["bound_bridges"], on_step=advance)
    if log_z_hat is None and bounds is None:
        raise BDMCInputError("No exact log Z(θ̂) here: pass bound_chains > 0 to bound it.")
    log_z_ref = log_z_hat if log_z_hat is not None else bounds.upper

    q = chain.proposal(scale=opts["proposal_scale"])
    rng = rngs["forward"]
    theta = np.asarray(q.rvs(size=opts["draws"], random_state=rng), dtype=float)
    theta = theta.reshape(opts["draws"], -1)
    eta = np.array([compiled.natural(t) for t in theta])
    log_prior = np.array([compiled.log_prior(t) for t in theta])
    args = (sim, stats_y, eta, log_prior, q.logpdf(theta).reshape(-1), eta_hat, log_z_ref)
    with phase(progress, method.upper(), opts["draws"]) as advance:
        if method == "savis":
            result = savis(*args, n_aux=opts["n_aux"], rng=rng, on_step=advance)
        else:
            result = mavis(*args, n_aux=opts["n_aux"], n_bridges=opts["n_bridges"],
                           sweeps=opts["sweeps"], rng=rng, on_step=advance)
    # log p̂ = log Â - log_z_ref, with Â unbiased for p(y) Z(θ̂): swap in the upper bound.
    certified = np.nan if bounds is None else result.log_evidence + log_z_ref - bounds.upper
    return _datatree(model, name, compiled, chain, result, certified, theta_hat, eta_hat,
                     log_z_hat, bounds, dict(method=method, draws=opts["draws"],
                                  bound_chains=opts["bound_chains"],
                                  bound_bridges=opts["bound_bridges"], exact=bool(sim.exact),
                                  drift=drift))


def _datatree(model, name, compiled, chain, result, certified, theta_hat, eta_hat, log_z_hat,
              bounds, info) -> xr.DataTree:
    exact = info["exact"] and chain.exact and result.exact
    evidence = _evidence_dataset(
        {"lower": result.log_evidence, "certified_lower": float(certified),
         "relative_se": result.relative_se, "ess": result.ess,
         "log_weight": ("importance_draw", result.log_weights)},
        result.relative_se,
        attrs={"estimate_kind": "unbiased" if exact else "biased", "method": info["method"],
               "exact": int(exact),
               "log_z_source": "exact" if log_z_hat is not None else "upper_bound"},
    )
    nan = float("nan")
    auxiliary = xr.Dataset(
        {"theta_hat": ("parameter", theta_hat), "eta_hat": ("natural", eta_hat),
         "log_z_hat": nan if log_z_hat is None else log_z_hat,
         "log_z_hat_lower": nan if bounds is None else bounds.lower,
         "log_z_hat_upper": nan if bounds is None else bounds.upper,
         "pilot_acceptance_rate": float(chain.acceptance_rate),
         "n_pilot_draws": len(chain.theta), "n_importance_draws": info["draws"],
         "n_aux": result.n_aux, "n_aux_draws": info["draws"] * result.n_aux,
         "n_bridges": result.n_bridges, "sweeps": result.sweeps,
         "n_bound_chains": info["bound_chains"], "n_bound_bridges": info["bound_bridges"],
         **info["drift"]},
        attrs={"exact": int(exact)},
    )
    return _pilot_tree(model, name, compiled, chain, evidence, auxiliary)


def _rwsmc(model, name, sim, method, opts, random_seed, compile_kwargs,
           progress) -> xr.DataTree:
    """Random-weight SMC over the rows of an Ising field, from exact prior draws."""
    draws, n_aux, n_moves = opts["draws"], opts["n_aux"], opts["n_moves"]
    op = model[name].owner.op
    path = IsingRowPath(_observed(model, name), op.neighbourhood, exact=sim.exact,
                        sweeps=sim.sweeps)
    compiled = _Compiled(model, name, compile_kwargs)
    rngs = streams(random_seed)
    prior = ModelSimulator(model, compiled.layout, compile_kwargs).draw_prior(
        draws, rngs["forward_init"])
    rng = rngs["forward"]
    with phase(progress, "Random-weight SMC (rows)", path.n_targets) as advance:
        result = random_weight_smc(path, compiled.natural, compiled.log_prior, prior, rng,
                                   n_aux=n_aux, n_moves=n_moves, on_step=advance)
    weights = np.exp(result.log_weights - logsumexp(result.log_weights))
    resampled = result.theta[systematic_resample(rng, weights, draws)]
    exact = bool(result.exact)
    evidence = _evidence_dataset(
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
         "n_aux_draws": draws * path.n_targets * n_aux, "n_moves": n_moves,
         "n_resamples": result.n_resamples, "acceptance_rate": float(result.acceptance_rate)},
        attrs={"exact": int(exact)},
    )
    posterior = _posterior(model, compiled, resampled,
                           {"sampler": "random-weight SMC (final particles, resampled)"})
    return _tree(model, name, posterior, evidence, auxiliary)


def _summary_evidence(model, name, sim, method, opts, random_seed, compile_kwargs,
                      progress) -> xr.DataTree:
    """ABC or synthetic likelihood by importance sampling with the exchange pilot's proposal."""
    summary_fn, summary_name = opts["summary"]
    data = _observed(model, name)
    s_obs = np.atleast_1d(np.asarray(summary_fn(data[None]), dtype=float)).reshape(-1)
    eps = np.asarray(opts["epsilon"], dtype=float)
    if method == "abc" and (np.ndim(eps) > 1 or np.size(eps) not in (1, len(s_obs))
                            or not np.all(np.isfinite(eps)) or np.any(eps < 0)):
        raise BDMCInputError(f"`epsilon` must be >= 0, a scalar or one value per statistic "
                             f"({len(s_obs)}), got {opts['epsilon']!r}.")
    if method == "sl" and opts["n_sim"] < len(s_obs) + 2:
        raise BDMCInputError(f"Synthetic likelihood needs `n_sim` >= {len(s_obs) + 2} for "
                             f"{len(s_obs)} statistics, got {opts['n_sim']}.")
    compiled = _Compiled(model, name, compile_kwargs)
    stats_y = np.asarray(sim.statistics(data), dtype=float)
    rngs = streams(random_seed)
    chain = _pilot(compiled, sim, stats_y, rngs, opts["pilot_draws"], opts["pilot_tune"],
                   progress)
    theta_hat = chain.pilot()
    drift = pilot_drift_check(sim, data, compiled.natural(theta_hat))
    q = chain.proposal(scale=opts["proposal_scale"])
    rng = rngs["forward"]
    theta = np.asarray(q.rvs(size=opts["draws"], random_state=rng), dtype=float)
    theta = theta.reshape(opts["draws"], -1)
    eta = np.array([compiled.natural(t) for t in theta])
    log_prior = np.array([compiled.log_prior(t) for t in theta])
    args = (sim, summary_fn, s_obs, eta, log_prior, q.logpdf(theta).reshape(-1))
    with phase(progress, method.upper(), opts["draws"]) as advance:
        if method == "abc":
            result = abc_evidence(*args, n_sim=opts["n_sim"], epsilon=opts["epsilon"],
                                  rng=rng, on_step=advance)
        else:
            result = synthetic_likelihood_evidence(*args, n_sim=opts["n_sim"], rng=rng,
                                                   on_step=advance)
    exact = bool(result.exact and chain.exact)
    variables = {"lower": result.log_evidence, "relative_se": result.relative_se,
                 "ess": result.ess, "log_weight": ("importance_draw", result.log_weights)}
    if method == "abc":
        variables |= {"epsilon": ("statistic", result.epsilon),
                      "acceptance_rate": result.acceptance_rate}
    evidence = _evidence_dataset(variables, result.relative_se,
                                 attrs={"estimate_kind": "summary-statistic", "method": method,
                                        "summary": summary_name, "exact": int(exact)})
    auxiliary = xr.Dataset(
        {"theta_hat": ("parameter", theta_hat),
         "eta_hat": ("natural", compiled.natural(theta_hat)),
         "pilot_acceptance_rate": float(chain.acceptance_rate),
         "n_pilot_draws": len(chain.theta), "n_importance_draws": opts["draws"],
         "n_sim": result.n_sim, "n_simulations": opts["draws"] * result.n_sim, **drift},
        attrs={"exact": int(exact)},
    )
    return _pilot_tree(model, name, compiled, chain, evidence, auxiliary)
