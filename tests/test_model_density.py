import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from kernel_models import kernel_model
from pytensor.graph.traversal import ancestors

from pymc_bdmc import known_evidence
from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.model.density import FlatLayout, ModelDensity
from pymc_bdmc.model.simulate import ModelSimulator

EXACT = 1e-9  # compiled densities vs PyMC's own: same graph, round-off only


@pytest.fixture(scope="module")
def nig():
    return known_evidence.normal_inverse_gamma_regression(n_obs=12, n_coef=3, seed=1)


@pytest.fixture(scope="module")
def nig_density(nig):
    return ModelDensity(nig.model)


def _random_points(density, n, seed):
    return np.random.default_rng(seed).normal(size=(n, density.n_dim))


def test_parts_match_pymc_logp(nig, nig_density):
    model = nig.model
    x = _random_points(nig_density, 7, 0)
    parts = nig_density.parts(x)
    prior_fn = model.compile_logp(vars=model.free_RVs)
    lik_fn = model.compile_logp(vars=model.observed_RVs)
    for i in range(len(x)):
        point = nig_density.layout.unravel(x[i])
        assert parts.log_prior[i] == pytest.approx(prior_fn(point), rel=EXACT)
        assert parts.log_likelihood[i] == pytest.approx(lik_fn(point), rel=EXACT)


def test_prior_and_likelihood_from_one_pass_are_pymcs_varlogp_and_observedlogp():
    # Two free variables (one transformed) and two observed ones, so that a split at the wrong
    # index or a lost Jacobian shows.
    from pymc_bdmc.model.density import prior_and_likelihood

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu, sigma, observed=[0.3, -0.1, 1.2])
        pm.Poisson("k", pt.exp(mu), observed=[1, 0, 3])
    point = model.initial_point()
    point = {**point, "mu": np.array(0.4), "sigma_log__": np.array(-0.3)}
    prior, likelihood = prior_and_likelihood(model)
    for ours, pymcs in ((prior, model.varlogp), (likelihood, model.observedlogp)):
        values = [model.compile_fn(graph, point_fn=True)(point) for graph in (ours, pymcs)]
        assert values[0] == values[1]
    assert model.compile_fn(prior, point_fn=True)(point) != 0
    assert model.compile_fn(likelihood, point_fn=True)(point) != 0


def test_tempered_gradient_matches_finite_differences(nig_density):
    x = _random_points(nig_density, 3, 1)
    beta = 0.37
    parts = nig_density.parts(x)
    grad = parts.tempered_grad(beta)
    h = 1e-6
    for d in range(nig_density.n_dim):
        e = np.zeros(nig_density.n_dim)
        e[d] = h
        up = nig_density.parts(x + e).tempered_logp(beta)
        down = nig_density.parts(x - e).tempered_logp(beta)
        np.testing.assert_allclose(grad[:, d], (up - down) / (2 * h), rtol=1e-5, atol=1e-5)


def test_tempered_logp_is_prior_at_beta_zero_even_for_impossible_data(nig_density):
    x = _random_points(nig_density, 2, 2)
    parts = nig_density.parts(x)
    minus_inf = type(parts)(parts.log_prior, np.full(2, -np.inf), parts.grad_log_prior,
                            parts.grad_log_likelihood)
    np.testing.assert_array_equal(minus_inf.tempered_logp(0.0), parts.log_prior)


def test_set_observed_changes_data_without_recompiling(nig, nig_density):
    x = _random_points(nig_density, 4, 3)
    before = nig_density.parts(x).log_likelihood
    n_compiled = nig_density.n_compilations
    original = nig_density.observed_data()["y"]
    try:
        nig_density.set_observed({"y": original + 1.0})
        after = nig_density.parts(x).log_likelihood
        assert not np.allclose(before, after)
        assert nig_density.n_compilations == n_compiled
    finally:
        nig_density.set_observed({"y": original})
    np.testing.assert_array_equal(nig_density.parts(x).log_likelihood, before)
    # the user's model still holds its own data
    np.testing.assert_array_equal(nig.model.rvs_to_values[nig.model.observed_RVs[0]].data,
                                  nig.data["y"])


def test_set_observed_rejects_wrong_shapes(nig_density):
    with pytest.raises(ValueError, match="shape"):
        nig_density.set_observed({"y": np.zeros(3)})


