"""Checking a run's arguments before anything is compiled or sampled."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.config import DEFAULT_TUNING, Tuning, resolve_tuning
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.checks import check_positive_int
from pymc_bdmc.parallel.executors import resolve_workers
from pymc_bdmc.schedules import ADAPTIVE, make_schedule

__all__ = ["BASES", "LONG_PATH_TRANSITIONS", "Parallel", "Settings", "parallel_settings",
           "validate"]

#: Accepted values of ``base`` (where AIS paths start).
BASES = ("auto", "prior", "fitted")

#: HMC transitions per temperature where ``transitions_per_step`` is not given and the path is
#: not short (:meth:`Settings.transitions_on`).
LONG_PATH_TRANSITIONS = 2


@dataclass(frozen=True)
class Settings:
    """Validated settings shared by the annealing runs (AIS, SMC, held-out, step methods).

    Attributes
    ----------
    n_steps : int
    chains : int
    betas : numpy.ndarray
        The fixed schedule (or the grid an adaptive schedule replaces).
    n_leapfrog : int or None
        None: the pilot chooses the trajectory length.
    transitions_per_step : int
        HMC transitions per temperature; where not given (``transitions_given`` False), on
        paths longer than :meth:`transitions_on` calls short.
    reverse_spread : int
        HMC transitions at ``beta = 1`` that spread reverse chains out from the exact sample
        (they keep each chain's start an exact posterior draw and decorrelate the reverse
        weights).
    target_accept, step_size_jitter : float
    pilot_chains : int
    confidence : float
    adaptive : bool
        Whether the schedule is placed from the pilot.
    base : {"auto", "prior", "fitted"}
        Where AIS paths start: ``"auto"`` lets the pilot choose between the prior and a fitted
        Gaussian (:mod:`pymc_bdmc.pipeline.pilot`); ``"prior"`` always starts at the prior;
        ``"fitted"`` at a fitted Gaussian wherever the pilot can fit one.
    pilot_chains_given : bool
        Whether the user fixed ``pilot_chains``; otherwise the pilot may enlarge its population
        where it measures a dense metric on more coordinates than it has particles for
        (:func:`pymc_bdmc.pipeline.pilot.tune`).
    schedule_name : str or None
        The named schedule ``betas`` came from (None for an array), so that the same settings
        can be made at another length (:meth:`with_n_steps`).
    refit_length_limit : float or None
        A fitted path whose pilot measures it longer than this ends the refits, and the first
        one's pilot stops there (:func:`pymc_bdmc.pipeline.path_choice.choose_path`): set only
        where a longer path already decides what happens next (the driver then pilots the
        model's other form).
    transitions_given : bool
        Whether the user fixed ``transitions_per_step``.
    tuning : Tuning
        The automatic choices' settings (:class:`~pymc_bdmc.config.Tuning`).
    """

    n_steps: int
    chains: int
    betas: np.ndarray
    n_leapfrog: int | None
    transitions_per_step: int
    reverse_spread: int
    target_accept: float
    step_size_jitter: float
    pilot_chains: int
    confidence: float
    adaptive: bool
    pilot_chains_given: bool = False
    base: str = "prior"
    schedule_name: str | None = None
    refit_length_limit: float | None = None
    transitions_given: bool = True
    tuning: Tuning = DEFAULT_TUNING

    def transitions_on(self, path_length: float) -> int:
        """HMC transitions per temperature on a path of thermodynamic length ``path_length``.

        ``tuning.short_path_transitions`` where the user gave none and the path needs fewer
        than ``tuning.first_n_steps`` steps at ``tuning.steps_per_squared_length``; else
        ``transitions_per_step``.
        """
        if self.transitions_given or not np.isfinite(path_length):
            return self.transitions_per_step
        needs = self.tuning.steps_per_squared_length * path_length**2
        return (int(self.tuning.short_path_transitions) if needs < self.tuning.first_n_steps
                else self.transitions_per_step)

    def with_chains(self, chains: int) -> Settings:
        """Return the same settings with ``chains`` chains per direction (the pilot unchanged)."""
        return dataclasses.replace(self, chains=check_positive_int(chains, "chains"))

    def with_pilot_chains(self, pilot_chains: int) -> Settings:
        """Return the same settings with a pilot of ``pilot_chains`` particles."""
        return dataclasses.replace(
            self, pilot_chains=check_positive_int(pilot_chains, "pilot_chains", minimum=2))

    def with_n_steps(self, n_steps: int) -> Settings:
        """Return the same settings on ``n_steps`` temperatures of the same named schedule.

        Parameters
        ----------
        n_steps : int

        Returns
        -------
        Settings

        Raises
        ------
        ValueError
            If the schedule was given as an array (its length is fixed).
        """
        if self.schedule_name is None:
            raise ValueError("A schedule given as an array cannot change its length.")
        betas = make_schedule(self.schedule_name, check_positive_int(n_steps, "n_steps"))
        return dataclasses.replace(self, n_steps=len(betas) - 1, betas=betas)


def validate(n_steps, chains, schedule, n_leapfrog, transitions_per_step, target_accept,
             step_size_jitter, pilot_chains, confidence, base="prior",
             tuning: Tuning | None = None) -> Settings:
    """Check the annealing arguments of an entry point and return them as :class:`Settings`.

    Parameters
    ----------
    n_steps, chains, schedule, n_leapfrog, transitions_per_step, target_accept : see sample_ais
    step_size_jitter, pilot_chains, confidence, base : see sample_ais
    tuning : Tuning or None

    Returns
    -------
    Settings

    Raises
    ------
    BDMCInputError
        On any invalid argument.
    """
    chains = check_positive_int(chains, "chains")
    if not isinstance(schedule, str) and n_steps is not None:
        n_steps = check_positive_int(n_steps, "n_steps")
    betas = make_schedule(schedule, n_steps)
    if n_leapfrog is not None:  # None: the pilot chooses the trajectory length
        n_leapfrog = check_positive_int(n_leapfrog, "n_leapfrog")
    transitions_given = transitions_per_step is not None
    transitions_per_step = check_positive_int(
        LONG_PATH_TRANSITIONS if transitions_per_step is None else transitions_per_step,
        "transitions_per_step")
    if not 0 < target_accept < 1:
        raise BDMCInputError(f"`target_accept` must be in (0, 1), got {target_accept}.")
    if not 0 <= step_size_jitter < 1:
        raise BDMCInputError(f"`step_size_jitter` must be in [0, 1), got {step_size_jitter}.")
    if not 0 < confidence < 1:
        raise BDMCInputError(f"`confidence` must be in (0, 1), got {confidence}.")
    if base not in BASES:
        raise BDMCInputError(f"`base` must be one of {BASES}, got {base!r}.")
    tuning = resolve_tuning(tuning)
    given_pilot_chains = pilot_chains
    pilot_chains = check_positive_int(
        max(chains, 64) if pilot_chains is None else pilot_chains, "pilot_chains", minimum=2
    )
    return Settings(len(betas) - 1, chains, betas, n_leapfrog, transitions_per_step,
                    tuning.reverse_spread, float(target_accept),
                    float(step_size_jitter), pilot_chains, float(confidence),
                    isinstance(schedule, str) and schedule == ADAPTIVE,
                    pilot_chains_given=given_pilot_chains is not None, base=base,
                    schedule_name=schedule if isinstance(schedule, str) else None,
                    transitions_given=transitions_given, tuning=tuning)


@dataclass(frozen=True)
class Parallel:
    """Where the chains of an AIS run go, and whether their transitions are fused.

    Attributes
    ----------
    cores : int or None
    executor : Executor, dask Client or None
    chains_per_batch : int or None
    fused_kernel : bool or None
    """

    cores: int | None = 1
    executor: object = None
    chains_per_batch: int | None = None
    fused_kernel: bool | None = False


def parallel_settings(cores, executor, chains_per_batch, step_methods: bool,
                      fused_kernel: bool | None = None, smc=None) -> Parallel:
    """Check the parallelism and execution arguments before anything runs.

    Parameters
    ----------
    cores, executor, chains_per_batch, fused_kernel : see sample_ais
    step_methods : bool
        The run uses PyMC step methods.
    smc : SMCSettings, optional
        The SMC settings of an SMC run.

    Returns
    -------
    Parallel

    Raises
    ------
    BDMCInputError
        On any invalid or inapplicable argument.
    """
    if fused_kernel is not None and not isinstance(fused_kernel, bool):
        raise BDMCInputError(f"`fused_kernel` must be True, False or None, got {fused_kernel!r}.")
    if fused_kernel and (step_methods or smc is not None):
        raise BDMCInputError(
            "`fused_kernel` compiles the vectorized kernels of method='ais'; it does not "
            "apply to PyMC step methods or method='smc'."
        )
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int)
                              or cores < 1):
        raise BDMCInputError(f"`cores` must be a positive integer or None, got {cores!r}.")
    if chains_per_batch is not None:
        chains_per_batch = check_positive_int(chains_per_batch, "chains_per_batch")
    if smc is not None and smc.path == "data" and (executor is not None or (cores or 1) > 1
                                                    or chains_per_batch is not None):
        raise BDMCInputError(
            "path='data' runs its populations in this process; `cores`, `executor` and "
            "`chains_per_batch` apply to path='tempering'."
        )
    if executor is not None:
        resolve_workers(None, executor)  # refuses anything that is not an executor
    return Parallel(cores, executor, chains_per_batch, fused_kernel)
