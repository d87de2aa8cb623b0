"""sample_bdmc(n_steps="auto"): the doubling search, its budget, its record and its refusals."""

import logging
import time

import numpy as np
import pymc as pm
import pytest
import xarray as xr

import pymc_bdmc as pmb
from pymc_bdmc import BDMCInputError, known_evidence
from pymc_bdmc.config import DEFAULT_TUNING
from pymc_bdmc.methods import step_methods as step_method_module
from pymc_bdmc.methods import vectorized as vectorized_module
from pymc_bdmc.pipeline.auto_steps import LengthSearch, first_length, path_needs
from pymc_bdmc.pipeline.timing import call_clock, timed

FIRST_N_STEPS = DEFAULT_TUNING.first_n_steps
MAX_CHAINS = DEFAULT_TUNING.max_chains
MAX_N_STEPS = DEFAULT_TUNING.max_n_steps
MAX_PILOT_CHAINS = DEFAULT_TUNING.max_pilot_chains
MIN_FIRST_N_STEPS = DEFAULT_TUNING.min_first_n_steps
SWAP_GAP = DEFAULT_TUNING.swap_gap


class _Switch:
    """A FormSwitch stand-in: ``reparameterize(other)`` says whether the switch was made."""

    def __init__(self, reparameterize):
        self.use = reparameterize


def search_n_steps(run, *, reparameterize=None, tuning=DEFAULT_TUNING, **kwargs):
    """The search on a fake ``run(n_steps, fit_length, chains, pilot_chains=...)``."""
    return LengthSearch(
        lambda a: run(a.n_steps, a.fit_length, a.chains, pilot_chains=a.pilot_chains),
        switch=None if reparameterize is None else _Switch(reparameterize), tuning=tuning,
        **kwargs).run()


def _fake_run(gaps, calls, interrupt_at=None, pilot_time=0.0, bound_se=0.0, pilot=64, ess=None,
              stuck=None):
    """``ess``: the effective sample sizes (forward, reverse) of each call; unmeasured if None.

    ``stuck``: whether the reverse chains accept nothing near beta = 1 (the forward ones 0.8);
    no ``annealing`` group if None.
    """
    pilots = [pilot]

    def run(n_steps, fit_length=None, chains=None, pilot_chains=None):
        if pilot_chains is not None:
            pilots.append(pilot_chains)
        if pilot_chains is not None:
            calls.append((n_steps, "pilot", pilot_chains))
        else:
            calls.append(n_steps if chains is None else (n_steps, chains))
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        gap = gaps[min(len(calls) - 1, len(gaps) - 1)]
        se = bound_se[min(len(calls) - 1, len(bound_se) - 1)] if np.ndim(bound_se) else bound_se
        measured = {} if ess is None else dict(zip(
            ("ess_forward", "ess_reverse"), ess[min(len(calls) - 1, len(ess) - 1)], strict=True))
        tree = xr.DataTree.from_dict({"evidence": xr.Dataset(
            {"gap": gap, "gap_se": np.hypot(se, se), **measured})})
        if stuck is not None:
            tree["annealing"] = xr.Dataset({
                "acceptance_rate_forward": ("step", np.full(n_steps + 1, 0.8)),
                "acceptance_rate_reverse": ("step", np.full(n_steps + 1, 0.0 if stuck else 0.8))})
        tree["evidence"].attrs.update(
            n_steps=n_steps, chains=32 if chains is None else chains, pilot_chains=pilots[-1],
            pilot_time=pilot_time if len(calls) == 1 or pilot_chains else 0.0)
        return tree
    return run


def test_lengthens_until_the_gap_is_within_the_target():
    calls = []
    result = search_n_steps(_fake_run([0.9, -0.9, 0.3, 0.1], calls), target_gap=0.5,
                            max_time=None, started=time.perf_counter())
    # 0.9 nats at 1000 steps: 1/n decay predicts 1800, so at least double; then -0.9 at 2000.
    assert calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS, 4 * FIRST_N_STEPS]
    attrs = result["evidence"].attrs
    np.testing.assert_array_equal(attrs["auto_n_steps"], calls)
    np.testing.assert_array_equal(attrs["auto_gaps"], [0.9, -0.9, 0.3])
    assert attrs["certified"] == 1 and attrs["auto_stop"] == "certified"
    assert float(result["evidence"]["gap"]) == 0.3


def test_a_negative_gap_beyond_the_target_is_not_a_certificate():
    calls = []
    result = search_n_steps(_fake_run([-0.7, -0.2], calls), target_gap=0.5, max_time=None,
                            started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS]
    assert result["evidence"].attrs["certified"] == 1


