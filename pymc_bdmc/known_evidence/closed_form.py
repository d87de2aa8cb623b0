"""Models with closed-form evidence, for testing evidence estimators.

Each factory returns an :class:`AnalyticModel`: a ``pm.Model`` and a function giving the exact
``log p(y)`` for *any* data set of the right shape, so that bounds on simulated data ``y*`` (from
:func:`pymc_bdmc.sample_bdmc`) can be checked against the truth as well as bounds on the data the
model was built with. The models are conjugate, so each also draws exactly from every tempered
posterior ``p(theta) p(y|theta)^beta / Z_beta`` (:meth:`AnalyticModel.sample_tempered`), which is
what :mod:`pymc_bdmc.verification` needs to test kernels at ``0 < beta < 1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pymc as pm
import scipy
from scipy.special import betaln, gammaln, logsumexp

__all__ = [
    "AnalyticModel",
    "beta_binomial",
    "binary_attribute",
    "categorical_mixture",
    "gamma_poisson",
    "linear_regression",
    "normal_inverse_gamma_regression",
]


@dataclass(frozen=True)
class AnalyticModel:
    """A PyMC model together with its exact log evidence.

    Attributes
    ----------
    model : pm.Model
    log_evidence_fn : callable
        ``log_evidence_fn(observed)``: the exact ``log p(y)`` of ``observed``, a mapping from
        observed-variable name to data. Call it through :meth:`log_evidence`, which defaults to
        the data the model was built with.
    data : dict
        The data the model was built with.
    constants : dict
        Covariates and hyperparameters (e.g. the design matrix ``x``), for exact posteriors.
    tempered_sampler : callable, optional
        ``tempered_sampler(beta, observed, n, rng)``: exact draws of the tempered posterior; see
        :meth:`sample_tempered`.
    """

    model: pm.Model
    log_evidence_fn: Callable[[Mapping[str, np.ndarray]], float]
    data: dict
    constants: dict = field(default_factory=dict)
    tempered_sampler: Callable | None = None

    def sample_tempered(self, beta: float, n: int, rng: np.random.Generator,
                        observed: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Exact draws from ``p(theta) p(y|theta)^beta / Z_beta`` (``beta=0``: the prior).

        Parameters
        ----------
        beta : float
            Inverse temperature in [0, 1].
        n : int
            Number of independent draws.
        rng : numpy.random.Generator
        observed : mapping, optional
            Data ``y`` (default: the model's own data).

        Returns
        -------
        dict
            Unconstrained values keyed by *value-variable* name (e.g. ``sigma2_log__``), each
            of shape ``(n, *shape)``: the space the compiled densities and kernels work in.
        """
        if self.tempered_sampler is None:
            raise NotImplementedError("This model has no exact tempered-posterior sampler.")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"beta must be in [0, 1], got {beta}.")
        return self.tempered_sampler(beta, self.data if observed is None else observed, n, rng)

    def log_evidence(self, observed: Mapping[str, np.ndarray] | None = None) -> float:
        """Exact ``log p(y)`` of ``observed`` (default: the model's own data)."""
        return float(self.log_evidence_fn(self.data if observed is None else observed))

    def log_evidence_of(self, result) -> float:
        """Exact ``log p(y)`` of the data recorded in a result's ``observed_data`` group."""
        obs = result["observed_data"]
        return self.log_evidence({name: obs[name].values for name in self.data})


