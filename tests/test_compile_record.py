"""Compilation records: a graph's signature, its cold compilation time, and the fused kernel's
forms compiled on this machine (which steer the choice of the fused kernel, never results)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from pymc_bdmc.kernels.hmc import HMCParams
from pymc_bdmc.model import compile_record
from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.model.compile_record import (
    fused_form,
    graph_signature,
    kernel_compiled,
    mark_kernel_compiled,
    record_compile_seconds,
)


def _regression(prior_sd=1.0, data=(0.1, 0.4, -0.2)):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, prior_sd)
        pm.Normal("y", mu, pm.HalfNormal("s", 1.0), observed=np.array(data))
    return model


def test_rebuilt_models_share_a_signature_and_another_constant_does_not():
    signatures = [compiled_model(model).density.compile_signature
                  for model in (_regression(), _regression(data=(1.0, 2.0, 3.0)),
                                _regression(prior_sd=2.0))]
    assert signatures[0] == signatures[1]  # other data: the same compiled code
    assert signatures[0] != signatures[2]
    # The compilation settings are part of it (another mode compiles other code).
    x = pt.vector("x")
    assert graph_signature([pt.exp(x)], extra="NUMBA") != graph_signature([pt.exp(x)], extra="C")
    assert graph_signature([pt.exp(x)]) == graph_signature([pt.exp(pt.vector("y"))])


def test_the_longest_compilation_is_kept_and_kernel_forms_are_remembered(monkeypatch,
                                                                          tmp_path):
    monkeypatch.setattr(compile_record, "RECORD_DIR", tmp_path)
    assert record_compile_seconds("abc", 26.0) == 26.0  # a cold compilation
    assert record_compile_seconds("abc", 1.1) == 26.0   # the same graph from the disk cache
    assert record_compile_seconds("abc", 30.0) == 30.0
    assert record_compile_seconds("other", 1.1) == 1.1
    form = fused_form(dense=True, base=True)
    assert not kernel_compiled("abc", form)
    mark_kernel_compiled("abc", form)
    assert kernel_compiled("abc", form) and not kernel_compiled("abc", fused_form())
    # Unwritable records only mean "unknown".
    monkeypatch.setattr(compile_record, "RECORD_DIR", tmp_path / "file" / "below")
    (tmp_path / "file").write_text("")
    assert record_compile_seconds("abc", 2.0) == 2.0
    mark_kernel_compiled("abc", form)
    assert not kernel_compiled("abc", form)


def test_a_fused_form_run_once_is_recorded_for_later_sessions(monkeypatch, tmp_path):
    monkeypatch.setattr(compile_record, "RECORD_DIR", tmp_path)
    density = compiled_model(_regression(prior_sd=3.0), cache=False).density
    assert not density.fused_hmc_cached()
    x = np.zeros((2, density.n_dim))
    params = HMCParams(step_size=0.1, n_leapfrog=2, inv_mass=np.ones(density.n_dim))
    density.fused_hmc().step(np.random.default_rng(0), x, density.parts(x), 0.5, params)
    assert density.fused_hmc_cached() and not density.fused_hmc_cached(dense=True)
    # A rebuild of the same model (a new process would see the same) knows it.
    rebuilt = compiled_model(_regression(prior_sd=3.0), cache=False).density
    assert rebuilt.fused_hmc_cached()
