"""pymc_bdmc: certified marginal likelihoods for PyMC models.

Annealed importance sampling gives a stochastic lower bound on ``log p(y)``; on data simulated
from the model, reverse AIS from the generating parameters gives a stochastic upper bound
(bidirectional Monte Carlo, Grosse, Ghahramani & Adams 2015).
"""

import logging

__version__ = "0.1.0"

from pymc_bdmc import schedules, verification
from pymc_bdmc.estimators import EvidenceBounds, log_mean_exp
from pymc_bdmc.model.checks import BDMCInputError
from pymc_bdmc.sampling import sample_ais, sample_bdmc

__all__ = [
    "BDMCInputError",
    "EvidenceBounds",
    "__version__",
    "log_mean_exp",
    "sample_ais",
    "sample_bdmc",
    "schedules",
    "verification",
]

_log = logging.getLogger("pymc_bdmc")
if not logging.root.handlers:  # like PyMC: show INFO messages unless the user configured logging
    _log.setLevel(logging.INFO)
    if not _log.handlers:
        _log.addHandler(logging.StreamHandler())
