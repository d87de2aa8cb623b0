"""Every example script has an executed notebook with the same cells, so the two cannot drift.

The scripts (``examples/*.py``) are the source of truth and run in ``tests/test_examples.py``;
``docs/build_notebooks.py`` turns each into ``examples/*.ipynb`` with its outputs. A new script
needs its notebook committed with it: run the command in the failure message.
"""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "examples").glob("*.py"))

_spec = importlib.util.spec_from_file_location("build_notebooks",
                                               ROOT / "docs" / "build_notebooks.py")
build_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_notebooks)


def _cells(notebook):
    return [(cell.cell_type, cell.source) for cell in notebook.cells]


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_notebook_is_executed_and_matches_its_script(script):
    rebuild = f"rebuild it: python3 docs/build_notebooks.py {script.relative_to(ROOT)}"
    path = script.with_suffix(".ipynb")
    assert path.exists(), f"{path.name} is missing; {rebuild}"
    notebook = nbformat.read(path, as_version=4)
    assert _cells(notebook) == _cells(build_notebooks.notebook_from_script(script)), (
        f"{path.name} differs from {script.name}; {rebuild}")

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        f"{path.name} was not run top to bottom in one kernel; {rebuild}")
    errors = [out for cell in code for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{path.name} has error outputs; {rebuild}"
    for cell in code:
        if "plt.show()" in cell.source:  # figures are stored inline
            assert any("image/png" in out.get("data", {}) for out in cell.outputs), cell.source


def test_sync_check_detects_an_edited_script(tmp_path):
    # The comparison above must see a one-character change in a code cell.
    script = SCRIPTS[0]
    edited = tmp_path / script.name
    edited.write_text(script.read_text().replace("\nimport ", "\nimport  ", 1))
    assert edited.read_text() != script.read_text()
    original = build_notebooks.notebook_from_script(script)
    assert _cells(build_notebooks.notebook_from_script(edited)) != _cells(original)
