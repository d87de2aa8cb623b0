"""``pmb.plots``: plot_compare's encoding (that it is a lazy attribute: test_imports.py)."""

import numpy as np
import pytest
from evidence_trees import calibrated_tree, evidence_tree

import pymc_bdmc as pmb


@pytest.fixture
def plt():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_plot_compare_shows_each_kind_of_interval(plt):
    results = {"sandwich": evidence_tree(-10.0, -9.7),
               "certified": calibrated_tree(-10.4, gap=0.05), "lower only": evidence_tree(-12.0),
               "biased": evidence_tree(-13.0, attrs={"estimate_kind": "biased"})}
    table = pmb.compare(results)
    ax = pmb.plots.plot_compare(table)
    # Rows best first, from the top; ticks named after the models.
    assert [t.get_text() for t in ax.get_yticklabels()] == list(table.index)
    assert list(ax.get_yticks()) == [3, 2, 1, 0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    sandwich = lines["sandwich: lower and upper bound"]
    np.testing.assert_array_equal(sandwich.get_xdata(), [-10.0, -9.7])
    assert sandwich.get_linestyle() == "-" and sandwich.get_ydata()[0] == 3
    certified = lines["certified lower bound: + gap measured on simulated data"]
    np.testing.assert_allclose(certified.get_xdata(), table.loc["certified", ["lower", "upper"]])
    assert certified.get_linestyle() == "--"
    lower = lines["lower bound only"]
    assert lower.get_xdata()[0] == -12.0 and lower.get_xdata()[1] > -9.7  # runs off rightwards
    assert lower.get_marker() == ">" and lower.get_linestyle() == ":"
    # The best model's estimate as a reference line; one legend entry per kind.
    assert any(np.allclose(line.get_xdata(), -9.85) for line in ax.get_lines()
               if line.get_label().startswith("_"))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["sandwich: lower and upper bound",
                      "certified lower bound: + gap measured on simulated data",
                      "lower bound only", "estimate without bounds"]


def test_plot_compare_refuses_another_table(plt):
    table = pmb.compare({"a": evidence_tree(-1.0)}).rename(columns={"lower": "elpd"})
    with pytest.raises(ValueError, match=r"lacks columns \['lower'\]"):
        pmb.plots.plot_compare(table)


def test_plot_bounds_takes_one_result_as_well_as_a_series(plt):
    # Before, one result (a DataTree is a mapping of its groups) raised KeyError: 'evidence'.
    import xarray as xr

    calibration = xr.Dataset({"n_steps": ("attempt", [100, 400]),
                              "lower": ("attempt", [-5.0, -4.6]),
                              "upper": ("attempt", [-4.0, -4.5])})
    calibrated = evidence_tree(-4.55, calibration=calibration)
    ax = pmb.plots.plot_bounds(calibrated)
    lines = {c.get_label(): c.lines[0] for c in ax.containers}  # each errorbar's data line
    np.testing.assert_array_equal(lines["lower (forward AIS)"].get_xdata(), [100, 400])
    np.testing.assert_array_equal(lines["upper (reverse AIS)"].get_ydata(), [-4.0, -4.5])
    one = evidence_tree(-3.0, -2.9, attrs={"n_steps": 200})
    ax = pmb.plots.plot_bounds(one)
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    np.testing.assert_array_equal(lines["lower (forward AIS)"].get_data(), [[200], [-3.0]])