def linear_regression(n_obs: int = 50, n_coef: int = 5, prior_sd: float = 2.0,
                      noise_sd: float = 0.5, seed: int = 0) -> AnalyticModel:
    """``w ~ N(0, prior_sd^2 I)``, ``y ~ N(X w, noise_sd^2 I)``: ``y ~ N(0, s^2 I + t^2 X X')``.

    Here ``s = noise_sd`` and ``t = prior_sd``.

    Parameters
    ----------
    n_obs : int, default 50
        Number of observations (rows of the design matrix ``X``).
    n_coef : int, default 5
        Number of coefficients (columns of ``X``, whose entries are standard normal).
    prior_sd : float, default 2.0
        Prior standard deviation of each coefficient.
    noise_sd : float, default 0.5
        Known noise standard deviation.
    seed : int, default 0
        Seeds ``X`` and the data, which are drawn from the model itself.

    Returns
    -------
    AnalyticModel
        With exact tempered posteriors (Gaussian).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, n_coef))
    y = x @ rng.normal(0, prior_sd, n_coef) + rng.normal(0, noise_sd, n_obs)
    with pm.Model(coords={"coef": np.arange(n_coef), "obs": np.arange(n_obs)}) as model:
        w = pm.Normal("w", 0.0, prior_sd, dims="coef")
        pm.Normal("y", pm.math.dot(x, w), noise_sd, observed=y, dims="obs")

    def log_evidence(observed):
        return gaussian_regression_log_evidence(np.asarray(observed["y"], dtype=float), x,
                                                prior_sd, noise_sd)

    def tempered(beta, observed, n, rng):
        # Precision I/t^2 + beta X'X/s^2: the likelihood's precision scaled by beta.
        precision = np.eye(n_coef) / prior_sd**2 + beta * x.T @ x / noise_sd**2
        cov_beta = np.linalg.inv(precision)
        mean = cov_beta @ (beta * x.T @ np.asarray(observed["y"]) / noise_sd**2)
        return {"w": _mvn(rng, mean, cov_beta, n)}

    return AnalyticModel(model, log_evidence, {"y": y},
                         {"x": x, "prior_sd": prior_sd, "noise_sd": noise_sd}, tempered)


def gaussian_regression_log_evidence(y: np.ndarray, x: np.ndarray, prior_sd: float,
                                     noise_sd: float) -> float:
    """``log N(y; 0, s^2 I + t^2 X X')`` in ``O(n p^2)``, without the ``n x n`` covariance.

    With ``A = (s/t)^2 I + X'X`` (``p x p``), Woodbury and the determinant lemma give
    ``y' C^-1 y = (y'y - y'X A^-1 X'y) / s^2`` and
    ``log det C = 2 (n - p) log s + 2 p log t + log det A``.
    """
    n, p = x.shape
    factor = np.linalg.cholesky((noise_sd / prior_sd) ** 2 * np.eye(p) + x.T @ x)
    projected = np.linalg.solve(factor, x.T @ y)  # L^-1 X'y: y'X A^-1 X'y = |L^-1 X'y|^2
    quadratic = (y @ y - projected @ projected) / noise_sd**2
    log_det = (2 * (n - p) * np.log(noise_sd) + 2 * p * np.log(prior_sd)
               + 2 * np.log(np.diag(factor)).sum())
    return float(-0.5 * (quadratic + log_det + n * np.log(2 * np.pi)))


def normal_inverse_gamma_regression(n_obs: int = 30, n_coef: int = 3, a: float = 3.0,
                                    b: float = 2.0, prior_scale: float = 1.5,
                                    seed: int = 0) -> AnalyticModel:
    """Regression with unknown noise variance; exercises a log transform and its Jacobian.

    ``sigma2 ~ InvGamma(a, b)``, ``w | sigma2 ~ N(0, sigma2 c^2 I)``,
    ``y ~ N(X w, sigma2 I)``. Marginally ``y ~ t_{2a}(0, (b/a) (I + c^2 X X'))``.

    Parameters
    ----------
    n_obs : int, default 30
        Number of observations (rows of the standard normal design matrix ``X``).
    n_coef : int, default 3
        Number of coefficients.
    a, b : float, default 3.0 and 2.0
        Shape and scale of the inverse-gamma prior on the noise variance ``sigma2``.
    prior_scale : float, default 1.5
        ``c``: prior standard deviation of the coefficients in units of the noise standard
        deviation.
    seed : int, default 0
        Seeds ``X`` and the data, which are drawn from the model itself.

    Returns
    -------
    AnalyticModel
        With exact tempered posteriors (normal-inverse-gamma).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_obs, n_coef))
    sigma2 = scipy.stats.invgamma(a, scale=b).rvs(random_state=rng)
    w_true = rng.normal(0, np.sqrt(sigma2) * prior_scale, n_coef)
    y = x @ w_true + rng.normal(0, np.sqrt(sigma2), n_obs)
    shape = (b / a) * (np.eye(n_obs) + prior_scale**2 * x @ x.T)
    with pm.Model() as model:
        s2 = pm.InverseGamma("sigma2", alpha=a, beta=b)
        w = pm.Normal("w", 0.0, pm.math.sqrt(s2) * prior_scale, shape=n_coef)
        pm.Normal("y", pm.math.dot(x, w), pm.math.sqrt(s2), observed=y)

    def log_evidence(observed):
        return scipy.stats.multivariate_t(np.zeros(n_obs), shape, df=2 * a).logpdf(observed["y"])

    def tempered(beta, observed, n, rng):
        # Conjugate with X -> sqrt(beta) X, y -> sqrt(beta) y, and n -> beta n in sigma2's shape.
        yy = np.asarray(observed["y"], dtype=float)
        v_inv = np.eye(n_coef) / prior_scale**2 + beta * x.T @ x
        v = np.linalg.inv(v_inv)
        m = v @ (beta * x.T @ yy)
        a_beta = a + 0.5 * beta * n_obs
        b_beta = b + 0.5 * (beta * yy @ yy - m @ v_inv @ m)
        sigma2 = b_beta / rng.gamma(a_beta, size=n)
        w = m + np.sqrt(sigma2)[:, None] * _mvn(rng, np.zeros(n_coef), v, n)
        return {"sigma2_log__": np.log(sigma2), "w": w}

    return AnalyticModel(model, log_evidence, {"y": y}, {"x": x}, tempered)


