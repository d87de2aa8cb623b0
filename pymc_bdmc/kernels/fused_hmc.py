"""The HMC transition of :mod:`pymc_bdmc.kernels.hmc` compiled into one function.

On small models most of a NumPy HMC transition is Python: some thirty array operations of a
few microseconds each around every model call. Here the whole trajectory (leapfrog steps as a
``scan`` over the batched model graph), the energy and the accept/reject are one compiled
PyTensor function, so a transition costs one call and little more than its model evaluations.

It is the same Markov kernel, not an approximation: the random numbers (step-size jitter,
momentum, accept/reject uniforms) are drawn in NumPy from the chains' own streams in exactly
the order :func:`~pymc_bdmc.kernels.hmc.hmc_step` draws them, and passed in. The two agree to
floating-point round-off (``tests/test_fused_hmc.py``), so seeds, chain splitting and the
validity of both bounds are unchanged. Compiling costs about one more compilation of the model's
densities, which only long runs repay; :mod:`pymc_bdmc.pipeline.execution` decides when.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import vectorize_graph

from pymc_bdmc.kernels.hmc import (
    DIVERGENCE_THRESHOLD,
    HMCInfo,
    HMCParams,
    draw_transition_noise,
    started_finite,
)
from pymc_bdmc.model.batching import (
    checks_to_switches,
    register_fused_kernel,
    without_stack_traces,
)
from pymc_bdmc.model.layout import DensityParts

if TYPE_CHECKING:
    from pymc_bdmc.kernels.base_distribution import GaussianBase

__all__ = ["FusedHMC"]


class FusedHMC:
    """One compiled HMC transition over a batch of chains.

    Each form of the kernel is compiled on first use and kept: a diagonal or a dense inverse
    mass matrix (:class:`~pymc_bdmc.kernels.hmc.HMCParams` ``mass_factor``), on the prior's
    path or on the path from a fitted Gaussian base
    (:class:`~pymc_bdmc.kernels.base_distribution.GaussianBase`, whose arrays are inputs, so one
    compilation serves every fitted base of any rank).

    Parameters
    ----------
    x : TensorVariable
        The flat parameter vector the per-chain graph ``outputs`` is a function of.
    outputs : sequence of TensorVariable
        Per-chain ``[log_prior, log_likelihood, grad_log_prior, grad_log_likelihood]``, whose
        vectorized version was validated against it (``batching == "vectorized"``).
    compile_fn : callable
        ``(inputs, outputs) -> function`` (the owning density's compiler and settings).
    count : callable, optional
        Called with the number of model evaluations of each transition (cost accounting).
    """

    def __init__(self, x, outputs: Sequence, compile_fn: Callable,
                 count: Callable[[int], None] | None = None):
        self._x = x
        self._outputs = checks_to_switches(list(outputs))
        self._compile_fn = compile_fn
        self._fns: dict[tuple[bool, bool, bool], Callable] = {}
        self._count = count
        self._cache: dict[int, np.ndarray] = {}

    def is_compiled(self, *, dense: bool = False, base: bool = False,
                    principal: bool = False) -> bool:
        """Whether this form of the kernel is compiled already (so using it costs nothing more)."""
        return (dense, base, principal) in self._fns

    def compiled(self, *, dense: bool = False, base: bool = False,
                 principal: bool = False) -> Callable:
        """The compiled function of one form of the kernel (compiling it the first time).

        ``principal`` (with ``dense`` and ``base``): the metric is a vector ``w``, the factor
        ``A diag(w)`` in the base's principal coordinates (:class:`~.hmc.HMCParams`).
        """
        key = (dense, base, principal)
        if key not in self._fns:
            build = _principal_graph if principal else _transition_graph
            kwargs = {} if principal else {"dense": dense, "base": base}
            with without_stack_traces():
                self._fns[key] = self._compile_fn(*build(self._x, self._outputs, **kwargs))
        return self._fns[key]

    def step(self, rng, x: np.ndarray, parts: DensityParts, beta: float,
             params: HMCParams, base: GaussianBase | None = None,
             ) -> tuple[np.ndarray, DensityParts, HMCInfo]:
        """Same contract as :func:`~pymc_bdmc.kernels.hmc.hmc_step`, without ``parts_fn``.

        With ``base``, ``parts`` and the returned parts are those of the path from ``base``
        (:meth:`GaussianBase.rebase`), as :func:`hmc_step` with ``base.parts_fn(...)`` would.
        """
        # The same draws as hmc_step; their transformations (momentum scale, log of the
        # uniform) are compiled.
        eps, normals, uniforms = draw_transition_noise(rng, x.shape, params)
        dense = params.mass_factor is not None
        metric = params.mass_factor if dense else params.inv_mass
        principal = dense and metric.ndim == 1
        if principal and (base is None or not base.full_rank):
            raise ValueError("The compiled principal-coordinate metric needs a path from a "
                             "full-rank base.")
        extra = (() if base is None else base.principal_inputs() if principal
                 else base.kernel_inputs())
        form = {"dense": dense, "base": base is not None, "principal": principal}
        (x_new, prior, lik, grad_prior, grad_lik, accepted, acceptance_rate,
         divergent) = self.compiled(**form)(
            np.ascontiguousarray(x, dtype=float), normals, eps, metric, np.float64(beta),
            parts.log_prior, parts.log_likelihood, parts.grad_log_prior,
            parts.grad_log_likelihood, uniforms, self._coefficients(params.n_leapfrog), *extra)
        if self._count is not None:
            self._count(params.n_leapfrog)
        return (x_new, DensityParts(prior, lik, grad_prior, grad_lik),
                HMCInfo(acceptance_rate, accepted, divergent & started_finite(parts)))

    def _coefficients(self, n_leapfrog: int) -> np.ndarray:
        # Momentum updates along the trajectory in units of the step: 1, ..., 1, then a half.
        coefficients = self._cache.get(n_leapfrog)
        if coefficients is None:
            coefficients = np.ones(n_leapfrog)
            coefficients[-1] = 0.5
            self._cache[n_leapfrog] = coefficients
        return coefficients


def _transition_graph(x, outputs, *, dense: bool = False, base: bool = False):
    """Inputs and outputs of one batched HMC transition (see :func:`hmc_step` for the maths).

    ``dense``: the metric input is the factor ``L`` of a dense inverse mass matrix and the
    momentum is kept whitened, as in :func:`~pymc_bdmc.kernels.hmc.hmc_step`'s dense form.
    ``base``: the densities are those of the path from a Gaussian base (five more inputs,
    :meth:`GaussianBase.kernel_inputs`; :meth:`GaussianBase.rebase`).
    """
    q0 = pt.matrix("q0", dtype=x.dtype)
    normals = pt.matrix("standard_normals", dtype=x.dtype)
    eps = pt.vector("eps", dtype=x.dtype)
    metric = (pt.matrix("mass_factor", dtype=x.dtype) if dense
              else pt.vector("inv_mass", dtype=x.dtype))
    beta = pt.scalar("beta", dtype=x.dtype)
    prior0, lik0 = pt.vector("log_prior0"), pt.vector("log_likelihood0")
    grad_prior0, grad_lik0 = pt.matrix("grad_log_prior0"), pt.matrix("grad_log_likelihood0")
    uniforms = pt.vector("uniforms")
    coefficients = pt.vector("momentum_coefficients")  # 1, ..., 1, 0.5 (one per leapfrog)
    base_inputs = ([pt.vector("base_mean", dtype=x.dtype),
                    pt.vector("base_inverse_scale", dtype=x.dtype),
                    pt.matrix("base_basis", dtype=x.dtype),
                    pt.vector("base_inverse_eigenvalues", dtype=x.dtype),
                    pt.scalar("base_log_norm", dtype=x.dtype)] if base else [])
    step = eps[:, None]
    if dense:
        # Whitened momentum r = L^T p ~ N(0, I): moves eps L r, kicks eps L^T grad.
        momentum = normals

        def drift(p):
            return step * (p @ metric.T)

        def kick(grad):
            return grad @ metric

        def kinetic(p):
            return 0.5 * pt.sum(p**2, axis=1)
    else:
        # A zero inverse mass pins a coordinate (a discrete one): no momentum, as in hmc.py.
        scale = pt.sqrt(metric)
        momentum = pt.switch(scale > 0, normals / pt.switch(scale > 0, scale, 1.0), 0.0)

        def drift(p):
            return step * metric * p

        def kick(grad):
            return grad

        def kinetic(p):
            return 0.5 * pt.sum(p**2 * metric, axis=1)

    def leapfrog(coefficient, q, p, *_previous):
        q = q + drift(p)
        prior, lik, grad_prior, grad_lik = vectorize_graph(outputs, replace={x: q})
        # NaN densities are impossible states (as in ModelDensity.parts).
        prior = pt.switch(pt.isnan(prior), -np.inf, prior)
        lik = pt.switch(pt.isnan(lik), -np.inf, lik)
        if base:
            prior, lik, grad_prior, grad_lik = _rebased(q, prior, lik, grad_prior, grad_lik,
                                                        *base_inputs)
        p = p + kick(grad_prior + beta * grad_lik) * (coefficient * step)
        return q, p, prior, lik, grad_prior, grad_lik

    p_half = momentum + 0.5 * step * kick(grad_prior0 + beta * grad_lik0)
    trajectory = pytensor.scan(
        leapfrog, sequences=[coefficients],
        outputs_info=[q0, p_half, prior0, lik0, grad_prior0, grad_lik0],
        return_updates=False,
    )
    q, p, prior, lik, grad_prior, grad_lik = (out[-1] for out in trajectory)

    inputs = [q0, normals, eps, metric, beta, prior0, lik0, grad_prior0, grad_lik0, uniforms,
              coefficients, *base_inputs]
    return inputs, _metropolis(beta, uniforms, (kinetic(momentum), kinetic(p)),
                               (q0, prior0, lik0, grad_prior0, grad_lik0),
                               (q, prior, lik, grad_prior, grad_lik))


def _metropolis(beta, uniforms, kinetics, old, proposed):
    """Return the accept/reject's outputs for ``proposed`` (q, parts) against ``old``."""
    q0, prior0, lik0, grad_prior0, grad_lik0 = old
    q, prior, lik, grad_prior, grad_lik = proposed
    # At beta = 0 the target is the prior alone, even where the likelihood is -inf.
    logp1 = pt.switch(pt.eq(beta, 0), prior, prior + beta * lik)
    logp0 = pt.switch(pt.eq(beta, 0), prior0, prior0 + beta * lik0)
    kinetic0, kinetic1 = kinetics
    log_ratio = (logp1 - kinetic1) - (logp0 - kinetic0)
    # As in hmc_step: only finite proposals can be accepted; NaN densities count as -inf.
    log_ratio = pt.switch(pt.isnan(log_ratio) | ~pt.isfinite(logp1), -np.inf, log_ratio)
    accepted = pt.log(uniforms) < log_ratio
    row = accepted[:, None]
    return [pt.switch(row, q, q0), pt.switch(accepted, prior, prior0),
            pt.switch(accepted, lik, lik0), pt.switch(row, grad_prior, grad_prior0),
            pt.switch(row, grad_lik, grad_lik0), accepted,
            pt.exp(pt.minimum(log_ratio, 0.0)), ~(log_ratio > -DIVERGENCE_THRESHOLD)]


def _principal_graph(x, outputs):
    """:func:`_transition_graph` in a full-rank base's principal coordinates.

    As :func:`~pymc_bdmc.kernels.hmc.hmc_step`'s principal form: the state moves as
    ``z = A^{-1} (x - mean)`` with the diagonal metric ``w`` (the ``mass_factor`` input), two
    products with the base's basis per leapfrog step; the inputs and outputs are those of the
    dense form on the path from the base, in ``x``.
    """
    q0 = pt.matrix("q0", dtype=x.dtype)
    normals = pt.matrix("standard_normals", dtype=x.dtype)
    eps = pt.vector("eps", dtype=x.dtype)
    scales = pt.vector("principal_scales", dtype=x.dtype)
    beta = pt.scalar("beta", dtype=x.dtype)
    prior0, lik0 = pt.vector("log_prior0"), pt.vector("log_likelihood0")
    grad_prior0, grad_lik0 = pt.matrix("grad_log_prior0"), pt.matrix("grad_log_likelihood0")
    uniforms = pt.vector("uniforms")
    coefficients = pt.vector("momentum_coefficients")
    mean = pt.vector("base_mean", dtype=x.dtype)
    scale = pt.vector("base_scale", dtype=x.dtype)
    basis = pt.matrix("base_basis", dtype=x.dtype)
    root = pt.vector("base_sqrt_eigenvalues", dtype=x.dtype)
    log_norm = pt.scalar("base_log_norm", dtype=x.dtype)
    step = eps[:, None]

    def kick(z, joint_grad):  # w A^T grad log f_beta (GaussianBase.principal_gradient)
        return scales * (beta * (((joint_grad * scale) @ basis) * root) - (1.0 - beta) * z)

    def leapfrog(coefficient, z, p, *_previous):
        z = z + step * scales * p
        q = mean + ((z * root) @ basis.T) * scale
        prior, lik, grad_prior, grad_lik = vectorize_graph(outputs, replace={x: q})
        prior = pt.switch(pt.isnan(prior), -np.inf, prior)
        lik = pt.switch(pt.isnan(lik), -np.inf, lik)
        joint_grad = grad_prior + grad_lik
        p = p + kick(z, joint_grad) * (coefficient * step)
        return z, p, q, prior, lik, joint_grad

    z0 = (((q0 - mean) / scale) @ basis) / root
    joint_grad0 = grad_prior0 + grad_lik0
    p_half = normals + 0.5 * step * kick(z0, joint_grad0)
    trajectory = pytensor.scan(
        leapfrog, sequences=[coefficients],
        outputs_info=[z0, p_half, q0, prior0, lik0, joint_grad0],
        return_updates=False,
    )
    z, p, q, model_prior, model_lik, joint_grad = (out[-1] for out in trajectory)
    # The path's parts at the end (GaussianBase.rebase), from z: log q0 = log_norm - |z|^2 / 2.
    prior = log_norm - 0.5 * pt.sum(z**2, axis=1)
    lik = model_prior + model_lik - prior
    grad_prior = -((z / root) @ basis.T) / scale
    grad_lik = joint_grad - grad_prior

    inputs = [q0, normals, eps, scales, beta, prior0, lik0, grad_prior0, grad_lik0, uniforms,
              coefficients, mean, scale, basis, root, log_norm]
    kinetics = (0.5 * pt.sum(normals**2, axis=1), 0.5 * pt.sum(p**2, axis=1))
    return inputs, _metropolis(beta, uniforms, kinetics,
                               (q0, prior0, lik0, grad_prior0, grad_lik0),
                               (q, prior, lik, grad_prior, grad_lik))


def _rebased(q, prior, lik, grad_prior, grad_lik, mean, inverse_scale, basis, inverse,
             log_norm):
    """The model's densities as parts of the path from a Gaussian base (GaussianBase.rebase)."""
    # As GaussianBase.logpdf_and_grad: two O(d r) products with the basis.
    u = (q - mean) * inverse_scale
    projected = u @ basis
    log_q = log_norm - 0.5 * (pt.sum(u**2, axis=1) + (projected**2) @ inverse)
    grad_q = -(u + (projected * inverse) @ basis.T) * inverse_scale
    return log_q, prior + lik - log_q, grad_q, grad_prior + grad_lik - grad_q


register_fused_kernel("hmc", FusedHMC)  # ModelDensity.fused_hmc builds this
