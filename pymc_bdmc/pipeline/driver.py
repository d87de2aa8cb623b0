"""The one driver every estimate goes through: prepare, (search), tune, launch, run, result.

Entry points (:mod:`pymc_bdmc.evidence`) check their arguments into a
:class:`~pymc_bdmc.methods.protocol.Job` and call :func:`run` with a method
(:mod:`pymc_bdmc.methods`); the method brings its kernels and loop through the four steps of
:class:`~pymc_bdmc.methods.protocol.EvidenceMethod`, and the driver does the rest. A call shows
one progress bar and logs one INFO line saying what it found (:func:`call_scope`); a call made
inside another (``calibrate``'s two runs) shares the outer call's.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import pytensor
import xarray as xr

from pymc_bdmc.methods.protocol import EvidenceMethod, Job, Outcome, Problem, SharedPilot
from pymc_bdmc.model.cache import model_key
from pymc_bdmc.model.threads import density_threads
from pymc_bdmc.parallel.executors import local_cores
from pymc_bdmc.pipeline.auto_steps import Attempt, FormSwitch, LengthSearch
from pymc_bdmc.pipeline.diagnostics import deferred_warnings, replay_warnings
from pymc_bdmc.pipeline.interrupts import no_bound_if_interrupted
from pymc_bdmc.pipeline.lower_bound_search import (
    CertifiedLength,
    LowerBoundSearch,
    certified_length,
    remember_certified,
)
from pymc_bdmc.pipeline.path_choice import prefer_second_checked
from pymc_bdmc.pipeline.progress import StageProgress, StepCounter, progress_enabled
from pymc_bdmc.pipeline.results import short_summary, summary_line
from pymc_bdmc.pipeline.runs import forward_and_reverse
from pymc_bdmc.pipeline.seeding import restarted
from pymc_bdmc.pipeline.settings import Settings
from pymc_bdmc.pipeline.timing import call_clock, peak_memory_mb, timed

__all__ = ["Form", "call_scope", "run", "run_attempt", "settings_for"]

#: The progress bar of the user's call in progress (None outside any call).
_CALL: ContextVar[StageProgress | None] = ContextVar("pymc_bdmc_call", default=None)


def stage_progress(enabled: bool) -> StageProgress:
    """The progress bar of a call (a function, so that tests can record its stages)."""
    return StageProgress(enabled)


@contextmanager
def call_scope(progressbar: bool):
    """The progress bar of one user call; yields it, and whether this call is the outermost.

    Parameters
    ----------
    progressbar : bool
        The user's ``progressbar`` (off on CI, :func:`~.progress.progress_enabled`).

    Yields
    ------
    tuple
        ``(StageProgress, outermost)``: a call inside another shares its bar and leaves the
        summary line to it.
    """
    outer = _CALL.get()
    if outer is not None:
        yield outer, False
        return
    bar = stage_progress(progress_enabled(progressbar))
    token = _CALL.set(bar)
    try:
        with bar:
            yield bar, True
    finally:
        _CALL.reset(token)

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
    with call_scope(job.progressbar) as (bar, outermost), call_clock() as clock, \
            pytensor.config.change_flags(traceback__limit=0), \
            density_threads(2 if local_cores(job.parallel.cores) > 1 else 1):
        # The graphs built and rewritten here are ours, not the user's: recording each new
        # variable's creation stack (for PyTensor's error messages) only costs compile time.
        result = _run(method, job, bar)
        record_time(result, clock, time.perf_counter() - job.started)
        if outermost:
            line = summary_line(result)
            logger.info("%s (%.1f s).", line, time.perf_counter() - job.started)
            bar.finish(f"Done: {short_summary(result)}")
    return result


def _run(method: EvidenceMethod, job: Job, bar: StageProgress) -> xr.DataTree:
    problem = method.prepare(job)
    compile_seconds = [problem.compile_time]
    form = Form(problem, compile_seconds)
    if job.search is None:
        return run_attempt(method, job, form, Attempt(job.settings.n_steps), bar)

    def make_other() -> Form | None:
        other = method.other_form(job, problem)
        if other is None:
            return None
        compile_seconds[0] += other.compile_time
        return Form(other, compile_seconds)

    held = {}  # each attempt's warnings, by its result: only the returned one's are logged
    switch = FormSwitch(form, make_other) if job.search.other_form else None
    if job.search.lower_bound:
        known = certified_length(model_key(job.model), job.reparameterize)
        if known is None and switch is not None:  # certified in the other form: start there
            known = certified_length(model_key(job.model), not job.reparameterize)
            if known is not None and not switch.use(True):
                known = None
        form_choice = "" if known is not None or switch is None else _choose_form(
            method, job, switch, bar)
        if known is not None and known.fitted and job.settings.base == "auto":
            # The certificate is about annealing from a fitted Gaussian: anneal from one here
            # too, rather than let a pilot's noisy estimate pick the prior's path.
            logger.debug("BDMC certified this model from a fitted Gaussian: so does this run.")
            job = dataclasses.replace(job, settings=dataclasses.replace(job.settings,
                                                                        base="fitted"))
        outgrew, resume = ((False, "") if known is None or switch is None
                           else _path_outgrew(method, job, switch, known, bar))
        if outgrew:
            known_form = switch.other
            form_choice = _choose_form(method, job, switch, bar)
            if not form_choice:
                switch.use(known_form)
            if switch.other != known_form:  # the certificate was for the form left
                known = None
        if resume and known is not None:  # the certified form runs: with what it was spared
            if resume == "refits" and job.settings.base == "fitted":  # from its fitted path
                switch.current.memo.continue_refits = True
            else:  # its pilot afresh (the prior's path is weighed again too)
                switch.current.memo.clear()
        search = LowerBoundSearch(
            lambda request: _search_attempt(method, job, form if switch is None
                                            else switch.current, request, bar, held),
            target_gap=job.search.target_gap, max_time=job.search.max_time,
            started=job.started, tuning=job.settings.tuning,
            known=known, chains=job.settings.chains, switch=switch, form_choice=form_choice)
    else:
        search = LengthSearch(
            lambda request: _search_attempt(method, job, form if switch is None
                                            else switch.current, request, bar, held),
            target_gap=job.search.target_gap, max_time=job.search.max_time,
            started=job.started, larger_pilot=job.search.larger_pilot, switch=switch,
            tuning=job.settings.tuning)
    result = search.run()
    bar.prefix = ""
    replay_warnings(held.get(id(result), []))
    if not job.search.lower_bound:
        remember_certified(model_key(job.model), result)
    return result


def _choose_form(method: EvidenceMethod, job: Job, switch: FormSwitch,
                 bar: StageProgress) -> str:
    """Pilot the model as written and in its other form; leave ``switch`` on the better one.

    Both pilots estimate the same ``log p(y)`` along their forms' chosen paths, and are kept
    for the search's attempts (:func:`~pymc_bdmc.pipeline.path_choice.prefer_second_checked` ranks
    them). Returns what was compared, or "" where there was nothing to compare.
    """
    attempt = Attempt(job.settings.n_steps)
    settings = settings_for(job.settings, attempt)
    pilots, tuned_forms = [], []
    for other in (False, True):
        if not switch.use(other):
            switch.use(False)
            return ""
        # Each form's pilot draws what a call in that form would; the frozen estimates below
        # go on from the first one's streams (fresh draws for both).
        with timed("pilot"):
            tuned = method.tune(fresh_streams(job) if other else job, switch.current.problem,
                                attempt, settings, bar, switch.current.memo)
        pilots.append(getattr(tuned, "pilot", None))
        tuned_forms.append((switch.current.problem, tuned))
    if any(pilot is None for pilot in pilots):
        switch.use(False)
        return ""
    # Where the pilots' estimates would choose the longer path, the method (if it can)
    # estimates both forms again with frozen kernels (pipeline/pilot.py says why).
    frozen, rechecked = getattr(method, "frozen_estimate", None), []

    def recheck():
        with timed("pilot_frozen_estimates"):
            rechecked.extend(frozen(job, problem, tuned) for problem, tuned in tuned_forms)
        return tuple(rechecked)

    keep_other = prefer_second_checked(*pilots, job.settings.tuning,
                                       None if frozen is None else recheck)
    switch.use(keep_other)
    choice = (f"{'reparameterized' if keep_other else 'as written'} chosen by the pilots: "
              f"log p(y) {pilots[0].log_z:.2f} as written (path length "
              f"{pilots[0].thermodynamic_length:.2f}), {pilots[1].log_z:.2f} reparameterized "
              f"({pilots[1].thermodynamic_length:.2f})")
    if rechecked and None not in rechecked:
        choice += (f"; with frozen kernels {rechecked[0]:.2f} as written, {rechecked[1]:.2f} "
                   f"reparameterized")
    logger.debug("The model's two forms: %s.", choice)
    return choice


def _path_outgrew(method: EvidenceMethod, job: Job, switch: FormSwitch, known: CertifiedLength,
                  bar: StageProgress) -> tuple[bool, str]:
    """Whether the real data's pilot path, in the certified form, far outgrew the certified one.

    The pilot is kept for the search's attempts. Steps needed grow as the path's length
    squared, so a path more than ``tuning.harder_path_ratio`` times as long as the certified
    run's says, before any run, that the certified length will not do here: on 500 centred
    groups whose real data put the group scale near zero, 12-18 against 3.9. A fitted path
    already that long ends the pilot's refits, and the first one's pilot stops there (the
    other form is piloted next). Returns ``(outgrew, resume)``: ``resume`` says what the pilot
    kept was spared, should the certified form run after all: ``"refits"``, ``"afresh"`` (its
    fitted path's pilot stopped) or "".
    """
    attempt = Attempt(known.n_steps)
    limit = job.settings.tuning.harder_path_ratio * known.path_length
    settings = dataclasses.replace(settings_for(job.settings, attempt),
                                   refit_length_limit=limit if np.isfinite(limit) else None)
    with timed("pilot"):
        tuned = method.tune(job, switch.current.problem, attempt, settings, bar,
                            switch.current.memo)
    pilot = getattr(tuned, "pilot", None)
    if pilot is None or not np.isfinite(limit):
        return False, ""
    fitted_cut = bool(pilot.path_choice.get("fitted_cut", 0.0))
    outgrew = fitted_cut or bool(pilot.thermodynamic_length > limit)
    if outgrew:
        logger.debug("The real data's path is over %.2f long, the certified run's %.2f: "
                     "piloting the model's other form too.", limit, known.path_length)
    return outgrew, ("afresh" if fitted_cut
                     else "refits" if pilot.path_choice.get("refits_cut", 0.0) else "")


def _search_attempt(method, job, form, request, bar, held) -> xr.DataTree:
    """One attempt of a search, on the call's bar, its warnings held (by its result) in ``held``."""
    bar.prefix = f"{request.n_steps} steps: "
    with deferred_warnings() as warnings:
        result = run_attempt(method, job, form, request, bar)
    held[id(result)] = warnings
    return result


def run_attempt(method: EvidenceMethod, job: Job, form: Form, attempt: Attempt,
                progress: StageProgress) -> xr.DataTree:
    """One attempt: the pilot (or its re-freezing), the measured runs and the result.

    Parameters
    ----------
    method : EvidenceMethod
    job : Job
    form : Form
        The problem to run on, and the pilot its attempts share.
    attempt : Attempt
    progress : StageProgress
        The call's progress bar.

    Returns
    -------
    xarray.DataTree
    """
    settings = settings_for(job.settings, attempt)
    job = fresh_streams(job)  # replayed by a call with this attempt's settings (seeding.py)
    if attempt.pilot_chains is not None:  # a fresh, larger pilot replaces the shared one
        form.memo.clear()
    start = time.perf_counter()
    done = StepCounter()
    n_steps = [settings.n_steps if job.plan is None else job.plan.n_steps]
    labels = method.labels
    with no_bound_if_interrupted(done, lambda: n_steps[0], labels.algorithm):
        with timed("pilot"):
            tuned = method.tune(job, form.problem, attempt, settings, progress, form.memo)
        pilot_time = time.perf_counter() - start
        launch = method.launch(job, form.problem, tuned, attempt, settings)
        n_steps[0] = launch.n_steps
        before = None if launch.evaluations is None else launch.evaluations()
        forward, reverse, interrupted = forward_and_reverse(
            progress, done, launch.total, launch.forward, launch.reverse,
            algorithm=labels.algorithm, reverse_label=labels.reverse_label, unit=labels.unit,
            forward_label=labels.forward_label, cancel=launch.cancel)
        evaluations = None if before is None else launch.evaluations() - before
    outcome = Outcome(forward, reverse, interrupted, pilot_time,
                      time.perf_counter() - start, form.compile_seconds[0], evaluations)
    result = method.result(job, form.problem, tuned, launch, outcome)
    if evaluations is not None and launch.model_call_seconds:
        group = result["heldout" if "heldout" in result.children else "evidence"]
        group.attrs.update(run_model_evaluations=int(evaluations),
                           model_call_seconds=float(launch.model_call_seconds))
    return result


def fresh_streams(job: Job) -> Job:
    """``job`` with the streams an attempt draws from back at their start (:func:`restarted`)."""
    return dataclasses.replace(job, streams=restarted(job.streams))


def record_time(result: xr.DataTree, clock: dict, seconds: float) -> None:
    """Record where the call's time went, and how far it was from its runs' evaluations alone.

    ``time_<stage>`` for every timed stage, ``time_total``, where the runs' evaluations were
    counted, ``limit_seconds`` (the final runs' batched model evaluations times the seconds of
    one) and ``distance_to_limit`` (the call's time over that), and the peak resident memory
    so far of this process and of its largest finished worker (``peak_memory_mb``,
    ``peak_worker_memory_mb``; :func:`~pymc_bdmc.pipeline.timing.peak_memory_mb`).
    """
    group = result["heldout" if "heldout" in result.children else "evidence"]
    attrs = {f"time_{stage}": float(value) for stage, value in sorted(clock.items())}
    attrs["time_total"] = float(seconds)
    attrs["peak_memory_mb"], attrs["peak_worker_memory_mb"] = peak_memory_mb()
    if "run_model_evaluations" in group.attrs:
        limit = group.attrs["run_model_evaluations"] * group.attrs["model_call_seconds"]
        attrs.update(limit_seconds=float(limit),
                     distance_to_limit=float(seconds / limit) if limit > 0 else float("nan"))
    group.attrs.update(attrs)