def test_layout_roundtrip_is_by_name():
    layout = FlatLayout.from_point(["a", "b"], {"b": np.zeros((2, 3)), "a": np.zeros(())})
    point = {"b": np.arange(6.0).reshape(2, 3), "a": np.array(-1.0)}
    x = layout.ravel(point)
    assert x.tolist() == [-1.0, 0, 1, 2, 3, 4, 5]
    back = layout.unravel(np.stack([x, 2 * x]))
    np.testing.assert_array_equal(back["b"][1], 2 * point["b"])
    assert layout.coordinate_labels()[:3] == ["a", "b[0, 0]", "b[0, 1]"]


def test_joint_draw_theta_star_generates_y_star():
    # With tiny noise, y* must equal the mean implied by theta* (to ~1e-6): the flat x*,
    # the constrained theta* and y* all come from one and the same draw.
    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 2.0)
        mu = pm.Normal("mu", 0, 1, shape=3)
        pm.Normal("y", mu * scale, 1e-8, observed=np.zeros(3))
    density = ModelDensity(model)
    draw = ModelSimulator(model, density.layout).draw_joint(np.random.default_rng(5))
    np.testing.assert_allclose(draw.observed["y"], draw.free["mu"] * draw.free["scale"], atol=1e-6)
    constrained = density.constrain(draw.x[None])
    np.testing.assert_allclose(constrained["scale"][0], draw.free["scale"], rtol=1e-12)
    np.testing.assert_allclose(constrained["mu"][0], draw.free["mu"], rtol=1e-12)


def test_prior_draws_have_prior_moments():
    with pm.Model() as model:
        pm.Gamma("g", alpha=3.0, beta=2.0)
        pm.Normal("y", 0, 1, observed=[0.0])
    density = ModelDensity(model)
    x = ModelSimulator(model, density.layout).draw_prior(4000, np.random.default_rng(1))
    g = np.exp(x[:, 0])
    # mean 1.5, sd sqrt(3)/2: 5 standard errors
    assert abs(g.mean() - 1.5) < 5 * (np.sqrt(3) / 2) / np.sqrt(4000)


def test_a_chain_never_sees_the_other_chains_of_its_batch():
    # PyMC's parameter checks, rewritten to -inf switches after vectorization, used to reduce
    # over the whole batch: one chain whose scale underflowed to 0 (log-scale -800) or became
    # NaN set every chain's log-likelihood to -inf, so chains rejected each other's moves.
    rng = np.random.default_rng(0)
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0)
        mu = pm.Normal("mu", 0.0, 1.0, shape=3)
        pm.Normal("y", mu, s, observed=rng.normal(size=(20, 3)))
    density = ModelDensity(model, compile_kwargs={"mode": "FAST_RUN"})
    assert density.batching == "vectorized"
    x = 0.3 * rng.normal(size=(4, density.n_dim))
    clean = density.parts(x)
    for bad in (-800.0, np.nan, 800.0):
        poisoned = x.copy()
        poisoned[0, 0] = bad
        parts = density.parts(poisoned)
        assert parts.log_likelihood[0] == -np.inf
        for field in ("log_prior", "log_likelihood", "grad_log_prior", "grad_log_likelihood"):
            np.testing.assert_array_equal(getattr(parts, field)[1:], getattr(clean, field)[1:])


def test_checks_nested_in_a_checks_value_become_per_chain_switches_too():
    # A mixture checks its weights around a value that holds its components' scale check; a
    # check left in the graph would be rewritten after vectorizing into one condition over the
    # whole batch (the coupling the test above pins).
    from pymc.logprob.utils import CheckParameterValue
    from pytensor.graph.traversal import applys_between, graph_inputs

    from pymc_bdmc.model.density import checks_to_switches

    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        mu = pm.Normal("mu", 0.0, 5.0, shape=2)
        s = pm.HalfNormal("s", 2.0)
        pm.NormalMixture("y", w=w, mu=mu, sigma=s, observed=[-2.0, 0.5, 3.0])

    def checks(outputs):
        return [node for node in applys_between(graph_inputs(outputs), outputs)
                if isinstance(node.op, CheckParameterValue)]

    assert len(checks([model.observedlogp])) == 2
    assert checks(checks_to_switches([model.observedlogp])) == []


