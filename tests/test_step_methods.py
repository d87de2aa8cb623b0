"""PyMC step methods as AIS transitions: discrete latents, retargeting, reversal, parallelism."""

import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pymc as pm
import pytensor.compile.maker
import pytest
import xarray as xr
from count_models import binomial_count_evidence, binomial_count_model
from pymc.step_methods import CompoundStep

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.kernels.pymc_steps import StepSweep, _reversed, resolve_step_methods
from pymc_bdmc.model.cache import clear_cache
from pymc_bdmc.model.density import FlatLayout
from pymc_bdmc.model.tempered import TemperedClone

# Markov slack: P(lower > log Z + b) < e^-b. With b = log(1000) a correct implementation fails
# each side with probability < 0.1%; a kernel that does not leave its target invariant, or a
# reverse chain that is not the forward chain reversed, is off by a lot more on these models.
RIGOROUS_SLACK = np.log(1000.0)
# Accuracy of each bound at the settings below: over 5-8 seeds per model (scratch runs of these
# settings, see benchmarks/step_methods.py) every bound was within 0.6 nats of the truth.
BOUND_TOL = 1.0


def _check_sandwich(result, truth):
    ev = result["evidence"]
    lower, upper = float(ev.lower), float(ev.upper)
    assert lower - RIGOROUS_SLACK <= truth <= upper + RIGOROUS_SLACK, (lower, truth, upper)
    assert abs(lower - truth) < BOUND_TOL, (lower, truth)
    assert abs(upper - truth) < BOUND_TOL, (upper, truth)


# -- discrete latent variables against enumerated evidence -------------------------------------
@pytest.fixture(scope="module")
def mixture():
    # 3 components, 6 points: 729 assignments are enumerated for the exact evidence.
    return known_evidence.categorical_mixture(n_obs=6, n_components=3, seed=1)


@pytest.fixture(scope="module")
def mixture_nuts_gibbs(mixture):
    m = mixture.model
    with m:
        step = [pm.NUTS([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])]
        return pmb.sample_bdmc(n_steps=150, chains=16, step=step, random_seed=11,
                               progressbar=False)


def test_mixture_sandwich_nuts_gibbs(mixture, mixture_nuts_gibbs):
    _check_sandwich(mixture_nuts_gibbs, mixture.log_evidence_of(mixture_nuts_gibbs))


@pytest.mark.slow
def test_mixture_sandwich_metropolis_gibbs(mixture):
    # In --runslow only. By default the same mixture's sandwich with user step methods and
    # CategoricalGibbsMetropolis is test_mixture_sandwich_nuts_gibbs, Metropolis's sandwich is
    # test_continuous_kernels_agree_with_closed_form[metropolis-300], and the Metropolis +
    # CategoricalGibbsMetropolis sweep runs (forward, reverse, on workers) in the tests of
    # _mixture_run below.
    m = mixture.model
    with m:
        step = [pm.Metropolis([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])]
        result = pmb.sample_bdmc(n_steps=150, chains=16, step=step, random_seed=12,
                                 progressbar=False)
    assert "Metropolis[mu] -> CategoricalGibbsMetropolis[z]" in result["evidence"].attrs[
        "step_methods"]
    _check_sandwich(result, mixture.log_evidence_of(result))


@pytest.mark.parametrize("explicit", [False, True], ids=["automatic", "step="])
def test_binary_attribute_sandwich(explicit):
    am = known_evidence.binary_attribute(n_obs=8, seed=1)
    m = am.model
    with m:
        # A fixed site order is not reversible: the reverse run must visit the sites backwards.
        step = [pm.BinaryGibbsMetropolis([m["z"]], order=list(range(8))),
                pm.Slice([m["effect"]])] if explicit else None
        result = pmb.sample_bdmc(n_steps=100, chains=16, step=step, random_seed=5,
                                 progressbar=False)
    if explicit:
        methods = result["step_methods"]
        assert list(methods["method"].values) == ["BinaryGibbsMetropolis", "Slice", "NUTS"]
    else:  # without step methods, z goes to the vectorized Gibbs kernel (tests/test_gibbs.py)
        assert result["evidence"].attrs["kernel"] == "hmc+gibbs"
    _check_sandwich(result, am.log_evidence_of(result))


