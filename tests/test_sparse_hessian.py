"""The curvature's Hessian along groups of coordinates, once its pattern is known."""

import numpy as np

import pymc_bdmc as pmb
from pymc_bdmc.kernels import pilot_metrics
from pymc_bdmc.kernels.mass import CURVATURE_ANCHORS, curvature_correlation, curvature_hessians
from pymc_bdmc.kernels.sparse_hessian import difference_groups, grouped_hessians

GROUPS = 200
#: Differences from the full Hessians' entries, relative to their largest: the truncation
#: error of forward differences with steps of 1e-5 sds (a misread entry is off by its size).
TRUNCATION = 1e-5


def _hierarchy_gradients(x):
    # log f = sum_j -(a_j - mu)^2 exp(-2 s) / 2 - J s - s^2 / 2 - mu^2 / 2 (prior), and
    # sum_j -(a_j - y_j)^2 / 2 (likelihood), for x = (a_1..a_J, mu, s): not quadratic, so the
    # differences have a truncation error.
    a, mu, s = x[:, :GROUPS], x[:, GROUPS], x[:, GROUPS + 1]
    precision = np.exp(-2 * s)[:, None]
    centred = a - mu[:, None]
    prior = np.concatenate([-centred * precision,
                            (np.sum(centred * precision, axis=1) - mu)[:, None],
                            (np.sum(centred**2 * precision, axis=1) - GROUPS - s)[:, None]],
                           axis=1)
    likelihood = np.zeros_like(x)
    likelihood[:, :GROUPS] = -(a - np.linspace(-1, 1, GROUPS))
    return [prior, likelihood]


def _walk_gradients(x):
    # A random walk's steps x_1..x_T with its log scale s last: each step coupled to its
    # neighbours, all to s.
    steps, s = x[:, :-1], x[:, -1:]
    increments = np.diff(steps, axis=1, prepend=0.0)
    grad = np.zeros_like(x)
    scaled = increments * np.exp(-2 * s)
    grad[:, :-1] = -scaled
    grad[:, :-2] += scaled[:, 1:]
    grad[:, -1] = np.sum(increments * scaled, axis=1) - steps.shape[1]
    return [grad]


def test_grouped_hessians_are_the_full_ones_from_four_gradients_per_anchor():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, GROUPS + 2)) * 0.3
    variance = np.var(x, axis=0)
    movable = variance > 0
    full = curvature_hessians(x, variance, movable, _hierarchy_gradients)
    plan = difference_groups(full, np.flatnonzero(movable))
    assert list(plan.hubs) == [GROUPS, GROUPS + 1] and len(plan.groups) == 3
    rows = []

    def counting(points):
        rows.append(len(points))
        return _hierarchy_gradients(points)

    grouped = grouped_hessians(x, variance, plan, counting)
    assert rows == [CURVATURE_ANCHORS * 4]  # against 4 * 203 for the full Hessians
    for exact, found in zip(full, grouped, strict=True):
        # Within the forward differences' truncation error (steps of 1e-5 sds): a hub's entry
        # in another row is its own row's, where the full Hessian averages both one-sided ones.
        np.testing.assert_allclose(found, exact, atol=TRUNCATION * np.max(np.abs(exact)))
        np.testing.assert_array_equal(found == 0, exact == 0)
    per_anchor = grouped_hessians(x, variance, plan, _hierarchy_gradients, per_anchor=True)
    exact = curvature_hessians(x, variance, movable, _hierarchy_gradients, per_anchor=True)
    np.testing.assert_allclose(per_anchor[0], exact[0],
                               atol=TRUNCATION * np.max(np.abs(exact[0])))


def test_a_walk_is_differenced_along_its_scale_and_three_colours():
    x = np.random.default_rng(1).normal(size=(32, 41)) * 0.2
    variance = np.var(x, axis=0)
    full = curvature_hessians(x, variance, variance > 0, _walk_gradients)
    plan = difference_groups(full, np.arange(41))
    assert list(plan.hubs) == [40] and len(plan.groups) == 4
    (found,) = grouped_hessians(x, variance, plan, _walk_gradients)
    np.testing.assert_allclose(found, full[0], atol=TRUNCATION * np.max(np.abs(full[0])))
    np.testing.assert_array_equal(found == 0, full[0] == 0)


def test_a_dense_pattern_is_differenced_coordinate_by_coordinate():
    a = np.random.default_rng(2).normal(size=(30, 30))
    assert difference_groups([a + a.T], np.arange(30)) is None


def test_the_pilot_differences_the_full_hessian_once_then_along_its_groups(monkeypatch):
    full_rows, grouped_rows = [], []

    def counting_full(values, variance, movable, gradients, *args, **kwargs):
        full_rows.append(1)
        return curvature_hessians(values, variance, movable, gradients, *args, **kwargs)

    def counting_grouped(*args, **kwargs):
        grouped_rows.append(1)
        return grouped_hessians(*args, **kwargs)

    class Parts:
        def __init__(self, x):
            self.grad_log_prior, self.grad_log_likelihood = _hierarchy_gradients(x)

        def tempered_grad(self, beta):
            return self.grad_log_prior + beta * self.grad_log_likelihood

    monkeypatch.setattr(pilot_metrics, "curvature_hessians", counting_full)
    monkeypatch.setattr(pilot_metrics, "grouped_hessians", counting_grouped)
    choice = pilot_metrics.MetricChoice(Parts, GROUPS + 2, True, np.zeros(0, dtype=int),
                                        pmb.Tuning(dense_max_dim=4))
    x = np.random.default_rng(3).normal(size=(16, GROUPS + 2)) * 0.3
    variance = np.var(x, axis=0)
    for beta in (0.01, 0.1, 1.0):  # each past the reuse ratio: measured afresh
        found = choice.correlation_at(x, variance, variance > 0, beta)
        exact = curvature_correlation(x, variance, variance > 0,
                                      lambda p, b=beta: Parts(p).tempered_grad(b))
        np.testing.assert_allclose(found, exact, atol=1e-4)
    assert len(full_rows) == 1 and len(grouped_rows) == 2