@pytest.mark.parametrize(("build", "mirrored"), [
    # Components of one family: their labels can swap, a copy of each mode per order.
    (lambda w: pm.NormalMixture("y", w=w, mu=pm.Normal("mu", 0, 5, shape=2), sigma=1.0,
                                observed=[0.1, 2.0]), True),
    (lambda w: pm.Mixture("y", w=w, comp_dists=[pm.Normal.dist(pm.Normal("m", 0, 1), 1.0),
                                                pm.Normal.dist(0.0, 1.0)],
                          observed=[0.1, 2.0]), True),
    # A zero-inflated count: a point mass and a Poisson, no labels to swap.
    (lambda w: pm.ZeroInflatedPoisson("y", psi=w[0], mu=2.0, observed=[0, 3]), False),
    # Sorted draws: a copy per order of the raw draws.
    (lambda w: pm.Normal("y", pt.sort(pm.Normal("c", 0, 1, shape=2))[0] + w[0], 1.0,
                         observed=[0.1, 2.0]), True),
    (lambda w: pm.Normal("y", w[0], 1.0, observed=[0.1, 2.0]), False),
])
def test_models_whose_posterior_may_repeat_its_modes_are_told_apart(build, mirrored):
    with pm.Model() as model:
        build(pm.Dirichlet("w", np.ones(2)))
    assert ModelDensity(model, gradients=False).mirrored_modes is mirrored


def _coupling_compile(shift):
    """A compile function whose vectorized function adds ``shift(batch)`` to every output."""
    from pymc.pytensorf import compile as compile_pytensor

    batched_compiles = []

    def compile_fn(inputs, outputs, **kwargs):
        fn = compile_pytensor(inputs, outputs, **kwargs)
        if inputs[0].ndim == 1 or batched_compiles:  # only the vectorized graph is coupled
            return fn
        batched_compiles.append(fn)

        def batched(x, *rest):
            return [out + shift(x) for out in fn(x, *rest)]
        return batched
    return compile_fn