def test_a_gap_within_the_target_but_measured_too_noisily_is_measured_with_more_chains(
        caplog, monkeypatch):
    from pymc_bdmc.pipeline import auto_steps

    calls = []
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = search_n_steps(_fake_run([0.1, 0.2], calls, bound_se=[0.6, 0.1]),
                                target_gap=0.5, max_time=None, started=time.perf_counter())
    # 0.1 nats, but each bound's standard error 0.6 (the gap's 0.85, 1.7 times the target):
    # the same length again, with ceil(1.7^2) = 3 times the chains.
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, 96)]
    attrs = result["evidence"].attrs
    assert attrs["certified"] == 1
    np.testing.assert_array_equal(attrs["auto_chains"], [32, 96])
    np.testing.assert_allclose(attrs["auto_gap_se"], [0.6 * np.sqrt(2), 0.1 * np.sqrt(2)])
    assert not caplog.records
    # Never measured precisely enough within the budget: not certified, and the warning says
    # why and what to pass.
    clock = _Clock(per_step=0.01)  # 10 s per 1000 steps of 32 chains
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = search_n_steps(clock.run([0.1], calls, bound_se=0.6), target_gap=0.5,
                                max_time=45.0, started=0.0)
    # 35 s were left after 10: three times the chains (30 s) fit, and were run.
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, 96)]
    assert result["evidence"].attrs["certified"] == 0
    assert "standard error 0.85" in caplog.text and "chains=192" in caplog.text
    # A single chain has no standard error: two make one; never more than MAX_CHAINS.
    calls = []
    result = search_n_steps(_fake_run([0.1], calls, bound_se=np.nan), target_gap=0.5,
                            max_time=None, started=time.perf_counter())
    assert calls[1] == (FIRST_N_STEPS, 64) and calls[-1] == (FIRST_N_STEPS, MAX_CHAINS)
    assert result["evidence"].attrs["certified"] == 0
    assert str(MAX_CHAINS) in result["evidence"].attrs["auto_stop"]


def test_a_noisy_gap_on_degenerate_weights_is_measured_on_a_longer_path():
    # The latent AR(2) with an explosive prior (geometry.py --blocks, seed 0): 0.42 nats at 350
    # steps with a standard error of 0.77, the forward weights' effective sample size 3.1 of 32
    # chains. Three times the chains left it at 3.4 (0.67); 700 steps at 3.5, 1400 certified.
    se = [0.57, 0.48, 0.29]
    calls = []
    result = search_n_steps(_fake_run([0.42, 0.36, 0.39], calls, bound_se=se,
                                      ess=[(3.1, 4.3), (3.5, 7.2), (10.3, 8.8)]),
                            target_gap=0.5, max_time=None, started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS, 4 * FIRST_N_STEPS]
    assert result["evidence"].attrs["certified"] == 1
    # The weaker direction decides: a quarter of the chains or more, and more chains pay.
    for ess in ((8.0, 30.0), (30.0, 8.0)):
        calls = []
        search_n_steps(_fake_run([0.42, 0.1], calls, bound_se=[0.57, 0.1], ess=[ess]),
                       target_gap=0.5, max_time=None, started=time.perf_counter())
        assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, 96)]
    # Where a longer path is out of reach, more chains are still tried.
    calls = []
    search_n_steps(_fake_run([0.42, 0.1], calls, bound_se=[0.57, 0.1], ess=[(3.1, 4.3)]),
                   target_gap=0.5, max_time=None, started=time.perf_counter(),
                   tuning=pmb.Tuning(max_n_steps=FIRST_N_STEPS))
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, 96)]


