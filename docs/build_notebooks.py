"""Build the executed notebooks ``examples/*.ipynb`` from their sources ``examples/*.py``.

The percent-format scripts are the source of truth; this script converts each with jupytext,
runs it top to bottom in a fresh Jupyter kernel that imports *this checkout's* ``pymc_bdmc``,
and writes the notebook with its outputs (figures inline). ``tests/test_notebooks.py`` fails
when a notebook is missing, unexecuted, or out of step with its script.

Usage, from the repository root (needs ``pip install -e ".[docs]"``)::

    python3 docs/build_notebooks.py                           # every examples/*.py
    python3 docs/build_notebooks.py examples/quickstart.py    # only these
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

logger = logging.getLogger("build_notebooks")

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def notebook_from_script(script: Path):
    """Convert a percent-format script to a notebook, without outputs or pairing metadata."""
    import jupytext

    notebook = jupytext.read(script, fmt="py:percent")
    notebook.metadata = {"kernelspec": dict(KERNELSPEC),
                         "language_info": {"name": "python"}}
    for i, cell in enumerate(notebook.cells):  # stable ids: a rebuild changes only outputs
        cell.id = f"{script.stem[:50]}-{i}"
    return notebook


def _check_import_path(env: dict) -> None:
    # The kernel runs this interpreter (jupyter_client substitutes sys.executable for the
    # kernelspec's "python") with this environment: make sure it sees this checkout.
    found = subprocess.run(
        [sys.executable, "-c", "import pymc_bdmc; print(pymc_bdmc.__file__)"],
        cwd=EXAMPLES, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(ROOT):
        raise RuntimeError(f"The kernel would import pymc_bdmc from {found}, not from {ROOT}.")


def build(script: Path, timeout: int = 1200) -> Path:
    """Execute ``script`` as a notebook and write ``script.with_suffix(".ipynb")``."""
    import nbformat
    from nbclient import NotebookClient

    notebook = notebook_from_script(script)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=timeout, kernel_name=KERNELSPEC["name"],
                   resources={"metadata": {"path": str(script.parent)}},
                   record_timing=False).execute()
    target = script.with_suffix(".ipynb")
    nbformat.write(notebook, target)
    logger.info("%s: executed in %.0f s", target.relative_to(ROOT), time.perf_counter() - start)
    return target


def main(argv: list[str] | None = None) -> None:
    """Build the notebooks named on the command line, or all of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", type=Path,
                        help="examples/*.py scripts to build (default: all)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    scripts = [s.resolve() for s in args.scripts] or sorted(EXAMPLES.glob("*.py"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    _check_import_path(env)
    os.environ.update(env)  # inherited by the kernels nbclient starts
    for script in scripts:
        build(script)


if __name__ == "__main__":
    main()
