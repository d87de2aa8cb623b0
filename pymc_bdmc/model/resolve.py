"""Which model a call runs on: the ``model=`` argument, a Bambi model's, or the ``with`` context."""

from __future__ import annotations

import logging

import pymc as pm
from pymc.model import modelcontext

from pymc_bdmc.errors import BDMCInputError

__all__ = ["resolve_model"]

logger = logging.getLogger("pymc_bdmc")


def _is_bambi_model(model) -> bool:
    return type(model).__module__.split(".")[0] == "bambi" and hasattr(model, "build")


def resolve_model(model, first: tuple[str, object] | None = None) -> pm.Model:
    """Return the PyMC model a call runs on, or refuse with what to pass.

    Parameters
    ----------
    model : pm.Model, bambi.Model or None
        A PyMC model; a Bambi model (built here if it was not, which leaves the Bambi model
        otherwise as it was); or None for the model of the ``with`` context.
    first : (str, object), optional
        The call's first positional parameter and its value: a model given there (as
        ``calibrate(model)`` takes it) is refused with where it goes.

    Returns
    -------
    pm.Model

    Raises
    ------
    BDMCInputError
        Without a model, or for anything that is not one.
    """
    if first is not None and (isinstance(first[1], pm.Model) or _is_bambi_model(first[1])):
        raise BDMCInputError(
            f"A model was given as `{first[0]}`, this function's first positional argument: "
            "pass it as `model=` (or call this inside `with model:`)."
        )
    if model is None:
        try:
            return modelcontext(None)
        except TypeError:
            raise BDMCInputError(
                "No model to run on: call this inside `with pm.Model():` (or `with model:`), "
                "or pass the model as `model=`."
            ) from None
    if isinstance(model, pm.Model):
        return model
    if _is_bambi_model(model):
        backend = getattr(model, "backend", None)
        if getattr(backend, "model", None) is None:
            logger.debug("Building the Bambi model.")
            model.build()
        return model.backend.model
    raise BDMCInputError(f"`model` must be a pymc.Model or a bambi.Model, got "
                         f"{type(model).__name__}.")
