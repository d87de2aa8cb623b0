"""``sample_ais`` (a lower bound on the real data) and ``sample_bdmc`` (the BDMC sandwich).

The entry points check their arguments into a :class:`~pymc_bdmc.methods.protocol.Job`, choose
the method that runs the model's transitions (:mod:`pymc_bdmc.methods`: the vectorized kernels,
PyMC step methods, or SMC) and hand both to the one driver, :func:`pymc_bdmc.pipeline.driver.run`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pymc as pm
import xarray as xr

from pymc_bdmc.config import Tuning, resolve_tuning
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.kernels.pymc_steps import resolve_step_methods
from pymc_bdmc.methods.protocol import Job, Search
from pymc_bdmc.methods.smc import (
    SMC,
    SMC_PARTICLES,
    check_smc_model,
    resolve_defaults,
    validate_smc,
)
from pymc_bdmc.methods.step_methods import DEFAULT_STEP_PILOT_CHAINS, StepMethodAIS
from pymc_bdmc.methods.vectorized import VectorizedAIS
from pymc_bdmc.model.checks import check_model
from pymc_bdmc.model.resolve import resolve_model
from pymc_bdmc.pipeline.auto_steps import check_auto_settings
from pymc_bdmc.pipeline.compile import has_other_form
from pymc_bdmc.pipeline.discrete import vectorized_discrete
from pymc_bdmc.pipeline.driver import run
from pymc_bdmc.pipeline.matching import n_candidates
from pymc_bdmc.pipeline.seeding import streams as make_streams
from pymc_bdmc.pipeline.settings import parallel_settings, validate
from pymc_bdmc.schedules import ScheduleName

__all__ = ["sample_ais", "sample_bdmc"]

#: Refusal of ``reparameterize=True`` where the model runs on PyMC step methods.
REPARAMETERIZE_WITH_STEPS = (
    "`reparameterize=True` runs the built-in kernels on a copy of the model; it cannot be "
    "combined with PyMC step methods (`step=`, or discrete variables the Gibbs kernel cannot "
    "enumerate).")

COMMON_DOC = """
    n_steps : int, default 1000
        Number of annealing steps (intermediate distributions). Ignored if ``schedule`` is an
        array, whose length then sets it.
    chains : int, default 32
        Independent annealing chains per direction, evaluated together in one batched call.
    model : pm.Model, optional
        The model; taken from the ``with`` context when omitted. It is never modified.
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like, default "adaptive"
        Inverse temperatures. ``"adaptive"`` lets the pilot run place ``n_steps`` temperatures
        at equal thermodynamic length (even weight variance per step); ``"sigmoid"`` is the
        BDMC paper's schedule (§6.2, delta=4); or an explicit array rising from 0 to 1.
    n_leapfrog : int, optional
        Leapfrog steps per HMC transition. By default the pilot run chooses among 3, 6 and 12
        the one that moves its population furthest per gradient evaluation (squared jumps in
        the metric of the mass matrix), then freezes it: short on near-Gaussian posteriors,
        longer on correlated or funnel-shaped ones. Models with centred hierarchies, Gaussian
        random walks or centred ``MvNormal`` latents also make *scale moves* between the HMC
        transitions: moves of a scale parameter that carry its children along, so chains leave
        a funnel's neck (``annealing.attrs["scale_moves"]``).
    transitions_per_step : int, optional
        HMC transitions at each temperature. By default 1 on a path the pilot measures short
        enough for fewer than ``Tuning.first_n_steps`` steps
        (``Tuning.short_path_transitions``), else 2 (``annealing.attrs`` records it).
    target_accept : float, default 0.9
        Acceptance rate the pilot run tunes the step sizes for.
    step_size_jitter : float, default 0.5
        Relative jitter of the step size, drawn independently of the state.
    pilot_chains : int, optional
        Size of the pilot population (default ``max(chains, 64)``, and, where the pilot
        chooses a dense mass matrix, at least 1.25 particles per movable coordinate: it then
        runs again on that many fresh prior draws; ``sample_bdmc``'s length search may also
        run one fresh pilot of 4 times the particles, see ``target_gap``). A value given is
        used as it is.
    confidence : float, default 0.95
        Level of the Markov-inequality bounds ``lower_markov`` / ``upper_markov``.
    random_seed : int, array_like of int, SeedSequence, Generator or RandomState, optional
        Seed of every random choice; the same seed gives the same result.
    progressbar : bool, default True
        Show a progress bar (never in CI, where the ``CI`` environment variable is set).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`, e.g. ``{"mode": "NUMBA"}``.
    step : PyMC step method or list of them, optional
        Transitions driven by PyMC's own step methods, as for :func:`pymc.sample`: NUTS,
        HamiltonianMC, Metropolis, Slice, BinaryGibbsMetropolis, CategoricalGibbsMetropolis,
        compound steps and user subclasses, each over some value variables; the others get
        PyMC's automatic assignment. Without ``step``, models with discrete free variables get
        the automatic assignment (Gibbs-type steps for discrete variables), and all-continuous
        models the vectorized HMC kernel. Steps are rebuilt on a tempered clone of the model,
        tuned on a pilot run and frozen; reverse runs apply the sweep in reverse order. The
        assignment is logged and stored in the ``step_methods`` group. ``n_leapfrog``,
        ``transitions_per_step``, ``target_accept`` and ``step_size_jitter`` only concern the
        vectorized HMC kernel (one sweep of the step methods is made per temperature).
    cores : int, optional
        Local worker processes running the chains (SMC: the populations). With the vectorized
        kernels each worker compiles the model once and keeps it for later calls; with PyMC
        step methods each worker builds the step methods once per call. Default: all cores
        when the run is predicted to take over 10 s in this process (from timing the model;
        20 s with PyMC step methods, from the pilot's time per sweep), otherwise this process.
        A seed gives the same chains whatever ``cores`` (see Notes).
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Run the chains on this executor instead of local processes, e.g. a Dask cluster for
        runs that outgrow one machine (vectorized kernels, PyMC step methods, SMC on the
        tempering path). Thread pools work too: each thread compiles its own copy.
    chains_per_batch : int, optional
        Most chains evaluated together in one batched model call, which bounds memory when
        ``chains`` is large. Default: all chains of a worker at once.
    fused_kernel : bool, optional
        Compile each HMC transition (all its leapfrog steps and the accept/reject) into one
        function, which removes most of the Python around every model call: on small models
        several times faster per step. With discrete variables on the vectorized Gibbs kernel,
        each color's update is compiled too. These are the same kernels with the same random
        draws, so results agree to round-off, on either path (from the prior or a fitted
        base) and with diagonal or dense mass matrices. Compiling costs about as much again as
        compiling the model, per form used. Default: for runs long enough to repay that
        (200,000 batched leapfrog steps per form, or 4,000 Gibbs sweeps), decided on those
        counts alone, never on timing or on what was compiled before, so that a seed gives the
        same numbers in a fresh process and in a warm one; the chosen setting is stored in
        ``evidence.attrs``.
    base : {"auto", "prior", "fitted"}, default "auto"
        Where the annealing path starts. ``"auto"``: the pilot also fits a Gaussian ``q0`` to
        its final population and pilots the path ``q0^(1 - beta) (p(x) p(y|x))^beta``, fitting
        a new Gaussian to that pilot's final population while its estimate of ``log p(y)``
        gains more than ``Tuning.base_refit_gain`` (at most ``Tuning.max_base_fits`` fits).
        The best fitted path is kept where its estimate is more than 0.5 nats above the prior
        pilot's or, within 0.5 nats of it, where its thermodynamic length is at most 0.75
        times the prior path's (``evidence.attrs``: ``path_start`` and both paths' numbers).
        Where BDMC certified this model earlier in the process from a fitted Gaussian,
        ``sample_ais`` anneals from one too (the path the certificate is about). The bounds
        stay exact: ``q0`` is normalised and sampled exactly. ``"prior"``: always from the
        prior. ``"fitted"``: from the best fitted Gaussian wherever the pilot fits one.
        ``"auto"`` and ``"fitted"``, from ``Tuning.laplace_min_observations`` observed values,
        start from the posterior's Laplace fit where it has a mode and its path is at most
        ``Tuning.laplace_path_length`` long, without piloting the prior's path (not where the
        posterior may repeat its modes: sorted draws, a mixture of one family).
        AIS on the vectorized kernels of continuous models with an adaptive schedule only.
"""

PARALLEL_NOTES = """
    Chains are cut into blocks of 8, each with its own random stream, and are split across
    batches, processes or executor workers only at block boundaries: a seed gives the same
    chains however they are split. Numbers agree exactly where the model's batched evaluation
    is row by row, and otherwise up to floating-point round-off (BLAS kernels may round
    differently for a different number of rows).
"""


def sample_ais(
    n_steps: int | Literal["auto"] | None = "auto",
    chains: int = 32,
    *,
    model: pm.Model | None = None,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int | None = None,
    transitions_per_step: int | None = None,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    potentials_in_likelihood: bool = False,
    plan: AnnealingPlan | None = None,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    step=None,
    cores: int | None = None,
    executor=None,
    chains_per_batch: int | None = None,
    fused_kernel: bool | None = None,
    base: Literal["auto", "prior", "fitted"] = "auto",
    reparameterize: bool | None = None,
    target_gap: float = 0.5,
    max_time: float | None = 60.0,
    tuning: Tuning | None = None,
) -> xr.DataTree:
    """Estimate a stochastic lower bound on ``log p(y)`` by annealed importance sampling.

    Runs AIS from exact prior draws to the posterior along ``p(x) p(y|x)^beta`` with a
    vectorized HMC kernel, whose step sizes and mass matrices are tuned on a separate pilot run
    and then frozen.

    Parameters
    ----------%s
    potentials_in_likelihood : bool, default False
        Declare that the model's ``pm.Potential`` terms are likelihood terms (tempered with it).
        Without it, a model with Potentials is refused.
    plan : AnnealingPlan, optional
        A frozen plan to run instead of tuning one (e.g. ``AnnealingPlan.from_result(bdmc)``,
        the plan certified on simulated data). Its schedule and kernels replace ``n_steps``,
        ``schedule`` and the kernel settings. A plan frozen on the model's other
        parameterisation (by ``sample_bdmc``'s search) runs on that parameterisation.
    reparameterize : bool or None, default None
        ``True`` runs the model's Gaussian hierarchies in their other parameterisation (centred
        ones, Gaussian random walks and ``pm.AR`` non-centred, non-centred ones centred;
        :mod:`pymc_bdmc.model.reparameterize`): the same evidence, with the kernels
        ``sample_bdmc`` certified where its search swapped (its
        ``evidence.attrs["reparameterized"]`` says so). The posterior then holds your
        variables and the new ones. Refused for a model with nothing to swap. ``False`` runs
        the model as written. ``None``: as written, except that the ``n_steps="auto"`` search
        starts in the form BDMC certified earlier in this process, and tries the other form
        at the same length where a run's forward log weights spread widely (see
        ``target_gap``).
    target_gap : float, default 0.5
        With ``n_steps="auto"``: the bias (nats) the lower bound may have left. The length
        starts where the pilot's thermodynamic length says a run can be short, runs half that
        length (or double it, where the log weights spread widely), and stops once the bound
        moves so little that ``1 / n_steps`` decay puts the longest run's remaining bias, and
        that estimate's standard error, within ``target_gap``
        (:mod:`pymc_bdmc.pipeline.lower_bound_search`; ``evidence.attrs``: ``auto_n_steps``,
        ``auto_lowers``, ``auto_bias_left``, ``converged``, ``auto_stop``). Where this process
        certified the same model by BDMC (``sample_bdmc`` or ``calibrate``), that length is run
        first, in the certified form and from the certified path's start, and kept unless your
        data's forward log weights spread much more than the certified run's. Where a run's
        log weights spread so widely that their variance allows more than ``target_gap`` of
        bias, a model with another parameterisation runs it there too, and the search keeps
        the form whose bound is higher beyond noise (``auto_form``). This is a
        measurement on your data, not a certificate: only BDMC, on data simulated from the
        model, certifies (:func:`pymc_bdmc.calibrate`).
    max_time : float or None, default 60
        With ``n_steps="auto"``: the seconds the call may take besides compiling the model
        (which costs what this machine's caches hold, not what the model needs).
    tuning : Tuning, optional
        Settings of the automatic choices (the length search, the pilot, where chains run),
        with documented defaults: :class:`pymc_bdmc.Tuning`.

    Returns
    -------
    xarray.DataTree
        With groups ``posterior`` (weighted-resampled final states), ``sample_stats``,
        ``observed_data``, ``evidence`` (``lower``; ``upper`` and ``gap`` are NaN) and
        ``annealing``.

    Notes
    -----
    ``lower = log mean_k w_k`` with ``E[w_k] = p(y)``: on average it underestimates ``log p(y)``
    and it overestimates it by more than ``b`` nats with probability below ``exp(-b)``
    (Grosse, Ghahramani & Adams 2015, §4.1).
%s
    Examples
    --------
    >>> import pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.2])
    ...     result = pmb.sample_ais(n_steps=100, chains=8, random_seed=1, progressbar=False)
    >>> float(result["evidence"]["lower"]) < 0
    True
    """
    started = time.perf_counter()
    model = resolve_model(model, first=("n_steps", n_steps))
    tuning = resolve_tuning(tuning)
    if isinstance(n_steps, str) and n_steps != "auto":
        raise BDMCInputError(
            f"`n_steps` must be 'auto' (the default: lengthen until the lower bound stops "
            f"moving), a positive integer, or None with a schedule array; got {n_steps!r}.")
    search = (isinstance(n_steps, str) and plan is None and isinstance(schedule, str))
    check_auto_settings(target_gap, max_time)
    if isinstance(n_steps, str):  # "auto": the first attempt's length, or the schedule's
        n_steps = tuning.first_n_steps if isinstance(schedule, str) else None
    settings = validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                        target_accept, step_size_jitter, pilot_chains, confidence, base, tuning)
    gibbs = vectorized_discrete(model, step)
    specs = None if gibbs else resolve_step_methods(model, step)
    check_model(model, potentials_in_likelihood=potentials_in_likelihood,
                gradient_kernel=specs is None and not gibbs)
    check_plan_arguments(plan, reparameterize, step_methods=specs is not None)
    parallel = parallel_settings(cores, executor, chains_per_batch, specs is not None,
                                 fused_kernel)
    job = Job(model, settings, make_streams(random_seed), simulate=False, started=started,
              parallel=parallel, progressbar=progressbar, compile_kwargs=compile_kwargs,
              potentials_in_likelihood=potentials_in_likelihood, plan=plan,
              reparameterize=bool(reparameterize),
              search=Search(target_gap, max_time, lower_bound=True,
                            other_form=(specs is None and reparameterize is None
                                        and plan is None and has_other_form(model)))
              if search else None)
    return run(annealing_method(specs, pilot_chains), job)


def check_plan_arguments(plan, reparameterize, step_methods: bool) -> None:
    """Refuse a ``plan`` that is not one, or that cannot run as asked, before anything runs."""
    if plan is not None and not isinstance(plan, AnnealingPlan):
        raise BDMCInputError(f"`plan` must be an AnnealingPlan (e.g. "
                             f"AnnealingPlan.from_result(result)), got {type(plan).__name__}.")
    if step_methods and plan is not None:
        raise BDMCInputError(
            "`plan` holds frozen HMC kernels; it cannot be combined with PyMC step methods "
            "(`step=`, or a model with discrete free variables)."
        )
    if plan is not None and reparameterize and not plan.reparameterized:
        raise BDMCInputError(
            "The plan was frozen on the model as written, so its kernels act on its "
            "coordinates, not on the other parameterisation's: drop `reparameterize=True`, or "
            "pass a plan from a reparameterized result."
        )
    if step_methods and reparameterize:
        raise BDMCInputError(REPARAMETERIZE_WITH_STEPS)


def annealing_method(specs, pilot_chains: int | None):
    """The vectorized kernels, or PyMC step methods where ``specs`` says the model needs them."""
    if specs is None:
        return VectorizedAIS()
    return StepMethodAIS(specs, DEFAULT_STEP_PILOT_CHAINS if pilot_chains is None
                         else pilot_chains)


def sample_bdmc(
    n_steps: int | Literal["auto"] | None = "auto",
    chains: int | None = None,
    *,
    model: pm.Model | None = None,
    method: Literal["ais", "smc"] = "ais",
    particles: int | None = None,
    path: Literal["tempering", "data"] = "tempering",
    ess_threshold: float = 0.5,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int | None = None,
    transitions_per_step: int | None = None,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    step=None,
    cores: int | None = None,
    executor=None,
    chains_per_batch: int | None = None,
    fused_kernel: bool | None = None,
    target_gap: float = 0.5,
    max_time: float | None = 60.0,
    base: Literal["auto", "prior", "fitted"] = "auto",
    reparameterize: bool | None = None,
    match_data: bool | int | None = None,
    tuning: Tuning | None = None,
) -> xr.DataTree:
    """Sandwich ``log p(y*)`` between stochastic bounds by bidirectional Monte Carlo.

    Simulates ``(theta*, y*)`` from the model's prior predictive, then runs forward AIS on
    ``y*`` (stochastic lower bound) and reverse AIS from ``theta*``, an exact posterior sample
    (stochastic upper bound), through the same frozen kernels. The gap measures how far the
    estimator is from the truth on data like the model's own.

    Parameters
    ----------%s
    method : {"ais", "smc"}, default "ais"
        ``"smc"`` runs forward SMC (lower bound) and the sequential harmonic mean estimator,
        SMC in reverse from ``theta*`` (upper bound), through the same frozen kernels and path:
        ``n_steps`` stages, ``chains`` independent populations of ``particles`` particles.
    particles : int, optional
        ``method="smc"`` only: particles per population (default 128).
    path : {"tempering", "data"}, default "tempering"
        ``method="smc"`` only: tempering, or data-point tempering (observations enter in
        ``n_steps`` blocks along the leading data dimension; see
        :func:`pymc_bdmc.sample_smc_evidence`).
    ess_threshold : float, default 0.5
        ``method="smc"`` only: resample a population when its ESS falls below this fraction
        of ``particles``.
    target_gap : float, default 0.5
        With ``n_steps="auto"`` (AIS and a named schedule, with the built-in kernels or with
        PyMC step methods): BDMC runs at 1000 steps (or, where the pilot's timing predicts
        those would not fit in ``max_time``, as many as fit and at least 100), then runs
        again, longer, until ``|gap| <= target_gap`` nats and the gap's standard error is
        within it too (:func:`pymc_bdmc.estimators.certifies`), while the next run is predicted
        to fit in ``max_time``: at least twice as long, and as long as ``1 / n_steps`` decay of
        the gap predicts the target needs, if that fits. A gap within the target whose
        standard error is not is measured again at the same length with more chains. A model
        with Gaussian hierarchies (``Normal`` variables, or a ``GaussianRandomWalk`` or
        ``MvGaussianRandomWalk`` whose scale or covariance depends on a free variable, or
        standard normals scaled so, as in ``beta = z * tau * lam``) whose run does not
        certify (by more than twice the target, or after being lengthened once) is run
        again at that length in its other parameterisation (centred
        ones and walks non-centred, non-centred ones centred; the same evidence, the same
        ``theta*`` and ``y*``), and the search goes on in the form
        with the smaller gap per step (:mod:`pymc_bdmc.model.reparameterize`;
        ``evidence.attrs["reparameterized"]`` names what was swapped, and the posterior then
        holds your variables and the new ones). A gap still more than 8 times the target
        runs again on a fresh pilot of 4 times the particles (unless ``pilot_chains`` is
        given): a pilot that missed part of the posterior leaves gaps that steps hardly
        close. The result is the last run's (or
        the model as written's, where the other form did worse); ``evidence.attrs`` records
        every attempt (``auto_n_steps``, ``auto_chains``, ``auto_pilot_chains``,
        ``auto_reparameterized``, ``auto_gaps``, ``auto_gap_se``) and ``certified``, and the
        log says what to change if the target was not reached.
    max_time : float or None, default 60
        With ``n_steps="auto"``: the seconds the call may take besides compiling the model
        (which costs what this machine's caches hold, not what the model needs).
        None removes the limit (at most 64000 steps). Which lengths are tried then depends on
        this machine's speed, not what each attempt is: the result's ``n_steps`` and ``chains``
        (``auto_pilot_chains``, ``auto_reparameterized``) replay it bit for bit with the same
        seed (docs/explanation/how-it-works.md).
    reparameterize : bool or None, default None
        ``True`` runs the model's Gaussian hierarchies in their other parameterisation from
        the start (on ``theta*`` and ``y*`` simulated from the model as written, so a seed
        gives the same data in either form), ``False`` as written throughout; ``None`` runs
        them as written and lets the ``n_steps="auto"`` search try the other form (see
        ``target_gap``). Refused for a model with nothing to swap, and with PyMC step methods.
    match_data : bool, int or None, default None
        Which simulated data set to certify on. ``False``: one draw from the prior predictive,
        as in the BDMC paper. ``None``: that draw, unless its data overflow or lie more than
        10 times farther from the model's real data than the median of 100 other draws (on the
        mean, sd and roughness of each observed variable, in the draws' robust standard
        deviations); then the nearest of those 100 (an explosive series from a wide AR prior,
        say). ``True`` or a number: always the nearest of this many (``True``: 100), so that
        the certificate is about data like yours. In every case the choice depends on the
        simulated data alone, so ``theta*`` stays an exact posterior sample
        (:mod:`pymc_bdmc.pipeline.matching`); ``evidence.attrs`` records ``data_matched`` (the
        candidates the kept data set was chosen from; 0 for a plain draw), ``data_redrawn`` and
        the kept data's distance in robust standard deviations (``data_match_distance``,
        beside the median candidate's).
    tuning : Tuning, optional
        Settings of the automatic choices (the length search, the pilot, where chains run),
        with documented defaults: :class:`pymc_bdmc.Tuning`.

    Returns
    -------
    xarray.DataTree
        As :func:`sample_ais`, plus ``generating_values`` (``theta*``); ``observed_data`` holds
        ``y*``, and the ``evidence`` group has ``lower``, ``upper`` and ``gap``. With
        ``method="smc"`` the per-stage group is ``smc`` (see
        :func:`pymc_bdmc.sample_smc_evidence`).

    Notes
    -----
    Reverse AIS weights ``v_k`` satisfy ``E[v_k] = 1 / p(y*)``, so
    ``upper = -log mean_k v_k`` overestimates ``log p(y*)`` on average, and underestimates it
    by more than ``b`` nats with probability below ``exp(-b)`` (Grosse, Ghahramani & Adams
    2015, §4.2.1). The plan is tuned on prior draws only, never on ``theta*``, so ``theta*``
    remains an exact posterior sample given the plan.

    Interrupting the run (Ctrl-C) during reverse AIS returns the finished forward run: ``lower``
    is valid, ``upper`` and ``gap`` are NaN and ``evidence.attrs["interrupted"]`` says where the
    reverse run stopped. An interrupt before the forward run ends is re-raised (no bound exists
    yet). Chains whose density becomes non-finite get zero weight and are counted in
    ``evidence`` (``n_failed_*``, ``failed_step_*``); see ``docs/bad-input.md``.
%s
    Examples
    --------
    >>> import pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, shape=5, observed=[0.0] * 5)
    ...     result = pmb.sample_bdmc(n_steps=200, chains=16, random_seed=1, progressbar=False)
    >>> float(result["evidence"]["gap"]) < 1
    True
    """
    started = time.perf_counter()
    model = resolve_model(model, first=("n_steps", n_steps))
    if method not in ("ais", "smc"):
        raise BDMCInputError(f"`method` must be 'ais' or 'smc', got {method!r}.")
    if isinstance(n_steps, str) and n_steps != "auto":
        raise BDMCInputError(
            f"`n_steps` must be 'auto' (the default: the shortest length that certifies "
            f"`target_gap`), a positive integer, or None with a schedule array; got {n_steps!r}.")
    search = (method == "ais" and isinstance(n_steps, str) and n_steps == "auto"
              and isinstance(schedule, str))
    check_auto_settings(target_gap, max_time)
    n_candidates(match_data)  # refused before anything runs
    n_steps, chains, transitions_per_step = resolve_defaults(
        method, n_steps, chains, transitions_per_step, schedule)
    settings = validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                        target_accept, step_size_jitter, pilot_chains, confidence, base, tuning)
    smc = None
    if method == "smc":
        smc = validate_smc(SMC_PARTICLES if particles is None else particles, path,
                           ess_threshold, schedule)
    elif particles is not None or path != "tempering":
        raise BDMCInputError("`particles` and `path` apply to method='smc' only.")
    gibbs = vectorized_discrete(model, step)
    specs = None if gibbs else resolve_step_methods(model, step)
    if specs is not None and smc is not None:
        raise BDMCInputError(
            "method='smc' runs the vectorized kernels (HMC, and Gibbs sweeps of finite discrete "
            "variables); PyMC step methods, given with `step=` or needed by discrete variables "
            "without a finite support, work with method='ais'."
        )
    check_model(model, needs_simulation=True, gradient_kernel=specs is None and not gibbs)
    if smc is not None:
        check_smc_model(model, smc, discrete=gibbs)
    check_plan_arguments(None, reparameterize, step_methods=specs is not None)
    parallel = parallel_settings(cores, executor, chains_per_batch, specs is not None,
                                 fused_kernel, smc)
    job = Job(model, settings, make_streams(random_seed), simulate=True, started=started,
              parallel=parallel, progressbar=progressbar, compile_kwargs=compile_kwargs,
              match_data=match_data, reparameterize=bool(reparameterize),
              search=None if not search else Search(
                  target_gap, max_time, larger_pilot=not settings.pilot_chains_given,
                  # Only a model with another form lets the search (and its advice) offer one.
                  other_form=(specs is None and reparameterize is None
                              and has_other_form(model))))
    return run(SMC(smc) if smc is not None else annealing_method(specs, pilot_chains), job)


def _replace_entries(doc: str, entries: dict[str, str]) -> str:
    for old, new in entries.items():
        if old not in doc:
            raise RuntimeError(f"Parameter entry {old.strip()!r} not found in the shared doc.")
        doc = doc.replace(old, new)
    return doc


sample_ais.__doc__ = sample_ais.__doc__ % (_replace_entries(COMMON_DOC, {
    """    n_steps : int, default 1000
        Number of annealing steps (intermediate distributions). Ignored if ``schedule`` is an
        array, whose length then sets it.
""": """    n_steps : int, "auto" or None, default "auto"
        Number of annealing steps (intermediate distributions). ``"auto"``: as long as the
        lower bound needs (see ``target_gap``), within ``max_time``; with a ``plan``, its
        length; with a ``schedule`` array (which ``None`` also accepts), the array's length.
""",
}), PARALLEL_NOTES)


# sample_bdmc's defaults depend on ``method``: its entries say so.
sample_bdmc.__doc__ = sample_bdmc.__doc__ % (_replace_entries(COMMON_DOC, {
    """    n_steps : int, default 1000
        Number of annealing steps (intermediate distributions). Ignored if ``schedule`` is an
        array, whose length then sets it.
""": """    n_steps : int, "auto" or None, default "auto"
        Number of annealing steps (intermediate distributions), or SMC stages. ``"auto"``: for
        AIS, the shortest of 1000, 2000, 4000, ... steps whose gap certifies ``target_gap``,
        within ``max_time`` (see there); 100 stages for SMC; or the length of a ``schedule``
        array (which ``None`` also accepts).
""",
    """    chains : int, default 32
        Independent annealing chains per direction, evaluated together in one batched call.
""": """    chains : int, optional
        Independent annealing chains (AIS, default 32) or SMC populations (default 4) per
        direction, evaluated together in one batched call.
""",
    """    transitions_per_step : int, optional
        HMC transitions at each temperature. By default 1 on a path the pilot measures short
        enough for fewer than ``Tuning.first_n_steps`` steps
        (``Tuning.short_path_transitions``), else 2 (``annealing.attrs`` records it).
""": """    transitions_per_step : int, optional
        HMC transitions at each temperature (for AIS as in :func:`sample_ais`; 5 for SMC).
""",
}), PARALLEL_NOTES)
