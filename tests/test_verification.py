"""The verification utilities, and a test of the tests.

Deliberately broken kernels must be caught and correct ones must pass. Every statistical check
here uses ``ALPHA = 0.01`` (Bonferroni-corrected within each test) and a fixed seed, so a correct
kernel fails a given check with probability at most about 1%, and then does so on every run. The
measured false-alarm rates and power are in the slow tests at the end (``--runslow``).
"""

import copy

import numpy as np
import pymc as pm
import pytest

from pymc_bdmc import known_evidence, verification
from pymc_bdmc.kernels.hmc import HMCInfo, HMCParams, hmc_step
from pymc_bdmc.model.density import DensityParts
from pymc_bdmc.verification import VerificationError, Verifier

ALPHA = 0.01


# -- kernels, correct and broken ------------------------------------------------------------------


def hmc(beta, params):
    """The library's HMC transition at a fixed beta, as a kernel factory."""

    def factory(parts_fn):
        return lambda rng, x, parts, t: hmc_step(rng, x, parts, beta, params, parts_fn)

    return factory


def broken_hmc(beta, params, *, metropolis=True, kinetic_mass=True):
    """HMC with a bug: no Metropolis correction, or a kinetic energy ignoring the mass matrix.

    Momenta are drawn from N(0, M) with M = 1 / inv_mass; the correct kinetic energy is
    ``p' M^-1 p / 2``. With ``kinetic_mass=False`` it is ``p' p / 2``: the energy error is then
    wrong and the accept step targets the wrong distribution.
    """

    def factory(parts_fn):
        def transition(rng, x, parts, t):
            n = len(x)
            inv_mass = params.inv_mass
            eps = params.step_size * rng.uniform(1 - params.jitter, 1 + params.jitter, n)[:, None]
            p0 = rng.standard_normal(x.shape) / np.sqrt(inv_mass)

            def kinetic(p):
                return 0.5 * np.sum(p**2 * (inv_mass if kinetic_mass else 1.0), axis=1)

            with np.errstate(all="ignore"):
                q, p = x, p0 + 0.5 * eps * parts.tempered_grad(beta)
                for i in range(params.n_leapfrog):
                    q = q + eps * inv_mass * p
                    new = parts_fn(q)
                    last = i == params.n_leapfrog - 1
                    p = p + (0.5 * eps if last else eps) * new.tempered_grad(beta)
                logp1 = new.tempered_logp(beta)
                log_ratio = (logp1 - kinetic(p)) - (parts.tempered_logp(beta) - kinetic(p0))
                if metropolis:
                    log_ratio = np.where(np.isnan(log_ratio), -np.inf, log_ratio)
                else:
                    log_ratio = np.zeros(n)
                accepted = (np.log(rng.uniform(size=n)) < log_ratio) & np.isfinite(logp1)
            info = HMCInfo(accepted.astype(float), accepted, ~accepted)
            return np.where(accepted[:, None], q, x), parts.take(accepted, new), info

        return transition

    return factory


def gaussian_gibbs(mean, precision, order):
    """Exact Gibbs updates of one coordinate at a time of N(mean, precision^-1), in ``order``.

    A compound kernel, like PyMC's ``CompoundStep``: each coordinate update is reversible, so
    every order leaves the target invariant, but the composition ``A then B`` is reversible only
    if the order is a palindrome (``A B A``). A one-way scan is exactly "a compound kernel
    applied unreversed" when a reverse run uses it as it stands.
    """

    def factory(parts_fn):
        def transition(rng, x, parts, t):
            x = x.copy()
            for i in order:
                others = [j for j in range(len(mean)) if j != i]
                shift = (x[:, others] - mean[others]) @ precision[i, others] / precision[i, i]
                x[:, i] = mean[i] - shift + rng.standard_normal(len(x)) / np.sqrt(precision[i, i])
            n = len(x)
            return x, parts_fn(x), HMCInfo(np.ones(n), np.ones(n, bool), np.zeros(n, bool))

        return transition

    return factory


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nig():
    """Regression with unknown noise: a log transform, and noise that Geweke feedback amplifies."""
    am = known_evidence.normal_inverse_gamma_regression(n_obs=5, n_coef=2, seed=1)
    verifier = Verifier(am.model)
    plan = verifier.hmc_plan(n_steps=20, random_seed=1)
    return am, verifier, plan


