"""Benchmark problems for evidence estimators: the BDMC paper's models on simulated data.

Grosse, Ghahramani & Adams (2015, §6.1) compare marginal-likelihood estimators on three latent
variable models fitted to data simulated from them: clustering, a low-rank approximation and a
binary-attributes model, all with fixed hyperparameters chosen so that the posterior keeps
structure without collapsing onto one explanation. Each factory here simulates ``(theta*, y*)``
exactly (with NumPy, from ``seed``) and returns a :class:`Problem`: the PyMC model conditioned on
``y*`` together with ``theta*``, which is an exact posterior sample given ``y*`` and is what the
reverse-AIS and exact-sample harmonic-mean estimators start from.

The discrete latent variables (cluster assignments, binary attributes) are summed out row by row
inside the likelihood, so every free variable is continuous and the vectorized HMC kernels apply.
The binary-attributes model sums over all ``2**n_attributes`` patterns, which is practical up to
about 10 attributes.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.model.fgraph import ModelObservedRV, fgraph_from_model, model_from_fgraph
from scipy.special import logsumexp

from pymc_bdmc.known_evidence import AnalyticModel
from pymc_bdmc.model.simulate import ModelSimulator
from pymc_bdmc.testbed.gibbs_models import CollapsedLinearGaussian, LowRankGibbs
from pymc_bdmc.testbed.problem import Problem

__all__ = [
    "Problem",
    "binary_attributes",
    "clustering",
    "enumerate_clustering_log_evidence",
    "low_rank",
    "problem_from_analytic",
    "with_observed",
]

logger = logging.getLogger(__name__)


def with_observed(model: pm.Model, data: Mapping[str, np.ndarray]) -> pm.Model:
    """A copy of ``model`` whose observed variables hold ``data`` instead of their data.

    Parameters
    ----------
    model : pm.Model
        Read, never modified.
    data : mapping
        New values by observed-variable name, each with the shape of the old data.

    Returns
    -------
    pm.Model
    """
    fgraph, _ = fgraph_from_model(model, inlined_views=True)
    replacements = []
    for node in fgraph.apply_nodes:
        if isinstance(node.op, ModelObservedRV) and node.op.name in data:
            old = node.inputs[1]
            new = pt.as_tensor_variable(np.asarray(data[node.op.name], dtype=old.dtype))
            if new.type.shape != tuple(old.type.shape) and old.type.shape != (None,) * old.ndim:
                raise ValueError(f"New data for {node.op.name!r} has shape {new.type.shape}, "
                                 f"expected {old.type.shape}.")
            replacements.append((old, new))
    missing = set(data) - {node.op.name for node in fgraph.apply_nodes
                           if isinstance(node.op, ModelObservedRV)}
    if missing:
        raise ValueError(f"{sorted(missing)} are not observed variables of the model.")
    fgraph.replace_all(replacements, import_missing=True)
    return model_from_fgraph(fgraph, mutate_fgraph=True)


def problem_from_analytic(analytic: AnalyticModel, seed: int = 0,
                          name: str | None = None) -> Problem:
    """Simulate ``(theta*, y*)`` from a closed-form model and condition it on ``y*``.

    Parameters
    ----------
    analytic : pymc_bdmc.known_evidence.AnalyticModel
    seed : int, default 0
    name : str, optional

    Returns
    -------
    Problem
        With ``log_evidence`` the exact ``log p(y*)``.
    """
    from pymc_bdmc.model.density import ModelDensity

    layout = ModelDensity(analytic.model, compile_kwargs={"mode": "FAST_COMPILE"}).layout
    # A stream of its own, so that estimators seeded alike never redraw theta*.
    draw = ModelSimulator(analytic.model, layout).draw_joint(np.random.default_rng([seed, 0xDA7A]))
    model = with_observed(analytic.model, draw.observed)
    return Problem(
        name=name or "analytic",
        model=model,
        generating_point=layout.unravel(draw.x),
        log_evidence=analytic.log_evidence(draw.observed),
        info={"seed": seed},
    )


# -- mixtures of spherical Gaussians over rows, with the assignment summed out ---------------------

def _mixture_logp(value, means, log_weights, sigma):
    # One row: value (D,), means (M, D), log_weights (M,): log sum_m w_m N(y | mu_m, sigma^2 I).
    d = value.shape[-1]
    sq = ((value[..., None, :] - means) ** 2).sum(axis=-1)
    comp = -0.5 * sq / sigma**2 - d * (pt.log(sigma) + 0.5 * np.log(2 * np.pi))
    return pt.logsumexp(comp + log_weights, axis=-1)


def _mixture_random(means, log_weights, sigma, rng=None, size=None):
    # Parameters may arrive broadcast to batch dimensions: (*batch, M, D) and (*batch, M).
    means, log_weights = np.asarray(means), np.asarray(log_weights)
    batch = tuple(size) if size else np.broadcast_shapes(means.shape[:-2],
                                                        log_weights.shape[:-1])
    means = np.broadcast_to(means, batch + means.shape[-2:])
    log_weights = np.broadcast_to(log_weights, batch + log_weights.shape[-1:])
    cdf = np.cumsum(np.exp(log_weights - logsumexp(log_weights, axis=-1, keepdims=True)), -1)
    z = np.minimum((rng.random(batch + (1,)) > cdf).sum(-1), cdf.shape[-1] - 1)
    picked = np.take_along_axis(means, z[..., None, None], axis=-2)[..., 0, :]
    return picked + sigma * rng.normal(size=picked.shape)


def _row_mixture(name, means, log_weights, sigma, observed):
    return pm.CustomDist(name, means, log_weights, sigma, logp=_mixture_logp,
                         random=_mixture_random, observed=observed,
                         signature="(m,d),(m),()->(d)", dtype="float64")


def _mixture_log_density(y, means, log_weights, sigma) -> float:
    d = y.shape[-1]
    sq = ((y[:, None, :] - means[None]) ** 2).sum(-1)
    comp = -0.5 * sq / sigma**2 - d * (np.log(sigma) + 0.5 * np.log(2 * np.pi))
    return float(logsumexp(comp + log_weights[None], axis=-1).sum())


def clustering(n_obs: int = 50, n_dim: int = 10, n_clusters: int = 5,
               sigma_theta: float = 1.0, sigma_noise: float = 1.0, seed: int = 0) -> Problem:
    """Mixture of spherical Gaussians with fixed, equal weights and variances (paper §6.1).

    ``theta_kj ~ N(0, sigma_theta^2)``, ``z_i ~ Uniform{1..K}``,
    ``y_ij ~ N(theta_{z_i j}, sigma_noise^2)``; the assignments ``z`` are summed out.

    Parameters
    ----------
    n_obs, n_dim : int, default 50, 10
        Data points and dimensions (the paper used 50 x 25).
    n_clusters : int, default 5
        The paper used 10.
    sigma_theta, sigma_noise : float, default 1.0, 1.0
        Between- and within-cluster standard deviations: the centers are about
        ``sqrt(2 n_dim) sigma_theta`` apart, so clusters overlap partly at the default sizes.
    seed : int, default 0

    Returns
    -------
    Problem
    """
    rng = np.random.default_rng(seed)
    log_w = np.full(n_clusters, -np.log(n_clusters))
    theta = rng.normal(0, sigma_theta, (n_clusters, n_dim))
    y = _mixture_random(theta, log_w, sigma_noise, rng=rng, size=(n_obs,))
    with pm.Model(coords={"cluster": range(n_clusters), "dim": range(n_dim)}) as model:
        centers = pm.Normal("theta", 0.0, sigma_theta, dims=("cluster", "dim"))
        _row_mixture("y", centers, pt.as_tensor(log_w), sigma_noise, y)
    collapsed = CollapsedLinearGaussian(y, sigma_theta, sigma_noise, n_clusters, "assignment",
                                        log_weights=log_w)
    return Problem("clustering", model, {"theta": theta},
                   info=dict(n_obs=n_obs, n_dim=n_dim, n_clusters=n_clusters,
                             sigma_theta=sigma_theta, sigma_noise=sigma_noise, seed=seed),
                   gibbs_model=collapsed, n_exchangeable_components=n_clusters)


def low_rank(n_obs: int = 50, n_dim: int = 10, rank: int = 3, sigma_u: float = 1.0,
             sigma_v: float = 1.0, sigma_noise: float = 1.0, seed: int = 0) -> Problem:
    """Low-rank approximation ``Y = U V + noise`` with Gaussian factors (paper §6.1).

    ``u_ik ~ N(0, sigma_u^2)``, ``v_kj ~ N(0, sigma_v^2)``, ``y_ij ~ N(u_i' v_j, sigma_noise^2)``.

    Parameters
    ----------
    n_obs, n_dim : int, default 50, 10
        The paper used 50 x 25.
    rank : int, default 3
        The paper used 5.
    sigma_u, sigma_v, sigma_noise : float, default 1.0
        Each entry of ``U V`` has variance ``rank sigma_u^2 sigma_v^2``, against unit noise.
    seed : int, default 0

    Returns
    -------
    Problem
    """
    rng = np.random.default_rng(seed)
    u = rng.normal(0, sigma_u, (n_obs, rank))
    v = rng.normal(0, sigma_v, (rank, n_dim))
    y = u @ v + rng.normal(0, sigma_noise, (n_obs, n_dim))
    with pm.Model(coords={"obs": range(n_obs), "factor": range(rank),
                          "dim": range(n_dim)}) as model:
        uu = pm.Normal("U", 0.0, sigma_u, dims=("obs", "factor"))
        vv = pm.Normal("V", 0.0, sigma_v, dims=("factor", "dim"))
        pm.Normal("y", uu @ vv, sigma_noise, observed=y, dims=("obs", "dim"))
    # The paper's VB correction counts the rank! factor permutations (it ignores sign flips
    # and the continuous rotations U R, R^-1 V, which also leave the likelihood unchanged).
    return Problem("low_rank", model, {"U": u, "V": v},
                   info=dict(n_obs=n_obs, n_dim=n_dim, rank=rank, sigma_u=sigma_u,
                             sigma_v=sigma_v, sigma_noise=sigma_noise, seed=seed),
                   gibbs_model=LowRankGibbs(y, rank, sigma_u, sigma_v, sigma_noise),
                   n_exchangeable_components=rank)


def binary_patterns(n_attributes: int) -> np.ndarray:
    """All ``2**n_attributes`` binary rows, shape ``(2**n_attributes, n_attributes)``."""
    return np.array(list(itertools.product([0.0, 1.0], repeat=n_attributes)))


def binary_attributes(n_obs: int = 50, n_dim: int = 10, n_attributes: int = 3,
                      p_attribute: float = 0.3, sigma_a: float = 1.0, sigma_noise: float = 0.5,
                      seed: int = 0, discrete: bool = False) -> Problem:
    """Binary attributes ``Y = Z A + noise`` (paper §6.1), ``Z`` summed out or sampled.

    ``z_ik ~ Bernoulli(p_attribute)``, ``a_kj ~ N(0, sigma_a^2)``,
    ``y_ij ~ N(sum_k z_ik a_kj, sigma_noise^2)``. By default each row's likelihood is a mixture
    over the ``2**n_attributes`` patterns of ``z_i``, with means ``patterns @ A``; with
    ``discrete=True``, ``Z`` is a free ``Bernoulli`` matrix (the discrete path: Gibbs updates of
    ``Z``, HMC on ``A``). Both are the same model, with the same data and evidence.

    Parameters
    ----------
    n_obs, n_dim : int, default 50, 10
        The paper used 50 x 25.
    n_attributes : int, default 3
        The paper used 10 (1024 patterns per row: slow, but supported).
    p_attribute : float, default 0.3
    sigma_a, sigma_noise : float, default 1.0, 0.5
    seed : int, default 0
    discrete : bool, default False
        Keep ``Z`` as a free discrete variable instead of summing it out.

    Returns
    -------
    Problem
    """
    rng = np.random.default_rng(seed)
    a = rng.normal(0, sigma_a, (n_attributes, n_dim))
    z = (rng.random((n_obs, n_attributes)) < p_attribute).astype(float)
    y = z @ a + rng.normal(0, sigma_noise, (n_obs, n_dim))
    coords = {"obs": range(n_obs), "attribute": range(n_attributes), "dim": range(n_dim)}
    with pm.Model(coords=coords) as model:
        aa = pm.Normal("A", 0.0, sigma_a, dims=("attribute", "dim"))
        if discrete:
            zz = pm.Bernoulli("Z", p_attribute, dims=("obs", "attribute"))
            pm.Normal("y", pt.cast(zz, "float64") @ aa, sigma_noise, observed=y,
                      dims=("obs", "dim"))
        else:
            patterns = binary_patterns(n_attributes)
            log_w = (patterns * np.log(p_attribute)
                     + (1 - patterns) * np.log1p(-p_attribute)).sum(1)
            _row_mixture("y", pt.as_tensor(patterns) @ aa, pt.as_tensor(log_w), sigma_noise, y)
    collapsed = CollapsedLinearGaussian(y, sigma_a, sigma_noise, n_attributes, "binary",
                                        p_attribute=p_attribute)
    truth = {"A": a, "Z": z.astype(np.int64)} if discrete else {"A": a}
    return Problem("binary_attributes", model, truth,
                   info=dict(n_obs=n_obs, n_dim=n_dim, n_attributes=n_attributes,
                             p_attribute=p_attribute, sigma_a=sigma_a,
                             sigma_noise=sigma_noise, seed=seed),
                   gibbs_model=collapsed, n_exchangeable_components=n_attributes)


def enumerate_clustering_log_evidence(problem: Problem) -> float:
    """Exact ``log p(y)`` of a small :func:`clustering` problem by enumerating assignments.

    Given the assignments ``z``, each column of ``Y`` is Gaussian with covariance
    ``sigma_noise^2 I + sigma_theta^2 Z Z'`` (the centers integrated out), so
    ``p(y) = K^-N sum_z prod_j N(y_j | 0, C_z)``: ``K**N`` terms, for tests on tiny problems.

    Parameters
    ----------
    problem : Problem
        From :func:`clustering`, with ``n_clusters ** n_obs`` at most about ``10**5``.

    Returns
    -------
    float
    """
    info = problem.info
    y = problem.observed["y"]
    n, k = y.shape[0], info["n_clusters"]
    if k**n > 200_000:
        raise ValueError(f"{k}**{n} assignments are too many to enumerate.")
    terms = []
    for z in itertools.product(range(k), repeat=n):
        same = np.equal.outer(z, z).astype(float)
        cov = info["sigma_noise"] ** 2 * np.eye(n) + info["sigma_theta"] ** 2 * same
        chol = np.linalg.cholesky(cov)
        sol = np.linalg.solve(chol, y)
        terms.append(-0.5 * np.sum(sol**2) - y.shape[1] * (np.log(np.diag(chol)).sum()
                                                          + 0.5 * n * np.log(2 * np.pi)))
    return float(logsumexp(terms) - n * np.log(k))
