"""pymc_bdmc against pm.sample_smc, side by side: closed-form cases, the BDMC paper's models, yours.

Run from the repository root::

    python3 benchmarks/peers.py                                  # everything, ~15-25 minutes
    python3 benchmarks/peers.py --suite closed-form --seeds 3
    python3 benchmarks/peers.py --suite paper --n-steps 1000 4000 --only "low rank"
    python3 benchmarks/peers.py --model my_models.py:build       # your own model(s)

Three suites, every run timed with its compilation (both tools) and, for pymc_bdmc, its pilot:

* ``closed-form``: models with exact ``log p(y)`` (:mod:`pymc_bdmc.known_evidence`). Both tools
  run at increasing budgets over ``--seeds`` seeds; printed: RMSE against the truth and seconds per run,
  the cheapest budget reaching ``--target`` nats, and the ratio of the two tools' times there.
* ``paper``: the low-rank, clustering and binary-attributes models of Grosse et al. (2015).
  ``pmb.sample_bdmc`` simulates ``(theta*, y*)`` and sandwiches ``log p(y*)``; ``pm.sample_smc``
  runs on the same ``y*``. Printed: bounds, gap (the accuracy certificate), the SMC chains'
  estimates and spread, times and their ratio.
* ``--model FILE.py:FUNCTION``: as ``paper`` for the models ``FUNCTION()`` returns: a
  ``pm.Model``, a :class:`pymc_bdmc.known_evidence.AnalyticModel` (the truth is then printed
  too), or a dict of them by name.

For every pymc_bdmc run the overhead ratio is printed: sampling seconds (all processes) divided
by (batched model calls x seconds of one batched call on the same number of chains, timed alone).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import time
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
from _common import run_pymc_smc, smc_log_ml

import pymc_bdmc as pmb
from pymc_bdmc import known_evidence
from pymc_bdmc.model.cache import clear_cache, compiled_model
from pymc_bdmc.testbed import binary_attributes, clustering, low_rank
from pymc_bdmc.testbed.models import with_observed

CLOSED_FORM = {
    "regression, 5 coefficients, N=50": lambda: known_evidence.linear_regression(50, 5, seed=1),
    "Normal-InvGamma, 3 coefficients, N=30":
        lambda: known_evidence.normal_inverse_gamma_regression(30, 3, seed=1),
    "Gamma-Poisson": lambda: known_evidence.gamma_poisson(seed=4),
    "regression, 20 coefficients, N=500": lambda: known_evidence.linear_regression(500, 20, seed=2),
}
AIS_STEPS = (100, 200, 400, 800, 1600, 3200)
SMC_DRAWS = (250, 500, 1000, 2000, 4000)


def paper_models(n_attributes: int, discrete_attributes: int) -> dict:
    return {
        "low rank (50 x 25, rank 5)": lambda: low_rank(50, 25, rank=5).model,
        "clustering (50 x 25, 10 clusters)": lambda: clustering(50, 25, n_clusters=10).model,
        f"binary attributes (50 x 25, {n_attributes} attributes summed out)":
            lambda: binary_attributes(50, 25, n_attributes=n_attributes).model,
        f"binary attributes (50 x 25, {discrete_attributes} attributes, discrete Z: Gibbs)":
            lambda: binary_attributes(50, 25, n_attributes=discrete_attributes,
                                      discrete=True).model,
    }


# -- measurements -----------------------------------------------------------------------------

def _seconds_per_call(fn, x) -> float:
    best = np.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(50):
            fn(x)
        best = min(best, (time.perf_counter() - start) / 50)
    return best


def overhead_ratio(model: pm.Model, result) -> float:
    """Sampling seconds / model-evaluation seconds (calls x one batched call), all processes.

    Model evaluations are the batched density-and-gradient calls and, on the discrete path,
    the batched elementwise-term calls of the Gibbs sweeps (each on its own batch size).
    """
    attrs = result["evidence"].attrs
    processes = 1 if attrs["workers"] == "this process" else attrs["chain_groups"]
    density = compiled_model(model).density  # the run's compiled densities (cached)
    rows = max(1, attrs["chains"] // attrs["chain_groups"])
    x = 0.1 * np.random.default_rng(0).normal(size=(rows, density.n_dim))
    model_seconds = attrs["model_evaluations"] * _seconds_per_call(density._parts_fn, x)
    if attrs.get("term_evaluations"):
        # A Gibbs sweep evaluates every value of a color at once: 2 rows per chain for binary
        # variables (the widest support sets the batch).
        rows_gibbs = np.repeat(x, 2, axis=0)
        discrete = np.setdiff1d(np.arange(density.n_dim), density.continuous)
        rows_gibbs[:, discrete] = density.layout.ravel(model.initial_point())[discrete]
        model_seconds += attrs["term_evaluations"] * _seconds_per_call(density.terms,
                                                                        rows_gibbs)
    return attrs["sampling_time"] * processes / model_seconds


def run_ais(analytic, n_steps: int, seed: int, chains: int):
    clear_cache()  # compilation included in every run, as for pm.sample_smc
    start = time.perf_counter()
    with analytic.model:
        result = pmb.sample_ais(n_steps=n_steps, chains=chains, random_seed=seed,
                                progressbar=False)
    return float(result["evidence"]["lower"]), time.perf_counter() - start, result


def run_bdmc(model: pm.Model, n_steps: int, chains: int, seed: int, cores):
    clear_cache()
    start = time.perf_counter()
    result = pmb.sample_bdmc(n_steps=n_steps, chains=chains, random_seed=seed, model=model,
                             progressbar=False, cores=cores)
    return result, time.perf_counter() - start


def run_smc_on(model: pm.Model, y_star: dict, seed: int, draws: int):
    conditioned = with_observed(model, y_star)
    start = time.perf_counter()
    with conditioned, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample_smc(draws=draws, chains=2, cores=2, random_seed=seed,
                              progressbar=False, compute_convergence_checks=False)
    return smc_log_ml(idata), time.perf_counter() - start


# -- suites -----------------------------------------------------------------------------------

def warm_up_both_tools() -> None:
    """One untimed run of each tool on a small model before anything is timed.

    The first compiled run in a process pays about a second of one-off set-up (PyTensor's and
    Numba's caches, imports) that later runs of *either* tool do not; without this the tool that
    happens to run first is charged for it.
    """
    analytic = known_evidence.linear_regression(20, 2, seed=0)
    run_ais(analytic, 10, 0, 16)
    run_pymc_smc(analytic, 100, 0)


def closed_form_suite(args) -> None:
    print("# Closed-form models: time to an RMSE of at most "
          f"{args.target} nats over {args.seeds} seeds (compilation included); pymc_bdmc AIS "
          f"with {args.ais_chains} chains, pm.sample_smc with 1 chain on 1 core", flush=True)
    warm_up_both_tools()
    for label, factory in _selected(CLOSED_FORM, args).items():
        analytic = factory()
        truth = analytic.log_evidence()
        print(f"\n## {label}: exact log p(y) = {truth:.3f}", flush=True)
        cheapest = {}
        def ais(analytic, n_steps, seed):
            return run_ais(analytic, n_steps, seed, args.ais_chains)

        for tool, budgets, runner in (("pymc_bdmc AIS", AIS_STEPS, ais),
                                      ("pm.sample_smc", SMC_DRAWS, run_pymc_smc)):
            for budget in budgets:
                out = [runner(analytic, budget, seed) for seed in range(args.seeds)]
                err = np.array([o[0] for o in out]) - truth
                rmse = float(np.sqrt(np.mean(err**2)))
                seconds = float(np.mean([o[1] for o in out]))
                extra = ""
                if tool == "pymc_bdmc AIS":
                    attrs = out[-1][2]["evidence"].attrs
                    extra = (f"  overhead {overhead_ratio(analytic.model, out[-1][2]):.2f}"
                             f"  fused {attrs['fused_kernel']}"
                             f"  compile {attrs['compile_time']:.2f} s")
                print(f"  {tool:14s} budget {budget:5d}: RMSE {rmse:.3f}  bias {err.mean():+.3f}"
                      f"  {seconds:.2f} s/run{extra}", flush=True)
                if rmse <= args.target:
                    cheapest[tool] = (budget, seconds)
                    break
        (b1, t1), (b2, t2) = (cheapest.get(t, (None, np.nan))
                              for t in ("pymc_bdmc AIS", "pm.sample_smc"))
        print(f"  RMSE <= {args.target}: pymc_bdmc n_steps={b1} in {t1:.2f} s; "
              f"pm.sample_smc draws={b2} in {t2:.2f} s; time ratio {t1 / t2:.2f}", flush=True)


def simulated_data_suite(title: str, factories: dict, args) -> None:
    print(f"# {title}: BDMC on simulated data, pm.sample_smc (2 chains, {args.smc_draws} draws) "
          "on the same data", flush=True)
    for name, factory in _selected(factories, args).items():
        built = factory()
        analytic = built if isinstance(built, known_evidence.AnalyticModel) else None
        model = built.model if analytic is not None else built
        n_free = sum(int(np.prod(v.shape.eval())) for v in model.free_RVs)
        print(f"\n## {name}: {n_free} parameters", flush=True)
        last = None
        for n_steps in args.n_steps:
            result, seconds = run_bdmc(model, n_steps, args.chains, args.seed, args.cores)
            ev = result["evidence"]
            truth = ("" if analytic is None else
                     f"  truth {analytic.log_evidence_of(result):.2f}")
            print(f"pymc_bdmc  n_steps={n_steps:5d}  lower {float(ev.lower):10.2f}  "
                  f"upper {float(ev.upper):10.2f}  gap {float(ev.gap):6.2f} nats{truth}  "
                  f"{seconds:6.1f} s (compile {ev.attrs['compile_time']:.1f} s; "
                  f"{ev.attrs['workers']}; fused {ev.attrs['fused_kernel']}; "
                  f"overhead {overhead_ratio(model, result):.2f})", flush=True)
            last = (result, seconds)
        if args.no_smc:
            continue
        result, seconds = last
        y_star = {k: result["observed_data"][k].values for k in result["observed_data"]}
        estimates, smc_seconds = run_smc_on(model, y_star, args.seed, args.smc_draws)
        ev = result["evidence"]
        inside = [bool(float(ev.lower) - 1 <= e <= float(ev.upper) + 1) for e in estimates]
        print(f"pm.sample_smc  chains {np.round(estimates, 2)}  spread {np.ptp(estimates):.2f} "
              f"nats  {smc_seconds:6.1f} s; within 1 nat of the sandwich: {inside}", flush=True)
        print(f"time ratio pymc_bdmc (n_steps={args.n_steps[-1]}) / pm.sample_smc: "
              f"{seconds / smc_seconds:.2f}", flush=True)


def _selected(factories: dict, args) -> dict:
    if not args.only:
        return factories
    return {name: f for name, f in factories.items()
            if any(word.lower() in name.lower() for word in args.only)}


def user_models(spec: str) -> dict:
    """``FILE.py:FUNCTION`` -> {name: factory}."""
    path, _, function = spec.rpartition(":")
    if not path or not function:
        raise SystemExit(f"--model expects FILE.py:FUNCTION, got {spec!r}")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    built = getattr(module, function)()
    if isinstance(built, dict):
        return {name: (lambda b=b: b) for name, b in built.items()}
    return {f"{Path(path).name}:{function}": lambda: built}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", nargs="+", choices=["closed-form", "paper"],
                        default=["closed-form", "paper"])
    parser.add_argument("--model", action="append", default=[],
                        help="FILE.py:FUNCTION returning a pm.Model, an AnalyticModel or a dict "
                             "of them (may be repeated; replaces the default suites)")
    parser.add_argument("--seeds", type=int, default=3, help="closed-form: seeds per budget")
    parser.add_argument("--target", type=float, default=0.05, help="closed-form: RMSE target")
    parser.add_argument("--ais-chains", type=int, default=256,
                        help="closed-form: AIS chains (on small models extra chains cost little "
                             "and cut the bias of log-mean-exp)")
    parser.add_argument("--n-steps", type=int, nargs="+", default=[1000, 4000],
                        help="paper and --model: BDMC annealing steps")
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--cores", type=int, default=None)
    parser.add_argument("--smc-draws", type=int, default=2000)
    parser.add_argument("--n-attributes", type=int, default=5,
                        help="binary attributes (the paper's 10 make each model call ~30x dearer)")
    parser.add_argument("--discrete-attributes", type=int, default=10,
                        help="binary attributes with Z a free Bernoulli matrix (the discrete "
                             "path; default the paper's 10)")
    parser.add_argument("--no-smc", action="store_true", help="paper and --model: skip SMC")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", nargs="+", default=None, metavar="WORD",
                        help="run only the models whose name contains one of these words")
    args = parser.parse_args()
    logging.getLogger("pymc_bdmc").setLevel(logging.ERROR)
    logging.getLogger("pymc").setLevel(logging.ERROR)

    if args.model:
        factories = {}
        for spec in args.model:
            factories.update(user_models(spec))
        simulated_data_suite("Your models", factories, args)
        return
    if "closed-form" in args.suite:
        closed_form_suite(args)
    if "paper" in args.suite:
        print()
        simulated_data_suite("The BDMC paper's models",
                             paper_models(args.n_attributes, args.discrete_attributes), args)


if __name__ == "__main__":
    main()