def test_reverse_chains_stuck_after_every_remedy_end_the_search(caplog):
    # A centred horseshoe at seed 1: theta* where no kernel moves; 608 nats at 600 steps with
    # a larger pilot in the other form, 598 at 4200. The same kernels run at any length.
    calls = []
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = search_n_steps(_fake_run([608.0], calls, stuck=True), target_gap=0.5,
                                max_time=None, started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", 256)]  # the larger pilot first
    attrs = result["evidence"].attrs
    assert attrs["certified"] == 0 and "did not move" in attrs["auto_stop"]
    assert "More steps will not move them" in caplog.text
    assert "after a larger pilot" in attrs["auto_stop"]
    # With the pilot fixed by the user (no larger one) and no other form: at once.
    calls = []
    result = search_n_steps(_fake_run([608.0], calls, stuck=True), target_gap=0.5,
                            max_time=None, started=time.perf_counter(), larger_pilot=False)
    assert calls == [FIRST_N_STEPS]
    assert "pilot" not in result["evidence"].attrs["auto_stop"]
    # Chains that move, or a remedy not yet tried (the other form), go on as before.
    calls = []
    search_n_steps(_fake_run([608.0, 608.0, 0.1], calls, stuck=False), target_gap=0.5,
                   max_time=None, started=time.perf_counter())
    assert len(calls) == 3
    forms = _TwoForms([608.0, 608.0, 0.1])
    forms.fake = _fake_run([608.0, 608.0, 608.0, 0.1], forms.calls, stuck=True)
    search_n_steps(forms.run, target_gap=0.5, max_time=None, started=time.perf_counter(),
                   reparameterize=forms.reparameterize)
    assert forms.swaps[0] is True and len(forms.calls) == 3  # as written, other form, pilot


def test_stops_when_the_next_run_would_exceed_the_budget(caplog):
    calls = []

    def slow(n_steps, fit_length=None, chains=None, pilot_chains=None):
        time.sleep(0.05)
        return _fake_run([5.0], calls)(n_steps)

    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        result = search_n_steps(slow, target_gap=0.5, max_time=0.12,
                                started=time.perf_counter(), larger_pilot=False)
    assert calls == [FIRST_N_STEPS]  # 0.05 s spent, the next ~0.1 s would pass 0.12 s
    attrs = result["evidence"].attrs
    assert attrs["certified"] == 0 and "max_time" in attrs["auto_stop"]
    assert "did not certify" in caplog.text and "max_time" in caplog.text



def test_compilation_does_not_count_against_the_budget():
    # A first attempt that compiles for 0.2 s (e.g. the model's other form) leaves a 0.1 s
    # budget untouched: what compiling costs depends on the machine's caches, and a cold call
    # must search as a warm one does. Counted, the search stopped after that attempt.
    calls = []
    fake = _fake_run([0.9, 0.3], calls)

    def compiling(n_steps, fit_length=None, chains=None, pilot_chains=None):
        if not calls:
            with timed("compile"):
                time.sleep(0.2)
        return fake(n_steps, chains=chains, pilot_chains=pilot_chains)

    with call_clock() as clock:
        result = search_n_steps(compiling, target_gap=0.5, max_time=0.1,
                                started=time.perf_counter(), larger_pilot=False)
    assert clock["compile"] >= 0.2
    assert calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS]
    assert result["evidence"].attrs["certified"] == 1

class _Clock:
    """The search's clock (``perf_counter``): a run of n steps takes ``per_step * n`` seconds."""

    def __init__(self, per_step):
        self.now, self.per_step = 0.0, per_step

    def perf_counter(self):
        return self.now

    def run(self, gaps, calls, pilot_time=0.0, bound_se=0.0):
        fake = _fake_run(gaps, calls, pilot_time=pilot_time, bound_se=bound_se)

        def run(n_steps, fit_length=None, chains=None, pilot_chains=None):
            if fit_length is not None:  # the first attempt: the pilot, then the timed kernels
                self.now += pilot_time
                n_steps = fit_length(n_steps, self.per_step * n_steps)
            if pilot_chains is not None:  # a fresh pilot, its time in proportion to its size
                self.now += pilot_time * pilot_chains / 64
            self.now += self.per_step * n_steps * (1 if chains is None else chains / 32)
            return fake(n_steps, chains=chains, pilot_chains=pilot_chains)
        return run


def test_a_gap_far_from_the_target_jumps_to_the_predicted_length_within_the_budget(monkeypatch):
    from pymc_bdmc.pipeline import auto_steps

    clock = _Clock(per_step=0.01)  # 10 s per 1000 steps
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    result = search_n_steps(clock.run([1.8, 0.2], calls), target_gap=0.5, max_time=100.0,
                            started=0.0)
    assert calls == [1000, 4000]  # 1.8 nats: 1/n decay predicts 3600 steps (36 s of 90 left)
    assert result["evidence"].attrs["certified"] == 1
    # Far from the target: the longest run the remaining 90 s allow, not a ladder of doublings.
    clock = _Clock(per_step=0.01)
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    result = search_n_steps(clock.run([30.0, 2.0], calls), target_gap=0.5, max_time=100.0,
                            started=0.0, larger_pilot=False)
    assert calls == [1000, 9000]
    assert result["evidence"].attrs["certified"] == 0
    assert "max_time" in result["evidence"].attrs["auto_stop"]


