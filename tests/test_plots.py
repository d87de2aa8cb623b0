"""``pmb.plots``: a lazy attribute (matplotlib stays optional), and plot_compare's encoding."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_plots_is_a_lazy_attribute():
    # `import pymc_bdmc` must not import matplotlib (an optional dependency), and pmb.plots
    # must still work as the docs write it. A fresh interpreter, so nothing is imported yet.
    code = (
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
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
