"""Models with latent counts and their exact evidence, for the tests of both discrete kernels.

A latent count under a Binomial (N ~ Poisson(5), p ~ Beta(2, 2), y_j ~ Binomial(N, p)), which
the tests of PyMC's step methods and of the window Gibbs kernel both run, and latent counts as
a Poisson likelihood's rates.
"""

import numpy as np
import pymc as pm


def binomial_count_model():
    # N ~ Poisson(5), p ~ Beta(2, 2), y_j ~ Binomial(N, p): a quarter of the prior's N lie below
    # max(y), where the data are impossible.
    with pm.Model() as m:
        p = pm.Beta("p", 2, 2)
        count = pm.Poisson("N", 5)
        pm.Binomial("y", n=count, p=p, observed=np.array([2, 4]))
    return m


def binomial_count_evidence(y) -> float:
    from scipy import integrate, stats
    from scipy.special import logsumexp

    y = np.asarray(y)
    terms = []
    for n in range(int(y.max()), 80):
        value, _ = integrate.quad(
            lambda p, n=n: stats.beta.pdf(p, 2, 2) * np.prod(stats.binom.pmf(y, n, p)), 0, 1)
        terms.append(stats.poisson.logpmf(n, 5) + np.log(value))
    return float(logsumexp(terms))


#: Counts observed through a Poisson whose rate is a latent count: possible at every N.
LATENT_RATE_COUNTS = np.array([2, 5, 0, 7, 3, 4])


def latent_rate_model(y=LATENT_RATE_COUNTS):
    # lam ~ Gamma(2, 0.5), N_i ~ Poisson(lam), y_i ~ Poisson(N_i + 0.5): a negative N_i (below
    # the Poisson's support) would fail the likelihood's parameter check for every element.
    with pm.Model() as m:
        lam = pm.Gamma("lam", 2, 0.5)
        count = pm.Poisson("N", lam, shape=len(y))
        pm.Poisson("y", count + 0.5, observed=y)
    return m


def latent_rate_evidence(y=LATENT_RATE_COUNTS) -> float:
    from scipy import integrate, stats
    from scipy.special import logsumexp

    n = np.arange(200)

    def joint(lam):
        per_site = [logsumexp(stats.poisson.logpmf(n, lam) + stats.poisson.logpmf(v, n + 0.5))
                    for v in y]
        return np.exp(sum(per_site)) * stats.gamma.pdf(lam, 2, scale=2)

    value, _ = integrate.quad(joint, 0, 80, limit=400, epsrel=1e-10)
    return float(np.log(value))
