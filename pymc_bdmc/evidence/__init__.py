"""The entry points: each checks its arguments and hands its method to the one driver."""

from pymc_bdmc.evidence.annealing import sample_ais, sample_bdmc
from pymc_bdmc.evidence.calibration import calibrate
from pymc_bdmc.evidence.heldout import sample_heldout_likelihood
from pymc_bdmc.evidence.smc import sample_smc_evidence
from pymc_bdmc.evidence.unnormalized import sample_unnormalized_evidence

__all__ = ["calibrate", "sample_ais", "sample_bdmc", "sample_heldout_likelihood",
           "sample_smc_evidence", "sample_unnormalized_evidence"]