def beta_binomial(trials=(20, 15, 30, 10), a: float = 2.0, b: float = 3.0,
                  seed: int = 0) -> AnalyticModel:
    """``p ~ Beta(a, b)``, ``k_i ~ Binomial(n_i, p)``; exercises the interval (logit) transform.

    Parameters
    ----------
    trials : sequence of int, default (20, 15, 30, 10)
        ``n_i``, the number of trials of each observation.
    a, b : float, default 2.0 and 3.0
        Parameters of the beta prior on the success probability ``p``.
    seed : int, default 0
        Seeds the data, which are drawn from the model itself.

    Returns
    -------
    AnalyticModel
        With exact tempered posteriors (beta).
    """
    rng = np.random.default_rng(seed)
    n = np.asarray(trials)
    k = rng.binomial(n, rng.beta(a, b))
    with pm.Model() as model:
        p = pm.Beta("p", a, b)
        pm.Binomial("k", n=n, p=p, observed=k)

    def log_evidence(observed):
        kk = np.asarray(observed["k"])
        log_choose = gammaln(n + 1) - gammaln(kk + 1) - gammaln(n - kk + 1)
        return (log_choose.sum() + betaln(a + kk.sum(), b + (n - kk).sum()) - betaln(a, b))

    def tempered(beta, observed, size, rng):
        kk = np.asarray(observed["k"])
        p = rng.beta(a + beta * kk.sum(), b + beta * (n - kk).sum(), size=size)
        return {"p_logodds__": np.log(p) - np.log1p(-p)}

    return AnalyticModel(model, log_evidence, {"k": k}, {}, tempered)


def gamma_poisson(n_obs: int = 20, a: float = 2.0, b: float = 0.5,
                  seed: int = 0) -> AnalyticModel:
    """``rate ~ Gamma(a, b)``, ``y_i ~ Poisson(rate)``; a log-transformed rate.

    Parameters
    ----------
    n_obs : int, default 20
        Number of counts.
    a, b : float, default 2.0 and 0.5
        Shape and rate of the gamma prior on ``rate``.
    seed : int, default 0
        Seeds the data, which are drawn from the model itself.

    Returns
    -------
    AnalyticModel
        With exact tempered posteriors (gamma).
    """
    rng = np.random.default_rng(seed)
    y = rng.poisson(rng.gamma(a, 1 / b), n_obs)
    with pm.Model() as model:
        rate = pm.Gamma("rate", alpha=a, beta=b)
        pm.Poisson("y", rate, observed=y)

    def log_evidence(observed):
        yy = np.asarray(observed["y"])
        s = yy.sum()
        return (-gammaln(yy + 1).sum() + a * np.log(b) - gammaln(a) + gammaln(a + s)
                - (a + s) * np.log(b + len(yy)))

    def tempered(beta, observed, size, rng):
        yy = np.asarray(observed["y"])
        rate = rng.gamma(a + beta * yy.sum(), 1.0 / (b + beta * len(yy)), size=size)
        return {"rate_log__": np.log(rate)}

    return AnalyticModel(model, log_evidence, {"y": y}, {}, tempered)


def _mvn(rng: np.random.Generator, mean: np.ndarray, cov: np.ndarray, n: int) -> np.ndarray:
    """``n`` draws of N(mean, cov) through a Cholesky factor, shape (n, dim)."""
    return mean + rng.standard_normal((n, len(mean))) @ np.linalg.cholesky(cov).T