def test_the_first_attempt_runs_as_many_steps_as_fit_in_what_is_left_of_the_budget():
    assert first_length(1000, 40.0, 50.0) == 1000  # fits: unchanged
    assert first_length(1000, 40.0, None) == 1000  # no budget
    assert first_length(1000, 100.0, 70.0) == 700  # a multiple of MIN_FIRST_N_STEPS that fits
    assert first_length(1000, 100.0, 75.0) == 700
    assert first_length(1000, 1000.0, 5.0) == MIN_FIRST_N_STEPS  # never shorter than this
    assert first_length(1000, 10.0, -3.0) == MIN_FIRST_N_STEPS  # the budget already spent
    # Shortened anyway: no more than 100 steps per squared thermodynamic length of the path,
    # so that a later attempt still fits; where the default fits, it runs whatever the path.
    per_square = pmb.Tuning(steps_per_squared_length=100)  # 100 L^2 steps
    assert first_length(1000, 100.0, 70.0, path_length=0.6,
                        tuning=per_square) == MIN_FIRST_N_STEPS  # needs 36
    assert first_length(1000, 100.0, 70.0, path_length=2.0, tuning=per_square) == 400
    # needs 2500: what fits
    assert first_length(1000, 100.0, 70.0, path_length=5.0, tuning=per_square) == 700
    assert first_length(1000, 40.0, 50.0, path_length=0.6, tuning=per_square) == 1000
    # The default, 5 L^2: a path of length 5 needs 125 steps, in fifties 150; one 4.6 long
    # 106, so 150; one 4.4 long 97, so the minimum of 100.
    assert path_needs(1000, 5.0) == 150 and path_needs(1000, 20.0) == 1000
    assert path_needs(1000, 4.6) == 150 and path_needs(1000, 4.4) == MIN_FIRST_N_STEPS
    assert path_needs(1000, 5.0, pmb.Tuning(length_unit=100)) == 200
    assert path_needs(1000, 0.5) == MIN_FIRST_N_STEPS and path_needs(800, None) == 800


def test_a_first_attempt_too_long_for_the_budget_is_shortened(monkeypatch, caplog):
    from pymc_bdmc.pipeline import auto_steps

    clock = _Clock(per_step=0.1)  # 1000 steps would take 100 s
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
        result = search_n_steps(clock.run([0.9, 0.2], calls, pilot_time=10.0), target_gap=0.5,
                                max_time=80.0, started=0.0)
    assert calls == [700]  # 70 s left after the pilot; none left for a second attempt
    attrs = result["evidence"].attrs
    np.testing.assert_array_equal(attrs["auto_n_steps"], [700])
    assert attrs["certified"] == 0 and "max_time" in attrs["auto_stop"]
    assert "first attempt runs 700 steps" in caplog.text.lower()
    # 0.9 nats at 700 steps: 1/n decay predicts 1260 steps, at least double: 1400, at 0.1 s each.
    assert "about 1400 steps (about 140 s of sampling after the pilot)" in caplog.text
    assert "pass `n_steps=1400`" in caplog.text


def test_the_next_length_is_predicted_without_the_first_attempts_pilot(monkeypatch):
    from pymc_bdmc.pipeline import auto_steps

    # 1000 steps in 10 s after a 30 s pilot; 60 s left. Counting the pilot as sampling time
    # (40 s per 1000 steps) would leave no room for the 4000 steps the gap asks for.
    clock = _Clock(per_step=0.01)
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    result = search_n_steps(clock.run([1.8, 0.2], calls, pilot_time=30.0), target_gap=0.5,
                            max_time=100.0, started=0.0)
    assert calls == [1000, 4000]
    assert result["evidence"].attrs["certified"] == 1


def test_without_a_budget_the_length_is_still_bounded():
    calls = []
    result = search_n_steps(_fake_run([5.0], calls), target_gap=0.5, max_time=None,
                            started=time.perf_counter(), larger_pilot=False)
    assert calls[-1] <= MAX_N_STEPS < 2 * calls[-1]
    assert result["evidence"].attrs["certified"] == 0