@pytest.mark.parametrize(("shift", "expected"), [
    # A chain's value moved by the other rows of its batch: fall back to a loop over chains.
    (lambda x: 1e-6 * np.nanmean(np.clip(x, -5, 5)), "blockwise"),
    # Round-off that depends on the batch size (BLAS sums in another order): still vectorized.
    (lambda x: 1e-15 * len(x), "vectorized"),
])
def test_batched_graph_is_checked_for_chain_coupling(shift, expected):
    import pytensor.tensor as pt

    from pymc_bdmc.model.density import compile_batched

    x = pt.vector("x")
    outputs = [pt.sum(x**2), pt.exp(x)]
    points = np.array([[0.1, 0.2], [0.3, -0.4], [1.0, 2.0]])
    fn, batching = compile_batched(_coupling_compile(shift), x, outputs, points)
    assert batching == expected
    total, exp = fn(points)
    np.testing.assert_allclose(total, (points**2).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(exp, np.exp(points), rtol=1e-12)


def test_regression_with_matrix_product_is_vectorized(nig_density):
    # X @ beta over a batch is a matrix product whose round-off depends on the batch size; the
    # chain-coupling check must not mistake that for coupling (it did: a 2x slower loop).
    assert nig_density.batching == "vectorized"


def test_a_scalar_beside_a_matrix_product_gets_the_vectorized_graph():
    # PyMC's join writes a scalar as x[i:i+1].reshape(()), whose vectorized column Numba
    # refused to broadcast against the (chains, n) likelihood: such models silently ran the
    # per-chain Blockwise loop, without the fused kernel.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 3))
    with pm.Model() as model:
        intercept = pm.Normal("a", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 1.0, shape=3)
        pm.Bernoulli("y", logit_p=intercept + x @ beta, observed=(rng.random(30) < 0.5) * 1)
    density = ModelDensity(model)
    assert density.batching == "vectorized" and density.can_fuse_hmc
    points = rng.normal(size=(5, density.n_dim))
    parts = density.parts(points)
    logp = model.compile_logp()
    for row, total in zip(points, parts.log_prior + parts.log_likelihood, strict=True):
        point = density.layout.unravel(row)
        np.testing.assert_allclose(total, logp(point), rtol=1e-10)


@pytest.mark.parametrize(("learn_scale", "expected"), [(True, "blockwise"), (False, "vectorized")])
def test_linear_algebra_on_each_chains_matrices_loops_over_chains(learn_scale, expected):
    # A covariance that depends on the parameters is factorized per chain either way: one loop
    # around the per-chain graph compiles faster and runs as fast or faster than the vectorized
    # graph's stacks of matrices. A fixed covariance is factorized once: vectorized.
    rng = np.random.default_rng(1)
    rng.normal(size=6)  # the model's data came first from this stream
    model = kernel_model(6, learn_scale)
    density = ModelDensity(model)
    assert density.batching == expected
    points = rng.normal(scale=0.5, size=(4, density.n_dim))
    parts = density.parts(points)
    logp = model.compile_logp()
    for row, total in zip(points, parts.log_prior + parts.log_likelihood, strict=True):
        np.testing.assert_allclose(total, logp(density.layout.unravel(row)), rtol=1e-10)


def _walk_model(rng):
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        walk = pm.GaussianRandomWalk("walk", sigma=sigma, init_dist=pm.Normal.dist(0, 1),
                                     steps=7)
        pm.Normal("y", walk, 0.5, observed=rng.normal(size=8))
    return model


def _assert_parts_are_pymcs(model, density, rng):
    points = rng.normal(scale=0.5, size=(4, density.n_dim))
    parts = density.parts(points)
    logp, dlogp = model.compile_logp(), model.compile_dlogp()
    for i, row in enumerate(points):
        point = density.layout.unravel(row)
        np.testing.assert_allclose(parts.log_prior[i] + parts.log_likelihood[i], logp(point),
                                   rtol=1e-10)
        np.testing.assert_allclose(parts.grad_log_prior[i] + parts.grad_log_likelihood[i],
                                   dlogp(point), rtol=1e-10)


def test_a_walks_gradient_is_vectorized_with_its_lengths_folded():
    # The gradient of a random walk's logp splits by the lengths of its first value and its
    # increments. Vectorized before those lengths were folded, the split and its shape
    # arithmetic became Blockwise ops (each a Numba compile); folded, no Blockwise is left.
    # The observed data's shared variable has a static shape, so no shape check remains either.
    from pytensor.tensor.blockwise import Blockwise, BlockwiseWithCoreShape
    from pytensor.tensor.shape import SpecifyShape

    rng = np.random.default_rng(3)
    model = _walk_model(rng)
    density = ModelDensity(model)
    assert density.batching == "vectorized"
    ops = [node.op for node in density._parts_fn.maker.fgraph.apply_nodes]
    assert not [op for op in ops
                if isinstance(op, Blockwise | BlockwiseWithCoreShape | SpecifyShape)]
    _assert_parts_are_pymcs(model, density, rng)


def test_a_fold_that_fails_leaves_the_graph_vectorized_as_it_is(cache_dir, monkeypatch):
    from pymc_bdmc.model import batching
    from pymc_bdmc.model import density as density_module

    def failing(outputs):
        raise RuntimeError("a rewrite failed")

    monkeypatch.setattr(batching, "fold_static_shapes", failing)
    monkeypatch.setattr(density_module, "start_compile_ahead", lambda recipe, label: None)
    rng = np.random.default_rng(4)
    model = _walk_model(rng)
    density = ModelDensity(model)
    assert density.batching == "vectorized"
    _assert_parts_are_pymcs(model, density, rng)


def test_a_loop_over_chains_that_fails_leaves_the_vectorized_graph(cache_dir, monkeypatch):
    from pymc_bdmc.model import batching
    from pymc_bdmc.model import density as density_module

    def failing(*args, **kwargs):
        raise RuntimeError("this backend cannot compile the loop")

    monkeypatch.setattr(batching, "_compile_loop", failing)
    # Chosen here, where the loop fails: not loaded as recorded, nor chosen by a helper.
    monkeypatch.setattr(density_module, "start_compile_ahead", lambda recipe, label: None)
    rng = np.random.default_rng(2)
    rng.normal(size=5)  # the model's data came first from this stream
    model = kernel_model(5, seed=2)
    density = ModelDensity(model)
    assert density.batching == "vectorized"
    points = rng.normal(scale=0.5, size=(3, density.n_dim))
    parts = density.parts(points)
    logp = model.compile_logp()
    for row, total in zip(points, parts.log_prior + parts.log_likelihood, strict=True):
        np.testing.assert_allclose(total, logp(density.layout.unravel(row)), rtol=1e-10)


def test_beta_variables_are_drawn_exactly_in_log_odds_space():
    # PyMC's Beta(a, b) draws round to exactly 0 for small a (log-odds -inf); drawn as
    # log G_a - log G_b they are finite and exact. Beta(a, 1) has log x = -Exponential(a).
    from scipy import stats

    with pm.Model() as model:
        mu = pm.Beta("mu", 2.0, 3.0)
        pm.Beta("theta", 0.004, 1.0, shape=3)
        pm.Binomial("y", 20, mu, observed=[3])
    density = ModelDensity(model)
    simulator = ModelSimulator(model, density.layout)
    x = simulator.draw_prior(4000, np.random.default_rng(0))
    assert np.all(np.isfinite(x)) and x[:, 1:].min() < -744  # below exp's underflow
    np.testing.assert_array_equal(x[:3], simulator.draw_prior(3, np.random.default_rng(0)))
    assert stats.kstest(1.0 / (1.0 + np.exp(-x[:, 0])), stats.beta(2.0, 3.0).cdf).pvalue > 0.01
    log_theta = -np.logaddexp(0.0, -x[:, 1:].ravel())
    assert stats.kstest(-0.004 * log_theta, stats.expon.cdf).pvalue > 0.01
    assert np.all(np.isfinite(density.parts(x[:50]).log_prior))
    # A joint draw's data and constrained values come from the same log-odds.
    joint = simulator.draw_joint(np.random.default_rng(1))
    assert joint.free["mu"] == pytest.approx(1.0 / (1.0 + np.exp(-joint.x[0])), rel=1e-12)


def test_log_odds_draws_of_a_beta_share_the_draws_it_depends_on():
    # theta ~ Beta(a, 1) with a = exp(mu) kappa has -a log theta ~ Exponential(1) given the
    # very mu and kappa the joint draw reports; a copied upstream draw would break that.
    from scipy import stats

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        kappa = pm.Exponential("kappa", 1.0)
        theta = pm.Beta("theta", pm.math.exp(mu) * kappa, 1.0, shape=3)
        pm.Binomial("y", 20, theta, observed=[1, 2, 3])
    density = ModelDensity(model)
    simulator = ModelSimulator(model, density.layout)
    rng = np.random.default_rng(0)
    statistic = []
    for _ in range(1500):
        joint = simulator.draw_joint(rng)
        log_odds = density.layout.unravel(joint.x)["theta_logodds__"]
        a = np.exp(joint.free["mu"]) * joint.free["kappa"]
        statistic.append(a * np.logaddexp(0.0, -log_odds))  # -a log theta
    assert stats.kstest(np.ravel(statistic), stats.expon.cdf).pvalue > 0.01


def test_gamma_and_inverse_gamma_variables_are_drawn_exactly_in_log_space():
    # BUGS-style Gamma(0.001, 0.001) draws round to exactly 0 in PyMC (most of them); drawn as
    # log G - log b they are finite, with the exact law (scipy's loggamma is that of log G).
    from scipy import stats

    with pm.Model() as model:
        pm.Gamma("g", 2.0, 3.0)
        pm.Gamma("vague", 0.001, 0.001)
        pm.InverseGamma("ig", 3.0, 2.0)
        pm.InverseGamma("ig_small", 0.002, 1.0)
        pm.Normal("y", 0.0, 1.0, observed=[0.1])
    density = ModelDensity(model)
    x = ModelSimulator(model, density.layout).draw_prior(4000, np.random.default_rng(0))
    draws = dict(zip(density.layout.names, x.T, strict=True))
    assert np.all(np.isfinite(x)) and draws["vague_log__"].min() < -744
    checks = [(np.exp(draws["g_log__"]), stats.gamma(2.0, scale=1 / 3.0).cdf),
              (np.exp(draws["ig_log__"]), stats.invgamma(3.0, scale=2.0).cdf),
              (draws["vague_log__"] + np.log(0.001), stats.loggamma(0.001).cdf),
              (-draws["ig_small_log__"], stats.loggamma(0.002).cdf)]
    for values, cdf in checks:
        assert stats.kstest(values, cdf).pvalue > 0.01
    assert np.all(np.isfinite(density.parts(x[:100]).log_prior))


def test_only_shapes_that_may_be_small_leave_pymcs_own_draws():
    from pymc_bdmc.model.simulate import SMALL_SHAPE, unconstrained_draws

    with pm.Model() as model:
        mu = pm.Normal("mu")
        large = pm.Beta("large", 2.0, 3.0)
        small = pm.Beta("small", 2.0, SMALL_SHAPE / 2)
        symbolic = pm.Gamma("symbolic", pm.math.exp(mu), 1.0)
        constant = pm.InverseGamma("constant", 3.0, 2.0)
    transforms = model.rvs_to_transforms
    assert unconstrained_draws(large, transforms[large]) is None
    assert unconstrained_draws(constant, transforms[constant]) is None
    assert unconstrained_draws(small, transforms[small]) is not None
    assert unconstrained_draws(symbolic, transforms[symbolic]) is not None


def test_a_graph_python_mode_cannot_run_keeps_its_vectorized_form():
    # An elementwise op of more than 32 inputs (NumPy's limit for Python-mode Elemwise; the
    # doubling of an AR(1)'s other form once made one) failed the per-chain reference, and the
    # density fell back to the per-chain loop. The reference is now compiled hot there.
    import pytensor.tensor as pt

    from pymc_bdmc.model.density import compile_batched

    x = pt.vector("x")
    outputs = [pt.add(*[x[i % 3] * (i + 1) for i in range(40)]), pt.exp(x)]
    points = np.array([[0.1, 0.2, 0.3], [0.3, -0.4, 1.0], [1.0, 2.0, -1.0]])
    from pymc.pytensorf import compile as compile_pytensor

    fn, batching = compile_batched(compile_pytensor, x, outputs, points)
    assert batching == "vectorized"
    total, _ = fn(points)
    weights = np.array([sum(i + 1 for i in range(40) if i % 3 == j) for j in range(3)])
    np.testing.assert_allclose(total, points @ weights, rtol=1e-12)


def test_the_per_chain_reference_is_unrewritten_and_rechecked_where_that_loses_precision():
    # The vectorized graph is checked against the per-chain graph compiled with no rewrites
    # (fast to compile). log(exp(x)) at x = 800 is inf there, 800 once rewritten: that
    # disagreement is checked again in the fast-compiling mode, which rewrites it, so the graph
    # stays vectorized; a graph that agrees at once needs no second reference.
    import pytensor.tensor as pt
    from pymc.pytensorf import compile as compile_pytensor

    from pymc_bdmc.model.batching import ONE_SHOT_MODE, REFERENCE_MODE, compile_batched

    x = pt.vector("x")
    points = np.array([[0.1, 800.0], [0.3, -0.4], [1.0, 2.0]])
    overflowing = [pt.sum(pt.log(pt.exp(x))), pt.exp(-x)]
    plain = [pt.sum(x), pt.exp(-x)]
    for outputs, modes in ((overflowing, [None, REFERENCE_MODE, ONE_SHOT_MODE]),
                           (plain, [None, REFERENCE_MODE])):
        compiled = []

        def compile_fn(*args, **kwargs):
            compiled.append(kwargs.get("mode"))
            return compile_pytensor(*args, **kwargs)

        fn, batching = compile_batched(compile_fn, x, outputs, points)
        assert batching == "vectorized"
        assert compiled == modes
        total, _ = fn(points)
        np.testing.assert_allclose(total, points.sum(axis=1), rtol=1e-12)


def test_the_per_chain_reference_never_compiles_c_code(monkeypatch):
    # An OpFromGraph (AllocDiag, as in a Cholesky's gradient) links its inner function in
    # PyTensor's default VM, with C thunks: a C++ compiler probe and module lookups that took
    # 0.6 s on the latent GP. The reference is compiled with no C++ compiler configured.
    import pytensor.link.c.op as c_op
    import pytensor.tensor as pt
    from pymc.pytensorf import compile as compile_pytensor

    from pymc_bdmc.model.batching import REFERENCE_MODE, compile_batched

    def no_c_thunks(*args, **kwargs):
        raise RuntimeError("a C thunk was compiled")

    monkeypatch.setattr(c_op.COp, "make_c_thunk", no_c_thunks)
    compiled = []

    def compile_fn(*args, **kwargs):
        compiled.append(kwargs.get("mode"))
        return compile_pytensor(*args, **kwargs)

    x = pt.vector("x")
    points = np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [0.0, -1.0, 2.0]])
    fn, batching = compile_batched(compile_fn, x, [pt.sum(pt.exp(pt.diag(x))), pt.exp(x)],
                                   points)
    assert batching == "vectorized"
    assert compiled == [None, REFERENCE_MODE]
    total, _ = fn(points)
    np.testing.assert_allclose(total, np.exp(points).sum(axis=1) + 6, rtol=1e-12)


