"""Exceptions shared across the package (kept import-free so every module can raise them)."""

from __future__ import annotations

__all__ = ["BDMCInputError"]


class BDMCInputError(ValueError):
    """A model or argument that pymc_bdmc cannot use, found before sampling."""
