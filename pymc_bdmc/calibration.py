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
import xarray as xr
from pymc.model import modelcontext

from pymc_bdmc.estimators import certifies
from pymc_bdmc.kernels.tuning import AnnealingPlan
from pymc_bdmc.model.checks import BDMCInputError, check_positive_int
from pymc_bdmc.sampling import sample_ais, sample_bdmc

__all__ = ["TRANSFER_MIN_BIAS_SCALE", "TRANSFER_SPREAD_FACTOR", "calibrate", "forward_spread",
           "harder_than_certified"]

logger = logging.getLogger(__name__)


#: The real data are flagged as harder than the simulated data where the spread (sd) of their
#: forward log weights exceeds the certified run's by this factor ...
TRANSFER_SPREAD_FACTOR = 2.0
#: ... and the bias it allows (``sd^2 / 2`` nats for log-normal weights) exceeds the tolerance.
TRANSFER_MIN_BIAS_SCALE = 1.0


def forward_spread(result: xr.DataTree) -> float:
    """Standard deviation of a run's finite forward log weights (NaN if fewer than two)."""
    log_w = np.asarray(result["evidence"]["log_weight_forward"].values, dtype=float)
    log_w = log_w[np.isfinite(log_w)]
    return float(np.std(log_w)) if log_w.size >= 2 else float("nan")


def harder_than_certified(real_sd: float, simulated_sd: float, tolerance: float) -> bool:
    """Whether the real-data run looks harder than the certified simulated one (see notes)."""
    if not np.isfinite(real_sd):
        return True
    return bool(real_sd > TRANSFER_SPREAD_FACTOR * simulated_sd
                and real_sd**2 / 2 > TRANSFER_MIN_BIAS_SCALE * tolerance)


def calibrate(
    model: pm.Model | None = None,
    *,
    tolerance: float = 1.0,
    n_steps: Sequence[int] = (250, 500, 1000, 2000, 4000),
    chains: int = 32,
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
    tolerance : float, default 1.0
        Largest acceptable size of the BDMC gap (nats) on simulated data. A negative gap (upper
        below lower) is run-to-run noise of the same order, so ``|gap|`` is compared, and the
        gap's own standard error must be within it too (:func:`~pymc_bdmc.estimators.certifies`).
    n_steps : sequence of int, default (250, 500, 1000, 2000, 4000)
        Annealing lengths to try, in increasing order; the first whose gap is within
        ``tolerance`` (and measured that precisely) is used.
    chains : int, default 32
    fix : mapping, optional
        Free variables to hold at given values (e.g. estimates from the real data) while
        simulating, through ``pm.do``, so that simulated data resemble the real data. The
        certified model then differs from ``model``, so its plan cannot be transferred: the
        real-data run tunes its own plan with the certified ``n_steps``. The same holds where
        the certified run annealed from a Gaussian fitted to the simulated data's posterior
        (``base="auto"``): the real-data run fits its own. Variables held fixed are not
        annealed on the simulated data, so the certificate says nothing about them (the
        transfer check in the notes flags a real-data run they make harder).
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
        simulated data;
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
    and its ``sd^2 / 2`` exceeds ``tolerance``, the result says ``real_data_harder=1`` and a
    warning names what to do: simulate data closer to the real data (``match_data=True``, or
    ``fix=``, e.g. at posterior means, in the spirit of Grosse, Ancha & Roy 2016) or raise
    ``n_steps``. The check
    can miss a harder data set whose difficulty the forward chains never see (mass they do not
    reach); it does not widen the certificate.
    """
    model = modelcontext(model)
    steps = [check_positive_int(n, "n_steps") for n in n_steps]
    if not steps or steps != sorted(steps):
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
    root = np.random.default_rng(random_seed)
    simulation_seed, estimation_seed = (int(s) for s in root.integers(2**31, size=2))
    simulation_model = model if not fix else pm.do(model, dict(fix))
    common = dict(chains=chains, progressbar=progressbar, compile_kwargs=compile_kwargs,
                  **sampler_kwargs)

    rows, result = [], None
    for n in steps:
        result = sample_bdmc(n_steps=n, model=simulation_model, random_seed=simulation_seed,
                             match_data=match_data, **common)
        ev = result["evidence"]
        rows.append((n, *(float(ev[k]) for k in ("lower", "upper", "gap", "gap_se"))))
        certified = certifies(rows[-1][3], rows[-1][4], tolerance)
        logger.info("Calibration: n_steps=%d, gap on simulated data %.3f nats (standard error "
                    "%.3f).", n, rows[-1][3], rows[-1][4])
        if certified:
            break
    if not certified:
        logger.warning("No tried n_steps reached a gap within %.3f nats, measured that precisely "
                       "(last: %.3f, standard error %.3f, at %d steps); the estimate below is not "
                       "certified.", tolerance, rows[-1][3], rows[-1][4], rows[-1][0])

    # A frozen HMC plan from the prior transfers to the real data; PyMC step-method runs
    # (discrete models), pm.do-fixed simulation models and paths from a base fitted to the
    # simulated data's posterior re-tune with the certified n_steps instead.
    attrs = result["evidence"].attrs
    transferable = (not fix and attrs.get("kernel") == "hmc"
                    and attrs.get("path_start", "prior") == "prior")
    if not transferable:
        real = sample_ais(n_steps=rows[-1][0], model=model, random_seed=estimation_seed,
                          **common)
    else:
        plan = AnnealingPlan.from_result(result)
        real = sample_ais(model=model, plan=plan, random_seed=estimation_seed, **common)

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
