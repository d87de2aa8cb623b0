"""Transition kernels and their pilot tuning.

Importing the package registers the compiled kernels with the model layer
(:func:`pymc_bdmc.model.batching.register_fused_kernel`), which builds them on its graphs
without importing this package.
"""

from pymc_bdmc.kernels import fused_gibbs, fused_hmc  # noqa: F401  (registers the builders)
