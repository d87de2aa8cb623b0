"""Deprecated alias of :mod:`pymc_bdmc.known_evidence.quadrature` (the models moved there)."""

import warnings

from pymc_bdmc.known_evidence.quadrature import *  # noqa: F403
from pymc_bdmc.known_evidence.quadrature import __all__  # noqa: F401

warnings.warn("pymc_bdmc.testing_quadrature is deprecated: use pymc_bdmc.known_evidence, which "
              "holds the same models.", DeprecationWarning, stacklevel=2)
