"""Densities and simulation with one data set per chain (the machinery of the Geweke test)."""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import fields

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
from pymc.logprob.utils import replace_rvs_by_values
from pymc.pytensorf import compile as compile_pytensor
from pymc.pytensorf import join_nonshared_inputs, reseed_rngs, rewrite_pregrad
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.replace import graph_replace, vectorize_graph
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.blockwise import Blockwise

from pymc_bdmc.model.density import ONE_SHOT_MODE, DensityParts, ModelDensity, observed_data_value
from pymc_bdmc.verification.common import VerificationError, typed_point

logger = logging.getLogger("pymc_bdmc.verification")

#: Agreement required between a batched-data function and the per-chain reference.
_BATCH_RTOL, _BATCH_ATOL = 1e-8, 1e-10


def _data_inputs(model: pm.Model):
    """Symbolic stand-ins for the observed data: ``(names, {data variable: input}, inputs)``."""
    names, replace, inputs = [], {}, []
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        if observed_data_value(value) is None:
            raise VerificationError(
                f"The data of {rv.name!r} are a symbolic expression; the Geweke test needs to "
                "replace them. Pass the observations as an array or a pm.Data container."
            )
        stand_in = value.type(name=f"{rv.name}_geweke_data")
        names.append(rv.name)
        replace[value] = stand_in
        inputs.append(stand_in)
    return names, replace, inputs


class PerChainDensity:
    """``(x, data) -> DensityParts`` with row ``k`` of ``x`` evaluated under data set ``k``.

    Compiles the model's log prior, log-likelihood and gradients with the observed data as
    batched inputs: ``vectorize_graph`` if it reproduces the reference exactly, otherwise a
    ``Blockwise(OpFromGraph)`` loop inside the compiled function, otherwise (e.g. if compilation
    fails) a Python loop over chains through ``density.set_observed``. Each candidate is checked
    against that loop before use.
    """

    def __init__(self, density: ModelDensity, check_x: np.ndarray,
                 check_data: Mapping[str, np.ndarray]):
        self.density = density
        self.names = [n for n in density.observed_names]
        self._fn = None
        self.mode = "loop"
        model = density.model
        try:
            names, replace, data_in = _data_inputs(model)
            (prior_x, lik_x), x = join_nonshared_inputs(
                point=model.initial_point(), outputs=[model.varlogp, model.observedlogp],
                inputs=list(model.value_vars),
            )
            prior_x, lik_x = graph_replace([prior_x, lik_x], replace, strict=False)
            outputs = [prior_x, lik_x,
                       pytensor.grad(rewrite_pregrad(prior_x), x, disconnected_inputs="ignore"),
                       pytensor.grad(rewrite_pregrad(lik_x), x, disconnected_inputs="ignore")]
        except VerificationError:
            raise
        except Exception as err:  # noqa: BLE001 - any failure: the loop is always correct
            logger.debug("Per-chain-data graph unavailable (%s); looping over chains.", err)
            return
        self.names, self._dtypes = names, [d.dtype for d in data_in]
        batch_x = pt.matrix("x_batch", dtype=x.dtype)
        batch_data = [pt.tensor(dtype=d.dtype, shape=(None, *d.type.shape), name=d.name + "_b")
                      for d in data_in]
        reference = self._loop(check_x, check_data)
        for mode, build in (("vectorized", self._vectorized), ("blockwise", self._blockwise)):
            try:
                fn = build(x, data_in, outputs, batch_x, batch_data)
                self._fn, self.mode = fn, mode
                if self._agrees(self(check_x, check_data), reference):
                    return
                logger.debug("Per-chain-data %s graph disagrees with the reference.", mode)
            except Exception as err:  # noqa: BLE001
                logger.debug("Per-chain-data %s graph failed (%s).", mode, err)
        self._fn, self.mode = None, "loop"

    def _compile(self, inputs, outputs):
        with self.density.model:
            fn = compile_pytensor(inputs, outputs, **self.density.compile_kwargs)
        fn.trust_input = True
        return fn

    def _vectorized(self, x, data_in, outputs, batch_x, batch_data):
        replace = {x: batch_x, **dict(zip(data_in, batch_data, strict=True))}
        return self._compile([batch_x, *batch_data], vectorize_graph(outputs, replace=replace))

    def _blockwise(self, x, data_in, outputs, batch_x, batch_data):
        shared = [v for v in graph_inputs(outputs) if isinstance(v, SharedVariable)]
        core = OpFromGraph([x, *data_in, *shared], list(outputs), inline=False)

        def dims(prefix, variables):
            return ["(" + ",".join(f"{prefix}{i}_{d}" for d in range(v.ndim)) + ")"
                    for i, v in enumerate(variables)]

        signature = (",".join(["(n)", *dims("y", data_in), *dims("s", shared)])
                     + "->(),(),(n),(n)")
        result = Blockwise(core, signature=signature)(batch_x, *batch_data, *shared)
        return self._compile([batch_x, *batch_data], result)

    @staticmethod
    def _agrees(a: DensityParts, b: DensityParts) -> bool:
        return all(
            np.allclose(u, v, rtol=_BATCH_RTOL, atol=_BATCH_ATOL, equal_nan=True)
            for u, v in zip((a.log_prior, a.log_likelihood, a.grad_log_prior,
                             a.grad_log_likelihood),
                            (b.log_prior, b.log_likelihood, b.grad_log_prior,
                             b.grad_log_likelihood), strict=True)
        )

    def _loop(self, x: np.ndarray, data: Mapping[str, np.ndarray]) -> DensityParts:
        density = self.density
        original = density.observed_data()
        rows = []
        try:
            for k in range(len(x)):
                density.set_observed({name: data[name][k] for name in self.names})
                rows.append(density.parts(x[k:k + 1]))
        finally:
            density.set_observed(original)
        return DensityParts(**{f.name: np.concatenate([getattr(r, f.name) for r in rows])
                               for f in fields(DensityParts)})

    def __call__(self, x: np.ndarray, data: Mapping[str, np.ndarray]) -> DensityParts:
        """Densities of the rows of ``x``, row ``k`` under data set ``k`` of ``data``."""
        x = np.ascontiguousarray(x, dtype=float)
        for name in self.names:
            if len(data[name]) != len(x):
                raise VerificationError(
                    f"The kernel evaluated {len(x)} rows, but there are {len(data[name])} "
                    "chains: in the Geweke test `parts_fn` must be called on all chains at "
                    "once, in order (each row is evaluated under its own chain's data)."
                )
        if self._fn is None:
            return self._loop(x, data)
        prior, lik, grad_prior, grad_lik = self._fn(
            x, *(np.ascontiguousarray(data[name], dtype=dtype)
                 for name, dtype in zip(self.names, self._dtypes, strict=True)))
        prior = np.where(np.isnan(prior), -np.inf, prior)
        lik = np.where(np.isnan(lik), -np.inf, lik)
        return DensityParts(prior, lik, grad_prior, grad_lik)


