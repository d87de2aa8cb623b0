"""The curvature's Hessian in a few gradients per anchor, once its sparsity pattern is known.

Differencing the gradient along each coordinate in turn
(:func:`~pymc_bdmc.kernels.mass.curvature_hessians`) costs ``d + 1`` gradients per anchor, at
every temperature where a pilot measures its curvature metric. Most models' Hessians are
sparse: a hierarchy couples each group's intercept only to itself and to a few *hubs* (the
population mean and scale), a random walk each step to its neighbours and its scale. One full
Hessian shows the pattern by its exact zeros (a gradient component that does not depend on a
coordinate does not change when it moves). After that, each hub is differenced alone (its row,
and by symmetry its column), and every other coordinate in groups whose members share no
non-hub gradient component of the pattern, a distance-2 colouring of its columns (Curtis,
Powell & Reid 1974): each component that changes along a group's step then changes through one
member only. A hierarchy takes ``1 + 2 + 1`` gradients per anchor, a random walk ``1 + 1 + 3``.

The Hessian is the one of differencing each coordinate alone but for the hubs' entries in
other rows: their rows' (the change of each gradient component along the hub's step), where
the symmetrised full Hessian averages in the change of the hub's own gradient along each
other step. That gradient is a sum over every coordinate the hub couples, and its small
changes come with the sum's rounding (a walk's scale deep in its funnel), so the grouped
Hessian is the more accurate one. Where the pattern misses an
entry (a coupling exactly zero at the first anchors only), that entry's change is read into
another one: a worse metric, never an invalid kernel, as the runs only ever see the frozen
metric.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pymc_bdmc.kernels.mass import CURVATURE_ANCHORS, CURVATURE_STEP, curvature_anchors

__all__ = ["DifferenceGroups", "difference_groups", "grouped_hessians"]

#: A coordinate coupled to more than this many others is differenced alone (a hub).
HUB_DEGREE = 16


@dataclass(frozen=True)
class DifferenceGroups:
    """Which coordinates a Hessian of a known pattern is differenced along together.

    Attributes
    ----------
    index : ndarray of int
        The coordinates (of the flat space) the pattern is over.
    groups : tuple of ndarray of int
        Positions in ``index`` stepped together, one gradient per group; hubs alone first.
    reads : tuple
        Per group, ``None`` (a lone coordinate: its whole row is read) or ``(rows, columns)``
        arrays: the Hessian entry ``[row, column]`` is read from gradient component
        ``column`` of that group's step.
    hubs : ndarray of int
        Positions of the hubs, whose rows give their columns.
    """

    index: np.ndarray
    groups: tuple
    reads: tuple
    hubs: np.ndarray


def difference_groups(hessians: list[np.ndarray], index: np.ndarray,
                      hub_degree: int = HUB_DEGREE) -> DifferenceGroups | None:
    """Return the groups to difference a Hessian of ``hessians``' pattern along, or None.

    Parameters
    ----------
    hessians : list of ndarray, shape (k, k)
        Full Hessians over the coordinates ``index`` (e.g. a prior's and a likelihood's): their
        union of non-zeros is the pattern.
    index : ndarray of int, shape (k,)
    hub_degree : int, default HUB_DEGREE

    Returns
    -------
    DifferenceGroups or None
        None where grouping would not halve the gradients (a dense pattern).
    """
    k = index.size
    pattern = np.eye(k, dtype=bool)
    for hessian in hessians:
        pattern |= hessian != 0
    pattern |= pattern.T
    hubs = np.flatnonzero(pattern.sum(axis=1) - 1 > hub_degree)
    rest = np.setdiff1d(np.arange(k), hubs)
    within = pattern[np.ix_(rest, rest)].astype(float)
    conflict = within @ within.T > 0  # two columns sharing a non-hub gradient component
    colour = np.full(rest.size, -1)
    for j in range(rest.size):  # greedy: the smallest colour no conflicting column has
        taken = np.unique(colour[conflict[j] & (colour >= 0)])
        free = np.setdiff1d(np.arange(taken.size + 1), taken)
        colour[j] = free[0]
    n_colours = int(colour.max(initial=-1)) + 1
    if 2 * (hubs.size + n_colours) >= k:
        return None
    groups = [np.array([hub]) for hub in hubs] + [rest[colour == c] for c in range(n_colours)]
    reads = []
    for group in groups:
        if group.size == 1:
            reads.append(None)
            continue
        rows, columns = np.nonzero(pattern[np.ix_(group, rest)])
        reads.append((group[rows], rest[columns]))
    return DifferenceGroups(np.asarray(index).copy(), tuple(groups), tuple(reads), hubs)


def grouped_hessians(values: np.ndarray, variance: np.ndarray, plan: DifferenceGroups,
                     gradients: Callable[[np.ndarray], list[np.ndarray]],
                     n_anchors: int = CURVATURE_ANCHORS,
                     per_anchor: bool = False) -> list[np.ndarray]:
    """:func:`~pymc_bdmc.kernels.mass.curvature_hessians` along ``plan``'s groups.

    The same anchors and steps; ``1 + len(plan.groups)`` gradients per anchor, in one batched
    call of ``gradients``.

    Returns
    -------
    list of ndarray, shape (k, k), or (anchors, k, k) with ``per_anchor``
        Symmetrised, over ``plan.index``.
    """
    index = plan.index
    step = CURVATURE_STEP * np.sqrt(variance[index])
    anchors = curvature_anchors(values, n_anchors)
    n_points, k = 1 + len(plan.groups), index.size
    points = np.repeat(anchors, n_points, axis=0)
    starts = np.arange(len(anchors)) * n_points
    for g, group in enumerate(plan.groups):
        points[np.ix_(starts + 1 + g, index[group])] += step[group]
    rest = np.setdiff1d(np.arange(k), plan.hubs)
    hessians = []
    for grad in gradients(points):
        grads = grad[:, index].reshape(len(anchors), n_points, k)
        changes = grads[:, 1:] - grads[:, :1]
        hessian = np.zeros((len(anchors), k, k))
        for g, (group, read) in enumerate(zip(plan.groups, plan.reads, strict=True)):
            if read is None:
                hessian[:, group[0]] = changes[:, g] / step[group[0]]
            else:
                rows, columns = read
                hessian[:, rows, columns] = changes[:, g, columns] / step[rows]
        # The hubs' entries in the other rows are the hubs' own rows' (by symmetry).
        hessian[:, rest[:, None], plan.hubs] = hessian[:, plan.hubs[:, None], rest].transpose(
            0, 2, 1)
        hessian = 0.5 * (hessian + hessian.transpose(0, 2, 1))
        hessians.append(hessian if per_anchor else hessian.mean(axis=0))
    return hessians
