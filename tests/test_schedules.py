import numpy as np
import pytest

from pymc_bdmc import BDMCInputError, schedules
from pymc_bdmc.kernels.tuning import thermodynamic_schedule

EXACT = 1e-12  # deterministic identities


@pytest.mark.parametrize("name", ["sigmoid", "linear", "geometric", "adaptive"])
@pytest.mark.parametrize("n_steps", [1, 2, 17, 500])
def test_named_schedules_run_from_zero_to_one_monotonically(name, n_steps):
    beta = schedules.make_schedule(name, n_steps)
    assert beta.shape == (n_steps + 1,)
    assert beta[0] == 0.0 and beta[-1] == 1.0
    assert np.all(np.diff(beta) >= 0)


def test_sigmoid_matches_paper_formula():
    n, delta = 10, 4.0
    t = np.arange(n + 1)
    raw = 1 / (1 + np.exp(-delta * (2 * t / n - 1)))
    expected = (raw - raw[0]) / (raw[-1] - raw[0])
    np.testing.assert_allclose(schedules.sigmoid(n, delta), expected, rtol=0, atol=EXACT)
    # symmetric about the middle: beta_t + beta_{T-t} = 1
    b = schedules.sigmoid(n, delta)
    np.testing.assert_allclose(b + b[::-1], 1.0, atol=EXACT)


def test_geometric_has_constant_ratio_after_zero():
    b = schedules.geometric(20, start=1e-3)
    ratios = b[2:] / b[1:-1]
    np.testing.assert_allclose(ratios, ratios[0], rtol=1e-10)
    assert b[1] == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "bad",
    [[0.0, 0.5, 0.4, 1.0], [0.1, 0.5, 1.0], [0.0, 0.5, 0.9], [0.0, np.nan, 1.0], [[0.0, 1.0]], [0.0]],
)
def test_invalid_schedule_arrays_are_refused(bad):
    with pytest.raises(BDMCInputError):
        schedules.make_schedule(bad, None)


def test_schedule_array_length_must_match_n_steps():
    with pytest.raises(BDMCInputError, match="does not match"):
        schedules.make_schedule([0.0, 0.5, 1.0], 5)


def test_unknown_schedule_name():
    with pytest.raises(BDMCInputError, match="Unknown schedule"):
        schedules.make_schedule("cosine", 10)


def test_thermodynamic_schedule_equalizes_length_for_inverse_beta_spread():
    # sd(loglik) = c / beta (likelihood-dominated regime): equal length <=> geometric spacing.
    pilot_beta = np.concatenate([[0.0], np.geomspace(1e-4, 1, 400)])
    sd = np.concatenate([[1e4 * 3.0], 3.0 / pilot_beta[1:]])
    beta = thermodynamic_schedule(pilot_beta, sd, 50)
    assert beta[0] == 0 and beta[-1] == 1 and np.all(np.diff(beta) > 0)
    ratios = beta[6:] / beta[5:-1]  # the first steps leave beta=0, where sd is finite
    np.testing.assert_allclose(ratios, ratios[-1], rtol=1e-3)


def test_thermodynamic_schedule_with_constant_likelihood_is_linear():
    beta = thermodynamic_schedule(np.array([0.0, 0.3, 1.0]), np.zeros(3), 4)
    np.testing.assert_allclose(beta, np.linspace(0, 1, 5), atol=EXACT)


@pytest.mark.parametrize("name", ["linear", "sigmoid", "geometric", "adaptive"])
def test_settings_remade_at_another_length_keep_their_named_schedule(name):
    from pymc_bdmc.pipeline.settings import validate

    settings = validate(1000, 8, name, None, 2, 0.9, 0.5, None, 0.95)
    shorter = settings.with_n_steps(7)
    assert shorter.n_steps == 7 and shorter.schedule_name == name
    np.testing.assert_array_equal(shorter.betas, schedules.make_schedule(name, 7))
    assert shorter.chains == settings.chains and shorter.adaptive == settings.adaptive


def test_settings_with_a_schedule_array_cannot_change_length():
    from pymc_bdmc.pipeline.settings import validate

    settings = validate(None, 8, np.linspace(0.0, 1.0, 11), None, 2, 0.9, 0.5, None, 0.95)
    assert settings.n_steps == 10 and settings.schedule_name is None
    with pytest.raises(ValueError, match="array"):
        settings.with_n_steps(5)
