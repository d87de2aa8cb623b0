"""Whether a model's densities compiled for the first time equal the ones loaded from the cache.

Run from the repository root::

    python3 benchmarks/compile_determinism.py                    # the suite's latent GP
    python3 benchmarks/compile_determinism.py --fastmath-off     # with numba__fastmath=False
    python3 benchmarks/compile_determinism.py --without reassoc  # PyTensor's flags but one

Each evaluation runs in a new process with its own PyTensor compile directory (a temporary
one): the first process compiles the densities cold, the second loads them from that cache.
Each prints the summed log-likelihood of 64 prior draws to all digits and the best time of a
batched call (32 chains), so the two can be compared bit for bit and the fast-math flags' cost
read off.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = """
import sys, time
sys.path.insert(0, {bench!r})
import numpy as np
{patch}
from geometry import SUITE
from pymc_bdmc.pipeline.compile import compile_model
built = [b for k, b in SUITE.items() if {name!r} in k][0]()
density, simulator, _ = compile_model(getattr(built, "model", built), False, None)
x = simulator.draw_prior(64, np.random.default_rng(0))
total = float(density.parts(x).log_likelihood.sum())
batch = x[:32]
times = []
for _ in range(5):
    start = time.perf_counter()
    for _ in range(100):
        density.parts(batch)
    times.append((time.perf_counter() - start) / 100)
print(repr(total), f"{{min(times) * 1e6:.0f}}")
"""


#: Drops fast-math flags from every Numba function PyTensor compiles (an experiment: PyTensor
#: has no option for single flags, so its ``numba_njit`` wrapper's ``_njit`` is wrapped).
WITHOUT = """
import pytensor.link.numba.dispatch.basic as numba_basic
_njit = numba_basic._njit
def _without(*args, fastmath=None, **kwargs):
    if isinstance(fastmath, set):
        fastmath = fastmath - set({flags!r})
    return _njit(*args, fastmath=fastmath, **kwargs)
numba_basic._njit = _without
"""


def evaluate(name: str, compiledir: str, fastmath: bool,
             without: tuple[str, ...] = ()) -> tuple[str, str]:
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={compiledir},"
                                          f"numba__fastmath={fastmath}")
    bench = os.path.dirname(os.path.abspath(__file__))
    patch = WITHOUT.format(flags=list(without)) if without else ""
    code = CHILD.format(bench=bench, name=name, patch=patch)
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return out[-2], out[-1]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="latent GP", help="a substring of a suite model")
    parser.add_argument("--fastmath-off", action="store_true")
    parser.add_argument("--without", nargs="*", default=[],
                        help="fast-math flags to drop (of arcp, contract, afn, reassoc, nsz)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as compiledir:
        for label in ("compiled cold", "loaded from the cache"):
            total, micros = evaluate(args.model, compiledir, not args.fastmath_off,
                                     tuple(args.without))
            flags = "off" if args.fastmath_off else "on" + "".join(
                f" without {flag}" for flag in args.without)
            print(f"{args.model}, fast math {flags}, {label}: "
                  f"summed log-likelihood {total}, {micros} us a 32-chain call", flush=True)


if __name__ == "__main__":
    main()
