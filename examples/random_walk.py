# %% [markdown]
# # A latent random walk at the defaults
#
# Random walks with an unknown innovation scale are among the models PyMC users write most,
# and among the hardest for annealing: under the prior the walk's scale is a funnel, far wider
# than the posterior and curved at scales no fixed kernel fits. This example runs
# `pmb.sample_bdmc()` and `pmb.sample_ais()` with **no settings at all** on a 150-step walk and
# checks both against the exact evidence (the walk is Gaussian given its scale, so one
# quadrature over the scale gives `log p(y)`).
#
# This notebook is generated from `examples/random_walk.py`, which also runs as a script
# (`python3 examples/random_walk.py`); see `docs/index.md`.

# %%
import logging
import time

import numpy as np
import pymc as pm

import pymc_bdmc as pmb
from pymc_bdmc.known_evidence import gaussian_random_walk

logging.getLogger("pymc_bdmc").setLevel(logging.WARNING)

T = 150
rng = np.random.default_rng(3)
sigma_true = abs(rng.normal(0.0, 0.5))
walk = rng.normal() + np.concatenate([[0.0], np.cumsum(sigma_true * rng.normal(size=T - 1))])
y = walk + 0.5 * rng.normal(size=T)

with pm.Model() as model:
    sigma = pm.HalfNormal("sigma", 0.5)
    x = pm.GaussianRandomWalk("x", sigma=sigma, init_dist=pm.Normal.dist(0.0, 1.0),
                              steps=T - 1)
    pm.Normal("y", x, 0.5, observed=y)

# The same model, with its exact evidence by quadrature over log sigma.
exact = gaussian_random_walk(T).log_evidence


# %% [markdown]
# ## Certify on simulated data
# `sample_bdmc()` simulates `(theta*, y*)` from the model and sandwiches `log p(y*)`. At the
# defaults it chooses its own length (`n_steps="auto"`: from 1000 steps, longer until the gap
# is within 0.5 nats or 60 s are spent), its kernels (a dense mass matrix where the pilot
# population is correlated and its gradients agree) and where the path starts (the prior, or a
# Gaussian fitted by the pilot where that path is shorter and loses no mass).

# %%
with model:
    start = time.perf_counter()
    bdmc = pmb.sample_bdmc(random_seed=0, progressbar=False)
    seconds = time.perf_counter() - start
ev = bdmc["evidence"]
truth_sim = exact({"y": bdmc["observed_data"]["y"].values})
print(f"BDMC: [{float(ev.lower):.2f}, {float(ev.upper):.2f}], gap {float(ev.gap):.2f} nats, "
      f"{ev.attrs['n_steps']} steps, certified: {bool(ev.attrs['certified'])}, {seconds:.0f} s")
print(f"exact log p(y*) {truth_sim:.2f}; path from the {ev.attrs['path_start']}; "
      f"dense mass matrix: {'mass_factor' in bdmc['annealing']}")
assert float(ev.lower) - 1.0 < truth_sim < float(ev.upper) + 1.0

# %% [markdown]
# Not every simulated data set is this easy. On seed 4 of the random walks in
# `benchmarks/geometry.py` the simulation draws `sigma* = 0.001`, which the prior does with
# probability 0.0016: `theta*` sits deep in the funnel's neck. HMC alone cannot leave it (a gap
# of 5.5 nats at 24000 steps on a 60-step walk). So every step also makes *scale moves*:
# Metropolis-Hastings steps of `sigma` that stretch the walk's first value and increments with
# it, which certify that seed at 1000 steps (`python3 benchmarks/scale_moves.py`). The plan
# records whether they ran. Where a search still misses its target, the result says
# `certified: False`, and the log gives the gap at each length and what to change.

# %%
print("scale moves:", bool(bdmc["annealing"].attrs["scale_moves"]))

# %% [markdown]
# The pilot's comparison of the two paths is in the attributes: thermodynamic lengths (the
# weight variance at a fixed number of steps grows as their square) and the pilots' own
# estimates of `log p(y*)` (a path the pilot cannot follow loses mass, and its estimate falls).

# %%
for key in ("thermodynamic_length_prior", "thermodynamic_length_fitted",
            "pilot_log_z_prior", "pilot_log_z_fitted"):
    print(f"{key:28s} {ev.attrs[key]:9.2f}")

# %% [markdown]
# ## Estimate on the real data
# On the real data only the lower bound exists. With the defaults, `sample_ais()` runs 1000
# steps on its own pilot's plan.

# %%
with model:
    start = time.perf_counter()
    ais = pmb.sample_ais(random_seed=2, progressbar=False)
    seconds = time.perf_counter() - start
lower = float(ais["evidence"]["lower"])
print(f"AIS lower bound {lower:.2f}, exact log p(y) {exact({'y': y}):.2f}, "
      f"error {lower - exact({'y': y}):+.2f} nats, {seconds:.0f} s, "
      f"path from the {ais['evidence'].attrs['path_start']}")
assert abs(lower - exact({"y": y})) < 1.0