def test_a_gap_far_beyond_the_target_is_run_again_on_a_larger_pilot(caplog):
    # Measured: a centred horseshoe's 104-particle pilot missed the posterior's mode and left a
    # gap of 172227 nats at 1000 steps; a fresh 416-particle pilot certified -0.08.
    calls = []
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
        result = search_n_steps(_fake_run([172227.0, -0.08], calls), target_gap=0.5,
                                max_time=None, started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", 256)]
    attrs = result["evidence"].attrs
    assert attrs["certified"] == 1
    np.testing.assert_array_equal(attrs["auto_pilot_chains"], [64, 256])
    assert "pilots afresh with 256 particles" in caplog.text
    # 8 times the target is not far enough, and neither is a gap that is not finite when the
    # user fixed the pilot.
    calls = []
    search_n_steps(_fake_run([4.0, 0.1], calls), target_gap=0.5, max_time=None,
                   started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, 8 * FIRST_N_STEPS]
    calls = []
    search_n_steps(_fake_run([np.inf, 0.1], calls), target_gap=0.5, max_time=None,
                   started=time.perf_counter(), larger_pilot=False)
    assert calls[1] == 64 * FIRST_N_STEPS  # steps instead (inf gap: the longest allowed)


class _TwoForms:
    """A fake run on a model as written and its other parameterisation (a flag in the result)."""

    def __init__(self, gaps, pilot_time=0.0):
        self.calls, self.swaps, self.other, self.fitted = [], [], False, []
        self.fake = _fake_run(gaps, self.calls, pilot_time=pilot_time)

    def run(self, n_steps, fit_length=None, chains=None, pilot_chains=None):
        self.fitted.append(fit_length is not None)
        if fit_length is not None:
            n_steps = fit_length(n_steps, 1000.0)  # predicted at 1000 s for the full length
        tree = self.fake(n_steps, None, chains, pilot_chains)
        if self.other:
            tree["evidence"].attrs["reparameterized"] = "z as z_centred"
        return tree

    def reparameterize(self, other):
        self.swaps.append(other)
        self.other = other
        return True


def test_an_uncertified_attempt_is_measured_again_in_the_other_parameterisation(caplog):
    # Measured: a non-centred 40-coefficient horseshoe, seed 0: hundreds of nats as written;
    # centred, the same simulated data certified (docs/performance.md).
    forms = _TwoForms([471.6, 0.3])
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
        result = search_n_steps(forms.run, target_gap=0.5, max_time=None,
                                started=time.perf_counter(), reparameterize=forms.reparameterize)
    assert forms.calls == [FIRST_N_STEPS, FIRST_N_STEPS] and forms.swaps == [True]
    assert forms.fitted == [True, True]  # the other form's fresh pilot fits its own length
    attrs = result["evidence"].attrs
    assert attrs["certified"] == 1 and attrs["reparameterized"] == "z as z_centred"
    np.testing.assert_array_equal(attrs["auto_reparameterized"], [0, 1])
    assert "other parameterisation" in caplog.text
    # The form with the smaller gap goes on: here the model as written, on its own pilot, at
    # the length its gap predicts (2.0 nats at 1000 steps: 4000).
    forms = _TwoForms([2.0, 5.0, 0.3])
    result = search_n_steps(forms.run, target_gap=0.5, max_time=None,
                            started=time.perf_counter(), reparameterize=forms.reparameterize)
    assert forms.swaps == [True, False]
    assert forms.calls == [FIRST_N_STEPS, FIRST_N_STEPS, 4 * FIRST_N_STEPS]
    np.testing.assert_array_equal(result["evidence"].attrs["auto_reparameterized"], [0, 1, 0])
    assert "reparameterized" not in result["evidence"].attrs
    # An uncertified search reports the form it went on with.
    forms = _TwoForms([2.0, 5.0, 2.0])
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"):
        result = search_n_steps(forms.run, target_gap=0.5, max_time=None,
                                started=time.perf_counter(), reparameterize=forms.reparameterize)
    assert "1000: 2.00, 1000 (other form): 5.00, 4000 (as written): 2.00" in caplog.text
    # Once in the other form, a gap still far off gets the larger pilot; a model with no
    # other form (reparameterize returns False) goes straight to it.
    forms = _TwoForms([471.6, 300.0, 0.3])
    search_n_steps(forms.run, target_gap=0.5, max_time=None, started=time.perf_counter(),
                   reparameterize=forms.reparameterize)
    assert forms.calls == [FIRST_N_STEPS, FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", 256)]
    calls = []
    search_n_steps(_fake_run([471.6, 0.3], calls), target_gap=0.5, max_time=None,
                   started=time.perf_counter(), reparameterize=lambda other: False)
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", 256)]


def test_a_first_gap_near_the_target_is_lengthened_before_the_other_form_is_tried(
        monkeypatch):
    # Measured: a random walk with drift, seed 0, -0.59 nats at 1000 steps as written and +0.14
    # at 2000; the other form's attempt (4.95) had left no time for them (docs/performance.md).
    forms = _TwoForms([-0.59, 0.14])
    search_n_steps(forms.run, target_gap=0.5, max_time=None, started=time.perf_counter(),
                   reparameterize=forms.reparameterize)
    assert forms.swaps == [] and forms.calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS]
    # Where lengthening does not certify either, the other form runs at the longer length.
    forms = _TwoForms([-0.59, 0.9, 0.1])
    result = search_n_steps(forms.run, target_gap=0.5, max_time=None,
                            started=time.perf_counter(), reparameterize=forms.reparameterize)
    assert forms.swaps == [True]
    assert forms.calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS, 2 * FIRST_N_STEPS]
    np.testing.assert_array_equal(result["evidence"].attrs["auto_reparameterized"], [0, 0, 1])
    # Just past SWAP_GAP times the target, the other form comes first ...
    forms = _TwoForms([SWAP_GAP * 0.5 + 0.01, 0.1])
    search_n_steps(forms.run, target_gap=0.5, max_time=None, started=time.perf_counter(),
                   reparameterize=forms.reparameterize)
    assert forms.swaps == [True] and forms.calls == [FIRST_N_STEPS, FIRST_N_STEPS]
    # ... and so it does near the target where no longer attempt is possible.
    forms = _TwoForms([-0.59, 0.1])
    search_n_steps(forms.run, target_gap=0.5, max_time=None, started=time.perf_counter(),
                   reparameterize=forms.reparameterize,
                   tuning=pmb.Tuning(max_n_steps=FIRST_N_STEPS))
    assert forms.swaps == [True] and forms.calls == [FIRST_N_STEPS, FIRST_N_STEPS]


