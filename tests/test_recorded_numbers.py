"""Every method's numbers, pinned bit for bit (issue 38: refactors keep every result).

``tests/recorded_runs.py`` runs small seeded cases of AIS, BDMC (fixed length, fused kernels,
the length search, the other parameterisation, Gibbs sweeps, PyMC step methods), SMC (both
paths, and its reverse), calibrate, the held-out likelihood and the un-normalised estimators,
and reduces each to its bounds and its log weights. The record in
``tests/recorded_numbers.json`` was made at commit 9aca824, before the one-driver refactor;
cases whose algorithm changed on purpose since were re-recorded alone (``ais_auto`` when the
lower-bound search began measuring its first length at half of it; the eight cases that anneal
from a fitted Gaussian when the equilibration before each fit began stopping where the
population had settled; the ten default-kernel AIS and BDMC cases when short paths began
making one HMC transition per temperature, not two; ``calibrate`` when a fitted path on few
data stopped starting from a Laplace fit; ``bdmc_gibbs`` when the pilot stopped sweeping the
discrete coordinates before its probe transitions; ``bdmc_other_form``, ``bdmc_search_swap`` and
``ais_auto`` when every attempt and every form's pilot began drawing from the call's streams
started afresh, and a call in the other form began simulating its data as written).
Compared to 1e-9, relative and absolute (``tests/recorded_runs.py`` says why not bit for bit:
the search's runs of thousands of leapfrog steps amplify PyTensor's round-off between processes
to 4e-10 on a log weight, and the gaps are differences of bounds, seen to move by 3e-12 from run
to run on a machine where 1e-12 relative had passed for weeks). Any change of an algorithm, of
its draws or of their order moves the numbers by many orders of magnitude more.
"""

import json

import numpy as np
import pytest
from recorded_runs import RECORD, run_all


@pytest.fixture(scope="module")
def numbers():
    return run_all()


RECORDED = json.loads(RECORD.read_text())
TOLERANCE = 1e-9


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_numbers_are_identical_to_the_record(numbers, case):
    assert sorted(numbers[case]) == sorted(RECORDED[case])
    for key, recorded in RECORDED[case].items():
        np.testing.assert_allclose(_flat(numbers[case][key]), _flat(recorded), rtol=TOLERANCE,
                                   atol=TOLERANCE, err_msg=f"{case}: {key}")


def _flat(value) -> np.ndarray:
    parts = value if isinstance(value, list) else [value]
    return np.concatenate([np.ravel(np.asarray(part, dtype=float)) for part in parts])


def test_every_case_is_recorded(numbers):
    assert sorted(numbers) == sorted(RECORDED)
