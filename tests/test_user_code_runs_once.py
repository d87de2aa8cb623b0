"""Worker processes never import or run the user's script, module or notebook.

Each test runs user code that forces worker processes (``cores=2``) without an
``if __name__ == "__main__":`` guard, counts how often its top level ran (once, in the user's
process) and checks that the chains really ran on the workers and gave the in-process numbers.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# Top-level code a user might write: a side effect (here, appending the process id to a file)
# and sampling calls, with no __main__ guard. Each call's chains are compared here and there.
USER_CODE = textwrap.dedent("""
    import json, os
    import numpy as np
    import pymc as pm
    import pymc_bdmc as pmb

    with open({log!r}, "a") as log:
        log.write(f"{{os.getpid()}}\\n")
    y = np.random.default_rng(0).normal(size=15)
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        s = pm.HalfNormal("s", 1)
        pm.Normal("y", mu, s, observed=y)
        run = dict(n_steps=15, chains=16, random_seed=3, progressbar=False,
                   compile_kwargs={{"mode": "FAST_RUN"}})
        here = pmb.sample_ais(cores=1, **run)
        there = pmb.sample_ais(cores=2, **run)
    with open({out!r}, "w") as out:
        json.dump({{"workers": there["evidence"].attrs["workers"],
                   "here": here["evidence"]["log_weight_forward"].values.tolist(),
                   "there": there["evidence"]["log_weight_forward"].values.tolist()}}, out)
""")


def _check(log: Path, out: Path, stderr: str = "", exact: bool = True) -> None:
    executions = log.read_text().split()
    assert len(executions) == 1, f"the user's code ran {len(executions)} times: {executions}"
    result = json.loads(out.read_text())
    assert result["workers"] == "2 local processes"
    assert "running its chains in this process" not in stderr, stderr
    if exact:  # elementwise model: no BLAS, so the split is exact
        assert result["there"] == result["here"]
    else:
        np.testing.assert_allclose(result["there"], result["here"], rtol=1e-12)


def _run(args, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_an_unguarded_script_runs_once_with_worker_processes(tmp_path):
    log, out = tmp_path / "executions.txt", tmp_path / "result.json"
    script = tmp_path / "user_script.py"
    script.write_text(USER_CODE.format(log=str(log), out=str(out)))
    proc = _run([str(script)], cwd=tmp_path)
    _check(log, out, proc.stderr)


def test_an_unguarded_script_runs_once_with_step_method_workers(tmp_path):
    # PyMC step methods send their chains to the same local workers.
    log, out = tmp_path / "executions.txt", tmp_path / "result.json"
    script = tmp_path / "user_script.py"
    code = USER_CODE.replace("run = dict(n_steps=15,", "run = dict(step=pm.Metropolis(), n_steps=15,")
    assert code != USER_CODE
    script.write_text(code.format(log=str(log), out=str(out)))
    proc = _run([str(script)], cwd=tmp_path)
    # Round-off only: with a cold PyTensor compile cache, step-method runs of one seed differ
    # by ~1e-14 between a process's first and later calls, workers or not (as on main).
    _check(log, out, proc.stderr, exact=False)


def test_an_unguarded_module_run_with_python_m_runs_once(tmp_path):
    # `python -m` makes workers re-import the module by name rather than by path.
    log, out = tmp_path / "executions.txt", tmp_path / "result.json"
    (tmp_path / "user_module.py").write_text(USER_CODE.format(log=str(log), out=str(out)))
    proc = _run(["-m", "user_module"], cwd=tmp_path)
    _check(log, out, proc.stderr)


def test_a_notebook_cell_runs_once_with_worker_processes(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    log, out = tmp_path / "executions.txt", tmp_path / "result.json"
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(USER_CODE.format(log=str(log), out=str(out)))])
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    _check(log, out)


# A model with a scale group, on an empty cache of rewritten graphs: helper interpreters
# compile its densities and its scale moves' map (pymc_bdmc/model/compile_ahead.py).
HELPER_CODE = textwrap.dedent("""
    import logging, os, sys
    import pymc as pm
    import pymc_bdmc as pmb

    with open({log!r}, "a") as log:
        log.write(f"{{os.getpid()}}\\n")
    logging.basicConfig(stream=sys.stderr)
    logging.getLogger("pymc_bdmc.model.density").setLevel(logging.DEBUG)
    with pm.Model():
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 5)
        theta = pm.Normal("theta", mu, tau, shape=3)
        pm.Normal("y", theta, 10.0, observed=[12.0, -3.0, 5.0])
        pmb.sample_bdmc(n_steps=10, chains=8, random_seed=1, progressbar=False, cores=2)
""")


def test_the_compiling_helper_never_runs_the_users_script(tmp_path):
    log = tmp_path / "executions.txt"
    script = tmp_path / "user_script.py"
    script.write_text(HELPER_CODE.format(log=str(log)))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "PYMC_BDMC_REWRITE_CACHE": str(tmp_path / "rw")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "The helper compiled the densities" in proc.stderr, proc.stderr[-3000:]
    assert "The helper compiled the scale moves' map" in proc.stderr, proc.stderr[-3000:]
    assert len(log.read_text().split()) == 1
