"""The import structure of the packages: no circle, the CLI on top, the layers apart.

Every ``import`` statement of ``native/``, ``phy/``, ``learning/`` and ``cosim/`` is
read with :mod:`ast` (function-level imports included: a lazy import is still a
dependency), and the module graph is checked:

* no circle: no two modules reach each other (strongly connected components of one);
* ``cosim.cli`` sits on top: no other module imports it;
* the layers: ``native`` imports none of the three, ``phy`` and ``learning`` never
  import each other nor ``cosim``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("native", "phy", "learning", "cosim")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules ``name`` imports (a ``from X import Y`` of a submodule Y is
    an edge to ``X.Y``, of anything else an edge to ``X``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(name, path, known) for name, path in modules.items()}


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm (iterative enough for this graph's depth)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_the_graph_sees_known_edges():
    graph = _graph()
    assert "cosim.exit_codes" in graph["cosim.run"]
    assert {"learning.models", "learning.convnets"} <= graph["learning.architectures"]
    assert "native.tensorflow_import" in graph["learning"]


def test_no_import_circle():
    circles = [sorted(c) for c in _strongly_connected(_graph()) if len(c) > 1]
    assert circles == []


def test_a_circle_is_found():
    assert [sorted(c) for c in _strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}})
            if len(c) > 1] == [["a", "b"]]


def test_nothing_imports_the_cli():
    importers = sorted(m for m, deps in _graph().items() if "cosim.cli" in deps)
    assert importers == []


def test_layers_stay_apart():
    forbidden = {
        "native": ("phy", "learning", "cosim"),
        "phy": ("learning", "cosim"),
        "learning": ("phy", "cosim"),
    }
    problems = [
        f"{module} imports {dep}"
        for module, deps in _graph().items()
        for dep in deps
        if dep.split(".")[0] in forbidden.get(module.split(".")[0], ())
    ]
    assert problems == []


def test_no_module_over_700_lines():
    """Files stay split by concern: none of the four packages' modules over 700 lines."""
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 700}
    assert long == {}


COSIM_PACKAGES = ("scenario", "trace", "plots", "study", "privacy")


def test_cosim_packages_hold_their_modules():
    """The scenario, trace, plot and study modules live in their packages, not flat in
    ``cosim/`` (the schema is ``cosim/scenario/tables.py``, no flat ``scenario_*`` module)."""
    flat = sorted(p.name for p in (ROOT / "cosim").glob("*.py")
                  if p.stem.startswith(("scenario", "trace", "plot", "study", "cost_table")))
    assert flat == []
    assert all((ROOT / "cosim" / name / "__init__.py").is_file() for name in COSIM_PACKAGES)


def _private_imports_across_packages() -> list[str]:
    found = []
    for name, path in _modules().items():
        home = name.split(".")[1] if name.startswith("cosim.") and name.count(".") >= 2 else None
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cosim."):
                package = node.module.split(".")[1]
                if package in COSIM_PACKAGES and package != home:
                    found += [f"{name} imports {node.module}.{alias.name}"
                              for alias in node.names if alias.name.startswith("_")]
    return found


def test_private_names_stay_inside_their_package():
    """No module outside ``cosim.trace`` (say) imports a ``_name`` of it."""
    assert _private_imports_across_packages() == []