@pytest.fixture(scope="module")
def correlated():
    """One observation of two coefficients: a correlated Gaussian posterior (rho ~ 0.58).

    Returns the model, its verifier, an exact posterior sampler, and the posterior's mean and
    precision (for exact Gibbs updates).
    """
    am = known_evidence.linear_regression(n_obs=1, n_coef=2, prior_sd=1.0, noise_sd=0.3, seed=9)
    x = am.constants["x"]
    precision = np.eye(2) + x.T @ x / 0.3**2
    mean = np.linalg.solve(precision, x.T @ am.data["y"] / 0.3**2)
    return am, Verifier(am.model), (lambda n, rng: am.sample_tempered(1.0, n, rng)), mean, precision


def _posterior_params(plan, scale=1.0):
    t = plan.n_steps
    return HMCParams(scale * float(plan.step_size[t]), plan.inv_mass[t], plan.n_leapfrog,
                     plan.jitter)


def _tempered(plan, am, beta):
    t = int(np.argmin(np.abs(plan.betas - beta)))
    beta = float(plan.betas[t])
    params = HMCParams(float(plan.step_size[t]), plan.inv_mass[t], plan.n_leapfrog, plan.jitter)
    return t, beta, params, (lambda n, rng: am.sample_tempered(beta, n, rng))


# -- exact density checks --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["normal-inverse-gamma", "beta-binomial"])
def test_compiled_densities_match_pymc_exactly(nig, name):
    if name == "normal-inverse-gamma":  # log transform, covariates
        result = nig[1].check_density(random_seed=0)
    else:  # logit transform, integer data
        model = known_evidence.beta_binomial(seed=2).model
        result = verification.check_density_consistency(model, random_seed=0)
    result.raise_if_failed()
    assert not result.skipped
    assert {"log prior vs model.varlogp", "log-likelihood vs observed logp",
            "prior + likelihood vs joint logp", "tempered gradient vs PyMC (beta=0.37)",
            "log-likelihood after set_observed vs pm.observe"} <= set(result.max_error)
    assert max(result.max_error.values()) < 1e-12  # round-off, far inside the 1e-9 tolerance


class _Buggy:
    """A compiled density with one bug planted (wraps a working one; no recompilation)."""

    def __init__(self, density, bug):
        self._density, self._bug = density, bug

    def __getattr__(self, name):
        return getattr(self._density, name)

    def parts(self, x):
        p = self._density.parts(x)
        if self._bug == "prior term":  # e.g. a Jacobian term slightly off
            return DensityParts(p.log_prior + 1e-6 * x[:, 0], p.log_likelihood,
                                p.grad_log_prior, p.grad_log_likelihood)
        if self._bug == "gradient":
            return DensityParts(p.log_prior, p.log_likelihood, p.grad_log_prior,
                                1.001 * p.grad_log_likelihood)
        return p

    def set_observed(self, data):
        if self._bug != "stale data":  # forgets to condition on new data
            self._density.set_observed(data)


@pytest.mark.parametrize(
    "bug, failing",
    [
        ("prior term", "log prior vs model.varlogp"),
        ("gradient", "tempered gradient vs PyMC (beta=1)"),
        ("stale data", "log-likelihood after set_observed vs pm.observe"),
    ],
)
def test_density_bugs_are_caught(nig, bug, failing):
    verifier = copy.copy(nig[1])  # shares the compiled PyMC references
    verifier.density = _Buggy(verifier.density, bug)
    result = verifier.check_density(random_seed=0)
    assert not result.passed
    assert result.max_error[failing] > result.tolerance
    with pytest.raises(VerificationError, match="FAILED"):
        result.raise_if_failed()


def test_potentials_left_out_of_the_density_are_reported():
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Potential("pot", -(mu**2))
        pm.Normal("y", mu, 1, observed=[0.5])
    assert "prior + likelihood vs joint logp" in Verifier(model).check_density(
        random_seed=0).skipped
    result = Verifier(model, potentials_in_likelihood=True).check_density(random_seed=0)
    result.raise_if_failed()
    assert "prior + likelihood vs joint logp" in result.max_error


# -- per-chain data machinery ---------------------------------------------------------------------


