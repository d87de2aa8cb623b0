"""A model's scale-move map compiled by a helper interpreter while this one compiles its density.

A model's first run on a machine is mostly Numba compiling its functions, one after another in
this process: the batched density and gradient, then the map of its scale groups' moves
(:mod:`pymc_bdmc.model.location_scale`), a separate function whose compilation took a fifth of
a random walk's first run (docs/performance.md). Where the map has not been compiled on this
machine before, :func:`start` hands its pickled graph to a fresh interpreter that compiles it
into the shared disk caches (PyTensor's Numba cache and this package's rewritten graphs) while
this process compiles the density; this process then loads the map from those caches
(:meth:`AheadCompile.wait`). The function is the same either way, so are the numbers.

The helper is ``python -c`` importing this module: it never imports or runs the user's script
or notebook. It only compiles, and it is told to stop where it would cost time: a helper still
starting when the map is needed is stopped, and the map compiled here as before.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

import cloudpickle

from pymc_bdmc.model import rewrite_cache

__all__ = ["COMPILING", "HELPER_TIMEOUT", "AheadCompile", "main", "start"]

logger = logging.getLogger("pymc_bdmc.model.density")

#: Seconds this process waits for a helper that is compiling before compiling itself.
HELPER_TIMEOUT = 300.0
#: What the helper writes to its standard output once it has started compiling.
COMPILING = b"c"

_RUNNING: weakref.WeakSet = weakref.WeakSet()


class AheadCompile:
    """A helper interpreter compiling one recipe (anything with a ``compile_ahead()`` method)."""

    def __init__(self, recipe):
        handle, path = tempfile.mkstemp(prefix="pymc_bdmc_ahead_", suffix=".pkl")
        self._path = Path(path)
        try:
            with os.fdopen(handle, "wb") as stream:
                cloudpickle.dump(recipe, stream)
        except BaseException:
            self._path.unlink(missing_ok=True)
            raise
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env["PYMC_BDMC_REWRITE_CACHE"] = str(rewrite_cache.CACHE_DIR)  # this process's
        self._process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import main; main()", path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env)
        self._compiling = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()
        _RUNNING.add(self)

    def _watch(self) -> None:
        while byte := self._process.stdout.read(1):
            if byte == COMPILING:
                self._compiling.set()
                return

    def wait(self) -> bool:
        """Wait for the helper if it is compiling; stop it if it is still starting.

        Returns whether it finished its compilation (never raises: this process compiles
        what the helper did not, loading what it did from the caches).
        """
        if self._process.poll() is None and not self._compiling.is_set():
            logger.debug("The helper compiling the scale moves' map had not started; "
                         "compiling it here.")
            self.stop()
            return False
        start = time.perf_counter()
        try:
            code = self._process.wait(timeout=HELPER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            return False
        finally:
            self._path.unlink(missing_ok=True)
        if code != 0:
            logger.debug("The helper failed to compile the scale moves' map; compiling it here.")
            return False
        logger.debug("The helper compiled the scale moves' map (waited %.1f s).",
                     time.perf_counter() - start)
        return True

    def stop(self) -> None:
        """Stop the helper (if running) and remove its recipe."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._path.unlink(missing_ok=True)


def start(recipe) -> AheadCompile | None:
    """Start a helper compiling ``recipe``; None where no interpreter can be started."""
    if not sys.executable:
        return None
    try:
        return AheadCompile(recipe)
    except Exception as err:  # a graph that does not pickle, no interpreter: compile here
        logger.debug("No helper interpreter (%s).", err)
        return None


@atexit.register
def _stop_helpers() -> None:
    for helper in list(_RUNNING):
        helper.stop()


def main() -> None:
    """Run the helper: read the recipe at ``sys.argv[1]``, say it is compiling, compile it."""
    path = Path(sys.argv[1])
    with path.open("rb") as stream:
        recipe = cloudpickle.load(stream)
    path.unlink(missing_ok=True)
    sys.stdout.buffer.write(COMPILING)
    sys.stdout.buffer.flush()
    # Nothing more is read from it: anything printed now must not fill the pipe and block.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    recipe.compile_ahead()
