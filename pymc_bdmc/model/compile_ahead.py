"""Functions new to this machine compiled by a helper interpreter, then loaded from the caches.

A model's first run on a machine is mostly Numba compiling its functions. Where one was never
compiled on this machine, :func:`start` hands a recipe (its pickled graph, anything with a
``compile_ahead()`` method) to a fresh interpreter that compiles it into the shared disk caches
(PyTensor's Numba cache and this package's rewritten graphs); this process then loads it from
those caches (:meth:`AheadCompile.wait`), as every later process does. That is what makes a
first run's numbers those of every later run: Numba's code compiled in a process and the same
code loaded from its cache can round differently (:mod:`~pymc_bdmc.model.first_compile`). The
densities are compiled so (this process waits), and the map of a model's scale moves
(:mod:`~pymc_bdmc.model.location_scale`): meanwhile, where the call may use a second core.

The helper is ``python -c`` importing this module: it never imports or runs the user's script
or notebook. It only compiles. A helper that fails, or cannot start, only means that this
process compiles the function itself, as it would without helpers.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import cloudpickle

from pymc_bdmc.model import rewrite_cache

__all__ = ["HELPER_TIMEOUT", "AheadCompile", "main", "start"]

logger = logging.getLogger("pymc_bdmc.model.density")

#: Seconds this process waits for a helper before compiling the function itself.
HELPER_TIMEOUT = 600.0

_RUNNING: weakref.WeakSet = weakref.WeakSet()


class AheadCompile:
    """A helper interpreter compiling one recipe (anything with a ``compile_ahead()`` method).

    ``label`` says what it compiles, in the log.
    """

    def __init__(self, recipe, label: str):
        self.label = label
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
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env)
        _RUNNING.add(self)

    def wait(self) -> bool:
        """Wait for the helper to finish; return whether it compiled its recipe.

        Never raises: this process compiles what the helper did not, loading what it did
        from the caches. A helper past :data:`HELPER_TIMEOUT` is stopped.
        """
        start = time.perf_counter()
        try:
            code = self._process.wait(timeout=HELPER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.stop()
            return False
        finally:
            self._path.unlink(missing_ok=True)
        if code != 0:
            logger.debug("The helper failed to compile %s; compiling here.", self.label)
            return False
        logger.debug("The helper compiled %s (waited %.1f s).", self.label,
                     time.perf_counter() - start)
        return True

    def stop(self) -> None:
        """Stop the helper (if running) and remove its recipe."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._path.unlink(missing_ok=True)


def start(recipe, label: str) -> AheadCompile | None:
    """Start a helper compiling ``recipe`` (``label``: what, for the log); None where none can."""
    if not sys.executable:
        return None
    try:
        return AheadCompile(recipe, label)
    except Exception as err:  # a graph that does not pickle, no interpreter: compile here
        logger.debug("No helper interpreter (%s).", err)
        return None


@atexit.register
def _stop_helpers() -> None:
    for helper in list(_RUNNING):
        helper.stop()


def main() -> None:
    """Run the helper: read the recipe at ``sys.argv[1]`` and compile it."""
    path = Path(sys.argv[1])
    with path.open("rb") as stream:
        recipe = cloudpickle.load(stream)
    path.unlink(missing_ok=True)
    recipe.compile_ahead()