class ConditionalSimulator:
    """Draws ``y ~ p(y | theta)`` for a batch of flat unconstrained ``theta`` (one per row).

    The observed variables' random graph is conditioned on the free variables' values and
    vectorized over rows. Before use, the vectorized draw is replayed against a row-by-row draw
    from the same random generators: they must agree to round-off, or the row-by-row function
    (which takes each value variable in its own dtype, so discrete ones work too) is used.
    """

    def __init__(self, density: ModelDensity, check_x: np.ndarray):
        model = density.model
        self.layout = density.layout
        self._initial = model.initial_point()
        self.names = [rv.name for rv in model.observed_RVs]
        data = density.observed_data()
        self._dtypes = {name: data[name].dtype if name in data else None for name in self.names}
        rvs_to_values = {rv: model.rvs_to_values[rv] for rv in model.free_RVs}
        ys = replace_rvs_by_values(list(model.observed_RVs), rvs_to_values=rvs_to_values,
                                   rvs_to_transforms=model.rvs_to_transforms)
        self._value_names = [v.name for v in model.value_vars]
        kwargs = {"mode": ONE_SHOT_MODE, "random_seed": 0, "on_unused_input": "ignore"}
        with model:
            self._single = compile_pytensor(list(model.value_vars), ys, **kwargs)
        self._rngs = self._generators(self._single)
        self._batched = None
        try:
            ys_x, x = join_nonshared_inputs(point=self._initial, outputs=ys,
                                            inputs=list(model.value_vars))
            batch_x = pt.matrix("x_batch", dtype=x.dtype)
            with model:
                batched = compile_pytensor([batch_x], vectorize_graph(ys_x, replace={x: batch_x}),
                                           **kwargs)
            if self._replays(batched, check_x):
                self._batched = batched
        except Exception as err:  # noqa: BLE001 - the row-by-row function is always correct
            logger.debug("Vectorized conditional simulation unavailable (%s).", err)
        self.mode = "vectorized" if self._batched is not None else "loop"

    @staticmethod
    def _generators(fn) -> list:
        return [v for v in fn.get_shared()
                if isinstance(v.get_value(borrow=True), np.random.Generator)]

    def _rows(self, x: np.ndarray) -> list[np.ndarray]:
        draws = []
        for row in x:
            point = typed_point(self.layout, self._initial, row)
            draws.append(self._single(*(point[name] for name in self._value_names)))
        return [np.stack([d[j] for d in draws]) for j in range(len(self.names))]

    def _replays(self, batched, x: np.ndarray) -> bool:
        rngs = self._generators(batched)
        if {id(r) for r in rngs} != {id(r) for r in self._rngs}:
            return False
        states = [copy.deepcopy(r.get_value()) for r in rngs]
        together = batched(x)
        for r, s in zip(rngs, states, strict=True):
            r.set_value(copy.deepcopy(s))
        # Batched and single linear algebra may differ in the last bits of the parameters.
        return all(np.allclose(a, b, rtol=_BATCH_RTOL, atol=_BATCH_ATOL)
                   for a, b in zip(together, self._rows(x), strict=True))

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """One data set per row of ``x``: ``{name: (rows, *shape)}``."""
        reseed_rngs(self._rngs, int(rng.integers(2**63)))
        x = np.asarray(x, dtype=float)
        values = self._batched(x) if self._batched is not None else self._rows(x)
        return {name: np.ascontiguousarray(v, dtype=self._dtypes[name])
                for name, v in zip(self.names, values, strict=True)}
