"""Sphinx configuration: the markdown pages (MyST) plus an API reference built from ``__all__``.

Build (``tests/test_docs.py`` runs the same command, so a warning fails the test suite)::

    python3 -m sphinx -W --keep-going -b html docs docs/_build/html

The API page (``api.rst``) does not list objects by hand. The ``public-api`` directive defined
below reads a module's ``__all__`` at build time and writes an autosummary table and one autodoc
entry per public name, so a function added to ``__all__`` appears (and its docstring is checked)
without editing the docs.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from pathlib import Path
from typing import ClassVar

from docutils.parsers.rst import Directive, directives

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # document this checkout, whichever copy is installed

import pymc_bdmc  # noqa: E402

project = "pymc_bdmc"
author = "pymc_bdmc developers"
release = version = pymc_bdmc.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_nb",  # markdown pages (MyST) and the stored notebooks, with their outputs
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "examples/*.py"]
templates_path: list[str] = []

# Markdown pages: GitHub-style heading anchors, so "[text](guide.md#section)" links resolve.
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

# Notebooks: ``docs/examples`` links to ``examples/``, whose notebooks are stored executed
# (``docs/build_notebooks.py``; ``tests/test_notebooks.py`` keeps them in step with their
# scripts). The site renders the stored outputs and never runs them.
nb_execution_mode = "off"

# autodoc / autosummary: no stub files are generated (the directive below writes the entries).
autosummary_generate = False
autodoc_typehints = "none"  # the numpydoc "Parameters" sections carry the types
autodoc_member_order = "bysource"
autodoc_default_options = {"members": False}

# numpydoc: members are documented by autodoc ``:members:``, not by numpydoc's own tables
# (which would point at pages that do not exist).
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Checked on every documented object; under -W a failed check fails the build. Every parameter
# is documented (PR01), no documented parameter is missing from the signature (PR02), and a
# function that returns something says what (RT01).
numpydoc_validation_checks = {"PR01", "PR02", "RT01"}
# Dataclasses document their fields under "Attributes"; PR01 would ask for them again as
# constructor parameters.
numpydoc_validation_overrides = {"PR01": [r"(^|\n)\s*Attributes\n\s*-{3,}\n"]}

html_theme = "alabaster"
html_title = f"pymc_bdmc {release}"
html_static_path: list[str] = []


def _public_names(module: types.ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        raise ValueError(f"{module.__name__} has no __all__; the API page needs one.")
    return [n for n in names if not (n.startswith("__") and n.endswith("__"))]


def _relative(qualified: str, module: types.ModuleType) -> str:
    # autosummary wants names below the current module written relative to it.
    prefix = module.__name__ + "."
    return qualified.removeprefix(prefix)


def _entry(qualified: str, obj: object) -> list[str]:
    if inspect.isclass(obj):
        return [f".. autoclass:: {qualified}", "   :members:", ""]
    if callable(obj):
        return [f".. autofunction:: {qualified}", ""]
    return [f".. autodata:: {qualified}", "   :annotation:", ""]


class PublicAPI(Directive):
    """Document every name in a module's ``__all__``; public submodules get sections of theirs.

    ``.. public-api:: pymc_bdmc`` writes, for the module, its docstring, an autosummary table of
    its public names and an autodoc entry for each. A public name that is itself a module gets
    a section of its own, after the parent's. An object already documented on the page (a
    re-export) is listed in the table under its first name and not documented twice, and a
    module already documented on the page is skipped.

    Option ``:extra:`` names further objects (dotted paths) for the first section: types that
    are public because public functions return them, although no ``__all__`` exports them.
    """

    required_arguments = 1
    option_spec: ClassVar[dict] = {"extra": directives.unchanged}

    def run(self):
        """Insert the generated reStructuredText where the directive stands."""
        env = self.state.document.settings.env
        seen: dict[int, str] = env.temp_data.setdefault("public_api_seen", {})
        done: set[str] = env.temp_data.setdefault("public_api_modules", set())
        lines: list[str] = []
        pending = [self.arguments[0]]
        extra = self.options.get("extra", "").split()
        while pending:
            name = pending.pop(0)
            if name in done:
                continue
            done.add(name)
            module = importlib.import_module(name)
            lines += self._module(module, seen, pending, extra)
            extra = []
        source = self.state_machine.input_lines.source(
            self.lineno - self.state_machine.input_offset - 1)
        self.state_machine.insert_input(lines, source)
        return []

    @staticmethod
    def _module(module, seen, pending, extra) -> list[str]:
        title = f"``{module.__name__}``"
        lines = [title, "-" * len(title), "",
                 f".. automodule:: {module.__name__}", "   :no-members:", "",
                 f".. currentmodule:: {module.__name__}", ""]
        table, entries = [], []
        for public in _public_names(module):
            obj = getattr(module, public)
            if isinstance(obj, types.ModuleType):
                if obj.__name__ not in pending:
                    pending.append(obj.__name__)
                continue
            qualified = f"{module.__name__}.{public}"
            key = id(obj)
            shared = not isinstance(obj, str | int | float | bool | None)  # ids of these recur
            if shared and key in seen:
                table.append(f"   ~{_relative(seen[key], module)}")
                continue
            if shared:
                seen[key] = qualified
            table.append(f"   {public}")
            entries += _entry(qualified, obj)
        for qualified in extra:  # objects that are public by use, e.g. a returned type
            parent, _, attr = qualified.rpartition(".")
            obj = getattr(importlib.import_module(parent), attr)
            seen[id(obj)] = qualified
            table.append(f"   ~{_relative(qualified, module)}")
            entries += _entry(qualified, obj)
        if table:
            lines += [".. autosummary::", "   :nosignatures:", "", *table, ""]
        return lines + entries


def setup(app):
    """Register the ``public-api`` directive."""
    app.add_directive("public-api", PublicAPI)
    return {"parallel_read_safe": True}