def test_discrete_latents_are_part_of_the_exact_sample(mixture_nuts_gibbs):
    # theta* includes the simulated assignments, as integers, and the data were drawn from them.
    z = mixture_nuts_gibbs["generating_values"]["z"].values
    assert np.issubdtype(z.dtype, np.integer) and z.shape == (6,)
    assert set(np.unique(z)) <= {0, 1, 2}
    posterior_z = mixture_nuts_gibbs["posterior"]["z"].values
    assert np.issubdtype(posterior_z.dtype, np.integer)


def test_flat_layout_keeps_discrete_values_exact():
    layout = FlatLayout(("a", "z"), ((2,), (3,)), (slice(0, 2), slice(2, 5)),
                        ("float64", "int64"))
    point = layout.to_point(np.array([0.5, -1.25, 2.0000000001, 0.0, 1.0]))
    assert point["z"].dtype == np.int64 and point["z"].tolist() == [2, 0, 1]
    np.testing.assert_array_equal(point["a"], [0.5, -1.25])
    np.testing.assert_array_equal(layout.ravel(point), [0.5, -1.25, 2.0, 0.0, 1.0])


# -- continuous model: every kernel agrees with the closed form --------------------------------
@pytest.fixture(scope="module")
def regression():
    return known_evidence.normal_inverse_gamma_regression(n_obs=15, n_coef=2, seed=4)


# Metropolis moves one coordinate at a time and mixes slower: it gets more temperatures.
@pytest.mark.parametrize("kernel, n_steps", [("hmc", 100), ("nuts", 100),
                                             ("metropolis", 300), ("slice", 100)])
def test_continuous_kernels_agree_with_closed_form(regression, kernel, n_steps):
    with regression.model:
        step = {"hmc": None, "nuts": pm.NUTS, "metropolis": pm.Metropolis,
                "slice": pm.Slice}[kernel]
        result = pmb.sample_bdmc(n_steps=n_steps, chains=16, random_seed=21, progressbar=False,
                                 step=None if step is None else step())
    assert result["evidence"].attrs["kernel"] == (
        "hmc" if kernel == "hmc" else "pymc_step_methods")
    _check_sandwich(result, regression.log_evidence_of(result))


# -- reversal ----------------------------------------------------------------------------------
RECORD: list[tuple[str, float]] = []


class RecordingMetropolis(pm.Metropolis):
    """A user subclass that records which variable it updates, at which temperature."""

    def astep(self, q0):
        beta = next(v for v in self.delta_logp.get_shared() if v.name == "bdmc_beta")
        RECORD.append((self.vars[0].name, float(beta.get_value())))
        return super().astep(q0)


def _two_variable_model():
    with pm.Model() as model:
        a = pm.Normal("a", 0, 1)
        b = pm.Normal("b", 0, 1)
        pm.Normal("y", a + b, 1, observed=[0.4, 0.1])
    return model


def test_compound_steps_run_in_reverse_order_in_reverse_runs():
    model = _two_variable_model()
    with model:
        step = CompoundStep([RecordingMetropolis([model["a"]]),
                                RecordingMetropolis([model["b"]])])
    RECORD.clear()
    with model:
        result = pmb.sample_bdmc(schedule="linear", n_steps=4, chains=2, step=step,
                                 random_seed=1, progressbar=False)
    betas = [0.25, 0.5, 0.75]
    forward = [(v, b) for b in betas for v in ("a", "b")]
    spread = [("b", 1.0), ("a", 1.0)] * 10  # reverse chains first spread out at beta = 1
    reverse = spread + [(v, b) for b in betas[::-1] for v in ("b", "a")]
    expected = forward * 2 + reverse * 2  # the pilot's own sweeps come before
    assert RECORD[-len(expected):] == expected
    assert result["step_methods"].attrs["reverse_sweep"] == (
        "RecordingMetropolis[b] -> RecordingMetropolis[a]")


def _sweep_for(model, step):
    layout = FlatLayout.from_point([v.name for v in model.value_vars], model.initial_point())
    clone = TemperedClone(model, layout)
    return StepSweep(resolve_step_methods(model, step), clone), layout


