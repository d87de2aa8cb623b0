"""What every result carries: the attributes of the ``evidence`` group shared by all drivers."""

from __future__ import annotations

import numpy as np

from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.pipeline.settings import Settings

__all__ = ["run_attrs"]


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
