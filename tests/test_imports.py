"""The import structure of the packages: no circle, the CLI on top, the layers apart.

Every ``import`` statement of ``native/``, ``phy/``, ``learning/`` and ``cosim/`` is
read with :mod:`ast` (function-level imports included: a lazy import is still a
dependency), and the module graph is checked:

* no circle: no two modules reach each other (strongly connected components of one);
* ``cosim.cli`` sits on top: no other module imports it;
* the layers: ``native`` imports none of the three, ``phy`` and ``learning`` never
  import each other nor ``cosim``.

And the size of what they hold: no module over 700 lines, no function over 80 lines
(Numba kernels aside) but the at most three ``docs/architecture.md`` names.
"""

from __future__ import annotations

import ast
import re
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
    assert {"learning.models.model", "learning.models.convnets"} <= graph["learning.models.architectures"]
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


LONG_FUNCTIONS = ("phy/aircomp.py::chain", "phy/aircomp.py::aggregate")
"""The functions allowed over :data:`MAX_FUNCTION_LINES` (at most three), each named
with its reason in ``docs/architecture.md`` (section "One round")."""
MAX_FUNCTION_LINES = 80
NUMBA_DECORATORS = {"njit", "jit", "vectorize", "guvectorize", "cfunc", "stencil"}


def _is_numba_kernel(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated ``@njit``, ``@numba.njit(...)``, ``@nb.jit`` and the like."""
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = ast.unparse(target)
        if name.split(".")[-1] in NUMBA_DECORATORS or name.startswith(("numba.", "nb.")):
            return True
    return False


def _functions(node: ast.AST, prefix: str = ""):
    """``(Class.function, node)`` of every function, method and nested function under
    ``node``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{child.name}", child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def _long_functions(limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``path::Class.function`` -> lines (``def`` to its end, docstring included) of
    every function of the four packages over ``limit``, Numba kernels left out."""
    found = {}
    for path in sorted(_modules().values()):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, node in _functions(tree):
            lines = node.end_lineno - node.lineno + 1
            if lines > limit and not _is_numba_kernel(node):
                found[f"{path.relative_to(ROOT).as_posix()}::{name}"] = lines
    return found


def _documented_long_functions(heading: str = f"Functions above {MAX_FUNCTION_LINES} lines"
                               ) -> dict[str, int]:
    """The functions (and their line counts) the paragraph of ``docs/architecture.md``
    that begins with ``heading`` names: ```path::name` (N``."""
    text = " ".join((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split())
    start = text.index(heading)
    paragraph = text[start:text.index("##", start)]
    return {name: int(lines) for name, lines in re.findall(r"`([\w/]+\.py::[\w.]+)` \((\d+)", paragraph)}


def test_no_function_over_80_lines_but_the_documented_ones():
    """Functions stay short: none of the four packages' functions over 80 lines (Numba
    kernels aside) except the at most three of :data:`LONG_FUNCTIONS`, which are the
    ones ``docs/architecture.md`` names with their reason, with their true lengths."""
    assert len(LONG_FUNCTIONS) <= 3
    found = _long_functions()
    assert set(found) == set(LONG_FUNCTIONS), (
        f"over {MAX_FUNCTION_LINES} lines: {found}; split them, or name at most three in "
        "LONG_FUNCTIONS and in docs/architecture.md with the reason")
    assert _documented_long_functions() == found, (
        "docs/architecture.md (section 'One round') names other functions or line counts")


COSIM_MAX_FUNCTION_LINES = 60
COSIM_LONG_FUNCTIONS = ("cosim/api.py::run", "cosim/plots/figures.py::plot_traces")
"""The functions of ``cosim/`` allowed over :data:`COSIM_MAX_FUNCTION_LINES`, each named
with its reason in ``docs/architecture.md`` (the paragraph "Functions in cosim/ above 60
lines")."""


def test_no_cosim_function_over_60_lines_but_the_documented_ones():
    """The run and trace layer is split by concern: no function of ``cosim/`` over 60
    lines (docstring included) except :data:`COSIM_LONG_FUNCTIONS`, which
    ``docs/architecture.md`` names with their reason and true lengths."""
    found = {name: lines for name, lines in _long_functions(COSIM_MAX_FUNCTION_LINES).items()
             if name.startswith("cosim/")}
    assert set(found) == set(COSIM_LONG_FUNCTIONS), (
        f"over {COSIM_MAX_FUNCTION_LINES} lines in cosim/: {found}; split them, or name them "
        "in COSIM_LONG_FUNCTIONS and in docs/architecture.md with the reason")
    documented = _documented_long_functions(
        f"Functions in cosim/ above {COSIM_MAX_FUNCTION_LINES} lines")
    assert {name: n for name, n in documented.items() if name.startswith("cosim/")} == found


def test_the_line_count_sees_numba_kernels_and_methods():
    source = ("import numba\nfrom numba import njit\n"
              "@numba.njit(cache=True)\ndef kernel(): pass\n@njit\ndef bare(): pass\n"
              "@staticmethod\ndef plain(): pass\n")
    kernels = {name: _is_numba_kernel(node) for name, node in _functions(ast.parse(source))}
    assert kernels == {"kernel": True, "bare": True, "plain": False}
    nested = "class A:\n    def f(self):\n        def g(): pass\n"
    assert [name for name, _ in _functions(ast.parse(nested))] == ["A.f", "A.f.g"]


def _graph_functions(tree: ast.AST):
    """Every ``tf.function`` of a module: as a bare decorator, or called."""
    for node in ast.walk(tree):
        decorators = getattr(node, "decorator_list", [])
        for decorator in decorators:
            if isinstance(decorator, ast.Attribute) and ast.unparse(decorator) == "tf.function":
                yield decorator, None
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tf.function":
            yield node, node


def test_every_graph_function_is_traced_without_autograph():
    """Every ``tf.function`` of the packages says ``autograph=False``: their bodies hold
    no tensor-dependent Python control flow (a tensor used as a Python bool fails at
    tracing time), and autograph's source conversion cost each new process seconds of
    CPU at its first round (benchmarks/README.md, "How a process starts fast")."""
    found, missing = 0, []
    for name, path in sorted(_modules().items()):
        for node, call in _graph_functions(ast.parse(path.read_text())):
            found += 1
            flag = None if call is None else next(
                (k.value for k in call.keywords if k.arg == "autograph"), None)
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                missing.append(f"{name}:{node.lineno}")
    assert found >= 15, found  # the walk sees them
    assert not missing, f"tf.function without autograph=False: {missing}"


RAY_TRACING = ("sionna.rt", "mitsuba", "drjit")
"""Sionna RT and its renderer: 2.4-4.6 s to import (issue 57), loaded only for a run with
``channel.model = "ray_traced"`` that must trace."""


def _imports_of(path: Path) -> list[tuple[str, bool]]:
    """``(module, at_top_level)`` of every import statement of ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.module, id(node) in top))
    return found


def test_only_the_ray_tracer_imports_sionna_rt_and_only_when_it_traces():
    """``sionna.rt``, mitsuba and Dr.Jit are imported by ``phy/ray_tracing.py`` alone,
    inside a function (never at a module's top), and ``phy.ray_tracing`` itself only
    inside functions: the CLI's start and a run without ``channel.model = "ray_traced"``
    never load them (``test_cli_startup.py`` holds that ``sionna`` is not imported at all
    by the commands that do not train)."""
    importers, eager = set(), []
    for name, path in _modules().items():
        for module, at_top in _imports_of(path):
            if module.split(".")[0] in ("mitsuba", "drjit") or module.startswith("sionna.rt"):
                importers.add(name)
                eager += [f"{name} imports {module} at its top"] if at_top else []
            if module == "phy.ray_tracing" and at_top:
                eager.append(f"{name} imports phy.ray_tracing at its top")
    assert importers == {"phy.ray_tracing"}
    assert eager == []
    graph = _graph()  # the ray-traced layouts and channel are reached through the registry only
    assert not [m for m, deps in graph.items() if deps & {"phy.ray_traced", "phy.scene_layouts"}]
