"""The one driver every estimate goes through: prepare, (search), tune, launch, run, result.

Entry points (:mod:`pymc_bdmc.evidence`) check their arguments into a
:class:`~pymc_bdmc.methods.protocol.Job` and call :func:`run` with a method
(:mod:`pymc_bdmc.methods`); the method brings its kernels and loop through the four steps of
:class:`~pymc_bdmc.methods.protocol.EvidenceMethod`, and the driver does the rest.
"""

from __future__ import annotations

import logging
import time

import xarray as xr
from pymc.progress_bar import create_simple_progress

from pymc_bdmc.methods.protocol import EvidenceMethod, Job, Outcome, Problem, SharedPilot
from pymc_bdmc.pipeline.auto_steps import Attempt, FormSwitch, LengthSearch
from pymc_bdmc.pipeline.interrupts import no_bound_if_interrupted
from pymc_bdmc.pipeline.progress import StepCounter, progress_enabled
from pymc_bdmc.pipeline.runs import forward_and_reverse
from pymc_bdmc.pipeline.settings import Settings

__all__ = ["Form", "run", "run_attempt", "settings_for"]

logger = logging.getLogger("pymc_bdmc")


class Form:
    """One form of the model (as written, or its other parameterisation) and its shared pilot.

    Parameters
    ----------
    problem : Problem
    compile_seconds : list of float
        The call's compile time so far, shared by its forms (one element, updated in place).
    """

    def __init__(self, problem: Problem, compile_seconds: list[float]):
        self.problem = problem
        self.memo = SharedPilot()
        self.compile_seconds = compile_seconds


def settings_for(settings: Settings, attempt: Attempt) -> Settings:
    """The call's settings at an attempt's length, chains and pilot size.

    Parameters
    ----------
    settings : Settings
    attempt : Attempt

    Returns
    -------
    Settings
    """
    s = settings if attempt.n_steps == settings.n_steps else settings.with_n_steps(
        attempt.n_steps)
    if attempt.chains is not None:
        s = s.with_chains(attempt.chains)
    if attempt.pilot_chains is not None:
        s = s.with_pilot_chains(attempt.pilot_chains)
    return s


def run(method: EvidenceMethod, job: Job) -> xr.DataTree:
    """Run ``method`` as ``job`` asks: one run, or the length search; return the result.

    Parameters
    ----------
    method : EvidenceMethod
    job : Job

    Returns
    -------
    xarray.DataTree
    """
    problem = method.prepare(job)
    compile_seconds = [problem.compile_time]
    form = Form(problem, compile_seconds)
    if job.search is None:
        return run_attempt(method, job, form, Attempt(job.settings.n_steps))

    def make_other() -> Form | None:
        other = method.other_form(job, problem)
        if other is None:
            return None
        compile_seconds[0] += other.compile_time
        return Form(other, compile_seconds)

    switch = FormSwitch(form, make_other) if job.search.other_form else None
    search = LengthSearch(
        lambda attempt: run_attempt(method, job, form if switch is None else switch.current,
                                    attempt),
        target_gap=job.search.target_gap, max_time=job.search.max_time, started=job.started,
        larger_pilot=job.search.larger_pilot, switch=switch, tuning=job.settings.tuning)
    return search.run()


def run_attempt(method: EvidenceMethod, job: Job, form: Form, attempt: Attempt) -> xr.DataTree:
    """One attempt: the pilot (or its re-freezing), the measured runs and the result.

    Parameters
    ----------
    method : EvidenceMethod
    job : Job
    form : Form
        The problem to run on, and the pilot its attempts share.
    attempt : Attempt

    Returns
    -------
    xarray.DataTree
    """
    settings = settings_for(job.settings, attempt)
    if attempt.pilot_chains is not None:  # a fresh, larger pilot replaces the shared one
        form.memo.clear()
    start = time.perf_counter()
    done = StepCounter()
    # NullSimpleProgress.__enter__ returns None, so keep our own reference to the bar.
    progress = create_simple_progress(progress_enabled(job.progressbar))
    n_steps = [settings.n_steps if job.plan is None else job.plan.n_steps]
    labels = method.labels
    with progress, no_bound_if_interrupted(done, lambda: n_steps[0], labels.algorithm):
        tuned = method.tune(job, form.problem, attempt, settings, progress, form.memo)
        pilot_time = time.perf_counter() - start
        launch = method.launch(job, form.problem, tuned, attempt, settings)
        n_steps[0] = launch.n_steps
        forward, reverse, interrupted = forward_and_reverse(
            progress, done, launch.total, launch.forward, launch.reverse,
            algorithm=labels.algorithm, reverse_label=labels.reverse_label, unit=labels.unit,
            forward_label=labels.forward_label, cancel=launch.cancel)
    outcome = Outcome(forward, reverse, interrupted, pilot_time,
                      time.perf_counter() - start, form.compile_seconds[0])
    return method.result(job, form.problem, tuned, launch, outcome)