def test_per_chain_densities_and_simulation_are_exact(nig):
    am, verifier, _ = nig
    rng = np.random.default_rng(0)
    simulate, per_chain = verifier._geweke_machinery()
    assert simulate.mode == "vectorized" and per_chain.mode in ("vectorized", "blockwise")
    x = verifier.prior_draws(6, rng)
    data = simulate(x, rng)
    assert data["y"].shape == (6, 5)
    np.testing.assert_allclose(per_chain(x, data).log_likelihood,
                               per_chain._loop(x, data).log_likelihood, rtol=1e-10)
    # data depend on their own row's parameters: near-zero noise gives y = X w row by row
    x_quiet = x.copy()
    x_quiet[:, 0] = np.log(1e-12)  # sigma2_log__
    y = simulate(x_quiet, rng)["y"]
    np.testing.assert_allclose(y, x_quiet[:, 1:] @ am.constants["x"].T, atol=1e-4)
    # the density keeps its own data
    np.testing.assert_array_equal(verifier.density.observed_data()["y"], am.data["y"])


def test_row_by_row_fallbacks_agree_with_the_batched_machinery(nig, monkeypatch):
    # Graphs PyTensor cannot batch fall back to loops over chains; the answers must not change.
    am, verifier, plan = nig
    rng = np.random.default_rng(1)
    simulate, per_chain = verifier._geweke_machinery()
    x = verifier.prior_draws(4, rng)
    data = simulate(x, np.random.default_rng(2))

    def unavailable(*args, **kwargs):
        raise NotImplementedError("no batching here")

    monkeypatch.setattr(verification.per_chain, "vectorize_graph", unavailable)
    monkeypatch.setattr(verification.per_chain, "Blockwise", unavailable)
    fresh = Verifier(density=verifier.density)
    loop_simulate, loop_density = fresh._geweke_machinery()
    assert loop_simulate.mode == "loop" and loop_density.mode == "loop"
    np.testing.assert_allclose(loop_simulate(x, np.random.default_rng(2))["y"], data["y"],
                               rtol=1e-10)
    looped, batched = loop_density(x, data), per_chain(x, data)
    for part in ("log_prior", "log_likelihood", "grad_log_prior", "grad_log_likelihood"):
        np.testing.assert_allclose(getattr(looped, part), getattr(batched, part), rtol=1e-10)
    result = fresh.geweke(plan.transition, t=plan.n_steps, n_chains=20, n_iterations=10,
                          n_reference=500, random_seed=0)
    assert result.passed, str(result)


def test_kernels_must_evaluate_all_chains_at_once(nig):
    _, verifier, plan = nig

    def one_chain_at_a_time(parts_fn):
        def transition(rng, x, parts, t):
            parts_fn(x[:1])
            return x, parts, HMCInfo(np.ones(len(x)), np.ones(len(x), bool), np.zeros(len(x), bool))

        return transition

    with pytest.raises(VerificationError, match="all chains at once"):
        verifier.geweke(one_chain_at_a_time, t=plan.n_steps, n_chains=20, n_iterations=2,
                        random_seed=0)


# -- Geweke test: correct kernels pass, broken ones are caught -------------------------------------


def test_geweke_passes_the_tuned_hmc_plan(nig):
    _, verifier, plan = nig
    result = verifier.geweke(plan.transition, t=plan.n_steps, alpha=ALPHA, random_seed=11)
    assert result.passed, str(result)
    assert result.test == "geweke" and result.n_kernel == 100
    assert "P(mean(y) <= q50)" in result.names and "P(sigma2_log__ <= q25)" in result.names
    # chain means of autocorrelated draws: fewer effective draws than draws
    assert np.all(result.ess < 100 * 100) and np.all(result.ess > 100)


def test_geweke_catches_hmc_without_metropolis_correction(nig):
    _, verifier, plan = nig
    kernel = broken_hmc(1.0, _posterior_params(plan, scale=1.5), metropolis=False)
    result = verifier.geweke(kernel, t=plan.n_steps, alpha=ALPHA, random_seed=11)
    assert not result.passed
    assert result.p_value < 1e-4  # far beyond the threshold, not a borderline call


def test_geweke_catches_a_wrong_kinetic_energy(nig):
    _, verifier, plan = nig
    kernel = broken_hmc(1.0, _posterior_params(plan), kinetic_mass=False)
    result = verifier.geweke(kernel, t=plan.n_steps, alpha=ALPHA, random_seed=11)
    assert not result.passed and result.p_value < 1e-4


