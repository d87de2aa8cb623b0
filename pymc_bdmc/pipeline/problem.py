"""The problem most methods run on: the model's compiled densities, and the data they fit."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pymc_bdmc.methods.protocol import Job, Problem
from pymc_bdmc.model.cache import written_simulator
from pymc_bdmc.model.checks import check_finite_start
from pymc_bdmc.model.density import ModelDensity
from pymc_bdmc.model.reparameterize import draw_in_other_form
from pymc_bdmc.pipeline.compile import compile_model, helpers_allowed, timed_build
from pymc_bdmc.pipeline.draws import simulate_truth
from pymc_bdmc.pipeline.timing import timed

__all__ = ["SIMULATED_START_HINT", "model_problem"]

#: Advice when the model's own simulated (theta*, y*) has a non-finite density.
SIMULATED_START_HINT = (
    "The data were simulated from the model itself, so its random generator produced values "
    "its own log-density rejects: typically draws that round to the edge of the support (e.g. "
    "Beta or Dirichlet draws equal to 0 or 1, Gamma draws equal to 0, under extreme "
    "parameters). Choose priors that keep the parameters away from such regions, or try "
    "another `random_seed` if this is rare."
)


def model_problem(job: Job, *, other: bool = False, gradients: bool = True,
                  check: Callable[[ModelDensity], None] | None = None,
                  check_start: bool = True) -> Problem:
    """Compile ``job.model`` (once per structure) and, for BDMC, simulate ``(theta*, y*)``.

    Parameters
    ----------
    job : Job
    other : bool, default False
        Compile the model's other parameterisation.
    gradients : bool, default True
        Compile the gradients too.
    check : callable, optional
        Called with the compiled density before anything is simulated (refusals that need it).
    check_start : bool, default True
        Refuse a simulated ``theta*`` whose density is not finite (a method that evaluates its
        own densities checks there instead).

    Returns
    -------
    Problem
        The density conditioned on the data (``y*`` for BDMC), the simulator, ``truth`` and the
        attributes saying how the simulated data were chosen.
    """
    density, simulator, compile_time = compile_model(
        job.model, job.potentials_in_likelihood, job.compile_kwargs, other=other,
        gradients=gradients, compile_ahead=helpers_allowed(job.parallel))
    if check is not None:
        check(density)
    if not job.simulate:
        return Problem(density, simulator, None, compile_time)
    source = simulator
    if other:
        # The model as written simulates (theta*, y*), as when a search switches forms: a seed
        # gives the same data in either form, and such a search's attempt is replayed.
        source, seconds = timed_build(lambda: written_simulator(job.model, job.compile_kwargs))
        compile_time += seconds
    with timed("simulate"):
        truth, attrs = simulate_truth(source, job.model, job.streams, job.match_data)
    density.set_observed(truth.observed)
    if other:
        truth = draw_in_other_form(truth, source.layout, density)
    if check_start:
        # Two rows, as the runs' batches: one row takes other BLAS routines, and each routine
        # costs Numba a compilation at its first call in a process (compile_costs.py).
        parts = density.parts(np.repeat(truth.x[None, :], 2, axis=0)).select(np.arange(1))
        check_finite_start(parts, "simulated parameters", density.layout, truth.x[None, :],
                           hint=SIMULATED_START_HINT)
    return Problem(density, simulator, truth, compile_time, attrs)