def _log_dirichlet_multinomial(counts: np.ndarray, alpha: np.ndarray) -> float:
    """``log p(z)`` of one assignment with category counts ``counts``, ``w ~ Dirichlet(alpha)``."""
    return float(gammaln(alpha.sum()) - gammaln(counts.sum() + alpha.sum())
                 + np.sum(gammaln(counts + alpha) - gammaln(alpha)))


def _log_normal_marginal(y: np.ndarray, prior_sd: float, noise_sd: float) -> float:
    """``log N(y; 0, noise_sd^2 I + prior_sd^2 11')``: points sharing one N(0, prior_sd^2) mean."""
    n = len(y)
    if n == 0:
        return 0.0
    # Sherman-Morrison: closed forms of the determinant and the quadratic form.
    s2, t2 = noise_sd**2, prior_sd**2
    logdet = n * np.log(s2) + np.log1p(n * t2 / s2)
    quad = (y @ y) / s2 - t2 * y.sum() ** 2 / (s2 * (s2 + n * t2))
    return float(-0.5 * (n * np.log(2 * np.pi) + logdet + quad))


def categorical_mixture(n_obs: int = 6, n_components: int = 2, prior_sd: float = 3.0,
                        noise_sd: float = 1.0, concentration: float = 1.0,
                        seed: int = 0) -> AnalyticModel:
    """A Gaussian mixture with explicit categorical assignments; evidence by enumeration.

    ``w ~ Dirichlet(concentration)``, ``mu_k ~ N(0, prior_sd^2)``, ``z_i ~ Categorical(w)``,
    ``y_i ~ N(mu_{z_i}, noise_sd^2)``. For each of the ``K^N`` assignments, ``w`` integrates to
    a Dirichlet-multinomial and each cluster's mean to a Gaussian marginal, so
    ``log p(y) = logsumexp_z [log p(z) + sum_k log p(y_{z=k})]`` exactly. Keep ``K^N`` small.

    Parameters
    ----------
    n_obs : int, default 6
        ``N``, the number of observations (and of discrete assignments ``z_i``).
    n_components : int, default 2
        ``K``, the number of mixture components.
    prior_sd : float, default 3.0
        Prior standard deviation of the component means.
    noise_sd : float, default 1.0
        Known standard deviation within a component.
    concentration : float, default 1.0
        Parameter of the symmetric Dirichlet prior on the weights.
    seed : int, default 0
        Seeds the data, which are drawn from the model itself.

    Returns
    -------
    AnalyticModel
        Without a tempered-posterior sampler; the model has discrete free variables ``z``.
    """
    rng = np.random.default_rng(seed)
    alpha = np.full(n_components, float(concentration))
    mu = rng.normal(0, prior_sd, n_components)
    z = rng.choice(n_components, size=n_obs, p=rng.dirichlet(alpha))
    y = rng.normal(mu[z], noise_sd)
    with pm.Model(coords={"obs": np.arange(n_obs)}) as model:
        w = pm.Dirichlet("w", alpha)
        means = pm.Normal("mu", 0.0, prior_sd, shape=n_components)
        assignment = pm.Categorical("z", p=w, dims="obs")
        pm.Normal("y", means[assignment], noise_sd, observed=y, dims="obs")

    assignments = np.array(list(np.ndindex(*([n_components] * n_obs))))

    def log_evidence(observed):
        yy = np.asarray(observed["y"], dtype=float)
        terms = []
        for zz in assignments:
            counts = np.bincount(zz, minlength=n_components)
            terms.append(_log_dirichlet_multinomial(counts, alpha) + sum(
                _log_normal_marginal(yy[zz == k], prior_sd, noise_sd)
                for k in range(n_components)))
        return float(logsumexp(terms))

    return AnalyticModel(model, log_evidence, {"y": y})


