# %% [markdown]
# # Quickstart: a certified evidence estimate
#
# Bidirectional Monte Carlo sandwiches `log p(y)` between a stochastic lower bound (forward AIS)
# and a stochastic upper bound (reverse AIS from the parameters that generated the data). Here
# the model's evidence is known in closed form, so we can see the sandwich hold.
#
# This notebook is generated from `examples/quickstart.py`, which also runs as a script
# (`python3 examples/quickstart.py`); see `docs/index.md`.

# %%
import logging

import numpy as np
import pymc as pm

import pymc_bdmc as pmb

logging.getLogger("pymc_bdmc").setLevel(logging.WARNING)

rng = np.random.default_rng(0)
X = rng.normal(size=(40, 3))
y = X @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.8, 40)

with pm.Model() as model:
    sigma2 = pm.InverseGamma("sigma2", alpha=3, beta=2)
    w = pm.Normal("w", 0, pm.math.sqrt(sigma2) * 1.5, shape=3)
    pm.Normal("y", pm.math.dot(X, w), pm.math.sqrt(sigma2), observed=y)

# %% [markdown]
# ## The sandwich on simulated data
# `sample_bdmc` simulates `(theta*, y*)` from the model and bounds `log p(y*)` from both sides.

# %%
with model:
    bdmc = pmb.sample_bdmc(n_steps=1000, chains=32, random_seed=1, progressbar=False)
ev = bdmc["evidence"]
print(f"lower {float(ev.lower):.3f}  upper {float(ev.upper):.3f}  gap {float(ev.gap):.3f} nats")
print(f"posterior KL certificate: {float(ev.posterior_kl_bound):.3f} nats")

# %% [markdown]
# This model's evidence is a multivariate t density, so we can check against the exact value:

# %%
from scipy import stats  # noqa: E402

shape = (2 / 3) * (np.eye(40) + 1.5**2 * X @ X.T)
exact = stats.multivariate_t(np.zeros(40), shape, df=6).logpdf(bdmc["observed_data"]["y"].values)
print(f"exact {exact:.3f}")
assert float(ev.lower) - 3 < exact < float(ev.upper) + 3

# %% [markdown]
# Each chain's log weight is a noisy estimate of `log p(y*)`: forward weights from below,
# negated reverse weights from above. The bounds average the weights themselves, not their
# logs, so the lower bound lies above the mean forward log weight and the upper bound below the
# mean negated reverse log weight (by Jensen's inequality, those means are looser bounds).

# %%
import matplotlib.pyplot as plt  # noqa: E402

from pymc_bdmc import plots  # noqa: E402

ax = plots.plot_log_weights(bdmc)
ax.axvline(exact, color="k", ls="--", lw=1, label="exact")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# ## A lower bound on the real data
# With the gap small on data like the model's, the forward estimate on the real data can be
# trusted to a similar accuracy (the upper bound needs the exact sample, so only the lower bound
# exists for real data).

# %%
with model:
    ais = pmb.sample_ais(n_steps=1000, chains=32, random_seed=2, progressbar=False)
print(f"log p(y) >= {float(ais['evidence']['lower']):.3f} "
      f"(exact {stats.multivariate_t(np.zeros(40), shape, df=6).logpdf(y):.3f})")

# %% [markdown]
# The result is an ArviZ `DataTree`: the usual diagnostics work on the weighted-resampled
# posterior.

# %%
import arviz as az  # noqa: E402

print(az.summary(ais, kind="stats"))
