"""The examples are executable documents: run them so they cannot rot (each asserts its claim)."""

import runpy
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))

# The four longest examples run in the opt-in suite (``--runslow``); together they were about
# 110 s of CPU, most of the default run's examples. What each one claims is pinned in the default
# run by faster tests:
# - random_walk (the defaults on a 150-step walk against quadrature; its search may take its
#   whole 60 s budget): test_random_walk_sandwich_contains_the_quadrature_truth in
#   tests/test_dense_mass.py and tests/test_curvature_metric.py (walks against quadrature),
#   tests/test_auto_steps.py (the search at the defaults), tests/test_reparameterize.py (walks
#   in the other form).
# - estimator_accuracy (the testbed's estimators against a BDMC truth): tests/test_testbed.py
#   (Laplace, BIC, likelihood weighting, harmonic mean, pm.sample_smc, compare_estimators and
#   summary_table) and tests/test_testbed_estimators.py.
# - ising_model_choice (un-normalised likelihoods, their Bayes factor, ABC and synthetic
#   likelihood): tests/test_unnormalized_entry.py, tests/test_unnormalized_summary.py,
#   tests/test_unnormalized_smc.py and the unnormalized_* runs of tests/test_recorded_numbers.py.
# - discrete_latents (a mixture's evidence with the Gibbs kernel, by AIS, SMC and summed out):
#   test_categorical_mixture_sandwich_encloses_enumerated_evidence (AIS and SMC) and the other
#   sandwiches against enumeration in tests/test_gibbs.py; the summed-out mixture's density
#   in test_mixture_likelihood_matches_numpy (tests/test_testbed.py), AIS on any density in
#   tests/test_ais.py.
# Their notebooks stay checked against the scripts in the default run (tests/test_notebooks.py).
SLOW = {"random_walk", "estimator_accuracy", "ising_model_choice", "discrete_latents"}
assert SLOW <= {p.stem for p in EXAMPLES}, SLOW - {p.stem for p in EXAMPLES}


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p for p in EXAMPLES
], ids=[p.stem for p in EXAMPLES])
def test_example_runs(path, capsys):
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out  # every example reports its numbers
