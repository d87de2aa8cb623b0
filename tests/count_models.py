"""A latent count under a Binomial: N ~ Poisson(5), p ~ Beta(2, 2), y_j ~ Binomial(N, p).

Shared by the tests of PyMC's step methods and of the window Gibbs kernel, which run it both.
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
