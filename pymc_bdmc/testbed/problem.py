"""The benchmark problem type: a model conditioned on simulated data, with its ``theta*``.

It lives apart from :mod:`.models` (which re-exports it) so that the estimator interface in
:mod:`.base` can name it without importing the model factories, whose Gibbs forms
(:mod:`.gibbs_models`) build on the estimators (:mod:`.chib`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm

if TYPE_CHECKING:
    from pymc_bdmc.model.density import FlatLayout

__all__ = ["Problem"]


@dataclass(frozen=True, eq=False)
class Problem:
    """A model conditioned on simulated data, with the parameters that generated the data.

    Attributes
    ----------
    name : str
    model : pm.Model
        The model, whose observed variables hold the simulated data ``y*``.
    generating_point : dict or None
        ``theta*`` as a mapping from value-variable name (unconstrained space, e.g.
        ``sigma_log__``) to array: an exact draw from ``p(theta | y*)``. None for real data.
    log_evidence : float or None
        The exact ``log p(y*)`` where it is known in closed form.
    info : dict
        Sizes and hyperparameters, for reports.
    gibbs_model : CollapsedLinearGaussian, LowRankGibbs or None
        The same model in a form with a Gibbs sampler whose transition probabilities are
        computable (collapsed discrete latents for clustering and binary attributes, the two
        factor blocks for low rank): what the Chib-style estimator runs on.
    n_exchangeable_components : int
        Number ``K`` of interchangeable components (clusters, attributes, factors), whose
        ``K!`` relabelings leave the posterior unchanged; 1 when there is no such symmetry.
        The symmetry-corrected variational estimate adds ``log K!`` (paper §6).
    """

    name: str
    model: pm.Model
    generating_point: dict[str, np.ndarray] | None = None
    log_evidence: float | None = None
    info: dict = field(default_factory=dict)
    # .gibbs_models.CollapsedLinearGaussian or LowRankGibbs (not imported: see the module doc)
    gibbs_model: CollapsedLinearGaussian | LowRankGibbs | None = None  # noqa: F821
    n_exchangeable_components: int = 1

    @property
    def observed(self) -> dict[str, np.ndarray]:
        """The observed data, by observed-variable name."""
        return {rv.name: np.asarray(self.model.rvs_to_values[rv].data)
                for rv in self.model.observed_RVs}

    @property
    def n_data(self) -> int:
        """Number of data points (rows of the first observed variable; BIC's ``N``)."""
        first = next(iter(self.observed.values()))
        return int(first.shape[0]) if first.ndim else 1

    def generating_vector(self, layout: FlatLayout) -> np.ndarray:
        """``theta*`` as a flat unconstrained vector in ``layout``."""
        if self.generating_point is None:
            raise ValueError(f"Problem {self.name!r} has no generating parameters (real data?).")
        return layout.ravel(self.generating_point)
