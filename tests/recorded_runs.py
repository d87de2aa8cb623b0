"""Small seeded runs of every method, reduced to fingerprints that pin their numbers bit for bit.

``tests/test_recorded_numbers.py`` compares these fingerprints with the ones recorded in
``tests/recorded_numbers.json``. Refactors must leave them unchanged; a change of an algorithm
that moves the numbers on purpose re-records them (``python3 tests/recorded_runs.py --record``)
and says why in its commit message.

A fingerprint holds the run's bounds, its per-chain log weights and (for the search) its
attempts, as floats. The test compares them to 1e-9, relative and absolute: any change of an
algorithm, of its random draws or of the order it uses them moves them by far more, while
PyTensor may compile the same model's graph with another order of floating-point operations in
another process (seen on the held-out run: 2 ulp on its total lower bound from one process to
the next), which long runs amplify.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pymc as pm

import pymc_bdmc as pmb

RECORD = Path(__file__).with_name("recorded_numbers.json")
QUIET = dict(progressbar=False)
VECTORIZED = dict(fused_kernel=False, cores=1, **QUIET)
Y = np.array([0.4, -0.3, 1.1, 0.2, 0.9, -0.5])


def _hex(x) -> float:
    return float(x)


def _sha(*arrays) -> list:
    return [np.asarray(a, dtype=float).ravel().tolist() for a in arrays]


def _evidence_print(result, names=("lower", "upper")) -> dict:
    ev = result["evidence"]
    out = {name: _hex(ev[name]) for name in names if name in ev}
    weights = [ev[k].values for k in ("log_weight_forward", "log_weight_reverse", "log_weight")
               if k in ev]
    out["weights"] = _sha(*weights)
    return out


def _normal_model():
    with pm.Model() as model:
        sigma = pm.HalfNormal("sigma", 1.0)
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, sigma, observed=Y)
    return model


def _hierarchy():
    with pm.Model() as model:
        tau = pm.HalfNormal("tau", 1.0)
        theta = pm.Normal("theta", 0.0, tau, shape=4)
        pm.Normal("y", theta, 0.5, observed=np.array([0.3, -0.8, 1.2, 0.1]))
    return model


def _mixture():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0, shape=2)
        z = pm.Bernoulli("z", 0.5, shape=len(Y))
        pm.Normal("y", pm.math.switch(z, mu[1], mu[0]), 0.7, observed=Y)
    return model


def _poisson_latent():
    with pm.Model() as model:
        lam = pm.Gamma("lam", 2.0, 1.0)
        k = pm.Poisson("k", lam)
        pm.Normal("y", k, 1.0, observed=np.array([1.2, 2.1, 0.7]))
    return model


def _ppca():
    d, k = 3, 1
    y = np.random.default_rng(1).normal(size=(4, d))
    coords = {"case": np.arange(4), "obs_dim": np.arange(d), "lat": np.arange(k)}
    with pm.Model(coords=coords) as model:
        w = pm.Normal("W", 0, 1, dims=("obs_dim", "lat"))
        sigma = pm.HalfNormal("sigma", 1)
        z = pm.Normal("z", 0, 1, dims=("case", "lat"))
        pm.Normal("y", z @ w.T, sigma, observed=y, dims=("case", "obs_dim"))
    params = {"W": np.array([[1.0], [-0.5], [0.3]]), "sigma": 0.4}
    return model, params


def _ising():
    field = np.array([[1, 1, -1], [1, 1, -1], [-1, 1, -1]])
    with pm.Model() as model:
        c = pm.Normal("c", 0.2, 0.5)
        pmb.Ising("y", c, observed=field)
    return model


def run_all() -> dict:
    """Run every recorded case and return its fingerprints, by case name."""
    out = {}
    normal = _normal_model()
    with normal:
        out["ais"] = _evidence_print(pmb.sample_ais(n_steps=40, chains=8, random_seed=11,
                                                    **VECTORIZED))
        ais_auto = pmb.sample_ais(chains=8, random_seed=26, max_time=None, target_gap=0.01,
                                  **VECTORIZED)  # the lower bound's own length search
        out["ais_auto"] = {**_evidence_print(ais_auto),
                           "attempts": _sha(ais_auto["evidence"].attrs["auto_n_steps"],
                                            ais_auto["evidence"].attrs["auto_lowers"])}
        out["ais_prior_base"] = _evidence_print(pmb.sample_ais(
            n_steps=40, chains=8, random_seed=12, base="prior", **VECTORIZED))
        out["ais_sigmoid"] = _evidence_print(pmb.sample_ais(
            n_steps=30, chains=8, random_seed=13, schedule="sigmoid", **VECTORIZED))
        out["bdmc"] = _evidence_print(pmb.sample_bdmc(n_steps=40, chains=8, random_seed=14,
                                                      **VECTORIZED))
        out["bdmc_fused"] = _evidence_print(pmb.sample_bdmc(
            n_steps=30, chains=8, random_seed=15, **{**VECTORIZED, "fused_kernel": True}))
        auto = pmb.sample_bdmc(chains=8, random_seed=16, max_time=None, target_gap=0.05,
                               **VECTORIZED)
        attrs = auto["evidence"].attrs
        out["bdmc_auto"] = {**_evidence_print(auto),
                            "attempts": _sha(attrs["auto_n_steps"], attrs["auto_chains"],
                                             attrs["auto_gaps"], attrs["auto_gap_se"])}
        out["smc"] = _evidence_print(pmb.sample_smc_evidence(n_steps=10, particles=16,
                                                             chains=2, random_seed=17, **QUIET))
        out["smc_data"] = _evidence_print(pmb.sample_smc_evidence(
            n_steps=3, particles=16, chains=2, path="data", random_seed=18, **QUIET))
        out["bdmc_smc"] = _evidence_print(pmb.sample_bdmc(
            method="smc", n_steps=10, particles=16, chains=2, random_seed=19, cores=1,
            **QUIET))
        cal = pmb.calibrate(n_steps=[20, 40], tolerance=10.0, chains=8, random_seed=20,
                            fused_kernel=False, cores=1, **QUIET)
        out["calibrate"] = {**_evidence_print(cal, ("lower",)),
                            "gaps": _sha(cal["calibration"]["gap"].values)}
    with _hierarchy():
        # Swaps form, lengthens, then adds chains: with two transitions per temperature (one
        # each lengthens it to 4600 steps instead).
        search = pmb.sample_bdmc(chains=8, random_seed=3, max_time=None, target_gap=0.02,
                                 transitions_per_step=2, **VECTORIZED)
        attrs = search["evidence"].attrs
        out["bdmc_search_swap"] = {
            **_evidence_print(search),
            "attempts": _sha(attrs["auto_n_steps"], attrs["auto_chains"], attrs["auto_gaps"],
                             attrs["auto_reparameterized"], attrs["auto_gap_se"])}
        out["bdmc_other_form"] = _evidence_print(pmb.sample_bdmc(
            n_steps=40, chains=8, random_seed=21, reparameterize=True, **VECTORIZED))
    with _mixture():
        out["bdmc_gibbs"] = _evidence_print(pmb.sample_bdmc(n_steps=30, chains=8,
                                                            random_seed=22, **VECTORIZED))
    with _poisson_latent() as model:
        # The steps PyMC assigns (the count now defaults to the window Gibbs kernel).
        steps = [pm.NUTS([model["lam"]]), pm.Metropolis([model["k"]])]
        out["bdmc_step_methods"] = _evidence_print(pmb.sample_bdmc(
            n_steps=20, chains=4, random_seed=23, cores=1, step=steps, **QUIET))
    model, params = _ppca()
    with model:
        held = pmb.sample_heldout_likelihood(params, simulate=True, n_steps=30, chains=4,
                                             random_seed=24, **QUIET)
    out["heldout"] = {name: _hex(held["heldout"][name]) for name in ("total_lower",
                                                                        "total_upper")}
    out["heldout"]["weights"] = _sha(held["heldout"]["log_weight_forward"].values,
                                     held["heldout"]["log_weight_reverse"].values)
    with _ising():
        for method in ("savis", "rwsmc", "abc"):
            result = pmb.sample_unnormalized_evidence(
                method, draws=64, pilot_draws=64, pilot_tune=32, bound_chains=4,
                bound_bridges=10, random_seed=25, **QUIET)
            out[f"unnormalized_{method}"] = _evidence_print(result, ("lower",))
    return out


if __name__ == "__main__":
    numbers = run_all()
    if "--record" in sys.argv:
        RECORD.write_text(json.dumps(numbers, indent=1, sort_keys=True) + "\n")
    print(json.dumps(numbers, indent=1, sort_keys=True))
