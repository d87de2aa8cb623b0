"""Exceptions shared across the package (kept import-free so every module can raise them)."""

from __future__ import annotations

__all__ = ["BDMCInputError", "SimulatedDataOverflow"]


class BDMCInputError(ValueError):
    """A model or argument that pymc_bdmc cannot use, found before sampling."""


class SimulatedDataOverflow(BDMCInputError):
    """Data simulated from the model are not finite: a property of the data alone.

    Dropping such a draw is a choice by the simulated data, so it keeps the parameters that
    generated the data kept an exact posterior sample (:mod:`pymc_bdmc.pipeline.matching`);
    other simulation failures depend on the parameters and are never dropped.
    """
