"""Architecture report for pymc_bdmc: cycles, private imports, long code, the one driver.

Run from the repository root::

    python3 benchmarks/architecture.py

It parses every module of ``pymc_bdmc`` with :mod:`ast` (nothing is imported), collects every
``import`` / ``from ... import`` statement, including those inside functions, and reports

* import cycles among ``pymc_bdmc`` modules (strongly connected components of the import graph,
  with module-level and function-level imports counted alike),
* private names (leading underscore, not dunder) imported from another ``pymc_bdmc`` module,
* modules longer than ``MAX_LINES`` lines,
* function bodies longer than ``MAX_BODY_LINES`` lines (the docstring not counted),
* module docstrings longer than ``MAX_DOCSTRING_LINES`` lines,
* public entry points (:data:`ENTRY_POINTS`) that do not reach the one driver
  (``pymc_bdmc.pipeline.driver.run``), directly or through another entry point.

``tests/test_architecture.py`` runs the same analysis and pins the counts.
"""

import ast
import sys
from pathlib import Path

PACKAGE = "pymc_bdmc"
MAX_LINES = 700
MAX_BODY_LINES = 80
MAX_DOCSTRING_LINES = 40
#: The public functions that run an estimate.
ENTRY_POINTS = ("sample_ais", "sample_bdmc", "sample_smc_evidence", "sample_heldout_likelihood",
                "sample_unnormalized_evidence", "calibrate")
DRIVER = ("pymc_bdmc.pipeline.driver", "run")
ROOT = Path(__file__).resolve().parents[1]


def module_files(root=ROOT):
    """Map dotted module names of the package to their files."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(module, level, current, is_package):
    """Absolute dotted name of an import written in ``current``."""
    if level == 0:
        return module
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _owner(name, modules):
    """The longest known module that is ``name`` or a prefix of it (None outside the package)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        cand = ".".join(parts[:k])
        if cand in modules:
            return cand
    return None


def imports(modules):
    """Per module: list of (target module, imported name or None, line)."""
    out = {}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _owner(alias.name, modules)
                    if target is not None:
                        found.append((target, None, node.lineno))
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module, node.level, mod, is_package)
                for alias in node.names:
                    # ``from pkg import submodule`` imports the submodule
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        found.append((sub, None, node.lineno))
                        continue
                    target = _owner(base, modules)
                    if target is not None:
                        found.append((target, alias.name, node.lineno))
        out[mod] = found
    return out


def _is_private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(graph):
    """(importer, target, name, line) for every private name imported from another module."""
    return sorted(
        (mod, target, name, line)
        for mod, found in graph.items()
        for target, name, line in found
        if name is not None and _is_private(name) and target != mod
    )


def _edges(graph, modules):
    edges = {m: set() for m in modules}
    for mod, found in graph.items():
        for target, _name, _line in found:
            if target != mod:
                edges[mod].add(target)
    # Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``. Those implicit edges are
    # not counted: ``pymc_bdmc/__init__`` imports the public API, so with them every module would
    # sit in one cycle. Explicit imports of a package (``import pymc_bdmc``, ``from pymc_bdmc
    # import x``) are counted, and a package's own imports are edges from that package.
    return edges


def cycles(graph, modules):
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    edges = _edges(graph, modules)
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(comps)


def long_modules(modules, max_lines=MAX_LINES):
    """(module, lines) for modules over ``max_lines`` lines, longest first."""
    sizes = ((m, len(p.read_text().splitlines())) for m, p in modules.items())
    return sorted(((m, n) for m, n in sizes if n > max_lines), key=lambda t: -t[1])


def _body_lines(node) -> int:
    body = node.body
    if (len(body) > 1 and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
        body = body[1:]
    return node.end_lineno - body[0].lineno + 1


def long_functions(modules, max_lines=MAX_BODY_LINES):
    """(module.function, body lines) for function bodies over ``max_lines``, longest first."""
    out = []
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = _body_lines(node)
                if n > max_lines:
                    out.append((f"{mod}.{node.name}", n))
    return sorted(out, key=lambda t: -t[1])


def long_docstrings(modules, max_lines=MAX_DOCSTRING_LINES):
    """(module, docstring lines) for module docstrings over ``max_lines``."""
    out = []
    for mod, path in modules.items():
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        if doc is not None and doc.count("\n") + 1 > max_lines:
            out.append((mod, doc.count("\n") + 1))
    return sorted(out, key=lambda t: -t[1])


def entry_points_off_the_driver(modules, graph):
    """Entry points whose body neither calls the driver nor another entry point."""
    defined, off = {}, []
    for mod, path in modules.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name in ENTRY_POINTS:
                defined[node.name] = (mod, node)
    for name in ENTRY_POINTS:
        if name not in defined:
            off.append(f"{name} (not found)")
            continue
        mod, node = defined[name]
        driver_names = {alias for target, alias, _line in graph[mod]
                        if target == DRIVER[0] and alias == DRIVER[1]}
        called = {n.func.id for n in ast.walk(node)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        if not (called & driver_names or called & (set(ENTRY_POINTS) - {name})):
            off.append(f"{mod}.{name}")
    return off


def analyse(root=ROOT):
    """Run the three checks; return a dict of results."""
    modules = module_files(root)
    graph = imports(modules)
    return {
        "modules": len(modules),
        "cycles": cycles(graph, modules),
        "private_imports": private_imports(graph),
        "long_modules": long_modules(modules),
        "long_functions": long_functions(modules),
        "long_docstrings": long_docstrings(modules),
        "entry_points_off_the_driver": entry_points_off_the_driver(modules, graph),
    }


def main():
    res = analyse()
    print(f"{res['modules']} modules in {PACKAGE}")
    print(f"import cycles: {len(res['cycles'])}")
    for comp in res["cycles"]:
        print("  " + " <-> ".join(comp))
    priv = res["private_imports"]
    names = {(t, n) for _m, t, n, _l in priv}
    print(f"private names imported across modules: {len(names)} names, {len(priv)} imports")
    for mod, target, name, line in priv:
        print(f"  {mod}:{line}  {target}.{name}")
    print(f"modules over {MAX_LINES} lines: {len(res['long_modules'])}")
    for mod, n in res["long_modules"]:
        print(f"  {mod}: {n}")
    print(f"function bodies over {MAX_BODY_LINES} lines: {len(res['long_functions'])}")
    for name, n in res["long_functions"]:
        print(f"  {name}: {n}")
    print(f"module docstrings over {MAX_DOCSTRING_LINES} lines: {len(res['long_docstrings'])}")
    for mod, n in res["long_docstrings"]:
        print(f"  {mod}: {n}")
    off = res["entry_points_off_the_driver"]
    print(f"entry points that do not go through the one driver: {len(off)}")
    for name in off:
        print(f"  {name}")


if __name__ == "__main__":
    main()