def test_a_joint_sampler_that_loops_in_python_compiles_hot_and_draws_the_same(monkeypatch):
    # The fast-compiling backend draws a categorical variable one element at a time, and runs a
    # Scan (pm.AR's simulation) one step at a time, in Python: 0.07 s per 12,000-value mixture
    # data set, 0.01 s per 200-step AR, a hundred of which BDMC's guard draws. From
    # PYTHON_LOOPS' numbers of observed values such a sampler compiles in the default backend,
    # which must draw the same data from the same seed.
    import pymc_bdmc.model.simulate as simulate

    with pm.Model() as model:
        w = pm.Dirichlet("w", np.ones(2))
        mu = pm.Normal("mu", 0, 5, shape=2)
        pm.NormalMixture("y", w=w, mu=mu, sigma=1.0, observed=np.zeros(60))
        pm.OrderedLogistic("grade", eta=mu[0], cutpoints=np.array([-1.0, 1.0]),
                           observed=np.zeros(60, dtype=int))
        pm.AR("series", rho=[pm.Normal("rho", 0, 0.3)], sigma=1.0,
              init_dist=pm.Normal.dist(0, 1), observed=np.zeros(30))
    with pm.Model() as gaussian:
        pm.Normal("y", pm.Normal("m"), 1.0, observed=np.zeros(60))
    thresholds = simulate.PYTHON_LOOPS
    assert simulate.hot_from([model["y"]]) == thresholds[simulate.CategoricalRV]
    assert simulate.hot_from([model["series"]]) == thresholds[simulate.Scan]
    assert simulate.hot_from(gaussian.observed_RVs) == np.inf

    layout = ModelDensity(model, gradients=False).layout
    draws = {}
    for threshold in (10**9, 100):
        monkeypatch.setattr(simulate, "PYTHON_LOOPS", dict.fromkeys(thresholds, threshold))
        simulator = ModelSimulator(model, layout)
        draws[threshold] = simulator.draw_joint(np.random.default_rng(3))
        linker = type(simulator._joint_fn[0].maker.linker).__name__
        assert ("Numba" in linker) == (threshold == 100), linker
    slow, hot = draws[10**9], draws[100]
    np.testing.assert_allclose(hot.x, slow.x, rtol=1e-12)
    np.testing.assert_array_equal(hot.observed["grade"], slow.observed["grade"])
    for name in ("y", "series"):
        np.testing.assert_allclose(hot.observed[name], slow.observed[name], rtol=1e-12,
                                   atol=1e-12)
    assert len(np.unique(slow.observed["grade"])) > 1