def test_fixed_order_gibbs_and_slice_are_reversed_inside_the_step():
    with pm.Model() as model:
        x = pm.Normal("x", 0, 1, shape=3)
        z = pm.Bernoulli("z", 0.5, shape=4)
        pm.Normal("y", x.sum() + z.sum(), 1, observed=[1.0])
        step = [pm.Slice([x]), pm.BinaryGibbsMetropolis([z], order=[2, 0, 3, 1])]
    sweep, _ = _sweep_for(model, step)
    slice_step, gibbs = sweep.leaves
    assert sweep.reversals == ["reverse_coordinates", "reverse_order"]
    with _reversed(gibbs, "reverse_order"):
        assert gibbs.order == [1, 3, 0, 2]
    assert gibbs.order == [2, 0, 3, 1]

    # Slice: the first coordinate whose stepping-out is evaluated is the one updated first.
    first_moved = {}
    for direction in ("forward", "reverse"):
        calls = []
        original = slice_step.logp
        slice_step.logp = lambda q, _f=original: (calls.append(np.array(q)), _f(q))[1]
        try:
            sweep.clone.set_beta(1.0)
            point = {"x": np.array([0.1, 0.2, 0.3]), "z": np.array([0, 1, 0, 1])}
            if direction == "forward":
                slice_step.step(point)
            else:
                with _reversed(slice_step, "reverse_coordinates"):
                    slice_step.step(point)
        finally:
            slice_step.logp = original
        moved = [np.flatnonzero(c != calls[0]) for c in calls[1:]]
        first_moved[direction] = int(next(m[0] for m in moved if m.size))
    assert first_moved == {"forward": 0, "reverse": 2}


# -- compilation, parallelism, validation, reporting ------------------------------------------
def test_no_recompilation_per_temperature(monkeypatch):
    model = _two_variable_model()
    original = pytensor.compile.maker.FunctionMaker.__init__
    counts = []
    for n_steps in (5, 40):
        calls = []

        def counting(self, *args, **kwargs):
            calls.append(1)
            return original(self, *args, **kwargs)

        monkeypatch.setattr(pytensor.compile.maker.FunctionMaker, "__init__", counting)
        clear_cache()  # each call compiles the model's densities afresh, as the first does
        with model:
            pmb.sample_bdmc(n_steps=n_steps, chains=2, step=pm.NUTS(), random_seed=3,
                            progressbar=False)
        monkeypatch.undo()
        counts.append(len(calls))
    assert counts[0] == counts[1]


def _mixture_run(mixture, **where):
    m = mixture.model
    with m:
        step = [pm.Metropolis([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])]
        return pmb.sample_bdmc(n_steps=10, chains=4, step=step, random_seed=8, progressbar=False,
                               **where)


def _assert_same_run(a, b):
    # An elementwise model (no BLAS): chains give the same bits wherever they run.
    for group in ("evidence", "posterior", "annealing", "generating_values"):
        xr.testing.assert_equal(a[group].to_dataset().drop_attrs(),
                                b[group].to_dataset().drop_attrs())


@pytest.fixture(scope="module")
def mixture_here(mixture):
    return _mixture_run(mixture, cores=1)


def test_same_seed_gives_identical_results_whatever_the_workers(mixture, mixture_here):
    # Each chain carries its own stream to whichever worker runs it: a process executor (no
    # pool initializer: the recipe travels with every chain) or threads (each thread builds its
    # own step methods, one compilation at a time). Local worker processes: the next test.
    reference = mixture_here
    assert reference["evidence"].attrs["workers"] == "this process"
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("forkserver")) as pool:
        processes = _mixture_run(mixture, executor=pool)
    with ThreadPoolExecutor(2) as pool:
        threads = _mixture_run(mixture, executor=pool)
    assert threads["evidence"].attrs["workers"] == "ThreadPoolExecutor (2 workers)"
    for other in (processes, threads):  # the evidence group holds both runs' log weights
        _assert_same_run(reference, other)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="all cores of a 1-core machine is one")
