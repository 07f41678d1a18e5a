"""The package's shape: no import cycle, no module over 600 lines, a one-line summary per module.

Read from the source with :mod:`ast` (nothing is imported).  The import graph has one node
per module, a package's ``__init__`` being the node of the package itself, and one edge per
``import`` statement anywhere in a module (module level, inside functions, under
``if TYPE_CHECKING:``) that names a ``codesign`` module:

* ``import codesign.search._relax`` and ``from codesign.search import _relax`` name the module
  ``codesign.search._relax``;
* ``from codesign.search import sweep`` (``sweep`` not a submodule) and ``import codesign`` name
  the package's ``__init__`` (``codesign.search``, ``codesign``);
* relative imports are resolved against the importing module's package;
* ``importlib.import_module("codesign.x")`` with a literal name counts as ``import codesign.x``.

A package that loads its names lazily (PEP 562 ``__getattr__`` over a table of module names,
as ``codesign/__init__.py`` does) shows its dependencies through the twin imports under
``if TYPE_CHECKING:``, which is why those count.

The parent packages a dotted import runs first are not edges: every module would otherwise
depend on ``codesign/__init__.py``.  Naming a package from inside it does make an edge, so
``import codesign`` in a submodule that ``codesign/__init__.py`` imports is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "codesign"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _is_import_call(func: ast.expr) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)``."""
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _imports(name: str, source: str) -> list[tuple[str, int]]:
    """``(imported codesign module, line)`` for every import statement of module ``name``."""
    tree = ast.parse(source, filename=str(MODULES[name]))
    package = name if _is_package(name) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.append((arg.value, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base_parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.append((sub if sub in MODULES else base, node.lineno))
    return [(m, line) for m, line in found if m in MODULES]


def import_graph(sources: dict[str, str] | None = None) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}`` over the codesign modules (``sources``:
    replacement source text of some modules, for the self-check)."""
    graph: dict[str, dict[str, int]] = {}
    for name, path in MODULES.items():
        edges: dict[str, int] = {}
        source = (sources or {}).get(name) or path.read_text()
        for target, line in _imports(name, source):
            if target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _a_cycle(graph: dict[str, dict[str, int]], comp: list[str]) -> list[str]:
    """One shortest cycle through the first module of a strongly connected component."""
    start, members = comp[0], set(comp)
    parent = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if w in members and w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {comp}")


def _describe(graph, cycle: list[str]) -> str:
    hops = [
        f"{a} ({MODULES[a].relative_to(ROOT)}:{graph[a][b]}) -> {b}"
        for a, b in zip(cycle, cycle[1:], strict=False)
    ]
    return "\n    ".join(hops)


def _cycles(graph) -> list[list[str]]:
    return [_a_cycle(graph, comp) for comp in _strongly_connected(graph)]


def test_the_walk_resolves_every_form_and_finds_cycles():
    """The checker itself, on replacement sources: every import form resolves as described
    above, and an ``import codesign`` in a module the package imports is reported."""
    step = """
import codesign
from . import specs
from .search import _relax, sweep
from codesign.search._grid import set_leaf
def f():
    import codesign.cost
    from codesign import rules as r, evaluate
    importlib.import_module("codesign.workload")
"""
    graph = import_graph({"codesign.step": step, "codesign.search._sweep": "from .. import cost\n"})
    assert graph["codesign.step"] == {
        "codesign": 2,
        "codesign.specs": 3,
        "codesign.search._relax": 4,
        "codesign.search": 4,
        "codesign.search._grid": 5,
        "codesign.cost": 7,
        "codesign.rules": 8,
        "codesign.workload": 9,
    }
    assert graph["codesign.search._sweep"] == {"codesign.cost": 1}
    cycles = _cycles(graph)
    assert cycles and all(c[0] == c[-1] and len(c) > 2 for c in cycles)
    assert any(set(c) == {"codesign", "codesign.step"} for c in cycles)
    # The package as it is: the edges the real modules have.
    real = import_graph()
    assert "codesign.search._relax" in real["codesign.search"]  # from codesign.search import _relax
    assert "codesign.cli.search" in real["codesign.cli"]  # function-local, in build_parser


def test_no_import_cycle():
    graph = import_graph()
    cycles = _cycles(graph)
    msg = "\n".join(f"  cycle:\n    {_describe(graph, c)}" for c in cycles)
    assert not cycles, f"{len(cycles)} import cycle(s) among codesign modules:\n{msg}"


def test_no_module_over_600_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in MODULES.values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_every_module_has_a_one_line_summary():
    """PEP 257: a docstring whose first line is one sentence (ending in a period), followed
    by a blank line or nothing."""
    bad = {}
    for path in MODULES.values():
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=True)
        where = str(path.relative_to(ROOT))
        if not doc:
            bad[where] = "no module docstring"
            continue
        lines = doc.splitlines()
        first = lines[0].strip()
        if not first or not first.endswith("."):
            bad[where] = f"first line is not one sentence ending in '.': {first!r}"
        elif len(lines) > 1 and lines[1].strip():
            bad[where] = f"the summary runs onto a second line: {lines[1].strip()!r}"
    assert not bad, "module docstrings:\n" + "\n".join(f"  {k}: {v}" for k, v in bad.items())
