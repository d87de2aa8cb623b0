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

from pymc_bdmc.kernels.tuning import AnnealingPlan
from pymc_bdmc.model.checks import BDMCInputError, check_positive_int
from pymc_bdmc.sampling import sample_ais, sample_bdmc

__all__ = ["calibrate"]

logger = logging.getLogger(__name__)


def _within(gap: float, tolerance: float) -> bool:
    # An upper bound far below the lower bound is no certificate: both bounds are noisy there.
    return bool(np.isfinite(gap) and abs(gap) <= tolerance)


def calibrate(
    model: pm.Model | None = None,
    *,
    tolerance: float = 1.0,
    n_steps: Sequence[int] = (250, 500, 1000, 2000, 4000),
    chains: int = 32,
    fix: Mapping[str, object] | None = None,
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
        below lower) is run-to-run noise of the same order, so ``|gap|`` is compared.
    n_steps : sequence of int, default (250, 500, 1000, 2000, 4000)
        Annealing lengths to try, in increasing order; the first whose gap is within
        ``tolerance`` is used.
    chains : int, default 32
    fix : mapping, optional
        Free variables to hold at given values (e.g. estimates from the real data) while
        simulating, through ``pm.do``, so that simulated data resemble the real data. The
        certified model then differs from ``model``, so its plan cannot be transferred: the
        real-data run tunes its own plan with the certified ``n_steps``. The same holds where
        the certified run annealed from a Gaussian fitted to the simulated data's posterior
        (``base="auto"``): the real-data run fits its own.
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
        attempt (dim ``attempt``) ``n_steps``, ``lower``, ``upper`` and ``gap`` on simulated data;
        attrs ``tolerance``, ``certified`` (whether the tolerance was met), ``certified_n_steps``,
        ``certified_gap``, ``simulation_seed`` and ``estimation_seed``.

    Notes
    -----
    The certificate is evidence, not proof, about the real data: it measures the estimator on
    data drawn from the model, which the real data resemble only as far as the model fits them.
    """
    model = modelcontext(model)
    steps = [check_positive_int(n, "n_steps") for n in n_steps]
    if not steps or steps != sorted(steps):
        raise BDMCInputError("`n_steps` must be a non-empty increasing sequence.")
    if not tolerance > 0:
        raise BDMCInputError(f"`tolerance` must be positive, got {tolerance}.")
    root = np.random.default_rng(random_seed)
    simulation_seed, estimation_seed = (int(s) for s in root.integers(2**31, size=2))
    simulation_model = model if not fix else pm.do(model, dict(fix))
    common = dict(chains=chains, progressbar=progressbar, compile_kwargs=compile_kwargs,
                  **sampler_kwargs)

    rows, result = [], None
    for n in steps:
        result = sample_bdmc(n_steps=n, model=simulation_model, random_seed=simulation_seed,
                             **common)
        ev = result["evidence"]
        rows.append((n, float(ev["lower"]), float(ev["upper"]), float(ev["gap"])))
        logger.info("Calibration: n_steps=%d, gap on simulated data %.3f nats.", n, rows[-1][3])
        if _within(rows[-1][3], tolerance):
            break
    certified = _within(rows[-1][3], tolerance)
    if not certified:
        logger.warning("No tried n_steps reached a gap within %.3f nats (last: %.3f at %d "
                       "steps); the estimate below is not certified.", tolerance, rows[-1][3],
                       rows[-1][0])

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

    n_tried, lower, upper, gap = (np.array(col) for col in zip(*rows, strict=True))
    real["calibration"] = xr.Dataset(
        {"n_steps": ("attempt", n_tried), "lower": ("attempt", lower),
         "upper": ("attempt", upper), "gap": ("attempt", gap)},
        coords={"attempt": np.arange(len(rows))},
        attrs={"tolerance": float(tolerance), "certified": int(certified),
               "certified_n_steps": int(rows[-1][0]), "certified_gap": float(rows[-1][3]),
               "simulation_seed": simulation_seed, "estimation_seed": estimation_seed,
               "plan_transferred": int(transferable)},
    )
    return real
