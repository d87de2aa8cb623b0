# ruff: noqa: RUF001, RUF002, RUF003  (γ is the paper's un-normalised density)
"""How the package recognises a likelihood whose PyMC logp is un-normalised.

The distributions of :mod:`pymc_bdmc.unnormalized.distributions` put ``log γ(y | θ)`` in the
PyMC graph, not ``log f(y | θ) = log γ(y | θ) - log Z(θ)``: ``Z(θ)`` is intractable. Every
estimator that treats the model's logp as a normalised density (AIS, SMC, BDMC) would then
estimate ``∫ γ(y|θ) p(θ) dθ`` instead of ``p(y)``. Their random-variable ops derive from
:class:`UnnormalizedRV`, whose class attribute ``unnormalized_likelihood = True`` survives model
cloning (``pm.observe``, ``pm.do``, ``model.copy()``), because clones reuse the ops.

This module imports only PyTensor so that :mod:`pymc_bdmc.model.checks` can use it.
"""

from __future__ import annotations

from pytensor.tensor.random.op import RandomVariable

__all__ = [
    "UnnormalizedRV",
    "is_unnormalized",
    "unnormalized_likelihoods",
    "unnormalized_variables",
]


class UnnormalizedRV(RandomVariable):
    """Base of random variables whose logp is an un-normalised ``log γ(y | θ)``.

    Subclasses provide an ``exact`` property (whether their simulator draws exactly from
    ``f(·|θ)``) and ``make_simulator(data_shape)``.
    """

    unnormalized_likelihood = True


def is_unnormalized(var) -> bool:
    """Whether the random variable ``var`` has an un-normalised logp.

    Parameters
    ----------
    var : TensorVariable
        A model variable (or any PyTensor variable).

    Returns
    -------
    bool
    """
    owner = getattr(var, "owner", None)
    return owner is not None and bool(getattr(owner.op, "unnormalized_likelihood", False))


def _model(model):
    import pymc as pm  # at call time: keeps this module PyTensor-only at import

    return pm.modelcontext(model)


def unnormalized_likelihoods(model=None) -> list[str]:
    """Names of the observed variables of ``model`` whose likelihood is un-normalised.

    Parameters
    ----------
    model : pm.Model, optional
        Defaults to the model on the context stack.

    Returns
    -------
    list of str
        In the model's order; empty when every likelihood is normalised.

    Examples
    --------
    >>> import numpy as np, pymc as pm, pymc_bdmc as pmb
    >>> with pm.Model() as model:
    ...     c = pm.Uniform("c", 0, 1)
    ...     _ = pmb.Ising("y", c, observed=np.ones((3, 3), dtype=int))
    >>> pmb.unnormalized_likelihoods(model)
    ['y']
    """
    return [rv.name for rv in _model(model).observed_RVs if is_unnormalized(rv)]


def unnormalized_variables(model=None) -> list[str]:
    """Names of all variables (free or observed) of ``model`` with an un-normalised logp.

    A free one (e.g. a latent Ising field whose coupling is a parameter) makes the prior
    un-normalised, which breaks evidence estimation just as an un-normalised likelihood does.

    Parameters
    ----------
    model : pm.Model, optional
        Defaults to the model on the context stack.

    Returns
    -------
    list of str
    """
    m = _model(model)
    return [rv.name for rv in (*m.free_RVs, *m.observed_RVs) if is_unnormalized(rv)]