def test_geweke_drives_foreign_kernels_through_set_data(nig):
    # A kernel closed over its own density (as a PyMC step-method adapter would be) is applied
    # one chain at a time, after set_data has given that chain's data to its density.
    am, verifier, plan = nig
    own = verifier.density
    original = own.observed_data()
    good = hmc(1.0, _posterior_params(plan))(own.parts)
    bad = broken_hmc(1.0, _posterior_params(plan), kinetic_mass=False)(own.parts)
    try:
        passed = verifier.geweke(good, t=plan.n_steps, set_data=own.set_observed, n_chains=25,
                                 n_iterations=40, random_seed=3)
        caught = verifier.geweke(bad, t=plan.n_steps, set_data=own.set_observed, n_chains=25,
                                 n_iterations=40, random_seed=3)
    finally:
        own.set_observed(original)
    assert passed.passed, str(passed)
    assert not caught.passed


def test_geweke_arguments_are_checked(nig):
    _, verifier, plan = nig
    with pytest.raises(ValueError, match="n_chains"):
        verifier.geweke(plan.transition, t=plan.n_steps, n_chains=5)
    with pytest.raises(ValueError, match="alpha"):
        verifier.geweke(plan.transition, t=plan.n_steps, alpha=1.5)
    with pytest.raises(ValueError, match="burn_in"):
        verifier.geweke(plan.transition, t=plan.n_steps, n_iterations=10, burn_in=10)


def test_geweke_refuses_potentials():
    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Potential("pot", -(mu**2))
        pm.Normal("y", mu, 1, observed=[0.5])
    verifier = Verifier(model, potentials_in_likelihood=True)
    with pytest.raises(VerificationError, match="Potentials"):
        verifier.geweke(hmc(1.0, HMCParams(0.5, np.ones(1), 3, 0.2)), t=1)


# -- invariance from exact tempered draws ----------------------------------------------------------


@pytest.mark.parametrize("beta", [0.05, 0.3])
def test_invariance_passes_the_tuned_plan_at_intermediate_beta(nig, beta):
    am, verifier, plan = nig
    t, beta, _, exact = _tempered(plan, am, beta)
    result = verifier.invariance(plan.transition, t=t, beta=beta, exact_sampler=exact,
                                 alpha=ALPHA, random_seed=5)
    assert result.passed, str(result)
    assert any(name.startswith("KS: ") for name in result.names)


def test_invariance_of_the_prior_needs_no_sampler(nig):
    _, verifier, plan = nig
    kernel = hmc(0.0, HMCParams(0.8, np.ones(verifier.layout.size), 3, 0.5))
    verifier.invariance(kernel, t=0, beta=0.0, random_seed=5).raise_if_failed()
    with pytest.raises(VerificationError, match="exact_sampler"):
        verifier.invariance(kernel, t=1, beta=0.5)


@pytest.mark.parametrize(
    "bug", [dict(metropolis=False), dict(kinetic_mass=False)], ids=["no-metropolis", "kinetic"]
)
def test_invariance_catches_broken_hmc(nig, bug):
    am, verifier, plan = nig
    t, beta, params, exact = _tempered(plan, am, 0.3)
    result = verifier.invariance(broken_hmc(beta, params, **bug), t=t, beta=beta,
                                 exact_sampler=exact, alpha=ALPHA, random_seed=5)
    assert not result.passed and result.p_value < 1e-4


def test_invariance_catches_a_kernel_at_the_wrong_temperature(nig):
    # An off-by-one in the schedule: the kernel at t targets beta_{t+1}.
    am, verifier, plan = nig
    t, beta, params, exact = _tempered(plan, am, 0.05)
    wrong = hmc(float(plan.betas[t + 3]), params)
    result = verifier.invariance(wrong, t=t, beta=beta, exact_sampler=exact, alpha=ALPHA,
                                 random_seed=5)
    assert not result.passed


# -- reversibility: compound kernels must be run reversed -----------------------------------------


def test_reversibility_passes_hmc_and_palindromic_compounds(correlated):
    _, verifier, exact, mean, precision = correlated
    x = verifier.flatten(exact(4000, np.random.default_rng(0)))
    assert np.corrcoef(x.T)[0, 1] > 0.5
    params = HMCParams(0.5, x.var(axis=0), 3, 0.5)
    for kernel in (hmc(1.0, params), gaussian_gibbs(mean, precision, [0, 1, 0])):
        result = verifier.reversibility(kernel, t=1, beta=1.0, exact_sampler=exact, alpha=ALPHA,
                                        random_seed=8)
        assert result.passed, str(result)


