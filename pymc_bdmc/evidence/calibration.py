"""Certify on simulated data, then estimate on the real data: the BDMC paper's recipe in one call.

The upper bound exists only where an exact posterior sample does, i.e. on data simulated from the
model. :func:`calibrate` raises the number of annealing steps until the BDMC gap on simulated data
is below a tolerance, then runs forward AIS on the real data with *that same frozen plan*, and
returns the real-data estimate together with its certificate.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import xarray as xr
from pytensor.graph.traversal import ancestors
from pytensor.tensor.random.op import RandomVariable

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import (
    SEARCH_ON_BIAS_SCALE,
    certifies,
    forward_spread,
    harder_than_certified,
)
from pymc_bdmc.evidence.annealing import sample_ais, sample_bdmc
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.model.checks import check_model, check_positive_int
from pymc_bdmc.model.resolve import resolve_model
from pymc_bdmc.pipeline.driver import call_scope
from pymc_bdmc.pipeline.seeding import root_generator

__all__ = ["calibrate"]

logger = logging.getLogger(__name__)


def calibrate(
    model: pm.Model | None = None,
    *,
    tolerance: float = 0.5,
    n_steps: Sequence[int] | str = "auto",
    chains: int = 32,
    max_time: float | None = 60.0,
    fix: Mapping[str, object] | None = None,
    match_data: bool | int | None = None,
    random_seed=None,
    progressbar: bool = True,
    compile_kwargs: dict | None = None,
    **sampler_kwargs,
) -> xr.DataTree:
    """Find the annealing length that BDMC certifies, then estimate ``log p(y)`` on real data.

    Parameters
    ----------
    model : pm.Model, optional
        A model with the real observed data (from the context when omitted).
    tolerance : float, default 0.5
        Largest acceptable size of the BDMC gap (nats) on simulated data. A negative gap (upper
        below lower) is run-to-run noise of the same order, so ``|gap|`` is compared, and the
        gap's own standard error must be within it too (:func:`~pymc_bdmc.estimators.certifies`).
    n_steps : "auto", int or sequence of int, default "auto"
        ``"auto"``: :func:`~pymc_bdmc.sample_bdmc`'s search with ``target_gap=tolerance`` (longer
        runs, more chains, a larger pilot and the model's other parameterisation, within
        ``max_time``); the real data then run with the certified plan, chains and form. An int
        or a sequence: annealing lengths to try, in increasing order; the first whose gap is within
        ``tolerance`` (and measured that precisely) is used.
    chains : int, default 32
    max_time : float or None, default 60.0
        Seconds the ``"auto"`` search may spend on simulated data (``sample_bdmc``'s).
    fix : mapping, optional
        Free variables to hold at given values (e.g. estimates from the real data) while
        simulating, through ``pm.do``, so that simulated data resemble the real data. The
        certified model then differs from ``model``, so its plan cannot be transferred: the
        real-data run tunes its own plan with the certified ``n_steps``. The same holds where
        the certified run annealed from a Gaussian fitted to the simulated data's posterior
        (``base="auto"``): the real-data run fits its own (``base="fitted"``). Variables held
        fixed are not annealed on the simulated data, so the certificate says nothing about
        them (the transfer check in the notes flags a real-data run they make harder).
    match_data : bool, int or None, default None
        ``True`` or a number certifies on the simulated data set, of this many (``True``: 100),
        nearest the real data; ``None`` on one draw unless its data are far out, ``False`` on
        one draw whatever its data (:func:`~pymc_bdmc.sample_bdmc`'s ``match_data``). The
        full model in each case, and ``theta*`` stays an exact posterior sample.
    random_seed : int, optional
        Seeds both stages; the integer seeds used are recorded in the ``calibration`` group so
        that each stage can be rerun on its own.
    progressbar : bool, default True
    compile_kwargs : dict, optional
    **sampler_kwargs
        Further settings shared by both stages (``n_leapfrog``, ``transitions_per_step``, ...).

    Returns
    -------
    xarray.DataTree
        The real-data :func:`~pymc_bdmc.sample_ais` result, plus a ``calibration`` group: per
        attempt (dim ``attempt``) ``n_steps``, ``lower``, ``upper``, ``gap`` and ``gap_se`` on
        simulated data (with ``"auto"``, ``lower`` and ``upper`` of the last attempt only);
        attrs ``tolerance``, ``certified`` (whether the tolerance was met), ``certified_n_steps``,
        ``certified_gap``, ``simulation_seed`` and ``estimation_seed``, and the transfer check:
        ``forward_log_weight_sd_simulated``, ``forward_log_weight_sd_real`` and
        ``real_data_harder``.

    Notes
    -----
    The certificate is evidence, not proof, about the real data: it measures the estimator on
    data drawn from the model, which the real data resemble only as far as the model fits them.
    Real data far in the tails of the prior predictive make a longer, harder path than typical
    simulated data. The one measurement both runs share is the spread of their forward log
    weights, whose variance bounds the lower bound's bias for log-normal weights (``E log w =
    log E w - var / 2``). Where the real data's spread is more than twice the certified run's
    and its ``sd^2 / 2`` exceeds ``tolerance``, a certified ``"auto"`` search does not stop
    at the certified length on the real data: ``sample_ais``'s own search goes on from it,
    lengthening and trying the model's other parameterisation (its ``auto_*`` attributes say
    what it did). Where the final real-data run still spreads that much, the result says
    ``real_data_harder=1`` and a warning names what to do: simulate data closer to the real
    data (``match_data=True``, or ``fix=``, e.g. at posterior means, in the spirit of Grosse,
    Ancha & Roy 2016) or raise ``n_steps``. The check can miss a harder data set whose
    difficulty the forward chains never see (mass they do not reach); it does not widen the
    certificate.
    """
    model = resolve_model(model)
    if sampler_kwargs.pop("potentials_in_likelihood", False):
        # Certifying simulates data, which Potentials cannot give: say so, not a TypeError.
        check_model(model, potentials_in_likelihood=True, needs_simulation=True)
    search = isinstance(n_steps, str)
    if search and n_steps != "auto":
        raise BDMCInputError(f"`n_steps` must be 'auto' or an increasing sequence of integers, "
                             f"got {n_steps!r}.")
    if not search and np.ndim(n_steps) == 0:  # one length, as sample_bdmc takes it
        n_steps = [n_steps]
    steps = [] if search else [check_positive_int(n, "n_steps") for n in n_steps]
    if not search and (not steps or steps != sorted(steps)):
        raise BDMCInputError("`n_steps` must be a non-empty increasing sequence.")
    if not tolerance > 0:
        raise BDMCInputError(f"`tolerance` must be positive, got {tolerance}.")
    if fix:
        free = {rv.name for rv in model.free_RVs}
        unknown = sorted(set(fix) - free)
        if unknown:
            raise BDMCInputError(f"`fix` names {unknown}, which are not free variables of the "
                                 f"model (free: {sorted(free)}).")
        if free <= set(fix):
            raise BDMCInputError("`fix` holds every free variable, which leaves nothing to "
                                 "anneal on the simulated data: leave at least one free.")
        check_fixed_values(model, fix)
    root = root_generator(random_seed)
    simulation_seed, estimation_seed = (int(s) for s in root.integers(2**31, size=2))
    simulation_model = model if not fix else pm.do(model, dict(fix))
    common = dict(chains=chains, progressbar=progressbar, compile_kwargs=compile_kwargs,
                  **sampler_kwargs)

    with call_scope(progressbar) as (bar, outermost):
        bar.prefix = "Certifying on simulated data: "
        if search:
            result = sample_bdmc(n_steps="auto", target_gap=tolerance, max_time=max_time,
                                 model=simulation_model, random_seed=simulation_seed,
                                 match_data=match_data, **common)
            rows, certified = _search_rows(result), bool(result["evidence"].attrs["certified"])
        else:
            rows, certified = _ladder(steps, tolerance, simulation_model, simulation_seed,
                                      match_data, common)
            result = rows.pop()
        bar.prefix = "Estimating on your data: "
        real, transferable = _estimate_on_real_data(
            result, model, fix, estimation_seed, common,
            search=dict(target_gap=tolerance, max_time=max_time) if search and certified
            and not fix else None)
        bar.prefix = ""
        line = (f"log p(y) >= {float(real['evidence']['lower']):.3f} on your data; "
                + (f"certified on simulated data, gap {rows[-1][3]:.3f} nats at {rows[-1][0]} "
                   f"steps" if certified else f"not certified (last gap {rows[-1][3]:.3f} nats "
                   f"at {rows[-1][0]} steps, tolerance {tolerance:g})"))
        if outermost:
            logger.info("calibrate: %s.", line)
            bar.finish("Done: " + ("certified" if certified else "not certified")
                       + f", log p(y) >= {float(real['evidence']['lower']):.3f}")

    simulated_sd, real_sd = forward_spread(result), forward_spread(real)
    harder = harder_than_certified(real_sd, simulated_sd, tolerance)
    if harder:
        logger.warning(
            "The real data's forward log weights spread more (sd %.2f) than those of the "
            "certified simulated data (sd %.2f): the real data look harder, and the certificate "
            "may not transfer. Simulate data closer to them (`match_data=True`, or `fix=`, e.g. "
            "at posterior means) or raise `n_steps`.", real_sd, simulated_sd)
    n_tried, lower, upper, gap, gap_se = (np.array(col) for col in zip(*rows, strict=True))
    real["calibration"] = xr.Dataset(
        {"n_steps": ("attempt", n_tried), "lower": ("attempt", lower),
         "upper": ("attempt", upper), "gap": ("attempt", gap), "gap_se": ("attempt", gap_se)},
        coords={"attempt": np.arange(len(rows))},
        attrs={"tolerance": float(tolerance), "certified": int(certified),
               "certified_n_steps": int(rows[-1][0]), "certified_gap": float(rows[-1][3]),
               "simulation_seed": simulation_seed, "estimation_seed": estimation_seed,
               "plan_transferred": int(transferable),
               "forward_log_weight_sd_simulated": simulated_sd,
               "forward_log_weight_sd_real": real_sd, "real_data_harder": int(harder)},
    )
    return real


def _ladder(steps, tolerance, simulation_model, simulation_seed, match_data, common):
    """Run ``sample_bdmc`` at each length until one certifies; rows, then the last result."""
    rows, result, certified = [], None, False
    for n in steps:
        result = sample_bdmc(n_steps=n, model=simulation_model, random_seed=simulation_seed,
                             match_data=match_data, **common)
        ev = result["evidence"]
        rows.append((n, *(float(ev[k]) for k in ("lower", "upper", "gap", "gap_se"))))
        certified = certifies(rows[-1][3], rows[-1][4], tolerance)
        logger.debug("Calibration: n_steps=%d, gap on simulated data %.3f nats (standard error "
                    "%.3f).", n, rows[-1][3], rows[-1][4])
        if certified:
            break
    if not certified:
        logger.warning("No tried n_steps reached a gap within %.3f nats, measured that precisely "
                       "(last: %.3f, standard error %.3f, at %d steps); the estimate below is not "
                       "certified.", tolerance, rows[-1][3], rows[-1][4], rows[-1][0])
    return [*rows, result], certified


def _search_rows(result: xr.DataTree) -> list[tuple]:
    """Return the search's attempts as calibration rows (bounds of the last attempt only)."""
    ev = result["evidence"]
    steps, gaps, ses = (np.atleast_1d(ev.attrs[k]) for k in ("auto_n_steps", "auto_gaps",
                                                             "auto_gap_se"))
    rows = [(int(n), np.nan, np.nan, float(g), float(e)) for n, g, e in zip(steps, gaps, ses,
                                                                           strict=True)]
    rows[-1] = (int(ev.attrs["n_steps"]), float(ev["lower"]), float(ev["upper"]),
                float(ev["gap"]), float(ev["gap_se"]))
    return rows


