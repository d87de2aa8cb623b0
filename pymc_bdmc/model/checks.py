"""Checks of a model and its inputs that run before any sampling.

Every failure raises :class:`BDMCInputError` (a ``ValueError``) whose message says what is wrong
and what to do about it. None of these checks modifies the model.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np
import pymc as pm
import pytensor
from pymc.distributions.continuous import FlatRV, HalfFlatRV
from pymc.distributions.custom import CustomDistRV, CustomSymbolicDistRV
from pymc.distributions.multivariate import ICARRV
from pymc.distributions.simulator import SimulatorRV
from pymc.distributions.transforms import Ordered, SumTo1
from pymc.variational.minibatch_rv import MinibatchRandomVariable

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.model.density import (
    ONE_SHOT_MODE,
    DensityParts,
    FlatLayout,
    transformed_by,
)
from pymc_bdmc.model.density import observed_data_value as _observed_data_value
from pymc_bdmc.unnormalized.marker import unnormalized_variables

logger = logging.getLogger("pymc_bdmc")

__all__ = [
    "DIAGNOSED_POINTS",
    "BDMCInputError",
    "check_finite_start",
    "check_model",
    "check_normalized",
    "check_positive_int",
    "imputed_observations",
    "narrowing_transforms",
    "never_finite_message",
    "never_finite_terms",
]


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise if it is not an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise BDMCInputError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def imputed_observations(model: pm.Model) -> dict[str, tuple[int, int]]:
    """Observed variables whose NaN or masked entries PyMC imputes, with their counts.

    PyMC splits such a variable ``y`` into an observed ``y_observed`` (the present entries)
    and a free ``y_unobserved`` (the missing ones). The evidence is then ``p(y_observed)``:
    the missing entries are latent variables of the prior, integrated over like any other.

    Returns
    -------
    dict
        ``{name: (n_missing, n_entries)}`` for each such variable ``name``.
    """
    free = {rv.name: rv for rv in model.free_RVs}
    imputed = {}
    for rv in model.observed_RVs:
        name = rv.name.removesuffix("_observed")
        if rv.name.endswith("_observed") and name + "_unobserved" in free:
            missing = _static_size(free[name + "_unobserved"])
            present = _static_size(rv)
            imputed[name] = (missing, None if None in (missing, present) else missing + present)
    return imputed


def _static_size(rv) -> int | None:
    shape = rv.type.shape
    return None if None in shape else int(np.prod(shape, dtype=int))


def _check_potential_likelihood(potentials: list[str], potentials_in_likelihood: bool,
                                needs_simulation: bool) -> None:
    """Refuse a model without observed variables unless its Potentials are its likelihood."""
    if not potentials:
        raise BDMCInputError(
            "The model has no observed variables, so there is no evidence p(y) to estimate. "
            "Pass data with `observed=` to the likelihood."
        )
    if needs_simulation:
        raise BDMCInputError(
            f"The model's likelihood is given by the Potentials {potentials}, which have no "
            "simulator: bidirectional Monte Carlo needs to simulate data from the model, so it "
            "cannot run. Write the likelihood as `pm.CustomDist(name, *params, logp=..., "
            "random=..., observed=data)` (its `random` function simulates the data), or use "
            "`sample_ais(..., potentials_in_likelihood=True)` for a lower bound only."
        )
    if not potentials_in_likelihood:
        raise BDMCInputError(
            f"The model has no observed variables, only the Potentials {potentials}. If they "
            "are its likelihood, pass `potentials_in_likelihood=True` (they are then tempered as "
            "the likelihood)."
        )


def check_model(
    model: pm.Model,
    *,
    potentials_in_likelihood: bool = False,
    needs_simulation: bool = False,
    gradient_kernel: bool = True,
    allow_missing: bool = True,
    needs_free_variables: bool = True,
) -> None:
    """Raise :class:`BDMCInputError` if ``model`` cannot be used for evidence estimation.

    Parameters
    ----------
    model : pm.Model
    potentials_in_likelihood : bool, default False
        Whether the user declared that ``pm.Potential`` terms belong to the likelihood.
    needs_simulation : bool, default False
        True for bidirectional Monte Carlo, which simulates data from the model: Potentials are
        then refused whatever their role, because they are not part of the generative process.
    gradient_kernel : bool, default True
        True when the transition kernel needs gradients (all free variables continuous).
    allow_missing : bool, default True
        Whether observations PyMC imputes (NaN or masked entries) are allowed. They are, for
        the evidence of the observed entries; held-out cases must be complete.
    needs_free_variables : bool, default True
        Refuse a model without free variables (held-out cases refuse it in their own words).
    """
    potentials = [p.name for p in model.potentials]
    if not model.observed_RVs:
        _check_potential_likelihood(potentials, potentials_in_likelihood, needs_simulation)
    _refuse_kinds(model.observed_RVs, _OBSERVED_REFUSALS)
    _check_observed_data(model, allow_missing)
    if potentials:
        _check_potentials(potentials, potentials_in_likelihood, needs_simulation)
    _check_priors(model)
    if gradient_kernel:
        _check_continuous(model)
    check_normalized(model)
    if needs_free_variables and not model.free_RVs:
        raise BDMCInputError(
            "The model has no free variables, so there is nothing to integrate: its log p(y) is "
            "its log-likelihood at the data, `model.compile_logp()({})`."
        )


def _check_observed_data(model: pm.Model, allow_missing: bool) -> None:
    """Refuse missing entries where not allowed, non-finite data and data of the wrong shape."""
    imputed = imputed_observations(model)
    if imputed and not allow_missing:
        raise BDMCInputError(
            f"Observed data of {list(imputed)} contain NaN or masked values, which PyMC imputes "
            "as free variables; held-out cases must be complete. Drop the incomplete cases."
        )
    for name, (missing, total) in imputed.items():
        logger.info(
            "%s of %s entries of %r are missing (NaN or masked): PyMC imputes them as the free "
            "variable %r, and the evidence is that of the observed entries, p(%s_observed), "
            "with the missing ones integrated over.", missing, total, name,
            name + "_unobserved", name)

    for rv in model.observed_RVs:
        data = _observed_data_value(model.rvs_to_values[rv])
        if data is None:
            continue
        if np.issubdtype(data.dtype, np.number) and not np.all(np.isfinite(data)):
            bad = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
            raise BDMCInputError(
                f"Observed data of {rv.name!r} contain {bad} non-finite value(s) (NaN or inf). "
                "Remove or fix them before estimating the evidence."
            )
        static = tuple(rv.type.shape)
        if len(static) != data.ndim or any(
            s is not None and s != d for s, d in zip(static, data.shape, strict=False)
        ):
            raise BDMCInputError(
                f"Observed data of {rv.name!r} have shape {data.shape}, but the variable has "
                f"shape {tuple('?' if s is None else s for s in static)} (e.g. pm.set_data "
                "changed the data's length while the likelihood has a fixed `shape=`). Tie the "
                "likelihood's shape to its data (`shape=data.shape` or `dims=`), or pass data of "
                "the variable's shape."
            )


def _check_potentials(potentials: list[str], potentials_in_likelihood: bool,
                      needs_simulation: bool) -> None:
    """Refuse Potentials of unknown role, and any Potential where data are to be simulated."""
    names = potentials
    if needs_simulation:
        raise BDMCInputError(
            f"The model has Potentials {names}. Bidirectional Monte Carlo simulates data from "
            "the model's generative process, which Potentials are not part of, so the "
            "upper bound would not be valid. Express them as distributions, or use "
            "`sample_ais(..., potentials_in_likelihood=True)` for a lower bound only."
        )
    if not potentials_in_likelihood:
        raise BDMCInputError(
            f"The model has Potentials {names}; it is ambiguous whether they belong to the "
            "prior or to the likelihood. If they are likelihood terms, pass "
            "`potentials_in_likelihood=True` (they are then tempered with the likelihood)."
        )


def _check_priors(model: pm.Model) -> None:
    """Refuse priors with no exact draws or no normalised density."""
    narrowed = narrowing_transforms(model)
    if narrowed:
        raise BDMCInputError(
            f"Free variables {narrowed} have a `transform=` that confines them to part of their "
            "distribution's support (ordered values, or values summing to 1). Their density is "
            "then the prior restricted to that part without being renormalised, and PyMC's "
            "prior draws ignore the restriction, so there is no exact prior draw and no "
            "normalised prior, which AIS and BDMC need. Build the constrained values from a "
            "prior PyMC can draw instead: sorted draws, e.g. `cut = pm.Deterministic('cut', "
            "pt.sort(pm.Normal('cut_raw', 0, 3, shape=3)))` (for independent, identically "
            "distributed draws, the restricted prior normalised), or increments, e.g. `c0 + "
            "pt.cumsum(pm.HalfNormal('gaps', 1, shape=2))`; for weights summing to 1, "
            "`pm.Dirichlet`."
        )

    _refuse_kinds(model.free_RVs, _PRIOR_REFUSALS)


#: Observed variables refused by the kind of their op: ``(kinds, message with {names})``.
_OBSERVED_REFUSALS = (
    (MinibatchRandomVariable,
     "The observed variables {names} have `total_size=` (minibatch scaling for variational "
     "inference): their log-likelihood is multiplied by total_size / n, so the model's density "
     "is no longer normalised and its integral is not p(y) (on 20 observations with "
     "total_size=200, -259 nats where p(y) is about -30). Leave `total_size` out: the evidence "
     "is that of the data the model holds."),
    (SimulatorRV,
     "The observed variables {names} are pm.Simulator: a simulator with a distance, not a "
     "likelihood. AIS and BDMC anneal a log-likelihood, so they have nothing to temper; "
     "`pm.sample_smc`'s ABC estimate is of the evidence of its epsilon-kernel, not of p(y). "
     "Where the likelihood can be written, use it (a pm.CustomDist with `logp=` and "
     "`random=`)."),
)

#: Free variables refused by the kind of their op. PyMC's ICAR log-density has no normalising
#: constant (the graph Laplacian's pseudo-determinant): an evidence with it is off by an
#: unknown constant.
_PRIOR_REFUSALS = (
    (FlatRV | HalfFlatRV,
     "Free variables {names} have improper Flat/HalfFlat priors: the evidence is not defined "
     "and AIS cannot start from exact prior draws. Give them proper priors."),
    (ICARRV,
     "Free variables {names} have intrinsic CAR priors (pm.ICAR): improper, flat along the "
     "constant vector up to PyMC's soft sum-to-zero penalty, unnormalised and with no prior "
     "draws, so the evidence is not defined. Use a proper spatial prior: pm.CAR (with "
     "alpha < 1), or pm.MvNormal with a covariance of your choice."),
)


def _refuse_kinds(variables, refusals) -> None:
    """Raise the first refusal whose op kinds some of ``variables`` have, naming them."""
    for kinds, message in refusals:
        names = [rv.name for rv in variables if isinstance(rv.owner.op, kinds)]
        if names:
            raise BDMCInputError(message.format(names=names))


def _check_continuous(model: pm.Model) -> None:
    """Refuse discrete free variables where the kernel needs gradients."""
    discrete = [
        rv.name for rv in model.free_RVs
        if model.rvs_to_values[rv].dtype.startswith(("int", "uint", "bool"))
    ]
    if discrete:
        raise BDMCInputError(
            f"Free variables {discrete} are discrete, and the vectorized HMC kernel needs "
            "gradients. Marginalize them out (e.g. with pm.Mixture), or pass PyMC step methods "
            "for them with `step=` (Gibbs-type steps such as pm.CategoricalGibbsMetropolis)."
        )


#: ``pytensor.function`` arguments that this package sets itself or that would change the graph.
_OWN_COMPILE_ARGUMENTS = frozenset({"inputs", "outputs", "updates", "givens", "on_unused_input"})


def check_compile_kwargs(compile_kwargs) -> None:
    """Raise :class:`BDMCInputError` for ``compile_kwargs`` that ``pytensor.function`` refuses."""
    if compile_kwargs is None:
        return
    if not isinstance(compile_kwargs, Mapping):
        raise BDMCInputError(f"`compile_kwargs` must be a dict of `pytensor.function` "
                             f"arguments, e.g. {{'mode': 'FAST_COMPILE'}}; got "
                             f"{type(compile_kwargs).__name__}.")
    accepted = set(inspect.signature(pytensor.function).parameters) - _OWN_COMPILE_ARGUMENTS
    unknown = sorted(set(compile_kwargs) - accepted)
    if unknown:
        raise BDMCInputError(f"`compile_kwargs` has {unknown}, which this package cannot pass "
                             f"to `pytensor.function`; it takes {sorted(accepted)}.")


def narrowing_transforms(model: pm.Model) -> list[str]:
    """Free variables whose transform confines them to part of their distribution's support.

    ``transform=ordered`` (or ``sum_to_1``) on, say, a ``pm.Normal`` makes the model's density
    the prior restricted to ordered values, unnormalised, while ``pm.draw`` and the prior
    predictive still draw unordered values (their unconstrained images are NaN). A
    ``pm.CustomDist`` is left to the check on its draws (:func:`check_finite_start`): its
    ``random`` may draw ordered values and its ``logp`` may be normalised on them.

    Parameters
    ----------
    model : pm.Model

    Returns
    -------
    list of str
        The variables' names.
    """
    return transformed_by(model, (Ordered, SumTo1),
                          skip=(CustomDistRV, CustomSymbolicDistRV))


def check_normalized(model: pm.Model) -> None:
    """Raise :class:`BDMCInputError` if any variable of ``model`` has an un-normalised density.

    Every estimator that treats the model's logp as a normalised density (AIS, SMC, BDMC, the
    testbed's estimators) calls this before compiling anything: with ``pmb.Ising``,
    ``pmb.ERGM`` or ``pmb.ExponentialFamily`` the logp lacks ``-log Z(θ)``, and the estimate
    would be of ``∫ gamma(y|θ) p(θ) dθ`` instead of ``p(y)``.

    Parameters
    ----------
    model : pm.Model
    """
    unnormalized = unnormalized_variables(model)
    if unnormalized:
        raise BDMCInputError(
            f"Variables {unnormalized} have un-normalised densities (pmb.Ising, pmb.ERGM, "
            "pmb.ExponentialFamily): their logp is log gamma(y|θ) without the intractable "
            "-log Z(θ), so AIS, SMC and BDMC would estimate ∫ gamma(y|θ) p(θ) dθ instead of the "
            "evidence p(y). Use `pmb.sample_unnormalized_evidence` (SAVIS, MAVIS or "
            "random-weight SMC), or the estimators of `pymc_bdmc.unnormalized`."
        )


def check_finite_start(parts: DensityParts, where: str, layout: FlatLayout,
                       x: np.ndarray, hint: str | None = None,
                       model: pm.Model | None = None,
                       impossible_data: Literal["refuse", "allow"] = "refuse",
                       impossible_note: str | None = None) -> None:
    """Raise if the prior or the likelihood is not finite at any starting state.

    ``hint`` replaces the default advice at the end of the message. With ``model``, a density
    that is finite at none of the states is traced to the terms that are never finite there.
    ``impossible_data="allow"`` lets through states where the log-likelihood is ``-inf`` at
    some states but not all, and everything else is finite: the data are impossible there (a
    ``Uniform(0, b)`` likelihood with ``b`` below a datum), or the likelihood underflows (a
    censored Weibull's far tail). The drivers' prior draws allow them, and replace them
    (:func:`~pymc_bdmc.pipeline.draws.possible_starts`). ``impossible_note`` is added to the
    refusal where the data are impossible at every state.
    """
    bad_prior = ~np.isfinite(parts.log_prior)
    bad_lik = ~np.isfinite(parts.log_likelihood)
    if not (bad_prior.any() or bad_lik.any()):
        return
    if (impossible_data == "allow" and not bad_prior.any() and not bad_lik.all()
            and np.all(parts.log_likelihood[bad_lik] == -np.inf)
            and np.all(np.isfinite(x))):
        return
    outside, rows = _outside_transform(layout, x)
    if outside:
        point = {k: np.round(v, 4).tolist() for k, v in layout.unravel(x[rows[0]]).items()}
        raise BDMCInputError(
            f"{outside} of the {where} are not finite in the unconstrained space, in "
            f"{len(rows)} of {len(x)} draws (the first: {point}): the draws lie "
            "on or beyond the edge of the values their transform allows. Either a `transform=` "
            "narrows the distribution's support (e.g. an Interval on a Normal: the density is "
            "then the prior restricted to part of its support, unnormalised, and PyMC's draws "
            "ignore the restriction; give such variables a distribution with that support, "
            "e.g. pm.TruncatedNormal or pm.Uniform, instead of the transform), or draws round "
            "to the edge of the support under extreme parameters (e.g. a Gamma draw equal to "
            "0; choose priors that keep the parameters away from such regions)."
        )
    if model is not None and (bad_prior | bad_lik).all():
        points = [layout.unravel(row) for row in x[:DIAGNOSED_POINTS]]
        dead = never_finite_terms(model, points)
        if dead:
            raise BDMCInputError(never_finite_message(dead, len(points), where))
    if (impossible_data != "refuse" and not bad_prior.any()
            and np.all(parts.log_likelihood == -np.inf) and np.all(np.isfinite(x))):
        point = {k: np.round(v, 4).tolist() for k, v in layout.unravel(x[0]).items()}
        raise BDMCInputError(
            f"The data are impossible at all {len(x)} {where}: the log-likelihood is -inf at "
            f"every one (the first at unconstrained point {point}), so every chain would carry "
            "zero weight. AIS starts from prior draws and needs some at which the data are "
            "possible: give the parameters a prior that puts more mass there (e.g. a Binomial's "
            "count N above the largest count observed), raise `pilot_chains`, or marginalise "
            "such a discrete count out of the likelihood."
            + (f" {impossible_note}" if impossible_note else ""))
    first = int(np.flatnonzero(bad_prior | bad_lik)[0])
    point = {k: np.round(v, 4).tolist() for k, v in layout.unravel(x[first]).items()}
    raise BDMCInputError(
        f"The density is not finite at {int(np.count_nonzero(bad_prior | bad_lik))} of "
        f"{len(parts.log_prior)} {where} (log prior: {parts.log_prior[first]}, log-likelihood: "
        f"{parts.log_likelihood[first]}, at unconstrained point {point}). "
        + (hint or "Check that the data lie in the support of the likelihood for every "
           "parameter value the prior allows, and that the prior puts no mass on invalid "
           "parameters.")
    )


def _outside_transform(layout: FlatLayout, x: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Value variables with non-finite unconstrained values, and the rows of ``x`` with any."""
    rows = np.flatnonzero(~np.all(np.isfinite(x), axis=1))
    names = set()
    for row in x[rows[:DIAGNOSED_POINTS]]:
        names |= {name for name, value in layout.unravel(row).items()
                  if not np.all(np.isfinite(value))}
    return sorted(names), rows


def unsampleable_prior_message(names: Iterable[str], reason: str) -> str:
    """Message for priors that cannot be drawn from exactly."""
    return (
        f"Cannot draw exactly from the prior ({reason.strip()}). AIS and BDMC start from exact "
        f"prior draws; give {list(names) or 'the offending variables'} a distribution with a "
        "random method (for pm.CustomDist, pass `random=` or `dist=`)."
    )


def unsimulable_data_message(reason: str) -> str:
    """Message for data that cannot be simulated from a model whose prior can be drawn."""
    return (
        f"Cannot simulate data from the model ({reason.strip()}). The BDMC upper bound "
        "(`sample_bdmc`, `calibrate`) needs data drawn from the model, and an observed variable "
        "has no random method: for a pm.CustomDist, pass `random=` or `dist=`. Without "
        "simulated data, `pmb.sample_ais()` still gives a stochastic lower bound on log p(y) "
        "of your data, uncertified."
    )


#: States at which the terms of a density that is never finite are evaluated one by one.
DIAGNOSED_POINTS = 16


def never_finite_terms(model: pm.Model, points: list[dict[str, np.ndarray]]) -> list[str]:
    """Names of the model's log-density terms (variables, Potentials) finite at none of ``points``.

    ``points`` map value-variable names to values (the unconstrained space). Used only to
    explain a failure, so each term is compiled here, in a fast-compiling mode.
    """
    variables = [*model.basic_RVs, *model.potentials]
    terms = [model.logp(vars=[v], sum=True) for v in variables]
    fn = model.compile_fn(terms, point_fn=True, mode=ONE_SHOT_MODE)
    finite_somewhere = np.zeros(len(variables), dtype=bool)
    for point in points:
        try:
            values = fn(point)
        except Exception:  # e.g. a parameter check that raises rather than returning -inf
            continue
        finite_somewhere |= np.isfinite(np.asarray(values, dtype=float))
    return [v.name for v, ok in zip(variables, finite_somewhere, strict=True) if not ok]


def never_finite_message(terms: list[str], n_points: int, where: str) -> str:
    """Message for log-density terms that are not finite at any of ``n_points`` states."""
    return (
        f"The log-density of {terms} is not finite at any of {n_points} {where}: wherever the "
        "prior puts its mass, these terms are -inf or NaN (for example a scale parameter that "
        "is always negative, or a parameter outside its distribution's support). AIS cannot "
        "start from such a model. Check how their parameters are computed from the other "
        "variables."
    )