def test_reversibility_catches_a_compound_kernel_run_unreversed(correlated):
    # "A then B": it leaves the target invariant (invariance passes), but a reverse run must
    # apply "B then A"; the one-way scan is not in detailed balance, and that is caught.
    _, verifier, exact, mean, precision = correlated
    scan = gaussian_gibbs(mean, precision, [0, 1])
    verifier.invariance(scan, t=1, beta=1.0, exact_sampler=exact, random_seed=8
                        ).raise_if_failed()
    result = verifier.reversibility(scan, t=1, beta=1.0, exact_sampler=exact, alpha=ALPHA,
                                    random_seed=8)
    assert not result.passed and result.p_value < 1e-4
    assert "w[0] -> w[1]" in dict(result.worst(3))


# -- reproducibility -------------------------------------------------------------------------------


def test_kernel_tests_are_reproducible(nig):
    am, verifier, plan = nig
    t, beta, _, exact = _tempered(plan, am, 0.3)
    runs = [verifier.invariance(plan.transition, t=t, beta=beta, exact_sampler=exact,
                                n_chains=200, random_seed=4) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].p_values, runs[1].p_values)
    # a fresh verifier builds its simulation machinery on the first call: that must not
    # shift the test's random streams
    fresh = Verifier(density=verifier.density)
    runs = [v.geweke(plan.transition, t=plan.n_steps, n_chains=20, n_iterations=5,
                     n_reference=200, random_seed=4) for v in (fresh, fresh, verifier)]
    np.testing.assert_array_equal(runs[0].statistic, runs[2].statistic)
    np.testing.assert_array_equal(runs[0].statistic, runs[1].statistic)


# -- measured false-alarm rates and power (slow) --------------------------------------------------


def _rejections(run, seeds):
    return np.array([run(seed).p_value < ALPHA for seed in seeds])


@pytest.mark.slow
def test_geweke_false_alarm_rate_and_power(nig):
    # 100 independent runs each. A correct kernel is rejected with probability <= ALPHA = 1%:
    # P(Binomial(100, 0.01) >= 6) = 5e-4. The broken kernels must be caught in >= 90 of 100.
    _, verifier, plan = nig

    def run(kernel):
        return lambda seed: verifier.geweke(kernel, t=plan.n_steps, random_seed=1000 + seed)

    seeds = range(100)
    assert _rejections(run(plan.transition), seeds).sum() <= 5
    no_mh = broken_hmc(1.0, _posterior_params(plan, scale=1.5), metropolis=False)
    assert _rejections(run(no_mh), seeds).sum() >= 90


@pytest.mark.slow
def test_invariance_and_reversibility_false_alarm_rates(nig, correlated):
    am, verifier, plan = nig
    t, beta, params, exact = _tempered(plan, am, 0.3)
    seeds = range(100)
    inv = _rejections(lambda s: verifier.invariance(plan.transition, t=t, beta=beta,
                                                    exact_sampler=exact, random_seed=s), seeds)
    assert inv.sum() <= 5
    _, verifier2, exact2, _, _ = correlated
    variance = verifier2.flatten(exact2(4000, np.random.default_rng(0))).var(axis=0)
    kernel = hmc(1.0, HMCParams(0.5, variance, 3, 0.5))
    rev = _rejections(lambda s: verifier2.reversibility(kernel, t=1, beta=1.0,
                                                        exact_sampler=exact2, random_seed=s),
                      seeds)
    assert rev.sum() <= 5


def test_an_unreversed_compound_kernel_still_gives_an_unbiased_reverse_weight(correlated):
    # What reversibility is *not* needed for: reverse AIS is AIS from the posterior to the prior,
    # so E[v] = 1 / p(y) holds with any invariant kernels, reversed or not (module notes). The
    # one-way Gibbs scan caught above keeps the upper bound valid; 4 standard errors.
    from pymc_bdmc.algorithms.ais import ais_reverse

    am, verifier, exact, _, _ = correlated
    x, y = am.constants["x"], am.data["y"]
    betas = np.concatenate([[0.0], np.geomspace(0.01, 1.0, 12)])

    def scan(parts_fn):
        def transition(rng, state, parts, t):
            precision = np.eye(2) + betas[t] * x.T @ x / 0.3**2
            mean = np.linalg.solve(precision, betas[t] * x.T @ y / 0.3**2)
            return gaussian_gibbs(mean, precision, [0, 1])(parts_fn)(rng, state, parts, t)

        return transition

    rng = np.random.default_rng(12)
    n = 20_000
    start = verifier.flatten(exact(n, rng))
    run = ais_reverse(rng, start, n, betas, scan(verifier.density.parts),
                      verifier.density.parts)
    v = np.exp(run.log_weight + am.log_evidence())
    assert abs(v.mean() - 1) < 4 * v.std() / np.sqrt(n)
