# ruff: noqa: RUF001, RUF002, RUF003  (γ is the paper's un-normalised density)
"""PyMC distributions with un-normalised likelihoods: Ising, ERGM and a user's exponential family.

Each is used like any PyMC distribution, with ``observed=`` inside ``with pm.Model()``. Its logp
in the PyMC graph is ``log γ(y | θ) = η(θ) · s(y)`` **without** ``-log Z(θ)``, which is
intractable; its random method is the simulator of :mod:`~pymc_bdmc.unnormalized.ising`,
:mod:`~pymc_bdmc.unnormalized.ergm` or the user's sampler, so prior-predictive draws are proper
draws from ``f(y | θ) = γ(y | θ) / Z(θ)``. Their ops derive from
:class:`~pymc_bdmc.unnormalized.marker.UnnormalizedRV`, so
:func:`~pymc_bdmc.unnormalized.marker.unnormalized_likelihoods` finds them and the AIS, SMC and
BDMC drivers refuse them (their estimates would be of ``∫ γ(y|θ) p(θ) dθ``, not of ``p(y)``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.distributions.distribution import Distribution, _support_point
from pymc.logprob.abstract import _logprob
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Variable

from pymc_bdmc.errors import BDMCInputError
from pymc_bdmc.unnormalized.ergm import ERGMSimulator, check_adjacency, check_statistics
from pymc_bdmc.unnormalized.ising import IsingSimulator, check_spins
from pymc_bdmc.unnormalized.marker import UnnormalizedRV

__all__ = [
    "ERGM",
    "ExponentialFamily",
    "ExponentialFamilySimulator",
    "Ising",
    "unnormalized_simulator",
]


def _concrete(observed):
    """Return the observed data as a NumPy array (``pm.Data``: its current value), or None."""
    if isinstance(observed, SharedVariable):
        return observed.get_value()
    if observed is None or isinstance(observed, Variable):
        return None  # an expression: checked by the logp, which is -inf off the support
    return np.asarray(observed)


def _static_ints(shape) -> tuple[int, ...] | None:
    try:
        return tuple(int(s) for s in shape)
    except TypeError:
        return None


def _first(value) -> int:
    # Shape parameters arrive broadcast over the batch dimensions when `size` is given.
    return int(np.ravel(value)[0])


def _batched_draws(rng, size, batch_params, draw_one):
    """Loop a core sampler over the batch shape ``size`` (or the parameters' batch shape)."""
    params = [np.asarray(p) for p in batch_params]
    batch = tuple(size) if size is not None else params[0].shape[:-1]
    if not batch:
        return draw_one(*(p.reshape(p.shape[-1:]) for p in params))
    full = [np.broadcast_to(p, batch + p.shape[-1:]) for p in params]
    out = [draw_one(*(f[idx] for f in full)) for idx in np.ndindex(*batch)]
    return np.stack(out).reshape(batch + out[0].shape)


def _call(op, *params, size=None, rng=None, **kwargs):
    """Apply a configured op the way PyMC applies its own (explicit rng, next rng not hidden)."""
    rng = pt.random.shared_rng(seed=None) if rng is None else rng
    _, rv = op(*params, size=size, rng=rng, return_next_rng=True, **kwargs)
    return rv


# ---------------------------------------------------------------------------------------------
# Ising
# ---------------------------------------------------------------------------------------------
class IsingRV(UnnormalizedRV):
    """Free-boundary Ising field: parameters ``η = (η₁, η₂)``, height, width."""

    name = "ising"
    signature = "(k),(),()->(h,w)"
    dtype = "int64"
    _print_name = ("Ising", "\\operatorname{Ising}")
    __props__ = ("name", "signature", "dtype", "inplace", "neighbourhood", "exact", "sweeps")

    def __init__(self, *args, neighbourhood="first", exact=True, sweeps=500, **kwargs):
        super().__init__(*args, **kwargs)
        self.neighbourhood = neighbourhood
        self.exact = bool(exact)
        self.sweeps = int(sweeps)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (dist_params[1], dist_params[2])

    def make_simulator(self, data_shape) -> IsingSimulator:
        """Return the simulator of fields of shape ``data_shape[-2:]`` (parameters: ``η``)."""
        return IsingSimulator(tuple(data_shape)[-2:], self.neighbourhood, exact=self.exact,
                              sweeps=self.sweeps)

    def rng_fn(self, rng, eta, height, width, size):
        """Draw fields with the simulator (exact or Swendsen-Wang, as configured)."""
        sim = self.make_simulator((_first(height), _first(width)))
        return _batched_draws(rng, size, [eta], lambda e: sim.sample(e, 1, rng)[0])


@_logprob.register(IsingRV)
def _ising_logp(op, values, rng, size, eta, height, width, **kwargs):
    (y,) = values
    s1 = ((y[..., :, 1:] * y[..., :, :-1]).sum((-2, -1))
          + (y[..., 1:, :] * y[..., :-1, :]).sum((-2, -1)))
    s2 = ((y[..., 1:, 1:] * y[..., :-1, :-1]).sum((-2, -1))
          + (y[..., 1:, :-1] * y[..., :-1, 1:]).sum((-2, -1)))
    log_gamma = eta[..., 0] * s1 + eta[..., 1] * s2
    spins = pt.all(pt.eq(pt.abs(y), 1), axis=(-2, -1))
    return pt.switch(spins, log_gamma, -np.inf)


@_support_point.register(IsingRV)
def _ising_support_point(op, rv, *inputs):
    return pt.ones_like(rv)  # a ground state for a ferromagnet: a valid start for latent fields


class Ising(Distribution):
    r"""Ising field on a free-boundary ``H x W`` grid, with an **un-normalised** logp.

    ``log γ(y | c) = c · Σ_{i~j} y_i y_j`` over nearest-neighbour pairs (first order), plus the
    diagonal pairs of every 2 x 2 block (second order), which have their own coupling when
    ``coupling`` has two entries ``(nearest, diagonal)``.

    Parameters
    ----------
    name : str
    coupling : tensor_like
        A scalar, or for ``neighbourhood="second"`` a length-2 vector.
    observed : array_like of {-1, +1}, shape (H, W)
        Checked before anything else: other values raise
        :class:`~pymc_bdmc.errors.BDMCInputError`.
    neighbourhood : {"first", "second"}, default "first"
    boundary : {"free"}
        Only free boundaries are implemented.
    exact : bool, optional
        Exact simulation (default): the transfer-matrix sampler when ``min(H, W) <= 12``,
        else coupling from the past (first order and couplings ``>= 0`` only; a wider
        second-order grid is refused). ``exact=False``: Swendsen-Wang sweeps (inexact).
    sweeps : int, default 500
        Swendsen-Wang sweeps per draw when ``exact=False``.
    **kwargs
        Passed to :class:`pymc.Distribution` (``dims``, ``shape``, ...).

    Notes
    -----
    The logp omits ``-log Z(c)``. Use it only with estimators for un-normalised likelihoods
    (:mod:`pymc_bdmc.unnormalized`); ``sample_ais``, ``sample_bdmc``, ``sample_smc_evidence`` and
    ``calibrate`` refuse it.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> y = np.array([[1, 1, -1], [1, -1, -1]])
    >>> with pm.Model() as model:
    ...     c = pm.Uniform("c", 0, 1)
    ...     _ = pmb.Ising("y", c, observed=y)
    >>> pmb.unnormalized_likelihoods(model)
    ['y']
    """

    rv_type = IsingRV

    def __new__(cls, name, coupling, *, observed=None, neighbourhood="first", boundary="free",
                exact=None, sweeps=500, **kwargs):
        """Add an Ising field to the model on the context stack (see the class docstring)."""
        data = _concrete(observed)
        if data is not None:
            check_spins(data, name)
        return super().__new__(cls, name, coupling, observed=observed, neighbourhood=neighbourhood,
                               boundary=boundary, exact=exact, sweeps=sweeps, **kwargs)

    @classmethod
    def dist(cls, coupling, *, neighbourhood="first", boundary="free", exact=None, sweeps=500,
             shape=None, **kwargs):
        """Create an unregistered Ising field of ``shape`` (..., H, W)."""
        if boundary != "free":
            raise BDMCInputError(f"Only `boundary='free'` is implemented, got {boundary!r}.")
        if shape is None or len(tuple(shape)) < 2:
            raise BDMCInputError("An Ising field needs `observed=` data or a `shape=(H, W)`.")
        static = _static_ints(tuple(shape)[-2:])
        if static is not None:
            # Validates the grid against the exact sampler here, before any sampling.
            IsingSimulator(static, neighbourhood, exact=exact, sweeps=sweeps)
        elif neighbourhood not in ("first", "second"):
            raise BDMCInputError(
                f"`neighbourhood` must be 'first' or 'second', got {neighbourhood!r}."
            )
        eta = _ising_natural(pt.as_tensor_variable(coupling), neighbourhood)
        op = IsingRV(neighbourhood=neighbourhood, exact=exact is None or exact, sweeps=sweeps)
        height, width = tuple(shape)[-2:]
        return super().dist([eta, height, width], shape=shape, rv_op_instance=op, **kwargs)

    @classmethod
    def rv_op(cls, eta, height, width, *, rv_op_instance, size=None, rng=None, **kwargs):
        """Apply the op configured by ``dist``."""
        return _call(rv_op_instance, eta, height, width, size=size, rng=rng, **kwargs)


def _ising_natural(coupling, neighbourhood: str):
    """Symbolic version of :func:`~pymc_bdmc.unnormalized.ising.ising_natural`."""
    if coupling.ndim > 1 or (coupling.ndim == 1 and coupling.type.shape[0] not in (1, 2)):
        raise BDMCInputError(
            "`coupling` must be a scalar, or a vector of static length 1 or 2 (nearest, "
            f"diagonal); got a tensor of shape {coupling.type.shape}."
        )
    if coupling.ndim == 1 and coupling.type.shape[0] == 2:
        if neighbourhood == "first":
            raise BDMCInputError("A first-order Ising model has one coupling, got two.")
        return coupling
    c = coupling[0] if coupling.ndim == 1 else coupling
    return pt.stack([c, c if neighbourhood == "second" else pt.zeros_like(c)])


# ---------------------------------------------------------------------------------------------
# ERGM
# ---------------------------------------------------------------------------------------------
class ERGMRV(UnnormalizedRV):
    """Exponential random graph on ``n`` nodes: parameters ``θ`` (k), ``n``."""

    name = "ergm"
    signature = "(k),()->(n,n)"
    dtype = "int64"
    _print_name = ("ERGM", "\\operatorname{ERGM}")
    __props__ = ("name", "signature", "dtype", "inplace", "statistics", "exact", "sweeps")

    def __init__(self, *args, statistics=("edges",), exact=True, sweeps=200, **kwargs):
        super().__init__(*args, **kwargs)
        self.statistics = tuple(statistics)
        self.exact = bool(exact)
        self.sweeps = int(sweeps)

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return (dist_params[1], dist_params[1])

    def make_simulator(self, data_shape) -> ERGMSimulator:
        """Return the simulator of graphs on ``data_shape[-1]`` nodes (parameters: ``θ``)."""
        return ERGMSimulator(tuple(data_shape)[-1], self.statistics, exact=self.exact,
                             sweeps=self.sweeps)

    def rng_fn(self, rng, theta, n_nodes, size):
        """Draw graphs with the simulator (exact or Gibbs, as configured)."""
        sim = self.make_simulator((_first(n_nodes),))
        return _batched_draws(rng, size, [theta], lambda t: sim.sample(t, 1, rng)[0])


def ergm_statistics_symbolic(y, statistics):
    """PyTensor statistics of adjacency matrices ``y`` (..., n, n), shape (..., k)."""
    degree = y.sum(-1)
    values = {
        "edges": lambda: degree.sum(-1) / 2.0,
        "two_stars": lambda: (degree * (degree - 1)).sum(-1) / 2.0,
        # tr(Y³) = Σ_ij (Y²)_ij Y_ji, and Y is symmetric
        "triangles": lambda: (pt.matmul(y, y) * y).sum((-2, -1)) / 6.0,
    }
    return pt.stack([values[s]() for s in statistics], axis=-1)


@_logprob.register(ERGMRV)
def _ergm_logp(op, values, rng, size, theta, n_nodes, **kwargs):
    (y,) = values
    stats = ergm_statistics_symbolic(y, op.statistics)
    log_gamma = (theta * stats).sum(-1)
    diagonal = pt.diagonal(y, axis1=-2, axis2=-1)
    valid = (pt.all(pt.eq(y, 0) | pt.eq(y, 1), axis=(-2, -1))
             & pt.all(pt.eq(y, pt.swapaxes(y, -1, -2)), axis=(-2, -1))
             & pt.all(pt.eq(diagonal, 0), axis=-1))
    return pt.switch(valid, log_gamma, -np.inf)


@_support_point.register(ERGMRV)
def _ergm_support_point(op, rv, *inputs):
    return pt.zeros_like(rv)  # the empty graph is in the support of every ERGM


class ERGM(Distribution):
    r"""Exponential random graph model with an **un-normalised** logp ``θ · s(y)``.

    ``y`` is the adjacency matrix of an undirected simple graph.

    Parameters
    ----------
    name : str
    theta : tensor_like, shape (k,)
        One parameter per statistic (a scalar is accepted when ``k = 1``).
    statistics : sequence of str, default ("edges",)
        From ``"edges"``, ``"two_stars"``, ``"triangles"``.
    observed : array_like, shape (n, n)
        A symmetric 0/1 adjacency matrix with a zero diagonal, checked before anything else.
    exact : bool, optional
        Exact simulation is available for edges only (independent dyads); other statistics
        need ``exact=False`` (Gibbs sweeps over dyads, inexact).
    sweeps : int, default 200
        Gibbs sweeps per draw when ``exact=False``.
    **kwargs
        Passed to :class:`pymc.Distribution` (``dims``, ``shape``, ...).

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> y = np.array([[0, 1, 1], [1, 0, 0], [1, 0, 0]])
    >>> with pm.Model() as model:
    ...     theta = pm.Normal("theta", 0, 5, shape=2)
    ...     _ = pmb.ERGM("y", theta, statistics=("edges", "two_stars"), observed=y, exact=False)
    >>> pmb.unnormalized_likelihoods(model)
    ['y']
    """

    rv_type = ERGMRV

    def __new__(cls, name, theta, *, statistics=("edges",), observed=None, exact=None,
                sweeps=200, **kwargs):
        """Add an ERGM to the model on the context stack (see the class docstring)."""
        data = _concrete(observed)
        if data is not None:
            check_adjacency(data, name)
        return super().__new__(cls, name, theta, statistics=statistics, observed=observed,
                               exact=exact, sweeps=sweeps, **kwargs)

    @classmethod
    def dist(cls, theta, *, statistics=("edges",), exact=None, sweeps=200, shape=None,
             **kwargs):
        """Create an unregistered ERGM of ``shape`` (..., n, n)."""
        stats = check_statistics(statistics)
        if shape is None or len(tuple(shape)) < 2:
            raise BDMCInputError("An ERGM needs `observed=` data or a `shape=(n, n)`.")
        n_nodes = tuple(shape)[-1]
        static = _static_ints((n_nodes,))
        if static is not None:
            ERGMSimulator(static[0], stats, exact=exact, sweeps=sweeps)  # refuses before sampling
        theta = pt.as_tensor_variable(theta)
        if theta.ndim == 0:
            theta = theta[None]
        if theta.ndim != 1 or theta.type.shape[0] not in (None, len(stats)):
            raise BDMCInputError(
                f"`theta` must be a vector with one entry per statistic {stats}, got shape "
                f"{theta.type.shape}."
            )
        op = ERGMRV(statistics=stats, exact=exact is None or exact, sweeps=sweeps)
        return super().dist([theta, n_nodes], shape=shape, rv_op_instance=op, **kwargs)

    @classmethod
    def rv_op(cls, theta, n_nodes, *, rv_op_instance, size=None, rng=None, **kwargs):
        """Apply the op configured by ``dist``."""
        return _call(rv_op_instance, theta, n_nodes, size=size, rng=rng, **kwargs)


# ---------------------------------------------------------------------------------------------
# A user's exponential family
# ---------------------------------------------------------------------------------------------
class ExponentialFamilyRV(UnnormalizedRV):
    """``γ(y | η) = exp(η · s(y))`` with a user's ``s`` and sampler; one draw is all the data."""

    name = "exponential_family"
    dtype = "floatX"
    _print_name = ("ExponentialFamily", "\\operatorname{ExponentialFamily}")
    __props__ = ("name", "signature", "dtype", "inplace", "statistic", "sampler", "exact",
                 "log_partition")

    def __init__(self, *args, statistic=None, sampler=None, exact=True, log_partition=None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.statistic = statistic
        self.sampler = sampler
        self.exact = bool(exact)
        self.log_partition = log_partition

    def _supp_shape_from_params(self, dist_params, param_shapes=None):
        return tuple(dist_params[1:])

    def make_simulator(self, data_shape) -> ExponentialFamilySimulator:
        """Return the simulator of data of shape ``data_shape`` (parameters: ``η``)."""
        return ExponentialFamilySimulator(self, data_shape)

    def rng_fn(self, rng, natural, *shape_and_size):
        """Draw with the user's sampler, one call per draw."""
        *shape, size = shape_and_size
        if self.sampler is None:
            raise BDMCInputError(
                "This ExponentialFamily has no simulator: pass `sampler=` (a function "
                "(natural, rng) -> one draw of y) to draw from it."
            )
        core = tuple(_first(s) for s in shape)

        def draw_one(eta):
            y = np.asarray(self.sampler(np.asarray(eta, dtype=float), rng))
            if y.shape != core:
                raise BDMCInputError(f"`sampler` returned shape {y.shape}, expected {core}.")
            return y

        return _batched_draws(rng, size, [natural], draw_one)


class ExponentialFamilySimulator:
    """A user's :class:`ExponentialFamily` seen as a simulator for the estimators.

    Gives ``sample(eta, size, rng)`` (the user's sampler), ``statistics(y)`` (the user's
    statistic, compiled once) and ``exact``, as :class:`~pymc_bdmc.unnormalized.IsingSimulator`
    does; there is no MCMC kernel, so MAVIS bridges are unavailable (SAVIS works). When the
    family was given ``log_partition=``, :meth:`log_partition` returns it, which lets
    :func:`~pymc_bdmc.sample_unnormalized_evidence` anchor SAVIS at ``Z(θ̂)``.

    Parameters
    ----------
    op : ExponentialFamilyRV
        The op of the model variable (``rv.owner.op``).
    data_shape : tuple of int
        Shape of one draw (the observed data's shape).
    """

    def __init__(self, op: ExponentialFamilyRV, data_shape):
        self.op = op
        self.shape = tuple(int(s) for s in data_shape)
        self.exact = op.exact
        y = pt.tensor("y", dtype="float64", shape=self.shape)
        self._statistic = pytensor.function([y], pt.as_tensor_variable(op.statistic(y)))

    def statistics(self, y) -> np.ndarray:
        """Return ``s(y)`` for data of shape (..., *data_shape), shape (..., k)."""
        y = np.asarray(y, dtype="float64")
        batch = y.shape[: y.ndim - len(self.shape)]
        flat = y.reshape(-1, *self.shape)
        out = np.stack([np.asarray(self._statistic(v)) for v in flat])
        return out.reshape(*batch, out.shape[-1])

    def sample(self, eta, size: int, rng: np.random.Generator) -> np.ndarray:
        """Return ``size`` draws from the user's sampler at ``η``, shape (size, *data_shape)."""
        if self.op.sampler is None:
            raise BDMCInputError("This ExponentialFamily has no `sampler=`, so no simulator.")
        eta = np.asarray(eta, dtype=float)
        return np.stack([np.asarray(self.op.sampler(eta, rng)) for _ in range(int(size))])

    def log_partition(self, eta) -> float:
        """Return the user's exact ``log Z(η)`` at one ``η``, or raise if none was given."""
        if self.op.log_partition is None:
            raise BDMCInputError("This ExponentialFamily has no `log_partition=`.")
        return float(self.op.log_partition(np.asarray(eta, dtype=float)))

    def mcmc(self, y, eta, rng, sweeps=1):
        """Refuse: a user's family has no MCMC kernel (use SAVIS, i.e. no bridges)."""
        raise BDMCInputError(
            "A user's ExponentialFamily has no MCMC kernel for annealing bridges; use SAVIS "
            "(or MAVIS with n_bridges=0)."
        )


def unnormalized_simulator(name: str, model=None):
    """Return the simulator of an un-normalised variable, for its observed data's shape.

    Parameters
    ----------
    name : str
        An observed variable with an un-normalised likelihood (see
        :func:`~pymc_bdmc.unnormalized.unnormalized_likelihoods`).
    model : pm.Model, optional
        Defaults to the model on the context stack.

    Returns
    -------
    IsingSimulator, ERGMSimulator or ExponentialFamilySimulator
        Configured as the variable is (neighbourhood, statistics, ``exact``, sweeps).
    """
    model = pm.modelcontext(model)
    rv = model[name]
    op = getattr(getattr(rv, "owner", None), "op", None)
    if rv not in model.observed_RVs or not hasattr(op, "make_simulator"):
        raise BDMCInputError(
            f"{name!r} is not an observed variable with an un-normalised likelihood."
        )
    data = model.rvs_to_values[rv]
    return op.make_simulator(np.shape(data.eval()))


@_logprob.register(ExponentialFamilyRV)
def _exponential_family_logp(op, values, rng, size, natural, *shape, **kwargs):
    (y,) = values
    return (natural * pt.as_tensor_variable(op.statistic(y))).sum(-1)


class ExponentialFamily(Distribution):
    r"""A user's exponential family with an **un-normalised** logp ``η · s(y)``.

    The normalised model is ``f(y | η) = exp(η · s(y)) / Z(η)``.

    Parameters
    ----------
    name : str
    natural : tensor_like, shape (k,)
        The natural parameters ``η`` as a PyMC expression of the model's parameters.
    statistic : callable
        ``statistic(y)`` returns the sufficient statistics ``s(y)`` (k,) as a PyTensor
        expression of the data tensor ``y`` (the whole observed array). A base measure
        ``log h(y)`` is a statistic whose natural parameter is 1.
    sampler : callable, optional
        ``sampler(natural, rng)`` returns one draw of ``y`` from ``f(· | natural)`` with the data's
        shape. Without it the model has no simulator.
    exact : bool, default True
        Whether ``sampler`` draws exactly from ``f(· | η)`` (False for an MCMC-based sampler).
    log_partition : callable, optional
        ``log_partition(natural)`` returns the exact ``log Z(η)`` (a float; ``inf`` where ``η``
        is outside the natural parameter space). Only
        :func:`~pymc_bdmc.sample_unnormalized_evidence` uses it, to anchor SAVIS at ``Z(θ̂)``.
    observed : array_like
        The data ``y``; its shape is the shape of one draw.
    **kwargs
        Passed to :class:`pymc.Distribution` (``dims``, ``shape``, ...).

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> y = np.array([2.0, 0.0, 3.0])
    >>> with pm.Model() as model:   # Poisson counts, log h(y) = -Σ log y! left out of γ
    ...     lam = pm.Exponential("lam", 1.0)
    ...     _ = pmb.ExponentialFamily("y", pm.math.log(lam)[None],
    ...                               statistic=lambda v: v.sum()[None], observed=y)
    >>> pmb.unnormalized_likelihoods(model)
    ['y']
    """

    rv_type = ExponentialFamilyRV

    def __new__(cls, name, natural, *, statistic, sampler=None, exact=True, log_partition=None,
                observed=None, **kwargs):
        """Add the family to the model on the context stack (see the class docstring)."""
        return super().__new__(cls, name, natural, statistic=statistic, sampler=sampler,
                               exact=exact, log_partition=log_partition, observed=observed,
                               **kwargs)

    @classmethod
    def dist(cls, natural, *, statistic, sampler=None, exact=True, log_partition=None,
             shape=None, **kwargs):
        """Create an unregistered family whose one draw has ``shape``."""
        if not callable(statistic):
            raise BDMCInputError("`statistic` must be a function y -> s(y) (a PyTensor vector).")
        if sampler is not None and not callable(sampler):
            raise BDMCInputError("`sampler` must be a function (natural, rng) -> y, or None.")
        if log_partition is not None and not callable(log_partition):
            raise BDMCInputError("`log_partition` must be a function natural -> log Z, or None.")
        if shape is None:
            raise BDMCInputError("An ExponentialFamily needs `observed=` data or a `shape=`.")
        natural = pt.as_tensor_variable(natural)
        if natural.ndim == 0:
            natural = natural[None]
        if natural.ndim != 1:
            raise BDMCInputError(f"`natural` must be a vector, got {natural.ndim} dimensions.")
        core = tuple(shape)
        letters = ",".join(f"d{i}" for i in range(len(core)))
        signature = "(k)" + ",()" * len(core) + f"->({letters})"
        op = ExponentialFamilyRV(signature=signature, statistic=statistic, sampler=sampler,
                                 exact=exact, log_partition=log_partition)
        return super().dist([natural, *core], shape=shape, rv_op_instance=op, **kwargs)

    @classmethod
    def rv_op(cls, natural, *shape, rv_op_instance, size=None, rng=None, **kwargs):
        """Apply the op configured by ``dist``."""
        return _call(rv_op_instance, natural, *shape, size=size, rng=rng, **kwargs)
