"""Tuning settings of the automatic choices: the length search, the pilot and how runs execute.

Every entry point takes ``tuning=Tuning(...)``; the defaults are what the project measured to
work (docs/performance.md). None of these settings can make a bound invalid: they decide how
long a search runs, what the pilot tries and where chains run, never what a frozen kernel does
to a measured chain.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pymc_bdmc.errors import BDMCInputError

__all__ = ["Tuning"]


@dataclass(frozen=True)
class Tuning:
    """Settings of the length search, the pilot and the execution, with their defaults.

    The first eleven attributes steer the length search (``sample_bdmc(n_steps="auto")``,
    ``calibrate``), the next twelve the pilot and its choice of path, the last three how runs
    execute.

    Attributes
    ----------
    first_n_steps : int, default 1000
        Annealing steps of the first attempt.
    min_first_n_steps : int, default 100
        A first attempt shortened to fit ``max_time`` runs at least this many steps (and
        lengths in multiples of it).
    length_unit : int, default 50
        A length chosen from a path's thermodynamic length (``steps_per_squared_length``
        times its square) is rounded up to a multiple of this, and is at least
        ``min_first_n_steps``.
    max_n_steps : int, default 64000
        No attempt is longer.
    steps_per_squared_length : float, default 5
        A first attempt runs no more than this many steps per squared thermodynamic length of
        its path (a gap with perfect transitions is then about 0.2 nats; within 0.5 needs
        about 2 steps per squared length).
    short_path_transitions : int, default 1
        HMC transitions per temperature (where ``transitions_per_step`` is not given) on a
        path its pilot measures short enough for fewer than ``first_n_steps`` steps at
        ``steps_per_squared_length``; longer paths make 2 (measured in
        docs/explanation/automatic-choices.md).
    max_chains_factor : int, default 8
        A gap within the target but measured too noisily is measured again with at most this
        many times the chains ...
    max_chains : int, default 1024
        ... and never with more chains than this.
    noisy_gap_ess_fraction : float, default 0.25
        ... unless the log weights' effective sample size, in the direction where it is
        smaller, is below this fraction of the chains: the gap is then measured again on a path
        twice as long. For log-normal weights that fraction is ``exp(-variance)``, and doubling
        the steps (halving the variance) gains more effective samples than doubling the chains
        below 0.25; it also shrinks the gap itself.
    larger_pilot_gap : float, default 8.0
        A gap more than this many times the target (or not finite) is run again on a fresh
        pilot with ``pilot_growth`` times the particles ...
    pilot_growth : int, default 4
    max_pilot_chains : int, default 1024
        ... and never more particles than this.
    swap_gap : float, default 2.0
        A first attempt whose gap is within this many times the target is lengthened before the
        model's other parameterisation is tried.
    harder_path_ratio : float, default 2.0
        A lower bound after a certificate: where the real data's pilot path is more than this
        many times as long as the certified run's, both parameterisations are piloted and the
        better one runs (the certified length needs the ratio squared more steps there).
    curvature_min_dim : int, default 48
        From this many movable coordinates up to ``dense_max_dim``, the prior path's pilot
        first takes its correlations from the model's curvature, and keeps them where they
        differ from particle to particle by at most ``curvature_agreement`` of their size;
        elsewhere it runs again with its population's ...
    curvature_agreement : float, default 1.0
        ... (:func:`~pymc_bdmc.kernels.mass.curvature_disagreement`).
    dense_max_dim : int, default 400
        Up to this many movable coordinates, dense metrics are estimated from the pilot's
        population; above it, from the model's curvature at a few particles ...
    curvature_max_dim : int, default 1200
        ... up to this many coordinates; above it, diagonal metrics only.
    particles_per_coordinate : float, default 1.25
        A pilot that chose a dense metric with fewer particles than this per movable coordinate
        runs again with that many (unless ``pilot_chains`` is given).
    max_base_fits : int, default 8
        Most Gaussians fitted in turn to pilot populations for a path from a fitted base.
    base_refit_gain : float, default 1.0
        Another Gaussian is fitted while the last fit's pilot estimate gained more than this.
    base_refit_unsettled : float, default 8.0
        A fit whose pilot loses to the one it came from gets one more try where that one had
        gained more than this (the fits have not settled), as the first fit always does.
    base_fit_moves : int, default 60
        Transitions at ``beta = 1`` a population makes at most before a Gaussian is fitted to
        it ...
    base_fit_block : int, default 10
        ... in blocks of this many: they stop after the first two blocks over which the
        population's mean log density moved less than its standard error (0: no such stop).
        A count, never wall time, so that a pilot is the same on a fast and a slow machine.
    base_log_z_tolerance : float, default 0.5
        The fitted path is refused when its pilot's estimate is more than this many nats below
        the prior path's ...
    base_log_z_gain : float, default 0.5
        ... taken when it is more than this many above ...
    base_path_gain : float, default 0.75
        ... and otherwise taken when its thermodynamic length is at most this fraction of the
        prior path's.
    laplace_min_observations : int, default 10000
        With ``base="auto"`` or ``"fitted"``, models with at least this many observed values
        first pilot the path from the posterior's Laplace fit (where it has a mode, and the
        model neither sorts values nor mixes components of one family: either makes a copy of
        each mode per order) ...
    laplace_path_length : float, default 1.0
        ... and take it, without piloting the prior's path (which many observations make
        long) and without refits, where its thermodynamic length is at most this. On small
        models and the latent GP the Laplace path saved nothing or cost steps, and a mode's
        Gaussian covers one of several modes (a mirror-symmetric posterior: half its mass),
        hence the size threshold.
    reverse_spread : int, default 10
        Transitions at ``beta = 1`` that spread reverse chains out from the exact sample.
    auto_parallel_seconds : float, default 10.0
        With ``cores=None``, the vectorized kernels' chains go to worker processes only where
        the run is predicted to take longer than this in one process.
    step_auto_parallel_seconds : float, default 20.0
        The same for PyMC step methods, whose workers cost more to start.
    """

    first_n_steps: int = 1000
    min_first_n_steps: int = 100
    length_unit: int = 50
    max_n_steps: int = 64000
    steps_per_squared_length: float = 5
    short_path_transitions: int = 1
    max_chains_factor: int = 8
    max_chains: int = 1024
    noisy_gap_ess_fraction: float = 0.25
    larger_pilot_gap: float = 8.0
    pilot_growth: int = 4
    max_pilot_chains: int = 1024
    swap_gap: float = 2.0
    harder_path_ratio: float = 2.0
    curvature_min_dim: int = 48
    curvature_agreement: float = 1.0
    dense_max_dim: int = 400
    curvature_max_dim: int = 1200
    particles_per_coordinate: float = 1.25
    max_base_fits: int = 8
    base_refit_gain: float = 1.0
    base_refit_unsettled: float = 8.0
    base_fit_moves: int = 60
    base_fit_block: int = 10
    base_log_z_tolerance: float = 0.5
    base_log_z_gain: float = 0.5
    base_path_gain: float = 0.75
    laplace_min_observations: int = 10_000
    laplace_path_length: float = 1.0
    reverse_spread: int = 10
    auto_parallel_seconds: float = 10.0
    step_auto_parallel_seconds: float = 20.0

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise BDMCInputError(f"`Tuning.{field.name}` must be a non-negative number, "
                                     f"got {value!r}.")
        for name in ("first_n_steps", "min_first_n_steps", "length_unit", "max_n_steps",
                     "max_chains", "max_pilot_chains", "pilot_growth", "max_chains_factor",
                     "short_path_transitions"):
            if getattr(self, name) < 1:
                raise BDMCInputError(f"`Tuning.{name}` must be at least 1, got "
                                     f"{getattr(self, name)!r}.")
        if self.short_path_transitions != int(self.short_path_transitions):
            raise BDMCInputError("`Tuning.short_path_transitions` must be an integer, got "
                                 f"{self.short_path_transitions!r}.")


#: The defaults, shared by every call that does not pass ``tuning``.
DEFAULT_TUNING = Tuning()


def resolve_tuning(tuning: Tuning | None) -> Tuning:
    """Return ``tuning``, or the defaults for None; refuse anything else.

    Parameters
    ----------
    tuning : Tuning or None

    Returns
    -------
    Tuning
    """
    if tuning is None:
        return DEFAULT_TUNING
    if not isinstance(tuning, Tuning):
        raise BDMCInputError(f"`tuning` must be a pymc_bdmc.Tuning, got {type(tuning).__name__}.")
    return tuning