def check_fixed_values(model: pm.Model, fix: Mapping[str, object]) -> None:
    """Refuse ``fix`` values outside their variables' supports (a negative scale, say).

    Read through each variable's transform, where its bounds do not depend on other free
    variables: a value the transform cannot map (``log`` of a negative number) is outside.
    """
    for name, value in fix.items():
        rv = model[name]
        transform = model.rvs_to_transforms.get(rv)
        if transform is None:
            continue
        image = transform.forward(pt.as_tensor(np.asarray(value, dtype=rv.dtype)),
                                  *rv.owner.inputs)
        if any(v.owner is not None and isinstance(v.owner.op, RandomVariable)
               for v in ancestors([image])):
            continue  # its bounds depend on other variables
        with np.errstate(all="ignore"):
            inside = np.all(np.isfinite(image.eval(mode="FAST_COMPILE")))
        if not inside:
            raise BDMCInputError(f"`fix` gives {name!r} the value {value!r}, outside the "
                                 "values its distribution allows.")


def _estimate_on_real_data(result, model, fix, estimation_seed, common,
                           search: dict | None = None) -> tuple[xr.DataTree, bool]:
    """``sample_ais`` on the real data with the certified run's plan, chains and form.

    A frozen HMC plan from the prior transfers to the real data; PyMC step-method runs
    (discrete models), pm.do-fixed simulation models and paths from a base fitted to the
    simulated data's posterior re-tune with the certified n_steps (and form) instead.
    ``search`` (``target_gap``, ``max_time``; after a certified search on the model itself):
    where a re-tuned run is needed, it is ``sample_ais``'s own search, which starts at the
    certified length, form and path and goes on where the real data look harder; a
    transferred plan whose run looks harder is followed by that search too. Returns the
    result and whether the plan was transferred (and kept).
    """
    attrs = result["evidence"].attrs
    settings = dict(common)
    if "auto_chains" in attrs:  # the search may have raised the chains
        settings["chains"] = int(np.atleast_1d(attrs["auto_chains"])[-1])
    transferable = (not fix and attrs.get("kernel") == "hmc"
                    and attrs.get("path_start", "prior") == "prior")
    if transferable:
        real = sample_ais(model=model, plan=AnnealingPlan.from_result(result),
                          random_seed=estimation_seed, **settings)
        if search is None or not harder_than_certified(
                forward_spread(real), forward_spread(result), search["target_gap"],
                SEARCH_ON_BIAS_SCALE):
            return real, True
        logger.debug("The real data look harder than the certified simulated data: "
                     "searching on them from the certified length.")
    if search is not None:  # the certified length, form and path are this process's record
        return sample_ais(model=model, random_seed=estimation_seed, **search, **settings), False
    if "reparameterized" in attrs and "reparameterize" not in settings and not fix:
        settings["reparameterize"] = True  # certified in the other form: run it there too
    if attrs.get("path_start", "prior") != "prior" and settings.get("base", "auto") == "auto":
        settings["base"] = "fitted"  # certified from a fitted Gaussian: fit one here too
    return sample_ais(n_steps=int(attrs["n_steps"]), model=model, random_seed=estimation_seed,
                      **settings), False
