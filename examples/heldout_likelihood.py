# %% [markdown]
# # Held-out log-likelihood of a latent-variable model, validated by BDMC
#
# Probabilistic PCA: `z_i ~ N(0, I_k)`, `y_i ~ N(W z_i + b, sigma^2 I_d)`. Once the model is
# trained, its held-out log-likelihood
# `log p(y_test | W, b, sigma) = sum_i log integral p(z_i) p(y_i | z_i) dz_i`
# measures how well it generalizes. `sample_heldout_likelihood` estimates every case's term by
# annealed importance sampling with the parameters fixed, and checks the estimator by
# bidirectional Monte Carlo on cases simulated from the trained model.
#
# PPCA's marginal `y_i ~ N(b, W W' + sigma^2 I)` is known, so we can compare with the truth.
#
# Run as a script (`python3 examples/heldout_likelihood.py`) or open as a notebook with jupytext.

# %%
import logging

import numpy as np
import pymc as pm
from scipy import stats

import pymc_bdmc as pmb

logging.getLogger("pymc_bdmc").setLevel(logging.WARNING)

d, k = 5, 2
rng = np.random.default_rng(0)
w_true, b_true, sigma_true = rng.normal(size=(d, k)), rng.normal(size=d), 0.3
cov_true = w_true @ w_true.T + sigma_true**2 * np.eye(d)
y_train = rng.multivariate_normal(b_true, cov_true, size=100)
y_test = rng.multivariate_normal(b_true, cov_true, size=50)

# %% [markdown]
# ## Train
# The maximum-likelihood PPCA fit is closed form (Tipping & Bishop 1999): the top `k`
# eigenvectors of the sample covariance, and the mean of the other eigenvalues as `sigma^2`.

# %%
eigval, eigvec = np.linalg.eigh(np.cov(y_train, rowvar=False, bias=True))
eigval, eigvec = eigval[::-1], eigvec[:, ::-1]
sigma2 = eigval[k:].mean()
params = {
    "W": eigvec[:, :k] * np.sqrt(eigval[:k] - sigma2),
    "b": y_train.mean(axis=0),
    "sigma": np.sqrt(sigma2),
}

# The model is written once, for the training data; the cases are a named dimension, so held-out
# data with another number of cases can be passed as they are.
coords = {"case": np.arange(len(y_train)), "feature": np.arange(d), "factor": np.arange(k)}
with pm.Model(coords=coords) as model:
    W = pm.Normal("W", 0, 1, dims=("feature", "factor"))
    b = pm.Normal("b", 0, 3, dims="feature")
    sigma = pm.HalfNormal("sigma", 1)
    z = pm.Normal("z", 0, 1, dims=("case", "factor"))
    pm.Normal("y", z @ W.T + b, sigma, observed=y_train, dims=("case", "feature"))

# %% [markdown]
# ## First, is the estimator accurate? BDMC on simulated cases
# On real test cases only the lower bound exists. On cases simulated from the trained model
# (as many as the model has, here 100), reverse AIS from the simulated latents gives an upper
# bound per case: a small gap certifies the estimator with these settings, on data like the
# model's own. Every (chain, case) pair is its own AIS chain, with its own accept/reject and
# weight, so each case gets its own bounds; the totals are their sums.

# %%
with model:
    check = pmb.sample_heldout_likelihood(params, simulate=True, n_steps=300, chains=16,
                                          random_seed=2, progressbar=False)
c = check["heldout"]
cov_fit = params["W"] @ params["W"].T + params["sigma"] ** 2 * np.eye(d)
marginal = stats.multivariate_normal(params["b"], cov_fit)
truth = marginal.logpdf(check["observed_data"]["y"].values)
n_sim = c.sizes["case"]
print(f"{n_sim} simulated cases: total lower {float(c.total_lower):.3f}, upper "
      f"{float(c.total_upper):.3f} (exact {truth.sum():.3f}); gap {float(c.total_gap):.3f} nats "
      f"in total, {float(c.total_gap) / n_sim:.4f} per case, largest per case "
      f"{float(c.gap.max()):.3f}")
assert float(c.total_lower) - np.log(1000) <= truth.sum() <= float(c.total_upper) + np.log(1000)
assert abs(float(c.total_gap)) / n_sim < 0.05

# %% [markdown]
# Each case's bias is small, but the totals add up the cases' biases (and noise), so the total
# gap grows with the number of cases; per case it is what to compare with the differences
# between models. A slightly negative gap is chance: both bounds are then accurate to within
# their noise (`total_lower_se`, `total_upper_se`). Raise `n_steps` (or `chains`) if the gap is
# too large.
#
# ## Then, the held-out log-likelihood of the test cases, with the certified plan
# `AnnealingPlan.from_result` freezes the schedule and kernels the gap was measured with; the
# test cases run exactly those (no new pilot run).

# %%
with model:
    result = pmb.sample_heldout_likelihood(params, {"y": y_test}, chains=16, random_seed=1,
                                           plan=pmb.AnnealingPlan.from_result(check),
                                           progressbar=False)
h = result["heldout"]
exact = marginal.logpdf(y_test)
print(f"held-out log-likelihood of {h.sizes['case']} test cases: AIS {float(h.total_lower):.3f} "
      f"(se {float(h.total_lower_se):.3f}), exact {exact.sum():.3f}")
print(f"largest per-case error: {np.abs(h.lower.values - exact).max():.3f} nats")
worst = np.argsort(h.lower.values)[:3]
print(f"worst-fitting test cases: {worst.tolist()}, log p(y_i | theta) = "
      f"{np.round(h.lower.values[worst], 2).tolist()}")
assert abs(float(h.total_lower) - exact.sum()) < 3.0