def test_a_function_compiled_per_row_stacks_the_rows_even_where_python_mode_cannot_run():
    # compile_per_row (results' constraining) compiles the per-chain graph in the fast-compiling
    # mode and loops over rows; a graph that mode cannot run (an elementwise op of more than 32
    # inputs) is compiled in the default mode instead, with the same values.
    import pytensor.tensor as pt
    from pymc.pytensorf import compile as compile_pytensor

    from pymc_bdmc.model.batching import compile_per_row

    x = pt.vector("x")
    points = np.array([[0.1, 0.2, 0.3], [0.3, -0.4, 1.0], [1.0, 2.0, -1.0], [0.0, 0.5, 2.0]])
    weights = np.array([sum(i + 1 for i in range(40) if i % 3 == j) for j in range(3)])
    wide = [pt.add(*[x[i % 3] * (i + 1) for i in range(40)]), pt.exp(x)]
    plain = [pt.sum(x**2), pt.exp(x)]
    for outputs, first, modes in ((wide, points @ weights, ["FAST_COMPILE", None]),
                                  (plain, np.sum(points**2, axis=1), ["FAST_COMPILE"])):
        compiled = []

        def compile_fn(*args, **kwargs):
            compiled.append(kwargs.get("mode"))
            return compile_pytensor(*args, **kwargs)

        total, exponential = compile_per_row(compile_fn, x, outputs)(points)
        np.testing.assert_allclose(total, first, rtol=1e-12)
        np.testing.assert_allclose(exponential, np.exp(points), rtol=1e-12)
        assert total.shape == (4,) and exponential.shape == (4, 3)
        assert compiled == modes


