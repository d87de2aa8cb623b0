"""The flat unconstrained vector and the batched densities on it: what everything downstream sees.

:class:`FlatLayout` maps value variables to slices of one float64 vector; :class:`DensityParts`
(and :class:`ObservationParts`) hold a batch's log prior, log-likelihood and their gradients,
from which every tempered density is formed in NumPy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["DensityParts", "FlatLayout", "ObservationParts"]


@dataclass(frozen=True, slots=True)
class FlatLayout:
    """Where each unconstrained value variable lives in the flat vector.

    Mapping is always by name: a cloned model may order its value variables differently.

    Discrete (integer) variables live in the same float64 vector, holding exact integers
    (float64 represents every integer up to 2**53 exactly). Compiled graphs cast them back to
    integers, and :meth:`to_point` rounds them to their integer dtype, so a discrete value is
    never seen as a fraction. Gradient kernels must not move these coordinates (their gradient
    entries are zero); PyMC's discrete step methods do.
    """

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    slices: tuple[slice, ...]
    dtypes: tuple[str, ...] = ()

    @classmethod
    def from_point(cls, names, point: Mapping[str, np.ndarray]) -> FlatLayout:
        """Build the layout of ``names`` (in this order) from a point giving shapes and dtypes."""
        shapes, slices, start = [], [], 0
        for name in names:
            shape = tuple(np.shape(point[name]))
            size = int(np.prod(shape, dtype=int))
            shapes.append(shape)
            slices.append(slice(start, start + size))
            start += size
        dtypes = tuple(str(np.asarray(point[name]).dtype) for name in names)
        return cls(tuple(names), tuple(shapes), tuple(slices), dtypes)

    @classmethod
    def of_model(cls, model, point: Mapping[str, np.ndarray]) -> FlatLayout:
        """Build the layout of ``model``'s value variables, in its order, at ``point``."""
        return cls.from_point([v.name for v in model.value_vars], point)

    def is_discrete(self, name: str) -> bool:
        """Whether value variable ``name`` has an integer (or boolean) dtype."""
        if not self.dtypes:
            return False
        dtype = np.dtype(self.dtypes[self.names.index(name)])
        return bool(np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.bool_))

    def to_point(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Map one flat vector to a point with each variable's own dtype (integers rounded)."""
        point = {}
        for i, (name, shape, slc) in enumerate(zip(self.names, self.shapes, self.slices,
                                                   strict=True)):
            value = np.asarray(x[slc]).reshape(shape)
            if self.is_discrete(name):
                value = np.rint(value)
            point[name] = value.astype(self.dtypes[i] if self.dtypes else float)
        return point

    @property
    def size(self) -> int:
        """Length of the flat vector."""
        return self.slices[-1].stop if self.slices else 0

    def ravel(self, point: Mapping[str, np.ndarray]) -> np.ndarray:
        """Map a point (name -> array, one chain) to a flat float64 vector."""
        out = np.empty(self.size)
        for name, shape, slc in zip(self.names, self.shapes, self.slices, strict=True):
            value = np.asarray(point[name], dtype=float)
            if value.shape != shape:
                raise ValueError(f"Value of {name!r} has shape {value.shape}, expected {shape}.")
            out[slc] = value.ravel()
        return out

    def unravel(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Map flat vectors ``(..., size)`` back to named arrays ``(..., *shape)``."""
        x = np.asarray(x)
        lead = x.shape[:-1]
        return {
            name: x[..., slc].reshape(lead + shape)
            for name, shape, slc in zip(self.names, self.shapes, self.slices, strict=True)
        }

    def coordinate_labels(self) -> list[str]:
        """One readable label per flat coordinate, e.g. ``w[0, 1]``."""
        labels = []
        for name, shape in zip(self.names, self.shapes, strict=True):
            if not shape:
                labels.append(name)
            else:
                labels.extend(f"{name}[{', '.join(map(str, idx))}]" for idx in np.ndindex(*shape))
        return labels


@dataclass(frozen=True, slots=True)
class DensityParts:
    """Log prior, log-likelihood and their gradients for a batch of chains.

    Attributes
    ----------
    log_prior, log_likelihood : ndarray, shape (chains,)
    grad_log_prior, grad_log_likelihood : ndarray, shape (chains, n_dim)
    """

    log_prior: np.ndarray
    log_likelihood: np.ndarray
    grad_log_prior: np.ndarray
    grad_log_likelihood: np.ndarray

    def tempered_logp(self, beta: float | np.ndarray) -> np.ndarray:
        """``log p(x) + beta * log p(y | x)``, taking ``0 * -inf`` as 0 (the prior at beta=0)."""
        if isinstance(beta, float | int):  # the hot path: one temperature for all chains
            return self.log_prior if beta == 0 else self.log_prior + beta * self.log_likelihood
        beta = np.asarray(beta, dtype=float)
        with np.errstate(invalid="ignore"):  # 0 * -inf is resolved just below
            tempered = self.log_prior + beta * self.log_likelihood
        return np.where(beta == 0, self.log_prior, tempered)

    def tempered_grad(self, beta: float | np.ndarray) -> np.ndarray:
        """Gradient of :meth:`tempered_logp` with respect to the flat vector."""
        if isinstance(beta, float | int):
            return self.grad_log_prior + beta * self.grad_log_likelihood
        beta = np.asarray(beta, dtype=float)
        if beta.ndim == 1:
            beta = beta[:, None]
        return self.grad_log_prior + beta * self.grad_log_likelihood

    def take(self, mask: np.ndarray, other: DensityParts) -> DensityParts:
        """Rows of ``other`` where ``mask`` is true, rows of ``self`` elsewhere."""
        col = mask[:, None]
        return DensityParts(
            np.where(mask, other.log_prior, self.log_prior),
            np.where(mask, other.log_likelihood, self.log_likelihood),
            np.where(col, other.grad_log_prior, self.grad_log_prior),
            np.where(col, other.grad_log_likelihood, self.grad_log_likelihood),
        )

    def select(self, index: np.ndarray) -> DensityParts:
        """Rows ``index`` of every part (used when resampling particles)."""
        return DensityParts(
            self.log_prior[index],
            self.log_likelihood[index],
            self.grad_log_prior[index],
            self.grad_log_likelihood[index],
        )

    def put(self, index: np.ndarray, other: DensityParts) -> DensityParts:
        """Return a copy whose rows ``index`` are those of ``other`` (some chains moved)."""
        values = {}
        for field in dataclasses.fields(self):
            values[field.name] = np.array(getattr(self, field.name), copy=True)
            values[field.name][index] = getattr(other, field.name)
        return type(self)(**values)


@dataclass(frozen=True, slots=True)
class ObservationParts(DensityParts):
    """Densities of ``p(x) prod_i p(y_i | x)^(m_i)`` for observation weights ``m``.

    A :class:`DensityParts` whose ``log_likelihood`` and ``grad_log_likelihood`` are those of the
    weighted log-likelihood ``sum_i m_i log p(y_i | x)`` (so ``tempered_logp(1.0)`` is the
    weighted target), plus every observation's own log-likelihood, whatever its weight.

    Attributes
    ----------
    log_likelihood_per_observation : ndarray, shape (chains, n_observations)
        ``log p(y_i | x)`` for each observation ``i`` along the shared leading data dimension
        (summed over every observed variable and over its trailing dimensions).
    """

    log_likelihood_per_observation: np.ndarray

    def take(self, mask: np.ndarray, other: ObservationParts) -> ObservationParts:
        """Rows of ``other`` where ``mask`` is true, rows of ``self`` elsewhere."""
        base = DensityParts.take(self, mask, other)
        return ObservationParts(
            base.log_prior, base.log_likelihood, base.grad_log_prior, base.grad_log_likelihood,
            np.where(mask[:, None], other.log_likelihood_per_observation,
                     self.log_likelihood_per_observation),
        )

    def select(self, index: np.ndarray) -> ObservationParts:
        """Rows ``index`` of every part (used when resampling particles)."""
        return ObservationParts(
            self.log_prior[index], self.log_likelihood[index], self.grad_log_prior[index],
            self.grad_log_likelihood[index], self.log_likelihood_per_observation[index],
        )