def test_the_other_form_is_tried_where_its_pilot_fits_and_shortened_to_the_budget(caplog):
    forms = _TwoForms([471.6, 0.3], pilot_time=1.0)
    result = search_n_steps(forms.run, target_gap=0.5, max_time=100.0,
                            started=time.perf_counter(), reparameterize=forms.reparameterize)
    assert forms.swaps == [True]
    np.testing.assert_array_equal(result["evidence"].attrs["auto_n_steps"],
                                  [MIN_FIRST_N_STEPS, MIN_FIRST_N_STEPS])
    forms = _TwoForms([471.6, 300.0], pilot_time=1.0)
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        search_n_steps(forms.run, target_gap=0.5, max_time=0.5, started=time.perf_counter(),
                       reparameterize=forms.reparameterize)
    assert forms.swaps == []  # no time for its pilot, and the warning says what to do
    assert "other parameterisation was not tried" in caplog.text
    assert "`reparameterize=True`" in caplog.text


def test_the_search_makes_one_larger_pilot_at_most(caplog):
    calls = []
    result = search_n_steps(_fake_run([900.0, 8.0, 0.2], calls), target_gap=0.5, max_time=None,
                            started=time.perf_counter())
    # 8 nats after the larger pilot: steps now, as 1/n decay predicts (16000), on that pilot.
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", 256), 16 * FIRST_N_STEPS]
    np.testing.assert_array_equal(result["evidence"].attrs["auto_pilot_chains"], [64, 256, 256])
    # An uncertified search's warning says which attempt ran on the larger pilot.
    with caplog.at_level(logging.WARNING, logger="pymc_bdmc"):
        search_n_steps(_fake_run([900.0, 8.0], []), target_gap=0.5, max_time=None,
                       started=time.perf_counter())
    assert "(here: 1000: 900.00, 1000 (pilot 256): 8.00, 16000: 8.00" in caplog.text
    # Four times the pilot, but never more than MAX_PILOT_CHAINS particles.
    calls = []
    search_n_steps(_fake_run([900.0, 0.2], calls, pilot=400), target_gap=0.5, max_time=None,
                   started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", MAX_PILOT_CHAINS)]
    calls = []
    search_n_steps(_fake_run([900.0, 0.2], calls, pilot=MAX_PILOT_CHAINS), target_gap=0.5,
                   max_time=None, started=time.perf_counter())
    assert calls == [FIRST_N_STEPS, 64 * FIRST_N_STEPS]


def test_a_larger_pilot_runs_only_where_it_fits_in_the_budget(monkeypatch):
    from pymc_bdmc.pipeline import auto_steps

    # A 10 s pilot and 10 s per 1000 steps: 20 s spent of 45, and four times the pilot plus
    # the same run (50 s) would not fit, so the remaining 25 s go to 2000 steps.
    clock = _Clock(per_step=0.01)
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    search_n_steps(clock.run([20.0, 0.2], calls, pilot_time=10.0), target_gap=0.5,
                   max_time=45.0, started=0.0)
    assert calls == [FIRST_N_STEPS, 2 * FIRST_N_STEPS]
    # With 80 s, it does.
    clock = _Clock(per_step=0.01)
    monkeypatch.setattr(auto_steps, "budget_clock", clock.perf_counter)
    calls = []
    search_n_steps(clock.run([20.0, 0.2], calls, pilot_time=10.0), target_gap=0.5,
                   max_time=80.0, started=0.0)
    assert calls == [FIRST_N_STEPS, (FIRST_N_STEPS, "pilot", 256)]


def test_an_interrupt_returns_the_last_finished_run():
    calls = []
    result = search_n_steps(_fake_run([3.0, 1.0], calls, interrupt_at=2), target_gap=0.5,
                            max_time=None, started=time.perf_counter())
    assert float(result["evidence"]["gap"]) == 3.0
    assert result["evidence"].attrs["auto_stop"] == "interrupted"
    with pytest.raises(KeyboardInterrupt):  # nothing finished yet: nothing to return
        search_n_steps(_fake_run([3.0], [], interrupt_at=1), target_gap=0.5, max_time=None,
                       started=time.perf_counter())


def _search_settings(kernels, monkeypatch):
    """``sample_bdmc`` keywords for the built-in kernels or PyMC step methods (in a model)."""
    if kernels == "built-in":
        return {}
    # Python-loop steps: few chains, and a first length at which 8 chains measure the gap to a
    # standard error within the target (at 200 steps it was 0.73 nats, pymc_bdmc.estimators).
    return dict(chains=8, step=pm.Metropolis(), tuning=pmb.Tuning(first_n_steps=1000))


@pytest.mark.parametrize("kernels", ["built-in", "step methods"])
def test_default_sample_bdmc_certifies_an_easy_model_at_the_first_length(kernels, monkeypatch):
    am = known_evidence.linear_regression(n_obs=20, n_coef=2, seed=5)
    with am.model:  # no budget: on a loaded machine 1000 Python-loop steps may not fit 60 s
        result = pmb.sample_bdmc(random_seed=3, progressbar=False, max_time=None,
                                 **_search_settings(kernels, monkeypatch))
    attrs = result["evidence"].attrs
    assert (attrs["kernel"] == "pymc_step_methods") == (kernels == "step methods")
    # The built-in kernels' first attempt is as long as the pilot's path length says it needs
    # (a 2-coefficient regression: the shortest, 100 steps); step methods run 1000.
    first = 100 if kernels == "built-in" else FIRST_N_STEPS
    np.testing.assert_array_equal(attrs["auto_n_steps"], [first])
    assert attrs["certified"] == 1 and attrs["n_steps"] == first
    truth = am.log_evidence_of(result)
    assert float(result["evidence"]["lower"]) - 0.5 <= truth <= float(
        result["evidence"]["upper"]) + 0.5


@pytest.mark.parametrize("kernels", ["built-in", "step methods"])
def test_a_spent_budget_still_runs_a_shortened_first_attempt_that_brackets_the_truth(
        kernels, monkeypatch):
    am = known_evidence.linear_regression(n_obs=20, n_coef=2, seed=5)
    with am.model:  # simulating the data and the pilot spend a 1 ms budget
        result = pmb.sample_bdmc(max_time=1e-3, random_seed=3, progressbar=False,
                                 **_search_settings(kernels, monkeypatch))
    attrs = result["evidence"].attrs
    assert (attrs["kernel"] == "pymc_step_methods") == (kernels == "step methods")
    np.testing.assert_array_equal(attrs["auto_n_steps"], [MIN_FIRST_N_STEPS])
    assert attrs["n_steps"] == MIN_FIRST_N_STEPS
    assert result["annealing"].sizes["step"] == MIN_FIRST_N_STEPS + 1
    truth = am.log_evidence_of(result)
    assert float(result["evidence"]["lower"]) - 0.5 <= truth <= float(
        result["evidence"]["upper"]) + 0.5


def test_an_explicit_n_steps_runs_once_without_a_search():
    with pm.Model():
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1.0, observed=[0.2, -0.1])
        result = pmb.sample_bdmc(n_steps=50, chains=8, random_seed=1, progressbar=False)
    assert "auto_n_steps" not in result["evidence"].attrs


