"""Functions new to this machine compiled by a helper interpreter, then loaded from the caches.

A model's first run on a machine is mostly Numba compiling its functions. Where one was never
compiled on this machine, :func:`start` hands a recipe (its pickled graph, anything with a
``compile_ahead()`` method) to a helper interpreter that compiles it into the shared disk caches
(PyTensor's Numba cache and this package's rewritten graphs); this process then loads it from
those caches (:meth:`AheadCompile.wait`), as every later process does. That is what makes a
first run's numbers those of every later run: Numba's code compiled in a process and the same
code loaded from its cache can round differently (:mod:`~pymc_bdmc.model.first_compile`). The
densities are compiled so (this process waits), and the map of a model's scale moves
(:mod:`~pymc_bdmc.model.location_scale`): meanwhile, where the call may use a second core.

A helper that has compiled a recipe waits for the next one, for :data:`IDLE_SECONDS`, then
exits: a process comparing several new models imports PyMC in it once, and Numba compiles its
own library functions (string formatting for error messages, sorting, hashing) there once, not
for every model (``benchmarks/first_run.py --one-session``). Helpers are ``python -c``
importing this module: they never import or run the user's script or notebook. They only
compile. A helper that fails, or cannot start, only means that this process compiles the
function itself, as it would without helpers.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cloudpickle

from pymc_bdmc.model import rewrite_cache

__all__ = ["HELPER_TIMEOUT", "IDLE_SECONDS", "IDLE_VARIABLE", "AheadCompile", "main", "start"]

logger = logging.getLogger("pymc_bdmc.model.density")

#: Seconds this process waits for a helper before compiling the function itself.
HELPER_TIMEOUT = 600.0
#: What sets :data:`IDLE_SECONDS`.
IDLE_VARIABLE = "PYMC_BDMC_HELPER_IDLE"


def _idle_seconds(default: float = 300.0) -> float:
    """Return ``PYMC_BDMC_HELPER_IDLE`` in seconds (a value that is not one warns, unused)."""
    text = os.environ.get(IDLE_VARIABLE, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    logger.warning("%s=%r is not a number of seconds (0 or more); helpers wait %.0f s.",
                   IDLE_VARIABLE, text, default)
    return default


#: Seconds a helper waits for its next recipe before it exits (0: it exits once it has
#: compiled one).
IDLE_SECONDS = _idle_seconds()
#: A helper idle this long is not given another recipe (it may be about to exit).
_REUSE_SECONDS = 0.8 * IDLE_SECONDS
#: The helper's answers on its output, after each recipe.
_COMPILED, _FAILED = "compiled", "failed"

_LOCK = threading.Lock()
_IDLE: list[_Helper] = []  # helpers of this process waiting for a recipe
_STARTED: list[_Helper] = []  # every helper this process started and has not stopped
_OWNER = os.getpid()  # a forked child does not share its parent's helpers


class _Helper:
    """A helper interpreter: recipe paths in on its input, one answer per recipe on its output.

    ``key`` is what it compiles with (this process's caches, PyTensor's flags): a helper
    serves only recipes of the same key.
    """

    def __init__(self, key: tuple):
        self.key = key
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env["PYMC_BDMC_REWRITE_CACHE"] = key[0]  # this process's
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"from {__name__} import main; main()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, text=True, bufsize=1)
        self.idle_since = time.monotonic()
        self._answers: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        for line in self.process.stdout:
            self._answers.put(line.strip())
        self._answers.put(None)  # the helper ended

    def submit(self, path: Path) -> None:
        """Hand it a recipe; raise ``OSError`` where it has ended."""
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()

    def answer(self, timeout: float) -> str | None:
        """Its answer to the recipe submitted last: None where it ended; ``queue.Empty`` late."""
        return self._answers.get(timeout=timeout)

    def reusable(self, key: tuple) -> bool:
        return (key == self.key and self.process.poll() is None
                and time.monotonic() - self.idle_since < _REUSE_SECONDS)

    def stop(self) -> None:
        """End it (killed: idle, it has nothing to finish; compiling, it is not waited for)."""
        with _LOCK:
            if self in _STARTED:
                _STARTED.remove(self)
            if self in _IDLE:
                _IDLE.remove(self)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        try:
            self.process.stdin.close()
        except OSError:
            pass


def _helper_key() -> tuple:
    """Return what a helper compiles with: this process's caches and PyTensor's flags."""
    return (str(rewrite_cache.CACHE_DIR), os.environ.get("PYTENSOR_FLAGS", ""), sys.executable)


def _acquire() -> _Helper:
    """Return an idle helper of this process for the current caches, or start one."""
    global _OWNER
    key = _helper_key()
    with _LOCK:
        if os.getpid() != _OWNER:  # a forked child: its parent's helpers are not its own
            _IDLE.clear()
            _STARTED.clear()
            _OWNER = os.getpid()
        stale = [helper for helper in _IDLE if not helper.reusable(key)]
        ready = [helper for helper in _IDLE if helper not in stale]
        if ready:
            _IDLE.remove(ready[-1])
    for helper in stale:  # ended, about to end, or compiling into other caches
        helper.stop()
    if ready:
        return ready[-1]
    helper = _Helper(key)
    with _LOCK:
        _STARTED.append(helper)
    return helper


def _release(helper: _Helper) -> None:
    helper.idle_since = time.monotonic()
    with _LOCK:
        keep = helper in _STARTED and IDLE_SECONDS > 0
        if keep:
            _IDLE.append(helper)
    if not keep:
        helper.stop()


class AheadCompile:
    """A helper interpreter compiling one recipe (anything with a ``compile_ahead()`` method).

    ``label`` says what it compiles, in the log.
    """

    def __init__(self, recipe, label: str):
        self.label = label
        self._result: bool | None = None
        handle, path = tempfile.mkstemp(prefix="pymc_bdmc_ahead_", suffix=".pkl")
        self._path = Path(path)
        try:
            with os.fdopen(handle, "wb") as stream:
                cloudpickle.dump(recipe, stream)
            self._helper = _acquire()
            try:
                self._helper.submit(self._path)
            except OSError:  # it ended as it was handed the recipe: a new one
                self._helper.stop()
                self._helper = _acquire()
                self._helper.submit(self._path)
        except BaseException:
            self._path.unlink(missing_ok=True)
            raise

    def wait(self) -> bool:
        """Wait for the helper to finish; return whether it compiled its recipe.

        Never raises: this process compiles what the helper did not, loading what it did
        from the caches. A helper past :data:`HELPER_TIMEOUT` is stopped.
        """
        if self._result is not None:
            return self._result
        start = time.perf_counter()
        try:
            answer = self._helper.answer(HELPER_TIMEOUT)
        except queue.Empty:
            answer = None
        finally:
            self._path.unlink(missing_ok=True)
        if answer is None:
            self._helper.stop()
        else:
            _release(self._helper)
        self._result = answer == _COMPILED
        if self._result:
            logger.debug("The helper compiled %s (waited %.1f s).", self.label,
                         time.perf_counter() - start)
        else:
            logger.debug("The helper failed to compile %s; compiling here.", self.label)
        return self._result

    def stop(self) -> None:
        """Stop the helper and remove its recipe."""
        self._helper.stop()
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
    if os.getpid() != _OWNER:
        return
    for helper in list(_STARTED):
        helper.stop()


def _recipe_paths():
    """Yield the recipe paths on this helper's input, one a line, until it ends or idles."""
    lines: queue.SimpleQueue = queue.SimpleQueue()

    def read() -> None:
        for line in sys.stdin:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    timeout = None  # the first recipe comes as the helper starts
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            return
        if line is None:
            return
        if line:
            yield Path(line)
            if IDLE_SECONDS <= 0:
                return
            timeout = IDLE_SECONDS


def main() -> None:
    """Run a helper: compile each recipe whose path comes on the input, answering for each.

    The answers go to the output this process was started with; anything else written there
    (by a recipe's compilation) goes where errors go, so that it cannot be read as an answer.
    """
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for path in _recipe_paths():
        try:
            with path.open("rb") as stream:
                recipe = cloudpickle.load(stream)
            path.unlink(missing_ok=True)
            recipe.compile_ahead()
        except Exception:  # this process compiles it instead
            answers.write(f"{_FAILED}\n")
        else:
            answers.write(f"{_COMPILED}\n")
