"""Running chains in batches and in parallel: random streams per block of chains, executors.

:mod:`~pymc_bdmc.parallel.streams` attaches random streams to blocks of chains so a seed gives
the same chains however they are split; :mod:`~pymc_bdmc.parallel.executors` resolves ``cores``
and user executors (``concurrent.futures`` or Dask); :mod:`~pymc_bdmc.parallel.annealing` runs
AIS groups here or on workers, each worker compiling a model once.
"""
