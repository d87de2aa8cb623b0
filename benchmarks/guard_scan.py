"""How often does the default guard replace the simulated data set? Simulation stage only.

For every model of ``benchmarks/geometry.py`` (suite, paper, ``--blocks``, ``--examples``,
``--non-gaussian``) and ``benchmarks/gallery.py``, and each seed, draws ``(theta*, y*)`` as
``sample_bdmc(random_seed=seed)`` does at the default ``match_data=None`` (the same streams,
:func:`pymc_bdmc.pipeline.draws.simulate_truth`) and prints, per seed, whether the draw was
replaced (1) or kept (0), with the kept data's distance from the real data and the median
candidate's, in robust sds. No sampling runs, so it takes a few minutes (compilation).

    python3 benchmarks/guard_scan.py --seeds 3
"""

import argparse
import logging
import warnings

import geometry
from _common import quiet
from gallery import GALLERY

from pymc_bdmc.model.cache import compiled_model
from pymc_bdmc.pipeline.draws import simulate_truth
from pymc_bdmc.pipeline.seeding import streams


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    quiet()
    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    models = {**{name: (lambda b=build: b().model) for name, build in geometry.SUITE.items()},
              **geometry.PAPER, **geometry.BLOCKS, **geometry.EXAMPLES,
              **geometry.NON_GAUSSIAN, **GALLERY}
    replaced = total = 0
    for name, build in models.items():
        model = build()
        simulator = compiled_model(model).simulator
        cells = []
        for seed in range(args.seeds):
            attrs = simulate_truth(simulator, model, streams(seed), None)[1]
            replaced += attrs["data_redrawn"]
            total += 1
            cells.append(f"{attrs['data_redrawn']} ({attrs['data_match_distance']:.1f} / "
                         f"{attrs['data_match_median_distance']:.1f})")
        print(f"{name:<58} " + "  ".join(cells), flush=True)
    print(f"replaced {replaced} of {total} draws")


if __name__ == "__main__":
    main()