def test_runs_predicted_long_use_all_cores_with_the_same_results(mixture, mixture_here,
                                                                  monkeypatch, caplog):
    default = _mixture_run(mixture)  # a short run: predicted far below the threshold
    assert default["evidence"].attrs["workers"] == "this process"
    # Every run now counts as long: the pilot's time per sweep predicts more than 0 s.
    with caplog.at_level("DEBUG", logger="pymc_bdmc"):
        long = _mixture_run(mixture, tuning=pmb.Tuning(step_auto_parallel_seconds=0.0))
    assert "using all cores" in caplog.text
    assert long["evidence"].attrs["workers"] == f"{long['evidence'].attrs['cores']} local processes"
    assert long["evidence"].attrs["cores"] >= 2
    _assert_same_run(mixture_here, long)

def test_step_method_chains_run_on_a_local_dask_cluster(mixture, mixture_here, dask_client):
    on_dask = _mixture_run(mixture, executor=dask_client)
    assert on_dask["evidence"].attrs["workers"].startswith("Dask cluster (2")
    _assert_same_run(mixture_here, on_dask)


def test_step_method_chains_stay_here_when_workers_cannot_start(mixture, mixture_here, caplog):
    pool = ThreadPoolExecutor(2)
    pool.shutdown()
    with caplog.at_level("WARNING", logger="pymc_bdmc"):
        fallback = _mixture_run(mixture, executor=pool)
    assert "running the chains in this process" in caplog.text
    _assert_same_run(mixture_here, fallback)


def test_interrupted_step_method_runs_cancel_the_chains_not_yet_run():
    # Local pools outlive a call: an interrupt (here, from the progress callback) must not
    # leave the remaining chains queued on them.
    from pymc_bdmc.parallel.executors import Workers
    from pymc_bdmc.step_chains import ChainTask, run_chains

    class Future:
        cancelled = False

        def result(self):
            return "run"

        def cancel(self):
            self.cancelled = True

    futures = []

    def submit(fn, *args):
        futures.append(Future())
        return futures[-1]

    def interrupt(task):
        raise KeyboardInterrupt

    tasks = [ChainTask("forward", np.zeros(1), np.random.default_rng(i)) for i in range(3)]
    with pytest.raises(KeyboardInterrupt):
        run_chains(None, None, tasks, workers=Workers(2, submit, "fake"), on_chain=interrupt)
    assert len(futures) == 3 and all(f.cancelled for f in futures)


def test_step_method_over_foreign_variable_is_refused():
    model = _two_variable_model()
    with pm.Model():
        other = pm.Normal("a", 0, 1)
        foreign = pm.Metropolis([other])
    with model, pytest.raises(pmb.BDMCInputError, match="not value variables of this model"):
        pmb.sample_bdmc(n_steps=5, chains=2, step=foreign, progressbar=False)


@pytest.mark.parametrize(
    "make_step, match",
    [
        (lambda m: pm.DEMetropolisZ([m["a"]]), "own history"),
        (lambda m: [pm.Metropolis([m["a"]]), pm.Slice([m["a"]])], "two step methods"),
        (lambda m: pm.Metropolis, "not an instance"),
        (lambda m: pm.NUTS([m["a"]], logp_dlogp_func=m.logp_dlogp_function(
            [m["a"]], ravel_inputs=True)), "logp_dlogp_func"),
    ],
    ids=["DEMetropolisZ", "duplicate", "class", "fixed-target"],
)
def test_invalid_step_methods_are_refused_before_sampling(make_step, match):
    model = _two_variable_model()
    with model:
        step = make_step(model)
        with pytest.raises(pmb.BDMCInputError, match=match):
            pmb.sample_ais(n_steps=5, chains=2, step=step, progressbar=False)


def test_proportional_categorical_gibbs_is_refused(mixture):
    m = mixture.model
    with m:
        step = pm.CategoricalGibbsMetropolis([m["z"]], proposal="proportional")
        with pytest.raises(pmb.BDMCInputError, match="proportional"):
            pmb.sample_ais(n_steps=5, chains=2, step=step, progressbar=False)


