"""pymc_bdmc: certified marginal likelihoods for PyMC models.

Annealed importance sampling gives a stochastic lower bound on ``log p(y)``; on data simulated
from the model, reverse AIS from the generating parameters gives a stochastic upper bound
(bidirectional Monte Carlo, Grosse, Ghahramani & Adams 2015).
"""

import importlib as _importlib
import logging as _logging

from pymc_bdmc import schedules, unnormalized
from pymc_bdmc.compare import bayes_factor, compare
from pymc_bdmc.config import Tuning
from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.estimators import EvidenceBounds, log_mean_exp
from pymc_bdmc.evidence import (
    calibrate,
    sample_ais,
    sample_bdmc,
    sample_heldout_likelihood,
    sample_smc_evidence,
    sample_unnormalized_evidence,
)
from pymc_bdmc.kernels.plan import AnnealingPlan
from pymc_bdmc.unnormalized import ERGM, ExponentialFamily, Ising, unnormalized_likelihoods
from pymc_bdmc.version import __version__

__all__ = [
    "ERGM",
    "AnnealingPlan",
    "BDMCInputError",
    "EvidenceBounds",
    "ExponentialFamily",
    "Ising",
    "Tuning",
    "__version__",
    "bayes_factor",
    "calibrate",
    "compare",
    "compare_estimators",
    "known_evidence",
    "log_mean_exp",
    "plots",
    "sample_ais",
    "sample_bdmc",
    "sample_heldout_likelihood",
    "sample_smc_evidence",
    "sample_unnormalized_evidence",
    "schedules",
    "testbed",
    "unnormalized",
    "unnormalized_likelihoods",
    "verification",
]

#: Submodules imported on first access, so that ``import pymc_bdmc`` (and every worker process)
#: does not pay for what an evidence run never uses: ``plots`` needs matplotlib, which is
#: optional; ``known_evidence``, ``testbed`` and ``verification`` hold reference models and
#: checks that pull in most of SciPy; ``testing`` and ``testing_quadrature`` are deprecated names
#: of ``known_evidence``'s modules (importing them warns).
_LAZY_SUBMODULES = (
    "known_evidence",
    "plots",
    "testbed",
    "testing",
    "testing_quadrature",
    "verification",
)
#: Public functions of lazy submodules, by the module that defines them.
_LAZY_FUNCTIONS = {"compare_estimators": "pymc_bdmc.testbed.runner"}


def __getattr__(name: str):
    """Import a lazy submodule (``pmb.plots``, ``pmb.known_evidence``, ...) on first access."""
    if name in _LAZY_SUBMODULES:
        return _importlib.import_module(f"pymc_bdmc.{name}")
    if name in _LAZY_FUNCTIONS:
        return getattr(_importlib.import_module(_LAZY_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'pymc_bdmc' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY_SUBMODULES, *_LAZY_FUNCTIONS})


_log = _logging.getLogger("pymc_bdmc")
if not _logging.root.handlers:  # like PyMC: show INFO messages unless the user configured logging
    _log.setLevel(_logging.INFO)
    if not _log.handlers:
        _log.addHandler(_logging.StreamHandler())