def test_a_large_batch_is_constrained_by_one_vectorized_call_with_the_per_row_values():
    # Past PER_ROW_LIMIT rows (held-out cases times chains) a Python loop costs more than a
    # vectorized graph: constrain() compiles one on first need, keeps it, and gives the values
    # the per-row function gives row by row.
    from pymc_bdmc.model.batching import PER_ROW_LIMIT
    from pymc_bdmc.model.density import ModelDensity

    with pm.Model() as model:
        scale = pm.HalfNormal("scale", 1.0)
        effect = pm.Normal("effect", 0.0, scale, shape=3)
        pm.Deterministic("total", effect.sum() * scale)
        pm.Normal("y", effect.sum(), 1.0, observed=np.zeros(4))
    density = ModelDensity(model)
    x = np.random.default_rng(0).normal(size=(PER_ROW_LIMIT + 40, density.n_dim))
    few = density.constrain(x[:PER_ROW_LIMIT])
    compilations = density.n_compilations
    many = density.constrain(x)
    assert density.n_compilations > compilations  # the vectorized graph, once
    compilations = density.n_compilations
    again = density.constrain(x[::-1])
    assert density.n_compilations == compilations
    for name in ("scale", "effect", "total"):
        np.testing.assert_allclose(many[name][:PER_ROW_LIMIT], few[name], rtol=1e-12)
        np.testing.assert_allclose(again[name], many[name][::-1], rtol=1e-12)
    np.testing.assert_allclose(many["total"], many["effect"].sum(axis=1) * many["scale"],
                               rtol=1e-12)


