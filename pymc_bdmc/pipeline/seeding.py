"""Random streams of a run: one independent child stream per stage, spawned from the seed."""

from __future__ import annotations

import numpy as np

__all__ = ["STREAMS", "streams"]

#: The stages that draw random numbers, in the order their streams are spawned (the order is
#: part of the seed's meaning: changing it changes every result; a new stage goes last, which
#: leaves the earlier ones as they were).
STREAMS = ("simulate", "pilot_init", "pilot", "forward_init", "forward", "reverse", "summary",
           "candidates")


def streams(random_seed) -> dict[str, np.random.Generator]:
    """One independent generator per stage of :data:`STREAMS`, spawned from ``random_seed``.

    Parameters
    ----------
    random_seed : int, sequence, SeedSequence, Generator or None
        Anything :func:`numpy.random.default_rng` accepts.

    Returns
    -------
    dict
        Generator by stage name. The pilot never shares randomness with the measured runs.
    """
    root = np.random.default_rng(random_seed)
    return dict(zip(STREAMS, root.spawn(len(STREAMS)), strict=True))
