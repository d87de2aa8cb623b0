# %% [markdown]
# # Comparing models by their evidence
#
# Two regressions for the same data: one with all covariates, one without the third. The
# evidence penalises the extra parameter unless the data need it. Both evidences are closed
# form here, so the Bayes factor can be checked.

# %%
import logging

import numpy as np
import pymc as pm
from scipy import stats

import pymc_bdmc as pmb

logging.getLogger("pymc_bdmc").setLevel(logging.WARNING)

rng = np.random.default_rng(3)
X = rng.normal(size=(60, 3))
y = X @ np.array([1.2, -0.7, 0.0]) + rng.normal(0, 1.0, 60)  # the third covariate is useless

models, exact = {}, {}
for name, cols in {"all covariates": [0, 1, 2], "first two": [0, 1]}.items():
    Xs = X[:, cols]
    with pm.Model() as m:
        w = pm.Normal("w", 0, 1, shape=len(cols))
        pm.Normal("y", pm.math.dot(Xs, w), 1.0, observed=y)
    models[name] = m
    exact[name] = stats.multivariate_normal(np.zeros(60), np.eye(60) + Xs @ Xs.T).logpdf(y)

# %% [markdown]
# ## Certify the estimator on simulated data, then estimate on the real data

# %%
results = {}
for name, m in models.items():
    with m:
        certificate = pmb.sample_bdmc(n_steps=800, chains=32, random_seed=1, progressbar=False)
        results[name] = pmb.sample_ais(n_steps=800, chains=32, random_seed=2, progressbar=False)
    print(f"{name}: BDMC gap on simulated data {float(certificate['evidence']['gap']):.3f} nats")

# %%
table = pmb.compare(results)
print(table[["log_evidence", "se", "kind", "log_bf", "strength"]].round(3))
bf = pmb.bayes_factor(results["first two"], results["all covariates"])
print(bf)
print(f"exact log BF {exact['first two'] - exact['all covariates']:.3f}")
assert abs(bf.log_bf - (exact["first two"] - exact["all covariates"])) < 0.3