def test_assignment_is_reported(mixture_nuts_gibbs, mixture, caplog):
    group = mixture_nuts_gibbs["step_methods"]
    assert list(group["method"].values) == ["NUTS", "CategoricalGibbsMetropolis"]
    assert list(group["assigned_by"].values) == ["user", "user"]
    assert dict(zip(group["variable"].values, group["step_method_of_variable"].values,
                    strict=True)) == {"w_simplex__": 0, "mu": 0, "z": 1}
    assert mixture_nuts_gibbs["evidence"].attrs["step_methods"] == (
        "NUTS[w_simplex__, mu] -> CategoricalGibbsMetropolis[z]")
    # Logged too: here with PyMC's automatic assignment of the variables no step was given
    # for, on the model's own data (AIS only).
    m = mixture.model
    with caplog.at_level(logging.DEBUG, logger="pymc_bdmc"), m:
        result = pmb.sample_ais(n_steps=100, chains=16, random_seed=0, progressbar=False,
                                step=pm.CategoricalGibbsMetropolis([m["z"]]))
    text = caplog.text
    assert "NUTS (automatic) -> w_simplex__, mu" in text
    assert "CategoricalGibbsMetropolis (user) -> z" in text
    lower, truth = float(result["evidence"].lower), mixture.log_evidence()
    assert lower - RIGOROUS_SLACK <= truth and abs(lower - truth) < BOUND_TOL
    np.testing.assert_array_equal(result["observed_data"]["y"].values, mixture.data["y"])


def test_user_model_with_initvals_and_pm_data_is_not_mutated():
    with pm.Model() as model:
        y_data = pm.Data("y_data", np.array([0.5, -0.2, 1.0]))
        p = pm.Beta("p", 2, 2, initval=0.3)
        z = pm.Bernoulli("z", p, shape=3)
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("y", mu + z, 1, observed=y_data)
    values = [v.name for v in model.value_vars]
    initvals = dict(model.rvs_to_initial_values)
    with model:
        result = pmb.sample_bdmc(n_steps=10, chains=2, random_seed=3, progressbar=False)
    np.testing.assert_array_equal(y_data.get_value(), [0.5, -0.2, 1.0])
    assert [v.name for v in model.value_vars] == values
    assert model.rvs_to_initial_values == initvals
    # the bounds refer to simulated data, which the step methods saw instead of y_data
    assert not np.allclose(result["observed_data"]["y"].values, [0.5, -0.2, 1.0])


# -- invariance of the frozen kernels ----------------------------------------------------------
def _exact_tempered_mixture_draws(rng, y, beta, n_components, prior_sd, n):
    """Exact draws of (w, mu, z) from p(w, mu, z) p(y | mu, z)^beta for `categorical_mixture`.

    A Gaussian likelihood to the power beta is, up to a factor free of (mu, z), the likelihood
    with noise variance 1 / beta: enumerate z, then draw w and mu from their conjugate posteriors.
    """
    noise_var = 1.0 / beta
    assignments = np.array(list(np.ndindex(*([n_components] * len(y)))))
    alpha = np.ones(n_components)
    log_p = np.array([
        known_evidence.closed_form._log_dirichlet_multinomial(np.bincount(z, minlength=n_components), alpha)
        + sum(known_evidence.closed_form._log_normal_marginal(y[z == k], prior_sd, np.sqrt(noise_var))
              for k in range(n_components))
        for z in assignments])
    prob = np.exp(log_p - log_p.max())
    prob /= prob.sum()
    z = assignments[rng.choice(len(assignments), size=n, p=prob)]
    counts = np.stack([np.bincount(row, minlength=n_components) for row in z])
    w = np.stack([rng.dirichlet(alpha + c) for c in counts])
    sums = np.stack([np.bincount(row, weights=y, minlength=n_components) for row in z])
    var = 1.0 / (1.0 / prior_sd**2 + counts / noise_var)
    mu = rng.normal(var * sums / noise_var, np.sqrt(var))
    co_clustering = np.mean(z[:, :, None] == z[:, None, :], axis=0)
    return w, mu, z, prob, assignments, co_clustering


def _mixture_log_likelihood(y, mu, z):
    return np.sum(-0.5 * (y - np.take_along_axis(mu, z, axis=1)) ** 2 - 0.5 * np.log(2 * np.pi),
                  axis=1)


