"""What an evidence method plugs into the one driver (:func:`pymc_bdmc.pipeline.driver.run`).

The driver owns what every method shares: the call's timing, the progress bar, Ctrl-C (no bound
before the forward run ends, the lower bound after it), the length search and the switch to
the model's other parameterisation, and the pilot shared by a search's attempts. A method
brings its kernels and its loop, in four steps:

1. :meth:`EvidenceMethod.prepare`: compile the densities and fix the data (real, or simulated
   ``(theta*, y*)`` for BDMC);
2. :meth:`EvidenceMethod.tune`: the pilot and its frozen plan (or a plan given, or the
   search's shared pilot re-frozen);
3. :meth:`EvidenceMethod.launch`: the exact starts and where the chains run, as one forward
   and (for BDMC) one reverse run function;
4. :meth:`EvidenceMethod.result`: the bounds and the result's groups.

A method may also offer ``frozen_estimate(job, problem, tuned) -> float | None``: ``log p(y)``
along a tuned path with the pilot's kernels frozen, which the driver uses to check the pilots'
estimates where they would choose the longer of the model's two forms
(:func:`pymc_bdmc.pipeline.path_choice.prefer_second_checked`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pymc as pm
import xarray as xr

from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.pipeline.auto_steps import Attempt
from pymc_bdmc.pipeline.runs import RunFn
from pymc_bdmc.pipeline.settings import Parallel, Settings

__all__ = ["EvidenceMethod", "Job", "Launch", "Outcome", "Problem", "RunLabels", "Search",
           "SharedPilot"]


@dataclass(frozen=True)
class Search:
    """The length search a call asked for (``n_steps="auto"``).

    Attributes
    ----------
    target_gap : float
    max_time : float or None
    larger_pilot : bool
        Whether a gap far beyond the target may get a larger pilot (not where the user fixed
        ``pilot_chains``).
    other_form : bool
        Whether the search may try the model's other parameterisation.
    lower_bound : bool
        A search on real data, for a lower bound that stops moving as the path lengthens
        (:mod:`pymc_bdmc.pipeline.lower_bound_search`), not for a BDMC certificate.
    """

    target_gap: float
    max_time: float | None
    larger_pilot: bool = True
    other_form: bool = False
    lower_bound: bool = False


@dataclass(frozen=True)
class Job:
    """One call's validated request: what every method is asked to do.

    Attributes
    ----------
    model : pm.Model
    settings : Settings
        The annealing settings (lengths, chains, kernel settings, tuning).
    streams : mapping of str to numpy.random.Generator
        One stream per stage (:func:`pymc_bdmc.pipeline.seeding.streams`).
    simulate : bool
        BDMC: simulate ``(theta*, y*)`` and run in reverse from ``theta*`` too.
    started : float
        ``time.perf_counter()`` when the call started.
    parallel : Parallel
    progressbar : bool
    compile_kwargs : dict or None
    potentials_in_likelihood : bool
    match_data : bool, int or None
        Which simulated data set to certify on (:func:`pymc_bdmc.pipeline.draws.simulate_truth`).
    plan : AnnealingPlan or None
        A frozen plan replacing the pilot.
    reparameterize : bool
        Run the model's other parameterisation from the start.
    search : Search or None
        ``n_steps="auto"``.
    attrs : mapping
        Extra attributes of the result.
    """

    model: pm.Model
    settings: Settings
    streams: Mapping[str, np.random.Generator]
    simulate: bool
    started: float
    parallel: Parallel = field(default_factory=Parallel)
    progressbar: bool = True
    compile_kwargs: dict | None = None
    potentials_in_likelihood: bool = False
    match_data: bool | int | None = False
    plan: AnnealingPlan | None = None
    reparameterize: bool = False
    search: Search | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Problem:
    """What a method runs on: its compiled densities and the data its bounds refer to.

    Attributes
    ----------
    density : object
        The method's batched densities, conditioned on the data.
    simulator : object
        Exact draws of the method's starting distribution.
    truth : JointDraw or None
        ``(theta*, y*)`` for BDMC; None on real data.
    compile_time : float
        Seconds spent compiling.
    attrs : dict
        Attributes of the result saying how the data were chosen.
    extra : dict
        Whatever else the method keeps with its problem.
    """

    density: Any
    simulator: Any
    truth: Any = None
    compile_time: float = 0.0
    attrs: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


@dataclass
class SharedPilot:
    """The pilot the attempts of a search share on one form of the model.

    Attributes
    ----------
    tuned : object or None
        What the method's first :meth:`EvidenceMethod.tune` made; later attempts re-freeze it
        onto their own length.
    data : dict
        Whatever else the method keeps for its later attempts (e.g. the pilot's draws).
    continue_refits : bool
        The pilot kept its fitted path whatever the prior's, and a length limit cut its refits:
        the next attempt goes on with them
        (:func:`~pymc_bdmc.pipeline.pilot.resume_refits`).
    """

    tuned: Any = None
    data: dict = field(default_factory=dict)
    continue_refits: bool = False

    def clear(self) -> None:
        """Forget the pilot: the next attempt pilots afresh."""
        self.tuned = None
        self.data.clear()
        self.continue_refits = False


@dataclass(frozen=True)
class RunLabels:
    """How a method's runs are named in progress rows and messages.

    Attributes
    ----------
    algorithm : str
        ``"AIS"`` names the rows ``"Forward AIS"`` and ``"Reverse AIS"``.
    reverse_label : str, optional
        The reverse row, if not ``"Reverse <algorithm>"``.
    unit : str
        What a run counts (``"step"``, ``"stage"``, ``"chain"``).
    forward_label : str, optional
        The forward row, if not ``"Forward <algorithm>"``.
    """

    algorithm: str = "AIS"
    reverse_label: str | None = None
    unit: str = "step"
    forward_label: str | None = None


@dataclass(frozen=True)
class Launch:
    """The measured runs, ready to go.

    Attributes
    ----------
    forward : RunFn
        ``(on_step, on_group) -> run``: the forward run.
    reverse : RunFn or None
        The reverse run (BDMC), or None.
    total : int
        Units in each direction's progress row.
    n_steps : int
        Steps of the forward run, for an interrupt message.
    settings : Settings
        The settings the runs use (a search's first attempt may have been shortened).
    cancel : callable, optional
        Cancels the reverse run's work elsewhere on Ctrl-C.
    state : object
        What the method's :meth:`EvidenceMethod.result` needs of the launch.
    evaluations : callable, optional
        ``() -> int``: batched model evaluations made so far, here and on workers (the driver
        counts the runs' own).
    model_call_seconds : float, optional
        Seconds of one batched evaluation of the model and its gradient on all chains: with
        the runs' evaluations, the time an ideal run would take.
    """

    forward: RunFn
    reverse: RunFn | None
    total: int
    n_steps: int
    settings: Settings
    cancel: Callable[[], None] | None = None
    state: Any = None
    evaluations: Callable[[], int] | None = None
    model_call_seconds: float | None = None


@dataclass(frozen=True)
class Outcome:
    """What the driver measured and collected of one attempt.

    Attributes
    ----------
    forward, reverse : object
        The runs' results (reverse None without a reverse run, or when interrupted).
    interrupted : str or None
        Where the reverse run was interrupted.
    pilot_time, sampling_time, compile_time : float
        Seconds of the pilot, of the pilot and the runs, and of compilation in this call.
    run_evaluations : int or None
        Batched model evaluations of the runs (forward and reverse), where counted.
    """

    forward: Any
    reverse: Any
    interrupted: str | None
    pilot_time: float
    sampling_time: float
    compile_time: float
    run_evaluations: int | None = None


class EvidenceMethod(Protocol):
    """A method's kernels and loop, in the four steps the driver calls (module docstring)."""

    labels: RunLabels

    def prepare(self, job: Job) -> Problem:
        """Compile, fix the data (simulating ``(theta*, y*)`` where ``job.simulate``)."""

    def other_form(self, job: Job, problem: Problem) -> Problem | None:
        """The problem in the model's other parameterisation (None: nothing to swap)."""

    def tune(self, job: Job, problem: Problem, attempt: Attempt, settings: Settings,
             progress, memo: SharedPilot) -> Any:
        """Pilot and freeze (or take ``job.plan``, or re-freeze ``memo.tuned``)."""

    def launch(self, job: Job, problem: Problem, tuned: Any, attempt: Attempt,
               settings: Settings) -> Launch:
        """Exact starts, where chains run, and the run functions."""

    def result(self, job: Job, problem: Problem, tuned: Any, launch: Launch,
               outcome: Outcome) -> xr.DataTree:
        """Bounds, diagnostics and the result."""
