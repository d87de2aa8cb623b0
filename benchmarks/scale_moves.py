"""Scale moves: what they buy on funnels and what they cost where there is none.

Run from the repository root::

    python3 benchmarks/scale_moves.py

Each part runs the same calls with the scale moves and without them (the ablation replaces
``pymc_bdmc.methods.vectorized.scale_moves_for`` by a function returning None, which removes
them from the pilot, the equilibration and the plan alike):

1. The 60- and 201-step random walks of ``benchmarks/geometry.py`` at ``random_seed=4``, whose
   simulated ``sigma*`` = 0.00099 puts ``theta*`` deep in the funnel's neck:
   ``sample_bdmc(n_steps=1000)``, bounds against the exact ``log p(y*)``, the gap, and the
   reverse chains' HMC acceptance over the last 10% of the path. For the 201-step walk also
   the pilot population's sd of ``log sigma`` at ``beta = 1`` (the plan's last inverse mass)
   against the exact posterior sd by quadrature.
2. The latent GP of ``benchmarks/geometry.py`` written centred (``pm.gp.Latent(...).prior(...,
   reparameterize=False)``, an ``MvNormal`` whose covariance holds the amplitude and the
   lengthscale), seeds 0 and 1: ``sample_bdmc(n_steps=1000)`` and ``sample_ais()`` against the
   exact evidence (the same as the non-centred model's).
3. The Normal-InvGamma regression of ``pymc_bdmc.known_evidence`` (one scale group, no funnel in its
   posterior): ``sample_ais(n_steps=100)`` on 30 seeds, median seconds per call (after a
   warm-up call) and RMSE against the exact evidence.
4. Children other than Normal ones (no exact evidence; the BDMC gap is the certificate):
   robust eight schools, the centred model with Student-t (``nu = 4``) school effects; and
   correlated random effects, 20 groups' intercept and slope (5 observations each) sharing an
   ``LKJCholeskyCov`` (a batch of ``MvNormal`` vectors: no scale group since 5ab69af, so both
   rows of it run without moves; at eed400d they had moves). ``sample_bdmc()`` at the
   defaults, seeds 0-3: the gap, its length and seconds (the first call of each model includes
   its compilation).

``--parts 4`` (for example) runs only some parts.
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np
import pymc as pm
from _common import quiet

import pymc_bdmc as pmb
import pymc_bdmc.methods.vectorized as vectorized
from pymc_bdmc import known_evidence

WITH_MOVES = vectorized.scale_moves_for


def set_moves(on: bool) -> None:
    vectorized.scale_moves_for = WITH_MOVES if on else (lambda density: None)


def posterior_sd_log_sigma(y: np.ndarray, n: int, prior_sd: float = 0.5,
                           noise_sd: float = 0.5) -> float:
    """Exact posterior sd of log sigma for the walk's data ``y``, on a fine grid."""
    t = np.arange(n)
    walk = np.minimum.outer(t, t).astype(float)
    grid = np.linspace(-30.0, 3.0, 3301)
    log_f = []
    for u in grid:
        cov = 1.0 + np.exp(2 * u) * walk + noise_sd**2 * np.eye(n)
        _, log_det = np.linalg.slogdet(cov)
        log_prior = u - np.exp(2 * u) / (2 * prior_sd**2)  # HalfNormal in log scale, unnormalised
        log_f.append(-0.5 * (y @ np.linalg.solve(cov, y) + log_det) + log_prior)
    w = np.exp(np.array(log_f) - max(log_f))
    w /= w.sum()
    mean = w @ grid
    return float(np.sqrt(w @ (grid - mean) ** 2))


def funnel_necks() -> None:
    print("1. theta* in the funnel's neck (random_seed=4, n_steps=1000)")
    for n, build in ((60, lambda: known_evidence.gaussian_random_walk(60)),
                     (200, lambda: known_evidence.gaussian_random_walk(200, seed=1))):
        walk = build()
        for on in (True, False):
            set_moves(on)
            start = time.perf_counter()
            with walk.model:
                result = pmb.sample_bdmc(n_steps=1000, random_seed=4, progressbar=False)
            seconds = time.perf_counter() - start
            y = result["observed_data"]["y"].values
            truth = walk.log_evidence({"y": y})
            ev, ann = result["evidence"], result["annealing"]
            top = ann["acceptance_rate_reverse"].values[900:1000]
            text = (f"   T={n:<3} moves {'on ' if on else 'off'}: "
                    f"lower {float(ev['lower']) - truth:+.2f} "
                    f"upper {float(ev['upper']) - truth:+.2f} gap {float(ev['gap']):+.2f} "
                    f"reverse acceptance (last 10%) {np.nanmean(top):.2f}  {seconds:.1f} s")
            if n == 200:
                text += (f"  pilot sd(log sigma) at beta=1 "
                         f"{np.sqrt(ann['inverse_mass'].values[-1, 0]):.2f}")
            print(text, flush=True)
        if n == 200:
            print(f"   exact posterior sd(log sigma) given y*: {posterior_sd_log_sigma(y, n):.2f}")
    set_moves(True)


