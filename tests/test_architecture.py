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


def test_no_function_body_over_80_lines(report):
    assert report["long_functions"] == []


def test_no_module_docstring_over_40_lines(report):
    assert report["long_docstrings"] == []


def test_every_entry_point_goes_through_the_one_driver(report):
    assert report["entry_points_off_the_driver"] == []


def _worked_example() -> str:
    """The method defined in docs/architecture.md's worked example, as the page shows it."""
    import re

    text = (ROOT / "docs" / "architecture.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return next(b for b in blocks if "class LikelihoodWeighting" in b)


def test_the_worked_example_of_a_new_method_runs_through_the_driver():
    # docs/architecture.md: a method is its kernel and loop; the driver does the rest. Its
    # estimate of a conjugate normal model's evidence is within 0.1 nats of the exact value
    # (4000 prior draws of a 1-parameter model whose posterior is near its prior: the weights'
    # relative spread is about 0.5, so the standard error is near 0.01).
    import time

    import numpy as np
    import pymc as pm
    from scipy import stats

    from pymc_bdmc.methods.protocol import Job
    from pymc_bdmc.pipeline.driver import run
    from pymc_bdmc.pipeline.seeding import streams
    from pymc_bdmc.pipeline.settings import validate

    namespace = {}
    exec(_worked_example(), namespace)
    y = np.array([0.3, -0.5, 0.8, 0.1])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        pm.Normal("y", mu, 1.0, observed=y)
    settings = validate(1, 4000, "linear", 3, 1, 0.9, 0.5, None, 0.95)
    job = Job(model, settings, streams(1), simulate=False, started=time.perf_counter(),
              progressbar=False)
    result = run(namespace["LikelihoodWeighting"](), job)
    exact = stats.multivariate_normal(np.zeros(4), np.eye(4) + np.ones((4, 4))).logpdf(y)
    assert result["evidence"].attrs["algorithm"] == "likelihood weighting"
    assert abs(float(result["evidence"]["lower"]) - exact) < 0.1
