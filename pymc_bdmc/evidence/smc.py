"""``sample_smc_evidence``: a lower bound on ``log p(y)`` by sequential Monte Carlo.

Named ``sample_smc_evidence``, not ``sample_smc``: :func:`pymc.sample_smc` already exists and
returns posterior draws from PyMC's own SMC, with its evidence as a by-product; this function's
product is the evidence, with this package's guarantees (exact prior start, frozen pilot-tuned
kernels, the same result layout as :func:`pymc_bdmc.sample_ais`). The sandwich with the
sequential harmonic mean estimator is ``sample_bdmc(method="smc")``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pymc as pm
import xarray as xr

from pymc_bdmc.config import Tuning
from pymc_bdmc.methods.protocol import Job
from pymc_bdmc.methods.smc import (
    SMC,
    SMC_CHAINS,
    SMC_N_STEPS,
    SMC_PARTICLES,
    SMC_TRANSITIONS_PER_STEP,
    PathName,
    check_smc_model,
    validate_smc,
)
from pymc_bdmc.model.checks import check_model
from pymc_bdmc.model.resolve import resolve_model
from pymc_bdmc.pipeline.discrete import vectorized_discrete
from pymc_bdmc.pipeline.driver import run
from pymc_bdmc.pipeline.seeding import streams as make_streams
from pymc_bdmc.pipeline.settings import parallel_settings, validate
from pymc_bdmc.schedules import ScheduleName

__all__ = ["sample_smc_evidence"]


def sample_smc_evidence(
    n_steps: int | None = SMC_N_STEPS,
    particles: int = SMC_PARTICLES,
    *,
    chains: int = SMC_CHAINS,
    model: pm.Model | None = None,
    path: PathName = "tempering",
    ess_threshold: float = 0.5,
    schedule: ScheduleName | Sequence[float] | np.ndarray = "adaptive",
    n_leapfrog: int | None = None,
    transitions_per_step: int = SMC_TRANSITIONS_PER_STEP,
    target_accept: float = 0.9,
    step_size_jitter: float = 0.5,
    pilot_chains: int | None = None,
    confidence: float = 0.95,
    potentials_in_likelihood: bool = False,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    cores: int | None = None,
    executor=None,
    chains_per_batch: int | None = None,
    tuning: Tuning | None = None,
) -> xr.DataTree:
    """Estimate a stochastic lower bound on ``log p(y)`` by sequential Monte Carlo.

    Runs ``chains`` independent SMC populations of ``particles`` particles from exact prior
    draws to the posterior, evaluated together in one batched call: reweight, resample
    (systematically) when the effective sample size drops below ``ess_threshold * particles``,
    and move with HMC kernels tuned on a separate pilot run and then frozen.

    Parameters
    ----------
    n_steps : int, default 100
        Number of SMC stages. With ``path="data"``, the number of blocks in which the
        observations enter (at most one stage per observation). Ignored if ``schedule`` is an
        array, whose length then sets it (pass ``None``).
    particles : int, default 128
        Particles per population.
    chains : int, default 4
        Independent populations; the bound averages their estimates, and their spread gives
        the standard errors.
    model : pm.Model, optional
        The model; taken from the ``with`` context when omitted. It is never modified.
    path : {"tempering", "data"}, default "tempering"
        ``"tempering"``: ``p(x) p(y|x)^beta`` over the ``schedule``. ``"data"``: data-point
        tempering, the observations entering in data order along the leading data dimension
        that every observed variable must share (a clear error otherwise).
    ess_threshold : float, default 0.5
        Resampling threshold, as a fraction of ``particles`` (0 never resamples: AIS).
    schedule : {"adaptive", "sigmoid", "linear", "geometric"} or array_like, default "adaptive"
        Inverse temperatures of the tempering path (see :func:`pymc_bdmc.sample_ais`).
    n_leapfrog : int, optional
        Leapfrog steps per HMC transition; by default chosen by the pilot (see
        :func:`pymc_bdmc.sample_ais`).
    transitions_per_step : int, default 5
        HMC transitions at each stage.
    target_accept : float, default 0.9
    step_size_jitter : float, default 0.5
    pilot_chains : int, optional
        Size of the pilot population (default ``max(chains, 64)``).
    confidence : float, default 0.95
    potentials_in_likelihood : bool, default False
        Declare that the model's ``pm.Potential`` terms are likelihood terms (tempering only).
    random_seed : int, array_like of int, SeedSequence, Generator or RandomState, optional
        Seed of every random choice; the same seed gives the same result.
    progressbar : bool, default True
    compile_kwargs : dict, optional
    cores : int, optional
        Local worker processes running the populations (tempering path). Default: all cores
        when the run is predicted to take over 20 s, otherwise this process. Each population
        has its own random streams, so a seed gives the same result whatever ``cores``.
    executor : concurrent.futures.Executor or dask.distributed.Client, optional
        Run the populations on this executor instead, e.g. a Dask cluster (tempering path).
    chains_per_batch : int, optional
        Most particles evaluated together in one batched model call (whole populations),
        which bounds memory (tempering path).
    tuning : Tuning, optional
        Settings of the automatic choices (the pilot, where populations run), with
        documented defaults: :class:`pymc_bdmc.Tuning`.

    Returns
    -------
    xarray.DataTree
        With groups ``posterior`` (final particles resampled by weight), ``sample_stats``,
        ``observed_data``, ``evidence`` (``lower``; ``upper`` and ``gap`` are NaN; per-population
        ``log_weight_forward`` over ``smc_chain``) and ``smc`` (per-stage diagnostics, dim
        ``stage``).

    Notes
    -----
    Each population's estimate ``Z^ = prod_t sum_k W_k g_k`` satisfies ``E[Z^] = p(y)``, so
    ``lower = log mean_c Z^_c`` is a stochastic lower bound exactly as for AIS (Grosse,
    Ghahramani & Adams 2015, §3.4, §4.1). See :mod:`pymc_bdmc.algorithms.smc`.

    Examples
    --------
    >>> import pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model():
    ...     mu = pm.Normal("mu", 0, 1)
    ...     _ = pm.Normal("y", mu, 1, observed=[0.3, -0.2])
    ...     result = pmb.sample_smc_evidence(n_steps=20, particles=32, random_seed=1,
    ...                                      progressbar=False)
    >>> float(result["evidence"]["lower"]) < 0
    True
    """
    started = time.perf_counter()
    model = resolve_model(model, first=("n_steps", n_steps))
    settings = validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step,
                        target_accept, step_size_jitter, pilot_chains, confidence, tuning=tuning)
    smc = validate_smc(particles, path, ess_threshold, schedule)
    gibbs = vectorized_discrete(model, None)
    check_model(model, potentials_in_likelihood=potentials_in_likelihood,
                gradient_kernel=not gibbs)
    check_smc_model(model, smc, discrete=gibbs)
    parallel = parallel_settings(cores, executor, chains_per_batch, False, None, smc)
    job = Job(model, settings, make_streams(random_seed), simulate=False, started=started,
              parallel=parallel, progressbar=progressbar, compile_kwargs=compile_kwargs,
              potentials_in_likelihood=potentials_in_likelihood)
    return run(SMC(smc), job)
