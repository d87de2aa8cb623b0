"""Exact checks of a model's compiled densities against PyMC's own functions.

:func:`check_density` is :meth:`pymc_bdmc.verification.Verifier.check_density`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import pymc as pm

from pymc_bdmc.model.density import ONE_SHOT_MODE, FlatLayout
from pymc_bdmc.verification.common import (
    EXACT_TOLERANCE,
    DensityCheckResult,
    scaled_error,
    typed_point,
)

__all__ = ["check_density"]

logger = logging.getLogger("pymc_bdmc.verification")


def check_density(self, *, n_points: int = 8, betas: Sequence[float] = (0.0, 0.37, 1.0),
                  tolerance: float = EXACT_TOLERANCE, data_swap: bool = True,
                  random_seed=None) -> DensityCheckResult:
    """Compare the compiled densities with PyMC's own functions at random points.

    Checked at ``n_points`` points (half exact prior draws, half prior draws moved by
    N(0, 0.5^2) noise in the unconstrained space): the log prior against
    ``model.compile_logp(vars=free_RVs)``, the log-likelihood against the observed
    variables' ``compile_logp``, their sum against the joint ``model.compile_logp()``, and
    the tempered density and its gradient at each ``beta`` against
    ``model.logp_dlogp_function(tempered=True)``. With ``data_swap``, data simulated from the
    model are swapped in with ``set_observed`` and the log-likelihood is compared with a
    PyMC model conditioned on them by ``pm.observe``.

    Parameters
    ----------
    n_points : int, default 8
    betas : sequence of float, default (0, 0.37, 1)
    tolerance : float, default 1e-9
        Largest error allowed, relative to ``max(1, |value|)``: round-off only.
    data_swap : bool, default True
    random_seed : optional

    Returns
    -------
    DensityCheckResult
    """
    rng = np.random.default_rng(random_seed)
    model, density, layout = self.model, self.density, self.layout
    half = max(1, n_points // 2)
    x = self.prior_draws(n_points, rng)
    x[half:] += rng.normal(scale=0.5, size=x[half:].shape)
    parts = density.parts(x)
    points = [_point(self, row) for row in x]
    errors, skipped = {}, {}

    def compare(name, ours, theirs):
        errors[name] = max(errors.get(name, 0.0), scaled_error(ours, theirs))

    lik_terms = list(model.observed_RVs)
    if self.potentials_in_likelihood:
        lik_terms += list(model.potentials)
    prior_fn = _reference(self, "prior", lambda: model.compile_logp(
        vars=list(model.free_RVs), mode=ONE_SHOT_MODE))
    lik_fn = _reference(self, "likelihood", lambda: model.compile_logp(
        vars=lik_terms, mode=ONE_SHOT_MODE))
    compare("log prior vs model.varlogp", parts.log_prior, [prior_fn(p) for p in points])
    compare("log-likelihood vs observed logp", parts.log_likelihood,
            [lik_fn(p) for p in points])
    if model.potentials and not self.potentials_in_likelihood:
        skipped["prior + likelihood vs joint logp"] = (
            "the model has Potentials, which the density leaves out")
    else:
        joint_fn = _reference(self, "joint", lambda: model.compile_logp(mode=ONE_SHOT_MODE))
        compare("prior + likelihood vs joint logp", parts.log_prior + parts.log_likelihood,
                [joint_fn(p) for p in points])
    _check_tempered(self, x, parts, points, betas, compare, skipped)
    if data_swap:
        _check_data_swap(self, x, points, rng, compare, skipped)
    passed = all(err <= tolerance for err in errors.values())
    result = DensityCheckResult(passed, errors, tolerance, n_points, skipped)
    (logger.info if passed else logger.warning)("%s", result)
    return result


def _reference(self, name: str, build: Callable[[], Callable]) -> Callable:
    # PyMC's own functions, compiled once per verifier.
    if name not in self._references:
        self._references[name] = build()
    return self._references[name]


def _point(self, row: np.ndarray) -> dict[str, np.ndarray]:
    return typed_point(self.layout, self.density._initial_point, row)


def _check_tempered(self, x, parts, points, betas, compare, skipped):
    model = self.model
    continuous = list(model.continuous_value_vars)
    if model.potentials and not self.potentials_in_likelihood:
        skipped["tempered density vs PyMC"] = "PyMC tempers Potentials with the likelihood"
        return
    if not continuous:
        skipped["tempered density vs PyMC"] = "no continuous variables"
        return
    fn = _reference(self, "tempered", lambda: model.logp_dlogp_function(
        tempered=True, ravel_inputs=True, mode=ONE_SHOT_MODE))
    sub = FlatLayout.from_point([v.name for v in continuous], self.density._initial_point)
    columns = np.concatenate([np.arange(self.layout.size)[self.layout.slices[
        self.layout.names.index(name)]] for name in sub.names])
    for beta in betas:
        fn.set_weights(np.array([beta], dtype=float))
        values, grads = [], []
        for point in points:
            fn.set_extra_values(point)
            value, grad = fn(sub.ravel(point))
            values.append(value)
            grads.append(grad)
        compare(f"tempered logp vs PyMC (beta={beta:g})", parts.tempered_logp(beta), values)
        finite = np.isfinite(parts.tempered_logp(beta))
        compare(f"tempered gradient vs PyMC (beta={beta:g})",
                parts.tempered_grad(beta)[finite][:, columns], np.array(grads)[finite])


def _check_data_swap(self, x, points, rng, compare, skipped):
    density, model = self.density, self.model
    name = "log-likelihood after set_observed vs pm.observe"
    try:
        observed = self.simulator.draw_joint(rng).observed
        conditioned = pm.observe(model, observed)
    except Exception as err:  # noqa: BLE001 - report, don't fail: a PyMC limitation
        skipped[name] = f"could not condition the model on simulated data ({err})"
        return
    lik_terms = list(conditioned.observed_RVs)
    if self.potentials_in_likelihood:
        lik_terms += list(conditioned.potentials)
    lik_fn = conditioned.compile_logp(vars=lik_terms, mode=ONE_SHOT_MODE)
    original = density.observed_data()
    try:
        density.set_observed(observed)
        ours = density.parts(x).log_likelihood
    finally:
        density.set_observed(original)
    # The conditioned clone may order its value variables differently: map by name.
    compare(name, ours, [lik_fn({v.name: p[v.name] for v in conditioned.value_vars})
                         for p in points])
