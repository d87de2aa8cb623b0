"""First- vs second-order Ising fields: evidence and Bayes factors against exact values (issue 18).

Run from the repository root (one BLAS thread: the transfer matrix does many small products)::

    OPENBLAS_NUM_THREADS=1 python3 benchmarks/unnormalized.py            # 4 seeds, 15-25 min
    OPENBLAS_NUM_THREADS=1 python3 benchmarks/unnormalized.py --quick    # 1 seed, 2-3 min
    OPENBLAS_NUM_THREADS=1 python3 benchmarks/unnormalized.py --markdown out.md

The experiment of Everitt, Johansen, Rowing & Evdemon-Hogan (2017, §2.6.1 and §3.3). Seed ``s``
simulates one ``size x size`` field exactly (transfer matrix): from a first-order model with
coupling 0.3 for even ``s``, from a second-order one with couplings (0.3, 0.1) for odd ``s``,
then one 4 x 4 field from the same model. Two PyMC models are fitted to each field:
``c ~ N(0, 1)`` with ``pmb.Ising("y", c, neighbourhood="first")`` and ``(c1, c2) ~ N(0, I)``
with ``neighbourhood="second"``. The log Bayes factor is first against second order.

**Truth.** ``log p(y)`` by quadrature of exact likelihoods: ``log Z`` by the row transfer
matrix (10 x 10) or by enumeration of all fields (4 x 4), the mode and Hessian of the log joint
found numerically, then a trapezoid rule on a 41-point (per axis) grid of ±8 standard
deviations along the Hessian's Cholesky axes. The same rule on every other point (21 per axis)
is reported as a check of the quadrature error. Nothing here uses the estimators' output.

**Cost unit.** One *field simulation* is one exact draw of a whole ``H x W`` field (transfer
matrix) or one Swendsen-Wang sweep of a whole field; a draw of a ``t``-row field (random-weight
SMC's partial fields) counts ``t / H``, a sweep likewise, i.e. cost is counted in sites
simulated, divided by ``H W``. It is *counted*, not computed from the settings: the benchmark
wraps ``IsingSimulator.sample`` and ``IsingSimulator.mcmc`` while each call runs and adds
``size x sites / (H W)`` per exact draw and ``fields x sweeps x sites / (H W)`` per sweep call
(inexact ``sample`` is counted through its sweeps). Exact ``log Z`` evaluations (the transfer
matrix's ``log Z(θ̂)`` that SAVIS and MAVIS are anchored at) are not simulations and are not
counted. Wall time is reported beside it, because the unit hides a large difference: an exact
10-wide draw at a new coupling costs about 5 ms (the transfer matrix is rebuilt), a
Swendsen-Wang sweep of one field about 0.15 ms.

Three parts, each through the public entry point ``pmb.sample_unnormalized_evidence`` inside
``with pm.Model()`` unless said otherwise:

1. **Defaults** (issue 18's targets, 2 cores): ``sample_unnormalized_evidence()`` with no
   settings (``method="auto"``: SAVIS with the exchange pilot, exact ``Z(θ̂)`` and the
   normaliser bounds) on both models. Reported: the error of ``lower`` on 4 x 4 (target within
   0.2 nats in <= 60 s per evidence), the error of the 10 x 10 log Bayes factor (target within
   0.5 nats in <= 300 s for both models together) and of the Bayes factor of the
   ``certified_lower`` values, wall seconds per model (model creation and compilation
   included) and field simulations.
2. **Equal simulation cost** (10 x 10 log Bayes factor): SAVIS, MAVIS, random-weight SMC, ABC
   and synthetic likelihood with their sizes set so that each model's run costs the same
   budget ``B`` of field simulations (``--budgets``). SAVIS, MAVIS, ABC and SL are charged the
   exchange pilot (defaults: 300 tuning + 1000 kept steps, one exact draw each, 1300 in all),
   and with the same ``random_seed`` per model they share it; the bounds on ``log Z(θ̂)`` are
   switched off (``bound_chains=0``) because ``lower`` uses the exact ``log Z(θ̂)``.
   Random-weight SMC has no pilot and no normaliser and gets all of ``B``. Sizes:
   SAVIS ``draws = B - 1300``; MAVIS ``draws = (B - 1300) / (1 + K)`` with ``K`` bridges of one
   sweep each; ABC and SL ``draws = (B - 1300) / n_sim``; random-weight SMC
   ``particles = B / ((n_aux + n_moves) (H + 1) / 2)`` (each row ``t`` costs ``n_aux`` ratio
   draws and ``n_moves`` exchange draws of a ``t``-row field). ABC and SL estimate
   summary-statistic numbers whose ratio is the Bayes factor here (both models' statistics
   ``(s1, s2)``, module :mod:`pymc_bdmc.unnormalized.summary`); ABC's tolerance ``ε > 0``
   biases it towards 1.
3. **Exact vs inexact simulation**: SAVIS at the default settings with exact simulation (the
   runs of part 1) against ``pmb.Ising(..., exact=False, sweeps=S)``, where every draw (pilot,
   importance stage, bounds) is ``S`` Swendsen-Wang sweeps from a uniform random field, for
   the ``S`` of ``--sweeps``; the flags ``exact`` and ``estimate_kind`` of the results are
   shown. A second inexact row keeps the exact pilot of part 1 and uses the ``S``-sweep
   simulator in SAVIS's auxiliary draws only; the entry point cannot mix simulators, so this
   row calls :func:`pymc_bdmc.unnormalized.savis` directly (with the pilot's ``θ̂``, a Gaussian
   proposal from its draws scaled by 1.5 as the entry point does, and the exact ``log Z(θ̂)``).
   It separates the bias that inexact draws bring into the importance weights from the bias
   they bring into the pilot, whose ``θ̂`` (largest absolute coupling) is reported.

Settings are fixed for all seeds (not tuned per seed). Every table reports all seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import time
from functools import partial

import numpy as np
import pymc as pm
from scipy import optimize, stats
from scipy.special import logsumexp

import pymc_bdmc as pmb
from pymc_bdmc.unnormalized import ExchangeChain, IsingSimulator, savis
from pymc_bdmc.unnormalized.ising import (
    MAX_EXACT_WIDTH,
    enumerated_log_partition,
    ising_enumerate,
    ising_natural,
    ising_statistics,
)

ORDERS = ("first", "second")
DATA_ETA = {"first": (0.3, 0.0), "second": (0.3, 0.1)}
SMALL = 4  # the 4 x 4 target's grid
#: (nats, seconds): 4 x 4 evidence per model; 10 x 10 log Bayes factor, both models together.
TARGET_SMALL = (0.2, 60.0)
TARGET_LARGE = (0.5, 300.0)
#: The entry point's default pilot: pilot_tune + pilot_draws exchange steps, one exact draw each.
PILOT_COST = 300 + 1000
MAVIS_BRIDGES = 4
RWSMC_AUX, RWSMC_MOVES = 4, 2
SUMMARY_SIMS = 10
ABC_EPSILON = 4.0


# -- counting field simulations -----------------------------------------------------------------
@contextlib.contextmanager
def counting(sites: int):
    """Count field simulations (module docstring) while the block runs; yields a one-item list."""
    total = [0.0]
    sample, mcmc = IsingSimulator.sample, IsingSimulator.mcmc

    def counted_sample(self, eta, size, rng):
        if self.exact:  # inexact draws are sweeps, counted by mcmc
            total[0] += int(size) * self.shape[0] * self.shape[1] / sites
        return sample(self, eta, size, rng)

    def counted_mcmc(self, y, eta, rng, sweeps=1):
        total[0] += len(y) * int(sweeps) * self.shape[0] * self.shape[1] / sites
        return mcmc(self, y, eta, rng, sweeps)

    IsingSimulator.sample, IsingSimulator.mcmc = counted_sample, counted_mcmc
    try:
        yield total
    finally:
        IsingSimulator.sample, IsingSimulator.mcmc = sample, mcmc


# -- exact evidence -----------------------------------------------------------------------------
def _log_joint(theta, order, s_y, log_partition):
    """``log p(θ) + log f(y | θ)`` for rows of ``theta`` (n, d), exactly."""
    eta = ising_natural(theta, order)
    return stats.norm.logpdf(theta).sum(-1) + eta @ s_y - log_partition(eta)


def exact_log_evidence(y, order, log_partition, points=41, width=8.0):
    """Return ``(log p(y), the same rule on every other grid point)`` by quadrature."""
    d = 1 if order == "first" else 2
    s_y = ising_statistics(y)

    def f(t):
        return float(_log_joint(np.atleast_2d(t), order, s_y, log_partition)[0])

    mode = optimize.minimize(lambda t: -f(t), np.zeros(d), method="Nelder-Mead",
                             options=dict(xatol=1e-7, fatol=1e-10, maxiter=2000)).x
    h = 1e-3  # central second differences of the log joint
    hess = np.empty((d, d))
    for i in range(d):
        for j in range(d):
            ei, ej = np.eye(d)[i] * h, np.eye(d)[j] * h
            hess[i, j] = (f(mode + ei + ej) - f(mode + ei - ej) - f(mode - ei + ej)
                          + f(mode - ei - ej)) / (4 * h * h)
    chol = np.linalg.cholesky(np.linalg.inv(-hess))
    z = np.linspace(-width, width, points)
    out = []
    for axis in (z, z[::2]):
        mesh = np.stack(np.meshgrid(*[axis] * d, indexing="ij"), -1).reshape(-1, d)
        log_joint = _log_joint(mode + mesh @ chol.T, order, s_y, log_partition)
        out.append(float(logsumexp(log_joint) + d * np.log(axis[1] - axis[0])
                         + np.log(np.linalg.det(chol))))
    return tuple(out)


# -- runs ---------------------------------------------------------------------------------------
def run(y, order, seed, ising=None, **kwargs):
    """One ``sample_unnormalized_evidence`` call inside ``with pm.Model()``; a dict of numbers."""
    start = time.perf_counter()
    with counting(y.size) as units, pm.Model():
        c = pm.Normal("c", 0.0, 1.0, shape=() if order == "first" else (2,))
        pmb.Ising("y", c, observed=y, neighbourhood=order, **(ising or {}))
        result = pmb.sample_unnormalized_evidence(random_seed=[seed, ORDERS.index(order)],
                                                  progressbar=False, **kwargs)
    ev = result["evidence"]
    certified = ev["certified_lower"] if "certified_lower" in ev else np.nan
    aux = result["auxiliary"]
    theta_hat = aux["theta_hat"].values if "theta_hat" in aux else np.full(1, np.nan)
    return dict(log_p=float(ev["lower"]), certified=float(certified), units=units[0],
                theta_hat=theta_hat,
                seconds=time.perf_counter() - start, exact=int(ev.attrs["exact"]),
                kind=ev.attrs["estimate_kind"], result=result)


def savis_inexact_importance(y, order, pilot, sweeps, seed):
    """SAVIS with the exact pilot of ``pilot`` (an entry-point result) and inexact aux draws.

    The entry point runs every stage with one simulator, so this calls
    :func:`~pymc_bdmc.unnormalized.savis` directly, as the entry point does at its defaults
    (1000 draws, a Gaussian proposal from the pilot's draws with its sd times 1.5, the exact
    ``log Z(θ̂)``). Its field simulations include the pilot's 1300 exact draws; its seconds
    are the importance stage's only.
    """
    draws = np.asarray(pilot["posterior"]["c"]).reshape(-1, 1 if order == "first" else 2)
    chain = ExchangeChain(draws, float("nan"), True)  # N(0, 1) priors: unconstrained = c
    q = chain.proposal(scale=1.5)
    rng = np.random.default_rng([seed, ORDERS.index(order), sweeps])
    start = time.perf_counter()
    theta = np.asarray(q.rvs(size=1000, random_state=rng)).reshape(1000, -1)
    eta = ising_natural(theta, order)
    eta_hat = ising_natural(chain.pilot(), order)
    exact = IsingSimulator(y.shape, order)
    inexact = IsingSimulator(y.shape, order, exact=False, sweeps=sweeps)
    with counting(y.size) as units:
        result = savis(inexact, ising_statistics(y), eta, stats.norm.logpdf(theta).sum(-1),
                       q.logpdf(theta).reshape(-1), eta_hat, float(exact.log_partition(eta_hat)),
                       rng=rng)
    # the pilot's simulations are charged too (the entry point's defaults: 1300 exact draws)
    return dict(log_p=result.log_evidence, units=units[0] + PILOT_COST, theta_hat=chain.pilot(),
                seconds=time.perf_counter() - start, exact=int(result.exact),
                kind="unbiased" if result.exact else "biased")


def equal_cost_settings(budget: int, height: int) -> dict[str, dict]:
    """Entry-point settings that spend ``budget`` field simulations per model (docstring)."""
    spend = budget - PILOT_COST
    if spend < SUMMARY_SIMS * (MAVIS_BRIDGES + 1):
        raise SystemExit(f"--budgets must exceed the pilot's {PILOT_COST} simulations by more.")
    per_particle = (RWSMC_AUX + RWSMC_MOVES) * (height + 1) / 2
    return {
        "SAVIS": dict(method="savis", draws=spend, bound_chains=0),
        f"MAVIS, K={MAVIS_BRIDGES}": dict(method="mavis", draws=spend // (MAVIS_BRIDGES + 1),
                                          n_bridges=MAVIS_BRIDGES, bound_chains=0),
        "random-weight SMC": dict(method="rwsmc", draws=int(budget // per_particle),
                                  n_aux=RWSMC_AUX, n_moves=RWSMC_MOVES),
        f"ABC, ε={ABC_EPSILON:g}": dict(method="abc", draws=spend // SUMMARY_SIMS,
                                        n_sim=SUMMARY_SIMS, epsilon=ABC_EPSILON),
        "synthetic likelihood": dict(method="sl", draws=spend // SUMMARY_SIMS,
                                     n_sim=SUMMARY_SIMS),
    }


def describe(kwargs: dict) -> str:
    keys = ("draws", "n_bridges", "n_aux", "n_moves", "n_sim")
    return ", ".join(f"{'particles' if k == 'draws' and kwargs['method'] == 'rwsmc' else k}"
                     f"={kwargs[k]}" for k in keys if k in kwargs)


# -- tables -------------------------------------------------------------------------------------
def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def stats_of(errors):
    """``mean ± sd`` and RMSE and max |e| of errors over seeds (NaN-aware)."""
    e = np.asarray(errors, dtype=float)
    ok = e[np.isfinite(e)]
    if not len(ok):
        return "n/a", "n/a", "n/a"
    sd = f" ± {ok.std(ddof=1):.2f}" if len(ok) > 1 else ""
    failed = f" ({len(e) - len(ok)} failed)" if len(ok) < len(e) else ""
    return (f"{ok.mean():+.2f}{sd}{failed}", f"{np.sqrt(np.mean(ok**2)):.2f}",
            f"{np.abs(ok).max():.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4, help="data sets (default 4)")
    parser.add_argument("--size", type=int, default=10, help="side of the large field")
    parser.add_argument("--budgets", type=int, nargs="+", default=[2600, 6500],
                        help="field simulations per model for the equal-cost part")
    parser.add_argument("--sweeps", type=int, nargs="+", default=[3, 30],
                        help="Swendsen-Wang sweeps per draw for the inexact part")
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, budget 2600, 3 sweeps, overriding those options (2-3 min)")
    parser.add_argument("--markdown", help="also write the tables to this markdown file")
    args = parser.parse_args()
    if not 2 <= args.size <= MAX_EXACT_WIDTH:  # exact data, truth and simulation counts
        parser.error(f"--size must be between 2 and {MAX_EXACT_WIDTH} (the transfer matrix).")
    if args.quick:
        args.seeds, args.budgets, args.sweeps = 1, [2600], [3]
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    logging.getLogger("pymc").setLevel(logging.ERROR)
    size, clock = args.size, time.perf_counter()
    enumerated = ising_enumerate((SMALL, SMALL))
    small_log_z = partial(enumerated_log_partition, *enumerated)
    large_log_z = IsingSimulator((size, size), "second").log_partition
    settings = {b: equal_cost_settings(b, size) for b in args.budgets}

    small, large, quad_check = [], [], {"large": [], "small": []}
    cost = {(b, m): [] for b in args.budgets for m in settings[b]}
    inexact = {(s, how): [] for s in args.sweeps for how in ("all", "importance")}
    for seed in range(args.seeds):
        rng = np.random.default_rng(seed)
        data_order = ORDERS[seed % 2]
        y = IsingSimulator((size, size), data_order).sample(DATA_ETA[data_order], 1, rng)[0]
        y4 = IsingSimulator((SMALL, SMALL), data_order).sample(DATA_ETA[data_order], 1, rng)[0]
        truth, truth4 = {}, {}
        for order in ORDERS:
            truth[order], coarse = exact_log_evidence(y, order, large_log_z)
            truth4[order], coarse4 = exact_log_evidence(y4, order, small_log_z)
            quad_check["large"].append(abs(truth[order] - coarse))
            quad_check["small"].append(abs(truth4[order] - coarse4))
        bf = truth["first"] - truth["second"]
        print(f"seed {seed}: data {data_order} order, log p(y) {truth['first']:.3f} / "
              f"{truth['second']:.3f}, log BF {bf:+.3f}", flush=True)

        # 1. defaults
        for order in ORDERS:
            r = run(y4, order, seed)
            small.append((seed, order, truth4[order], r))
        d = {order: run(y, order, seed) for order in ORDERS}
        large.append((seed, data_order, truth, d))
        print(f"  defaults: log BF error {d['first']['log_p'] - d['second']['log_p'] - bf:+.3f}"
              f" ({d['first']['seconds'] + d['second']['seconds']:.0f} s)", flush=True)

        # 2. equal simulation cost
        for budget in args.budgets:
            for method, kwargs in settings[budget].items():
                r = {order: run(y, order, seed, **kwargs) for order in ORDERS}
                err = r["first"]["log_p"] - r["second"]["log_p"] - bf
                cost[budget, method].append(
                    (err, [r[o]["log_p"] - truth[o] for o in ORDERS],
                     [r[o]["units"] for o in ORDERS], sum(r[o]["seconds"] for o in ORDERS)))
                print(f"  B={budget} {method}: log BF error {err:+.3f}", flush=True)

        # 3. exact vs inexact simulation
        for sweeps in args.sweeps:
            r = {order: run(y, order, seed, ising=dict(exact=False, sweeps=sweeps),
                            method="savis") for order in ORDERS}
            q = {order: savis_inexact_importance(y, order, d[order]["result"], sweeps, seed)
                 for order in ORDERS}
            for how, res in (("all", r), ("importance", q)):
                inexact[sweeps, how].append(res)
            print(f"  SW {sweeps} sweeps: log BF error "
                  f"{r['first']['log_p'] - r['second']['log_p'] - bf:+.3f} (everywhere), "
                  f"{q['first']['log_p'] - q['second']['log_p'] - bf:+.3f} (importance only)",
                  flush=True)

    lines = report(args, small, large, cost, settings, inexact, quad_check)
    minutes = (time.perf_counter() - clock) / 60
    lines += ["", f"Total wall time {minutes:.1f} min on {datetime.date.today().isoformat()}."]
    text = "\n".join(lines)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")


def report(args, small, large, cost, settings, inexact, quad_check):
    """Markdown tables of the three parts."""
    tol4, sec4 = TARGET_SMALL
    tol, sec = TARGET_LARGE
    n = len(large)
    lines = [f"Command: `OPENBLAS_NUM_THREADS=1 python3 benchmarks/unnormalized.py --seeds "
             f"{args.seeds} --size {args.size} --budgets {' '.join(map(str, args.budgets))} "
             f"--sweeps {' '.join(map(str, args.sweeps))}`"
             f"{' (--quick)' if args.quick else ''}. Quadrature check: the largest change "
             f"of the exact log p(y) from halving the grid was {max(quad_check['large']):.0e} "
             f"nats ({args.size} x {args.size}) and {max(quad_check['small']):.0e} nats "
             f"({SMALL} x {SMALL}).", ""]

    lines += [f"**Defaults, {SMALL} x {SMALL}** (target: |error| <= {tol4} nats in <= "
              f"{sec4:.0f} s per evidence)", ""]
    rows, passed = [], 0
    for seed, order, truth, r in small:
        ok = abs(r["log_p"] - truth) <= tol4 and r["seconds"] <= sec4
        passed += ok
        rows.append((seed, order, f"{truth:.3f}", f"{r['log_p'] - truth:+.3f}",
                     f"{r['certified'] - truth:+.3f}", f"{r['units']:.0f}",
                     f"{r['seconds']:.1f}", "pass" if ok else "**FAIL**"))
    lines += table(("seed", "model", "log p(y)", "error", "certified error",
                    "field simulations", "seconds", "target"), rows)
    lines += ["", f"{passed} of {len(small)} pass.", ""]

    lines += [f"**Defaults, {args.size} x {args.size} log Bayes factor** (first against second "
              f"order; target: |error| <= {tol} nats in <= {sec:.0f} s for both models)", ""]
    rows, passed = [], 0
    for seed, data_order, truth, d in large:
        bf = truth["first"] - truth["second"]
        est = d["first"]["log_p"] - d["second"]["log_p"]
        cert = d["first"]["certified"] - d["second"]["certified"]
        seconds = d["first"]["seconds"] + d["second"]["seconds"]
        ok = abs(est - bf) <= tol and seconds <= sec
        passed += ok
        rows.append((seed, data_order, f"{bf:+.3f}", f"{est - bf:+.3f}", f"{cert - bf:+.3f}",
                     f"{d['first']['units']:.0f} / {d['second']['units']:.0f}",
                     f"{d['first']['seconds']:.1f} / {d['second']['seconds']:.1f}",
                     "pass" if ok else "**FAIL**"))
    lines += table(("seed", "data", "log BF", "error", "certified error",
                    "field simulations (first / second)", "seconds (first / second)", "target"),
                   rows)
    suffix = "" if args.size == 10 else f" (the target is stated for 10 x 10, not {args.size})"
    lines += ["", f"{passed} of {n} pass{suffix}.", ""]

    lines += [f"**Equal simulation cost, {args.size} x {args.size}**, over {n} seeds: errors in "
              "nats (mean ± sd, RMSE, max |error|); field simulations per model (pilot "
              "included where used); seconds for both models", ""]
    rows = []
    for (budget, method), runs in cost.items():
        errors = [e for e, _, _, _ in runs]
        per_model = np.array([m for _, m, _, _ in runs])
        mean, rmse, worst = stats_of(errors)
        summary = method.startswith(("ABC", "synthetic"))
        model_rmse = "n/a (not p(y))" if summary else " / ".join(
            f"{np.sqrt(np.mean(per_model[:, i] ** 2)):.2f}" for i in range(2))
        units = np.array([u for _, _, u, _ in runs])
        rows.append((budget, method, describe(settings[budget][method]), mean, rmse, worst,
                     model_rmse, f"{units.min():.0f}-{units.max():.0f}",
                     f"{np.mean([s for *_, s in runs]):.0f}"))
    lines += table(("budget", "method", "settings per model", "log BF error", "RMSE",
                    "max", "log p RMSE (first / second)", "simulations counted",
                    "seconds"), rows)
    lines += [""]

    lines += [f"**Exact vs Swendsen-Wang simulation, SAVIS, {args.size} x {args.size}**, over "
              f"{n} seeds: mean error of log p(y) per model and of the log BF (± sd over seeds); "
              "the largest absolute coupling in the pilot's θ̂ over seeds and models; "
              "simulations per model; seconds for both models (SW in SAVIS only: without the "
              "pilot, which it reuses)", ""]
    rows = []
    groups = [("exact (part 1)", "-", [d for *_, d in large])]
    for (sweeps, how), runs in inexact.items():
        label = "SW everywhere (entry point)" if how == "all" else "SW in SAVIS only, exact pilot"
        groups.append((label, sweeps, runs))
    for label, sweeps, runs in groups:
        per_model = {o: [] for o in ORDERS}
        bf_err = []
        for (_, _, truth, _), r in zip(large, runs, strict=True):
            bf_err.append(r["first"]["log_p"] - r["second"]["log_p"]
                          - truth["first"] + truth["second"])
            for o in ORDERS:
                per_model[o].append(r[o]["log_p"] - truth[o])
        mean, rmse, worst = stats_of(bf_err)
        flags = sorted({f"{r[o]['exact']} / {r[o]['kind']}" for r in runs for o in ORDERS})
        units = np.mean([r[o]["units"] for r in runs for o in ORDERS])
        seconds = np.mean([r["first"]["seconds"] + r["second"]["seconds"] for r in runs])
        theta_hat = max(np.abs(r[o]["theta_hat"]).max() for r in runs for o in ORDERS)
        rows.append((label, sweeps, ", ".join(flags), stats_of(per_model["first"])[0],
                     stats_of(per_model["second"])[0], mean,
                     ", ".join(f"{e:+.2f}" for e in bf_err), f"{theta_hat:.2f}",
                     f"{units:.0f}", f"{seconds:.1f}"))
    lines += table(("simulation", "sweeps per draw", "exact / estimate_kind",
                    "log p error, first", "log p error, second", "log BF error",
                    "log BF error per seed", "largest abs θ̂", "simulations per model",
                    "seconds"), rows)
    return lines


if __name__ == "__main__":
    main()
