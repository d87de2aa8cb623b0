"""The documentation builds with warnings as errors: this is how CI checks it.

The API page is generated from ``__all__`` at build time (``docs/conf.py``), so a new public
function is documented, and its docstring validated, without touching the docs.
"""

import importlib
import inspect
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pymc_bdmc
import pymc_bdmc.plots

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _sphinx(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(source), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )


def _resolve(qualified: str):
    module, _, name = qualified.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):  # a method or attribute: Class.method
        return getattr(_resolve(module), name)


def test_docs_build_without_warnings(tmp_path):
    build = _sphinx(DOCS, tmp_path)
    assert build.returncode == 0, build.stdout + build.stderr
    api = (tmp_path / "api.html").read_text()
    anchors = set(re.findall(r'id="(pymc_bdmc[\w.]*)"', api))
    documented = {id(_resolve(a)) for a in anchors}
    # Every public class and function of the package and of its public modules has an entry
    # (a re-export once, under its first name on the page).
    modules = [pymc_bdmc, pymc_bdmc.plots]
    modules += [m for m in vars(pymc_bdmc).values()
                if isinstance(m, types.ModuleType) and m.__name__ in
                {f"pymc_bdmc.{n}" for n in pymc_bdmc.__all__}]
    assert {m.__name__ for m in modules} >= {"pymc_bdmc.testbed", "pymc_bdmc.verification"}
    missing = [f"{m.__name__}.{n}" for m in modules for n in m.__all__
               if (inspect.isclass(getattr(m, n)) or inspect.isfunction(getattr(m, n)))
               and id(getattr(m, n)) not in documented]
    assert not missing, missing


def test_undocumented_parameter_fails_the_build(tmp_path):
    # The same configuration on a one-function page: a parameter missing from the docstring
    # (numpydoc check PR01) must fail the build, or the check above proves nothing.
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(DOCS / "conf.py", source / "conf.py")
    (source / "index.rst").write_text("Page\n====\n\n.. autofunction:: bad_docstring.scale\n")
    (tmp_path / "bad_docstring.py").write_text(
        'def scale(x, factor):\n'
        '    """Multiply.\n\n'
        '    Parameters\n    ----------\n    x : float\n        A number.\n\n'
        '    Returns\n    -------\n    float\n    """\n'
        '    return x * factor\n'
    )
    build = _sphinx(source, tmp_path / "out")
    output = build.stdout + build.stderr
    assert build.returncode != 0
    assert "PR01" in output and "factor" in output, output