def binary_attribute(n_obs: int = 8, effect_sd: float = 2.0, noise_sd: float = 0.7,
                     a: float = 1.0, b: float = 1.0, seed: int = 0) -> AnalyticModel:
    """Items with a latent binary attribute shifting their response; evidence by enumeration.

    ``p ~ Beta(a, b)``, ``z_i ~ Bernoulli(p)``, ``effect ~ N(0, effect_sd^2)``,
    ``y_i ~ N(effect * z_i, noise_sd^2)``. For each of the ``2^N`` attribute vectors, ``p``
    integrates to a Beta-Bernoulli term and ``effect`` to a Gaussian marginal over the items
    with ``z_i = 1`` (the others are pure noise).

    Parameters
    ----------
    n_obs : int, default 8
        ``N``, the number of items (and of binary attributes ``z_i``).
    effect_sd : float, default 2.0
        Prior standard deviation of the shared effect.
    noise_sd : float, default 0.7
        Known noise standard deviation.
    a, b : float, default 1.0 and 1.0
        Parameters of the beta prior on the attribute probability ``p``.
    seed : int, default 0
        Seeds the data, which are drawn from the model itself.

    Returns
    -------
    AnalyticModel
        Without a tempered-posterior sampler; the model has discrete free variables ``z``.
    """
    rng = np.random.default_rng(seed)
    z = rng.binomial(1, rng.beta(a, b), n_obs)
    y = rng.normal(rng.normal(0, effect_sd) * z, noise_sd)
    with pm.Model() as model:
        p = pm.Beta("p", a, b)
        attribute = pm.Bernoulli("z", p, shape=n_obs)
        effect = pm.Normal("effect", 0.0, effect_sd)
        pm.Normal("y", effect * attribute, noise_sd, observed=y)

    configurations = np.array(list(np.ndindex(*([2] * n_obs))), dtype=bool)

    def log_evidence(observed):
        yy = np.asarray(observed["y"], dtype=float)
        noise = scipy.stats.norm(0, noise_sd).logpdf(yy)
        terms = []
        for zz in configurations:
            ones = int(zz.sum())
            terms.append(betaln(a + ones, b + n_obs - ones) - betaln(a, b)
                         + noise[~zz].sum() + _log_normal_marginal(yy[zz], effect_sd, noise_sd))
        return float(logsumexp(terms))

    return AnalyticModel(model, log_evidence, {"y": y})


def switchpoint_poisson(n_obs: int = 30, rate: float = 1.0, seed: int = 0,
                        counts: np.ndarray | None = None) -> AnalyticModel:
    """Build counts whose Poisson rate changes at an unknown time; evidence by enumeration.

    The coal-mining disasters model of PyMC's documentation: ``s ~ DiscreteUniform(0, N - 1)``,
    ``early, late ~ Exponential(rate)``, ``y_t ~ Poisson(early if t <= s else late)``. For each
    ``s``, each rate integrates against its counts to ``Gamma(S + 1) / (n + rate)^(S + 1)``
    (``S`` the counts' sum, ``n`` their number), so ``log p(y)`` is a sum over ``N`` values.
    The switchpoint touches every count's term, each only where it crosses that count's time.

    Parameters
    ----------
    n_obs : int, default 30
        ``N``, the number of counts (and of values of the switchpoint).
    rate : float, default 1.0
        Rate of the exponential priors on the two Poisson rates.
    seed : int, default 0
        Seeds the data, which are drawn from the model itself ...
    counts : array of int, optional
        ... unless given (then ``n_obs`` is their number), e.g. the British coal-mining
        disasters per year, 1851-1962, of PyMC's example.

    Returns
    -------
    AnalyticModel
        Without a tempered-posterior sampler; the model has the discrete free variable
        ``switchpoint``.
    """
    rng = np.random.default_rng(seed)
    n_obs = n_obs if counts is None else len(counts)
    times = np.arange(n_obs)
    early, late = rng.exponential(1.0 / rate, 2)
    y = (rng.poisson(np.where(times <= rng.integers(n_obs), early, late)) if counts is None
         else np.asarray(counts, dtype=np.int64))
    with pm.Model() as model:
        switchpoint = pm.DiscreteUniform("switchpoint", lower=0, upper=n_obs - 1)
        early_rate = pm.Exponential("early_rate", rate)
        late_rate = pm.Exponential("late_rate", rate)
        pm.Poisson("y", pm.math.switch(switchpoint >= times, early_rate, late_rate), observed=y)

    def log_evidence(observed):
        yy = np.asarray(observed["y"])
        before = np.cumsum(yy)  # counts up to and including each time
        total, count = before[-1], np.arange(1, n_obs + 1)
        terms = []
        for summed, n in ((before, count), (total - before, n_obs - count)):
            terms.append(np.log(rate) + gammaln(summed + 1) - (summed + 1) * np.log(n + rate))
        return float(logsumexp(terms[0] + terms[1]) - np.log(n_obs) - gammaln(yy + 1).sum())

    return AnalyticModel(model, log_evidence, {"y": y})
