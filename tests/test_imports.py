"""``import pymc_bdmc`` stays light: what an evidence run never needs is imported on first use.

Every worker process imports the package too, so what it pulls in is paid at each pool start.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_fresh(code: str) -> None:
    """Run ``code`` in a new interpreter (nothing imported yet) and fail with its stderr."""
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr


def test_plots_is_a_lazy_attribute():
    # matplotlib is an optional dependency; pmb.plots must still work as the docs write it.
    run_fresh(
        "import sys, pymc_bdmc as pmb\n"
        "assert 'matplotlib' not in sys.modules, 'import pymc_bdmc imported matplotlib'\n"
        "assert 'pymc_bdmc.plots' not in sys.modules, 'plots imported eagerly'\n"
        "assert 'plots' in dir(pmb) and 'plots' in pmb.__all__\n"
        "import pymc_bdmc.plots\n"
        "assert pmb.plots is sys.modules['pymc_bdmc.plots']\n"
        "assert callable(pmb.plots.plot_compare)\n"
        "try:\n"
        "    pmb.no_such_name\n"
        "except AttributeError as err:\n"
        "    assert 'no_such_name' in str(err)\n"
        "else:\n"
        "    raise AssertionError('unknown attribute did not raise')\n"
    )


def test_reference_models_and_arviz_are_imported_on_first_use():
    # The reference models pull in scipy.stats/integrate/optimize (about 1 s), arviz_base 0.5 s.
    run_fresh(
        "import sys, pymc_bdmc as pmb\n"
        "heavy = ['scipy.stats', 'arviz_base', 'pymc_bdmc.known_evidence', 'pymc_bdmc.testbed',\n"
        "         'pymc_bdmc.verification']\n"
        "loaded = [m for m in heavy if m in sys.modules]\n"
        "assert not loaded, f'import pymc_bdmc imported {loaded}'\n"
        "for name in ('known_evidence', 'testbed', 'verification', 'compare_estimators'):\n"
        "    assert name in dir(pmb) and name in pmb.__all__, name\n"
        "from pymc_bdmc.testbed.runner import compare_estimators\n"
        "assert pmb.compare_estimators is compare_estimators\n"
        "assert pmb.known_evidence is sys.modules['pymc_bdmc.known_evidence']\n"
        "assert callable(pmb.known_evidence.beta_binomial)\n"
        "assert callable(pmb.verification.invariance_test)\n"
    )


def test_numba_is_imported_by_the_first_compilation_not_by_the_import():
    # Numba takes 0.3-0.7 s to import; the densities' linker imports it only when it compiles.
    run_fresh(
        "import sys, pymc_bdmc\n"
        "from pymc_bdmc.model.rewrite_cache import hot_mode\n"
        "hot_mode()\n"
        "assert 'numba' not in sys.modules, 'import pymc_bdmc imported numba'\n"
    )
