"""What every result carries: the attributes of the ``evidence`` group shared by all drivers."""

from __future__ import annotations

import numpy as np

from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.pipeline.settings import Settings

__all__ = ["run_attrs", "short_summary", "summary_line"]


def run_attrs(settings: Settings, density: ModelDensity, pilot, sampling_time: float,
              interrupted: str | None, **specific) -> dict:
    """Attributes every AIS/SMC result carries, plus the method-specific ones.

    Parameters
    ----------
    settings : Settings
    density : ModelDensity
    pilot : PilotResult or None
        None when a given plan replaced the pilot.
    sampling_time : float
    interrupted : str or None
        Where a reverse run was interrupted.
    **specific
        Method-specific attributes (they override the shared ones).

    Returns
    -------
    dict
    """
    return {
        "interrupted": interrupted,
        "kernel": "hmc",
        "chains": settings.chains,
        "pilot_chains": settings.pilot_chains if pilot is None else pilot.n_particles,
        "pilot_log_z": np.nan if pilot is None else pilot.log_z,
        "pilot_steps": 0 if pilot is None else pilot.n_steps,
        "pilot_path_length": np.nan if pilot is None else float(pilot.thermodynamic_length),
        **_path_attrs(pilot),
        "target_accept": settings.target_accept,
        "sampling_time": sampling_time,
        "model_evaluations": density.n_evaluations,
        "batching": density.batching,
        **({"reparameterized": ", ".join(f"{name} as {helper}" for name, helper
                                          in density.reparameterized.items())}
           if density.reparameterized else {}),
        **specific,
    }


def _path_attrs(pilot) -> dict:
    """The pilot's comparison of the paths from the prior and from a fitted base, if made."""
    if pilot is None:
        return {}
    return {name: float(value) for name, value in pilot.path_choice.items()}


def summary_line(result) -> str:
    """One line saying what a result found: its bounds, its certificate, its length.

    Parameters
    ----------
    result : xarray.DataTree

    Returns
    -------
    str
    """
    if "heldout" in result.children:
        held = result["heldout"]
        total, upper = float(held["total_lower"]), float(held["total_upper"])
        what = f"held-out log-likelihood of {held.sizes[held.attrs['case_dim']]} cases"
        if np.isfinite(upper):
            return (f"{what}: total between {total:.3f} and {upper:.3f} "
                    f"(gap {upper - total:.3f} nats)")
        return f"{what}: total >= {total:.3f} (a stochastic lower bound)"
    ev = result["evidence"]
    attrs, lower, upper = ev.attrs, float(ev["lower"]), float(ev["upper"])
    kind = attrs.get("estimate_kind")
    if kind is not None:  # the un-normalised estimators
        quantity = "log p̂(S(y))" if kind == "summary-statistic" else "log p̂(y)"
        return f"{str(attrs.get('method', '')).upper()}: {quantity} = {lower:.3f} ({kind})"
    algorithm = "SMC" if attrs.get("method") == "smc" else "AIS"
    length = f"{attrs.get('n_steps')} {'stages' if algorithm == 'SMC' else 'steps'}"
    if not np.isfinite(upper):
        return (f"{algorithm}: log p(y) >= {lower:.3f} (a stochastic lower bound; {length}, "
                f"{attrs.get('chains')} chains)")
    verdict = ""
    if "certified" in attrs:
        verdict = (f"; certified within {attrs['target_gap']:g} nats" if attrs["certified"]
                   else f"; not certified (target {attrs['target_gap']:g} nats)")
    other = (" in the model's other parameterisation (run sample_ais with "
             "reparameterize=True on your data)" if "reparameterized" in attrs else "")
    return (f"BDMC ({algorithm}): log p(y*) of simulated data between {lower:.3f} and "
            f"{upper:.3f}, gap {upper - lower:.3f} nats at {length}{verdict}{other}")


def short_summary(result) -> str:
    """A few words for the end of the progress bar: the gap, or the lower bound."""
    group = result["heldout"] if "heldout" in result.children else result["evidence"]
    name = "total_" if "heldout" in result.children else ""
    lower, upper = float(group[name + "lower"]), float(group[name + "upper"])
    if np.isfinite(upper):
        certified = group.attrs.get("certified")
        verdict = "" if certified is None else (" certified" if certified else ", not certified")
        return f"gap {upper - lower:.3f} nats{verdict}"
    return f"log p(y) >= {lower:.3f}"
