"""Random streams of a run: one independent child stream per stage, spawned from the seed.

Each attempt of a search (and each pilot of a form) starts the streams it draws from afresh
(:func:`restarted`): it draws exactly what a call with its settings would, so that
``sample_bdmc(n_steps=<recorded>, chains=<recorded>, random_seed=<the same>)`` replays the
attempt a search returned, whichever attempt it was.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pymc_bdmc.errors import BDMCInputError

__all__ = ["ATTEMPT_STREAMS", "STREAMS", "restarted", "rewind", "root_generator", "streams"]

#: The stages that draw random numbers, in the order their streams are spawned (the order is
#: part of the seed's meaning: changing it changes every result; a new stage goes last, which
#: leaves the earlier ones as they were).
STREAMS = ("simulate", "pilot_init", "pilot", "forward_init", "forward", "reverse", "summary",
           "candidates", "possible")

#: The stages an attempt draws from (the simulated data are drawn once, before any attempt).
ATTEMPT_STREAMS = ("pilot_init", "pilot", "forward_init", "forward", "reverse", "summary",
                   "possible")


def streams(random_seed) -> dict[str, np.random.Generator]:
    """One independent generator per stage of :data:`STREAMS`, spawned from ``random_seed``.

    Parameters
    ----------
    random_seed : int, sequence, SeedSequence, Generator, RandomState or None
        Anything :func:`numpy.random.default_rng` accepts. A legacy ``RandomState`` (which
        PyMC's samplers accept) has no seed sequence to spawn from: its draws seed one.

    Returns
    -------
    dict
        Generator by stage name. The pilot never shares randomness with the measured runs.
    """
    root = root_generator(random_seed)
    try:
        children = root.spawn(len(STREAMS))
    except TypeError:  # "The underlying SeedSequence does not implement spawning"
        children = np.random.default_rng(root.integers(2**63, size=4)).spawn(len(STREAMS))
    return dict(zip(STREAMS, children, strict=True))


def root_generator(random_seed) -> np.random.Generator:
    """``numpy.random.default_rng(random_seed)``, refusing a seed it cannot take by name.

    Raises
    ------
    BDMCInputError
        For anything but an int, a sequence of ints, a SeedSequence, a Generator, a
        BitGenerator, a RandomState or None.
    """
    try:
        return np.random.default_rng(random_seed)
    except (TypeError, ValueError) as err:
        raise BDMCInputError(
            f"`random_seed` must be an int, a sequence of ints, a SeedSequence, a Generator, a "
            f"RandomState or None, got {random_seed!r} ({err})."
        ) from None


def restarted(streams: Mapping[str, np.random.Generator],
              stages: tuple[str, ...] = ATTEMPT_STREAMS) -> dict[str, np.random.Generator]:
    """Return the streams with ``stages`` back at their start, the others as they are.

    Each stage's generator is made again from a copy of its seed sequence that has spawned no
    children yet, so it draws, and spawns (:class:`~pymc_bdmc.parallel.streams.ChainBlocks`),
    what it did when first made.

    Parameters
    ----------
    streams : mapping
        As :func:`streams` returns them.
    stages : tuple of str, optional

    Returns
    -------
    dict
    """
    fresh = dict(streams)
    for stage in stages:
        generator = streams[stage]
        seed = generator.bit_generator.seed_seq
        start = np.random.SeedSequence(entropy=seed.entropy, spawn_key=seed.spawn_key,
                                       pool_size=seed.pool_size)
        fresh[stage] = np.random.Generator(type(generator.bit_generator)(start))
    return fresh


def rewind(generator: np.random.Generator) -> np.random.Generator:
    """Set ``generator`` back to its start in place, and return it.

    :func:`restarted` for a generator that others already hold (a pilot's stream, captured by
    its closures): it draws again what it drew when first made.
    """
    (fresh,) = restarted({"stream": generator}, ("stream",)).values()
    generator.bit_generator.state = fresh.bit_generator.state
    return generator
