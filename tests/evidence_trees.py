"""Hand-built results for the compare and plot tests: exact numbers, no sampling.

They have the layout every pymc_bdmc result shares (an ``evidence`` group with ``lower``,
``upper``, ``gap``, ``lower_se``, ``upper_se``, and an ``observed_data`` group), and a
``calibration`` group like :func:`pymc_bdmc.calibrate`'s where asked.
"""

import numpy as np
import xarray as xr

#: The observed data of every hand-built result unless told otherwise.
DATA = np.array([0.5, -1.0, 2.0])


def evidence_tree(lower, upper=np.nan, se=0.1, data=DATA, attrs=None, **groups):
    """A result with these bounds; ``data=None`` leaves out ``observed_data``."""
    ev = xr.Dataset({"lower": lower, "upper": upper, "gap": upper - lower, "lower_se": se,
                     "upper_se": se}, attrs=attrs or {})
    tree = {"evidence": ev, **groups}
    if data is not None and "observed_data" not in tree:
        tree["observed_data"] = xr.Dataset({"y": ("y_dim_0", np.asarray(data))})
    return xr.DataTree.from_dict(tree)


def calibrated_tree(lower, gap=0.03, gap_se=0.02, certified=1, harder=0, tolerance=0.2):
    """A calibrate result: a lower bound, and two attempts of which the last is ``gap``."""
    calibration = xr.Dataset(
        {"n_steps": ("attempt", [100, 400]), "gap": ("attempt", [0.9, gap]),
         "gap_se": ("attempt", [0.5, gap_se])},
        attrs={"tolerance": tolerance, "certified": certified, "certified_n_steps": 400,
               "certified_gap": gap, "real_data_harder": harder})
    return evidence_tree(lower, calibration=calibration)
