"""The package's structure (issue 15): no import cycles, no private names shared across modules,
no module over 700 lines. Same analysis as ``benchmarks/architecture.py`` (ast only, nothing is
imported; function-level imports count)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("architecture",
                                                  ROOT / "benchmarks" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.analyse(ROOT)


def test_no_import_cycles(report):
    assert report["cycles"] == []


def test_no_private_names_imported_across_modules(report):
    assert report["private_imports"] == []


def test_no_module_over_700_lines(report):
    assert report["long_modules"] == []


def test_the_model_layer_never_imports_the_kernels():
    # docs/architecture.md: kernels build on model/ (and register their compiled builders with
    # it), never the other way round. The fitted base distribution once broke this.
    import ast

    offenders = []
    for path in sorted((ROOT / "pymc_bdmc" / "model").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("pymc_bdmc.kernels")]
    assert offenders == []
