"""``sample_heldout_likelihood``: per-case held-out log-likelihoods with the globals fixed.

With a model's global parameters ``theta`` fixed (e.g. at trained values), the held-out
likelihood of data cases ``y_1..y_n`` integrates out each case's own latent variables:

    log p(y_1..y_n | theta) = sum_i log p(y_i | theta),
    p(y_i | theta) = integral p(z_i | theta) p(y_i | z_i, theta) dz_i.

This is the evaluation of the BDMC paper (Grosse, Ghahramani & Adams 2015, §1) and of its
follow-up on decoder-based generative models (Wu, Burda, Salakhutdinov & Grosse 2017): AIS per
case, batched over cases and chains (:mod:`pymc_bdmc.methods.heldout`), validated by BDMC on
cases simulated from the model with ``theta`` fixed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import pymc as pm
import xarray as xr

from pymc_bdmc.config import Tuning
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.methods.heldout import DEFAULT_PILOT_CHAINS, HeldOutAIS
from pymc_bdmc.methods.protocol import Job
from pymc_bdmc.model.resolve import resolve_model
from pymc_bdmc.pipeline.driver import run
from pymc_bdmc.pipeline.seeding import streams as make_streams
from pymc_bdmc.pipeline.settings import validate
from pymc_bdmc.schedules import ScheduleName

__all__ = ["sample_heldout_likelihood"]


def sample_heldout_likelihood(
    params: Mapping[str, np.ndarray],
    data: Mapping[str, np.ndarray] | None = None,
    n_steps: int | None = 1000,
    chains: int = 16,
    *,
    model: pm.Model | None = None,
    simulate: bool = False,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int = 3,
    transitions_per_step: int = 2,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    plan: AnnealingPlan | None = None,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    tuning: Tuning | None = None,
) -> xr.DataTree:
    """Estimate the held-out log-likelihood of each data case by AIS, with the globals fixed.

    For a latent-variable model with global parameters ``theta`` and per-case latents ``z_i``
    (leading case dimension) generating per-case data ``y_i``, estimates
    ``log p(y_i | theta) = log integral p(z_i | theta) p(y_i | z_i, theta) dz_i`` for every case
    by annealed importance sampling, batched over cases and chains. With ``simulate=True``, the
    cases are simulated from the model with ``theta`` fixed and reverse AIS from the simulated
    ``z_i*`` gives per-case stochastic upper bounds too (bidirectional Monte Carlo): the gap
    says how accurate the estimator is on cases like the model's own.

    Parameters
    ----------
    params : mapping
        Fixed values (constrained, e.g. a positive ``sigma``) of the model's global free
        variables, by name. Every free variable not given must be a per-case latent whose first
        dimension runs over the cases.
    data : mapping, optional
        Held-out data for every observed variable, cases along the first axis. The number of
        cases may differ from the model's when the cases are a named dimension (``dims=``) of
        the latents and the observed variables. Default: the model's own observed data.
    n_steps : int, default 1000
        Annealing steps. Ignored if ``schedule`` is an array, whose length then sets it.
    chains : int, default 16
        AIS chains per case and direction; all (chain, case) pairs run in one batched call.
    model : pm.Model, optional
        Taken from the ``with`` context when omitted. It is never modified.
    simulate : bool, default False
        Draw the latents and the data of every case from the model with ``params`` fixed
        (as many cases as the model has), and run reverse AIS from the simulated latents:
        per-case ``upper`` bounds and ``gap``. Cannot be combined with ``data``.
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like, default "adaptive"
        Inverse temperatures, shared by all cases. ``"adaptive"`` places them at equal
        thermodynamic length of the summed per-case weight variance, measured by the pilot.
    n_leapfrog : int, default 3
        Leapfrog steps per HMC transition.
    transitions_per_step : int, default 2
        HMC transitions at each temperature.
    target_accept : float, default 0.9
        Mean acceptance rate the pilot tunes the step sizes for.
    step_size_jitter : float, default 0.5
        Relative jitter of the step size, drawn per (chain, case) independently of the state.
    pilot_chains : int, optional
        Pilot particles per case (default 16).
    confidence : float, default 0.95
        Level of the Markov-inequality bounds on the totals.
    plan : AnnealingPlan, optional
        A frozen plan to run instead of tuning one, e.g. ``AnnealingPlan.from_result(check)``
        of a ``simulate=True`` run whose gap certified it: the test cases then get exactly the
        kernels and schedule the gap was measured with. Its schedule and kernels replace
        ``n_steps``, ``schedule`` and the kernel settings.
    random_seed : int, array_like of int, SeedSequence, Generator or RandomState, optional
        Seed of every random choice; the same seed gives the same result.
    progressbar : bool, default True
        Show a progress bar (never in CI, where the ``CI`` environment variable is set).
    compile_kwargs : dict, optional
        Passed to :func:`pymc.pytensorf.compile`, e.g. ``{"mode": "FAST_RUN"}``.
    tuning : Tuning, optional
        Settings of the automatic choices, with documented defaults: :class:`pymc_bdmc.Tuning`.

    Returns
    -------
    xarray.DataTree
        Groups:

        * ``heldout``: per case (the model's case dim name, else ``case``) ``lower``,
          ``upper`` (NaN without ``simulate``), ``gap``, their bootstrap standard errors, weight
          ESS, failed-chain counts; per chain and case ``log_weight_forward/reverse`` (dims
          ``ais_chain, case``); totals over cases ``total_lower``, ``total_upper``,
          ``total_gap``, ``total_lower_se``, ``total_upper_se``, ``total_lower_markov``,
          ``total_upper_markov``. Attributes record ``n_steps``, ``chains``, ``random_seed``,
          ``n_cases`` and the run settings.
        * ``posterior``: each case's final forward states resampled by its own weights
          (chain=1, draw=``chains``); ``sample_stats``: their per-case ``log_weight``,
          ``source_chain``, ``log_prior`` and ``log_likelihood``.
        * ``observed_data``: the cases the bounds refer to (simulated with ``simulate``);
          ``generating_values``: the simulated latents (``simulate`` only);
          ``fixed_parameters``: ``params``.
        * ``annealing``: the frozen schedule and kernels, per-step acceptance and divergences
          (pooled over cases).

    Raises
    ------
    BDMCInputError
        Before any sampling, for parameters that are unknown, missing, of the wrong shape or
        outside their prior's support; data with the wrong shape or non-finite values; free
        variables left that are not per-case latents; cases that are not independent given the
        parameters; discrete latents; Potentials.

    Notes
    -----
    Each (chain, case) pair is an independent AIS chain with its own Metropolis accept/reject,
    so each case's weights are AIS weights for that case alone: ``lower_i`` is a stochastic
    lower bound on ``log p(y_i | theta)`` and ``upper_i`` (on simulated cases) a stochastic
    upper bound (Grosse, Ghahramani & Adams 2015). Cases are independent, so the totals are
    stochastic bounds on ``log p(y_1..y_n | theta)`` with the same guarantee: the total lower
    bound exceeds the truth by more than ``b`` nats with probability below ``exp(-b)``.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model(coords={"case": range(4)}) as model:
    ...     w = pm.Normal("w", 0, 1)
    ...     z = pm.Normal("z", 0, 1, dims="case")
    ...     _ = pm.Normal("y", w * z, 0.5, observed=np.zeros(4), dims="case")
    ...     res = pmb.sample_heldout_likelihood({"w": 1.0}, n_steps=50, chains=4,
    ...                                         random_seed=1, progressbar=False)
    >>> res["heldout"]["lower"].sizes["case"]
    4
    """
    started = time.perf_counter()
    model = resolve_model(model, first=("params", params))
    settings = validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                        target_accept, step_size_jitter,
                        DEFAULT_PILOT_CHAINS if pilot_chains is None else pilot_chains,
                        confidence, tuning=tuning)
    if not isinstance(simulate, bool | np.bool_):
        raise BDMCInputError(f"`simulate` must be True or False, got {simulate!r}.")
    if plan is not None and not isinstance(plan, AnnealingPlan):
        raise BDMCInputError(f"`plan` must be an AnnealingPlan, got {type(plan).__name__}.")
    job = Job(model, settings, make_streams(random_seed), simulate=bool(simulate),
              started=started, progressbar=progressbar, compile_kwargs=compile_kwargs,
              plan=plan, attrs={"random_seed": random_seed
                                if isinstance(random_seed, int | np.integer) else None})
    return run(HeldOutAIS(params, data), job)