def test_frozen_sweeps_leave_the_tempered_posterior_invariant(mixture):
    # Exact draws at beta = 0.5 go through forward and reverse sweeps of the frozen kernel. If a
    # step targeted another density (another beta, or the untempered posterior), the
    # log-likelihood of the moved draws, the thermodynamic-integration integrand, would drift.
    m, beta, n = mixture.model, 0.5, 200
    y = mixture.data["y"]
    rng = np.random.default_rng(2024)
    w, mu, z, *_ = _exact_tempered_mixture_draws(rng, y, beta, 3, 3.0, n)
    _, ref_mu, ref_z, *_ = _exact_tempered_mixture_draws(rng, y, beta, 3, 3.0, 20_000)
    reference = _mixture_log_likelihood(y, ref_mu, ref_z)
    with m:
        step = [pm.NUTS([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])]
    sweep, _ = _sweep_for(m, step)
    sweep.load(sweep.snapshot(), rng)
    sweep.clone.set_beta(beta)
    w_value = m.rvs_to_transforms[m["w"]].forward(w).eval()
    moved = {"mu": [], "z": []}
    for i in range(n):
        point = {"w_simplex__": w_value[i], "mu": mu[i], "z": z[i]}
        for direction in ("forward", "forward", "reverse", "reverse"):
            point, _, _ = sweep.sweep(point, direction)
        moved["mu"].append(point["mu"])
        moved["z"].append(point["z"])
    moved_mu, moved_z = np.array(moved["mu"]), np.array(moved["z"])
    assert np.mean(np.abs(moved_mu - mu) > 1e-8) > 0.5  # the sweeps really move the chains
    log_lik = _mixture_log_likelihood(y, moved_mu, moved_z)
    # The moved draws are still exact and independent: a z-test on their mean log-likelihood
    # (|z| < 3.5 fails w.p. < 0.05% for correct kernels).
    z_score = (log_lik.mean() - reference.mean()) / (reference.std() / np.sqrt(n))
    assert abs(z_score) < 3.5, z_score


@pytest.mark.slow
def test_gap_shrinks_as_n_steps_grows_with_step_methods(mixture):
    # The mean-log-weight gap estimates the sum of both directions' biases; with valid forward
    # and reverse kernels it falls roughly as 1 / n_steps.
    m = mixture.model
    gaps = []
    for n_steps in (25, 250):
        with m:
            step = [pm.NUTS([m["w"], m["mu"]]), pm.CategoricalGibbsMetropolis([m["z"]])]
            result = pmb.sample_bdmc(n_steps=n_steps, chains=16, step=step, cores=2,
                                     random_seed=31, progressbar=False)
        ev = result["evidence"]
        gaps.append(float(ev.upper_mean_log_weight - ev.lower_mean_log_weight))
    assert gaps[0] > 0 and gaps[1] > 0
    assert gaps[1] < gaps[0] / 3


def test_step_methods_restart_chains_where_the_data_are_impossible(caplog):
    # Before, the pilot's first NUTS step raised "Bad initial energy" (0 * -inf at beta = 0),
    # and the prior draws were refused. Chains whose prior draw of N makes the data impossible
    # start from draws where they are possible. Monte Carlo tolerance: on seeds 0-5 (64 chains,
    # 100 steps) AIS and BDMC's bounds were within 0.07 of the exact evidence (the upper bound
    # 0.98 above it at most when those chains carried zero weight).
    with (binomial_count_model() as model,
          caplog.at_level(logging.INFO, logger="pymc_bdmc")):
        def steps():  # as PyMC assigns them (by default the count goes to window Gibbs)
            return [pm.NUTS([model["p"]]), pm.Metropolis([model["N"]])]

        ais = pmb.sample_ais(n_steps=100, chains=64, random_seed=1, progressbar=False,
                             step=steps())
        bdmc = pmb.sample_bdmc(n_steps=100, chains=64, random_seed=1, progressbar=False,
                               step=steps())
    assert "those chains start instead from draws at which they are possible" in caplog.text
    assert bdmc["evidence"].attrs["possible_starts_redrawn"] > 0
    assert ais["evidence"].attrs["step_methods"] == "NUTS[p_logodds__] -> Metropolis[N]"
    assert float(ais["evidence"]["lower"]) == pytest.approx(
        binomial_count_evidence([2, 4]), abs=0.25)
    simulated = binomial_count_evidence(bdmc["observed_data"]["y"].values)
    assert float(bdmc["evidence"]["lower"]) == pytest.approx(simulated, abs=0.25)
    assert -0.25 < float(bdmc["evidence"]["upper"]) - simulated < 0.5