def test_graphs_built_here_carry_no_creation_traces_and_the_flag_is_restored():
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", pm.Normal("mu", 0.0, 1.0), sigma, observed=np.array([0.3, -0.1, 0.8]))
    limit = pytensor.config.traceback__limit
    density = compiled_model(model, cache=False).density
    assert pytensor.config.traceback__limit == limit
    nodes = [v.owner for v in ancestors(density.hot_graph[1])
             if v.owner is not None]
    assert nodes and not any(getattr(node.tag, "trace", None) for node in nodes)
    # The user's own graph keeps them (where PyTensor's flags ask for them).
    user_nodes = [v.owner for v in ancestors(model.free_RVs)
                  if v.owner is not None]
    assert limit == 0 or any(getattr(node.tag, "trace", None) for node in user_nodes)


def test_the_densities_mode_adds_into_a_copy_where_numba_may_fuse_a_read_of_the_original():
    # Numba's fusion of indexed reads into elementwise loops runs after the in-place rewrites,
    # and read an in-place AdvancedIncSubtensor's overwritten buffer (a Dirichlet-Categorical
    # model's vectorized gradient came out wrong): the densities compile without that form.
    from pymc.pytensorf import compile as compile_pytensor

    from pymc_bdmc.model.rewrite_cache import compile_function

    v = pt.vector("v", shape=(3,))
    w = pt.exp(pt.concatenate([v, v[:1]]))
    out = pt.inc_subtensor(w[np.array([0, 2, 2])], v) * 2.0

    def in_place(fn):
        return [bool(node.op.destroy_map) for node in fn.maker.fgraph.toposort()
                if type(node.op).__name__ == "AdvancedIncSubtensor"]

    assert in_place(compile_pytensor([v], [out])) == [True]  # PyTensor's default
    fn = compile_function([v], [out])
    assert in_place(fn) == [False]
    np.testing.assert_allclose(fn(np.array([0.1, 0.2, 0.3]))[0],
                               2 * (np.exp([0.1, 0.2, 0.3, 0.1]) + np.array([0.1, 0, 0.5, 0])))


@pytest.mark.slow
def test_a_dirichlet_categorical_model_vectorizes_and_matches_pymc():
    # Its vectorized gradient was miscompiled in PyTensor's default mode (see above): the
    # check fell back to a loop over chains after a wasted compilation (55 s first run).
    rng = np.random.default_rng(5)
    with pm.Model() as model:
        p = pm.Dirichlet("p", np.ones(4))
        pm.Categorical("y", p=p, observed=rng.choice(4, size=100, p=[0.1, 0.2, 0.3, 0.4]))
    density = ModelDensity(model)
    assert density.batching == "vectorized"
    _assert_parts_are_pymcs(model, density, rng)


def test_a_loop_over_chains_whose_rows_depend_on_the_last_call_is_not_used(monkeypatch):
    # One compiled per-chain function on every row cannot give a point other values in
    # another batch, unless it reads what a call before left behind: such a function is no
    # kernel. The vectorized graph serves instead; where nothing else does, the error says so.
    import pytensor.tensor as pt
    from pymc.pytensorf import compile as compile_pytensor

    from pymc_bdmc.model import batching

    real_loop = batching._compile_loop

    def stateful_loop(*args, **kwargs):
        fn, calls = real_loop(*args, **kwargs), [0]

        def leaky(batch, *extra):
            calls[0] += 1
            return [value + calls[0] for value in fn(batch, *extra)]

        return leaky

    monkeypatch.setattr(batching, "_compile_loop", stateful_loop)
    monkeypatch.setattr(batching, "factorizes_per_chain", lambda outputs: True)
    x = pt.vector("x", shape=(3,))
    points = np.array([[0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [0.0, -1.0, 2.0]])
    outputs = [pt.sum(pt.exp(x)), pt.exp(x)]
    fn, form = batching.compile_batched(compile_pytensor, x, outputs, points)
    assert form == "vectorized"
    np.testing.assert_allclose(fn(points)[0], np.exp(points).sum(axis=1), rtol=1e-12)

    def unvectorizable(*args, **kwargs):
        raise ValueError("cannot vectorize")

    monkeypatch.setattr(batching, "vectorize_graph", unvectorizable)
    with pytest.raises(ValueError, match=r"other values in another batch.*FAST_COMPILE"):
        batching.compile_batched(compile_pytensor, x, outputs, points)