def centred_gp() -> None:
    print("2. centred latent GP, 30 points (n_steps=1000 for BDMC, defaults for AIS)")
    analytic = known_evidence.latent_gp(30, centered=True)
    truth = analytic.log_evidence()
    for on in (True, False):
        set_moves(on)
        for seed in (0, 1):
            with analytic.model:
                start = time.perf_counter()
                bdmc = pmb.sample_bdmc(n_steps=1000, random_seed=seed, progressbar=False)
                seconds = time.perf_counter() - start
                ais = pmb.sample_ais(random_seed=seed, progressbar=False)
            ev = bdmc["evidence"]
            truth_sim = analytic.log_evidence({"y": bdmc["observed_data"]["y"].values})
            print(f"   moves {'on ' if on else 'off'} seed {seed}: gap {float(ev['gap']):+.2f} "
                  f"lower {float(ev['lower']) - truth_sim:+.2f} ({seconds:.1f} s) | AIS error "
                  f"{float(ais['evidence']['lower']) - truth:+.2f}", flush=True)
    set_moves(True)


def no_funnel_cost(n_seeds: int = 30) -> None:
    print(f"3. Normal-InvGamma regression, sample_ais(n_steps=100), {n_seeds} seeds")
    analytic = known_evidence.normal_inverse_gamma_regression()
    truth = analytic.log_evidence()
    with analytic.model:
        pmb.sample_ais(n_steps=100, random_seed=0, progressbar=False)  # compile, warm up
        seconds = {True: [], False: []}
        errors = {True: [], False: []}
        for seed in range(n_seeds):
            for on in (True, False):
                set_moves(on)
                start = time.perf_counter()
                result = pmb.sample_ais(n_steps=100, random_seed=seed, progressbar=False)
                seconds[on].append(time.perf_counter() - start)
                errors[on].append(float(result["evidence"]["lower"]) - truth)
    set_moves(True)
    for on in (True, False):
        print(f"   moves {'on ' if on else 'off'}: median {np.median(seconds[on]):.3f} s per call, "
              f"RMSE {np.sqrt(np.mean(np.square(errors[on]))):.4f}")
    print(f"   time ratio on/off: {np.median(seconds[True]) / np.median(seconds[False]):.2f}")


def _robust_schools():
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfCauchy("tau", 5.0)
        theta = pm.StudentT("theta", nu=4.0, mu=mu, sigma=tau, shape=8)
        pm.Normal("y", theta, known_evidence.EIGHT_SCHOOLS_SIGMA,
                  observed=known_evidence.EIGHT_SCHOOLS_Y)
    return model


def _correlated_effects(n_groups: int = 20, per_group: int = 5):
    rng = np.random.default_rng(0)
    group = np.repeat(np.arange(n_groups), per_group)
    covariate = rng.normal(size=group.size)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=2, eta=2.0, sd_dist=pm.Exponential.dist(1.0))
        mu = pm.Normal("mu", 0.0, 1.0, shape=2)
        effects = pm.MvNormal("effects", mu=mu, chol=chol, shape=(n_groups, 2))
        pm.Normal("y", effects[group, 0] + effects[group, 1] * covariate, 0.5,
                  observed=rng.normal(size=group.size))
    return model


def other_families() -> None:
    print("4. other children, sample_bdmc() at the defaults")
    models = {"robust eight schools (Student-t effects)": _robust_schools(),
              "correlated effects (LKJ, 20 x 2)": _correlated_effects()}
    for name, model in models.items():
        for on in (True, False):
            set_moves(on)
            for seed in range(4):
                with model:
                    start = time.perf_counter()
                    bdmc = pmb.sample_bdmc(random_seed=seed, progressbar=False)
                    seconds = time.perf_counter() - start
                ev = bdmc["evidence"]
                print(f"   {name}, moves {'on ' if on else 'off'} seed {seed}: gap "
                      f"{float(ev['gap']):+.2f} ({int(ev.attrs['n_steps'])} steps, "
                      f"{seconds:.1f} s)", flush=True)
    set_moves(True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", type=int, nargs="*", default=[1, 2, 3, 4])
    args = parser.parse_args(argv)
    quiet()
    logging.getLogger("pymc").setLevel(logging.ERROR)
    parts = {1: funnel_necks, 2: centred_gp, 3: no_funnel_cost, 4: other_families}
    for part in args.parts:
        parts[part]()


if __name__ == "__main__":
    main()
