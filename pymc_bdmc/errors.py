"""Exceptions shared across the package (kept import-free so every module can raise them)."""

from __future__ import annotations

__all__ = ["BDMCInputError", "SimulatedDataOverflow"]


class BDMCInputError(ValueError):
    """A model or argument that pymc_bdmc cannot use, found before sampling."""


class SimulatedDataOverflow(BDMCInputError):
    """Data simulated from the model are not finite: a property of the data alone.

    ``sample_bdmc``'s default guard (:func:`pymc_bdmc.pipeline.matching.guarded_draw`)
    replaces a draw whose data overflow by the nearest finite one of 100 others; any other
    failure of that draw is refused, as it always was.
    """
