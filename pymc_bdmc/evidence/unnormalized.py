# ruff: noqa: RUF002, RUF003  (γ, θ̂ and η are the paper's notation)
"""``sample_unnormalized_evidence``: the evidence of a model whose likelihood has a normaliser
``Z(θ)`` that cannot be computed (Ising fields, ERGMs, user exponential families).

The entry point checks the model and the arguments, picks the estimator
(:mod:`pymc_bdmc.methods.unnormalized`) and hands it to the one driver.
"""

from __future__ import annotations

import time

import numpy as np
import pymc as pm
import xarray as xr

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.methods.protocol import Job
from pymc_bdmc.methods.unnormalized import (
    ExchangeImportance,
    RandomWeightSMC,
    SummaryStatistic,
)
from pymc_bdmc.model.resolve import resolve_model
from pymc_bdmc.pipeline.driver import run
from pymc_bdmc.pipeline.seeding import streams
from pymc_bdmc.pipeline.settings import validate
from pymc_bdmc.unnormalized.distributions import unnormalized_simulator
from pymc_bdmc.unnormalized.ergm import ERGMSimulator, ergm_statistics
from pymc_bdmc.unnormalized.ising import IsingSimulator, ising_statistics
from pymc_bdmc.unnormalized.marker import unnormalized_likelihoods, unnormalized_variables
from pymc_bdmc.unnormalized.pilot import observed_field, reference_normaliser

__all__ = ["METHODS", "sample_unnormalized_evidence"]

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


def check_unnormalized_model(model: pm.Model) -> str:
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


def choose_summary(sim, summary):
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


def check_arguments(method, draws, pilot_draws, pilot_tune, n_aux, n_bridges, sweeps, n_moves,
                    bound_chains, bound_bridges, proposal_scale, n_sim):
    """Refuse an unknown ``method`` and counts or scales out of range."""
    if method not in METHODS:
        raise BDMCInputError(f"`method` must be one of {METHODS}, got {method!r}.")
    counts = dict(draws=draws, pilot_draws=pilot_draws, pilot_tune=pilot_tune, n_aux=n_aux,
                  sweeps=sweeps, n_sim=n_sim)
    for key, value in counts.items():
        if not isinstance(value, int | np.integer) or value < 1:
            raise BDMCInputError(f"`{key}` must be a positive integer, got {value!r}.")
    for key, value in dict(n_bridges=n_bridges, n_moves=n_moves, bound_chains=bound_chains,
                           bound_bridges=bound_bridges).items():
        if not isinstance(value, int | np.integer) or value < 0:
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
    random_seed : int, sequence, SeedSequence, Generator or RandomState, optional
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
    started = time.perf_counter()
    if n_aux is None:
        n_aux = RWSMC_N_AUX if method == "rwsmc" else 1
    if n_sim is None:
        n_sim = N_SIM.get(method, 1)
    check_arguments(method, draws, pilot_draws, pilot_tune, n_aux, n_bridges, sweeps, n_moves,
                    bound_chains, bound_bridges, proposal_scale, n_sim)
    model = resolve_model(model, first=("method", method))
    name = check_unnormalized_model(model)
    sim = unnormalized_simulator(name, model)
    opts = dict(draws=int(draws), pilot_draws=int(pilot_draws), pilot_tune=int(pilot_tune),
                n_aux=int(n_aux), n_bridges=int(n_bridges), sweeps=int(sweeps),
                n_moves=int(n_moves), n_sim=int(n_sim), epsilon=epsilon,
                bound_chains=int(bound_chains), bound_bridges=int(bound_bridges),
                proposal_scale=float(proposal_scale))
    estimator = choose_estimator(method, model, name, sim, opts, summary)
    # The un-normalised estimators take their sizes from ``opts``; the settings are nominal.
    settings = validate(1, 1, "linear", None, 1, 0.9, 0.5, None, 0.95)
    job = Job(model, settings, streams(random_seed), simulate=False, started=started,
              progressbar=progressbar, compile_kwargs=compile_kwargs)
    return run(estimator, job)


def choose_estimator(method: str, model: pm.Model, name: str, sim, opts: dict, summary):
    """The estimator ``method`` names, or refuse what it cannot run on (before any sampling)."""
    if method == "rwsmc":
        if not isinstance(sim, IsingSimulator):
            raise BDMCInputError(
                f"method='rwsmc' tempers an Ising field row by row; {name!r} is not a pmb.Ising "
                "likelihood. Use method='savis' or 'mavis'."
            )
        return RandomWeightSMC(name, sim, opts, model[name].owner.op.neighbourhood)
    if method in SUMMARY_METHODS:
        opts["summary"] = choose_summary(sim, summary)
        check_summary_settings(method, opts, observed_field(model, name))
        return SummaryStatistic(method, name, sim, opts)
    opts["reference"] = reference = reference_normaliser(sim)
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
    return ExchangeImportance(method, name, sim, opts)


def check_summary_settings(method: str, opts: dict, data: np.ndarray) -> None:
    """Refuse an ABC tolerance or a synthetic likelihood's simulation count that cannot work."""
    summary_fn = opts["summary"][0]
    s_obs = np.atleast_1d(np.asarray(summary_fn(data[None]), dtype=float)).reshape(-1)
    eps = np.asarray(opts["epsilon"], dtype=float)
    if method == "abc" and (np.ndim(eps) > 1 or np.size(eps) not in (1, len(s_obs))
                            or not np.all(np.isfinite(eps)) or np.any(eps < 0)):
        raise BDMCInputError(f"`epsilon` must be >= 0, a scalar or one value per statistic "
                             f"({len(s_obs)}), got {opts['epsilon']!r}.")
    if method == "sl" and opts["n_sim"] < len(s_obs) + 2:
        raise BDMCInputError(f"Synthetic likelihood needs `n_sim` >= {len(s_obs) + 2} for "
                             f"{len(s_obs)} statistics, got {opts['n_sim']}.")