@pytest.mark.parametrize("kwargs, message", [(dict(target_gap=0.0), "target_gap"),
                                             (dict(max_time=-1.0), "max_time")])
def test_bad_search_settings_are_refused(kwargs, message):
    with pm.Model():
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1.0, observed=[0.2, -0.1])
        with pytest.raises(BDMCInputError, match=message):
            pmb.sample_bdmc(progressbar=False, **kwargs)


def _count_calls(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("kernels", ["built-in", "step methods"])
def test_the_search_pilots_once_and_refreezes_the_plan_for_longer_attempts(monkeypatch, kernels):
    if kernels == "built-in":
        calls = _count_calls(monkeypatch, vectorized_module, "tune")
        settings = dict(chains=8, base="prior")
    else:
        calls = _count_calls(monkeypatch, step_method_module, "run_step_pilot")
        settings = dict(chains=4)
    settings["tuning"] = pmb.Tuning(first_n_steps=20, max_n_steps=80)
    am = known_evidence.linear_regression(n_obs=20, n_coef=2, seed=5)
    with am.model:
        if kernels == "step methods":
            settings["step"] = pm.Metropolis()
        # A gap beyond 8e-6 nats would otherwise ask for a larger pilot (tested below).
        result = pmb.sample_bdmc(target_gap=1e-6, max_time=None, random_seed=3,
                                 pilot_chains=16, progressbar=False, **settings)
    attrs = result["evidence"].attrs
    assert (attrs["kernel"] == "pymc_step_methods") == (kernels == "step methods")
    tried = attrs["auto_n_steps"]
    assert list(tried) == [20, 80] and len(calls) == 1  # a jump to the longest allowed
    assert attrs["certified"] == 0 and attrs["n_steps"] == 80
    # The last attempt ran the first attempt's pilot on its own number of temperatures.
    assert result["annealing"].sizes["step"] == tried[-1] + 1
    assert np.isfinite(attrs["pilot_log_z"]) and np.isfinite(attrs["auto_gaps"]).all()


@pytest.mark.parametrize("kernels", ["built-in", "step methods"])
def test_a_noisy_gap_is_measured_again_with_more_chains_on_the_same_pilot(kernels, monkeypatch):
    from pymc_bdmc.pipeline import auto_steps

    pilots = (_count_calls(monkeypatch, vectorized_module, "tune") if kernels == "built-in"
              else _count_calls(monkeypatch, step_method_module, "run_step_pilot"))
    verdicts = iter([False, True])  # the first attempt's gap is taken as too noisy
    monkeypatch.setattr(auto_steps, "certifies", lambda *args: next(verdicts))
    am = known_evidence.linear_regression(n_obs=20, n_coef=2, seed=5)
    with am.model:
        settings = {**_search_settings(kernels, monkeypatch), "chains": 8,
                    "tuning": pmb.Tuning(first_n_steps=200)}
        result = pmb.sample_bdmc(random_seed=3, progressbar=False, max_time=None, **settings)
    attrs = result["evidence"].attrs
    first = 100 if kernels == "built-in" else 200  # as the path's length needs (above)
    np.testing.assert_array_equal(attrs["auto_n_steps"], [first, first])
    assert abs(attrs["auto_gaps"][0]) <= 0.5  # within the target: more chains, not more steps
    # As many times the chains as (standard error / target)^2, at least twice as many.
    more = 8 * max(2, int(np.ceil((attrs["auto_gap_se"][0] / 0.5) ** 2)))
    np.testing.assert_array_equal(attrs["auto_chains"], [8, more])
    assert attrs["chains"] == more and result["evidence"].sizes["ais_chain"] == more
    assert len(pilots) == 1 and attrs["certified"] == 1


@pytest.mark.parametrize("kernels", ["built-in", "step methods"])
def test_a_gap_far_beyond_the_target_pilots_afresh_with_four_times_the_particles(kernels,
                                                                                monkeypatch):
    from pymc_bdmc.pipeline import auto_steps

    pilot_sizes = []
    module, name = ((vectorized_module, "tune") if kernels == "built-in"
                    else (step_method_module, "run_step_pilot"))
    original = getattr(module, name)

    def recording(*args, **kwargs):
        pilot_sizes.append(len(args[3]))  # x_pilot, in both signatures
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, recording)
    # A target of 1e-6 nats puts any gap far beyond it; the second attempt is taken as certified.
    verdicts = iter([False, True])
    monkeypatch.setattr(auto_steps, "certifies", lambda *args: next(verdicts))
    am = known_evidence.linear_regression(n_obs=20, n_coef=2, seed=5)
    with am.model:
        settings = {**_search_settings(kernels, monkeypatch), "chains": 8,
                    "tuning": pmb.Tuning(first_n_steps=200)}
        result = pmb.sample_bdmc(random_seed=3, progressbar=False, max_time=None,
                                 target_gap=1e-6, **settings)
    attrs = result["evidence"].attrs
    first = 64 if kernels == "built-in" else step_method_module.DEFAULT_STEP_PILOT_CHAINS
    # The same length again, on a second pilot of fresh prior draws, four times as large.
    assert pilot_sizes == [first, 4 * first]
    np.testing.assert_array_equal(attrs["auto_pilot_chains"], [first, 4 * first])
    first_length = 100 if kernels == "built-in" else 200  # as the path needs (above)
    np.testing.assert_array_equal(attrs["auto_n_steps"], [first_length, first_length])
    assert attrs["pilot_chains"] == 4 * first and attrs["certified"] == 1
    # Its bounds are those of a plan tuned on the larger pilot: they sandwich the simulated
    # data's exact evidence.
    ev = result["evidence"]
    exact = am.log_evidence_of(result)
    assert float(ev["lower"]) - 3 * float(ev["lower_se"]) <= exact
    assert exact <= float(ev["upper"]) + 3 * float(ev["upper_se"])


def test_a_first_attempt_short_by_its_path_length_is_lengthened_before_other_remedies():
    # The path's length (1.0) asks for 100 steps. A 3-nat gap there is what 1/n decay
    # predicts 600 steps close (within the old first length, 1000): lengthen, not swap. A
    # 30-nat gap at 100 steps is 3 nats at 1000: not far enough for a larger pilot.
    def run_with_path(forms, path_length=1.0):
        def run(n_steps, fit_length=None, chains=None, pilot_chains=None):
            if fit_length is not None:
                n_steps = fit_length(n_steps, 1.0, path_length)
            return forms.run(n_steps, None, chains, pilot_chains)
        return run

    forms = _TwoForms([3.0, 0.1])
    search_n_steps(run_with_path(forms), target_gap=0.5, max_time=None,
                   started=time.perf_counter(), reparameterize=forms.reparameterize)
    assert forms.swaps == [] and forms.calls == [100, 600]
    forms = _TwoForms([30.0, 0.1])
    search_n_steps(run_with_path(forms), target_gap=0.5, max_time=None,
                   started=time.perf_counter())
    assert forms.calls == [100, 6000]  # steps, as 1/n decay predicts; no larger pilot
