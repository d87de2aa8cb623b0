"""Every method's numbers, pinned bit for bit (issue 38: refactors keep every result).

``tests/recorded_runs.py`` runs small seeded cases of AIS, BDMC (fixed length, fused kernels,
the length search, the other parameterisation, Gibbs sweeps, PyMC step methods), SMC (both
paths, and its reverse), calibrate, the held-out likelihood and the un-normalised estimators,
and reduces each to the hex form of its bounds and a hash of its log weights. The record in
``tests/recorded_numbers.json`` was made at commit a06e924, before the one-driver refactor.
"""

import json

import pytest
from recorded_runs import RECORD, run_all


@pytest.fixture(scope="module")
def numbers():
    return run_all()


RECORDED = json.loads(RECORD.read_text())


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_numbers_are_bit_identical_to_the_record(numbers, case):
    assert numbers[case] == RECORDED[case]


def test_every_case_is_recorded(numbers):
    assert sorted(numbers) == sorted(RECORDED)
