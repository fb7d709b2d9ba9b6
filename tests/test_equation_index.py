"""docs/architecture.md's equation index against the paper and the code.

(a) every ``\\label{eq:...}`` of the paper's Sections III-V has exactly one row, and no row
names another label; (b) every ``file::name`` of the reference and fast-path columns, and
every test the last column names, exists. Names are looked up in the files' syntax trees
(``ast``), so nothing is imported: no TensorFlow, no Numba compilation.
"""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PAPER = ROOT.parent / "shared" / "paper" / "000_8f2916cb5eaade02.txt"
SECTIONS = ("System Model", "Bayesian FL with Over-the-Air", "Convergence Analysis")
"""The openings of Sections III, IV and V (the paper's 3rd, 4th and 5th ``\\section``)."""

COLUMNS = ("label", "what", "reference implementation", "fast paths / other substrates",
           "tests that hold them together")
CODE_REF = re.compile(r"`([A-Za-z0-9_/]+\.py)::([A-Za-z_][A-Za-z0-9_.]*)`")
LABEL = re.compile(r"\\label\{(eq:[^}]+)\}")


def _cells(line: str) -> list[str]:
    """The cells of a markdown table row (``\\|`` is a pipe inside a cell)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


@cache
def index_rows() -> tuple[tuple[str, ...], ...]:
    """The rows of the table under ``## Equation index``, as cell tuples."""
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"^## Equation index\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, "docs/architecture.md has no '## Equation index' section"
    lines = [line for line in match.group(1).splitlines() if line.startswith("|")]
    assert len(lines) > 2, "the equation index has no table"
    assert tuple(_cells(lines[0])) == COLUMNS, _cells(lines[0])
    assert set(lines[1].replace("|", "").split()) == {"---"}, lines[1]
    rows = tuple(tuple(_cells(line)) for line in lines[2:])
    for row in rows:
        assert len(row) == len(COLUMNS), row
    return rows


def _row_label(row: tuple[str, ...]) -> str:
    match = re.fullmatch(r"`(eq:[^`]+)`", row[0])
    assert match, f"the label cell must be `eq:NAME`, got {row[0]!r}"
    return match.group(1)


def paper_labels() -> list[str]:
    """The ``eq:`` labels of Sections III-V, in the paper's order."""
    if not PAPER.exists():
        pytest.skip(f"the paper's source is not at {PAPER}")
    parts = re.split(r"^\\section\{", PAPER.read_text(encoding="utf-8"), flags=re.M)
    body = parts[3:6]
    for part, title in zip(body, SECTIONS, strict=True):
        assert part.startswith(title), (title, part[:60])
    return LABEL.findall("".join(body))


@cache
def _top_level(path: Path) -> dict[str, set[str] | None]:
    """Top-level names of a Python file: a class maps to the names in its body, a
    function or an assigned name to None."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: dict[str, set[str] | None] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = set()
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(sub.name)
                elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                    members.add(sub.target.id)
                elif isinstance(sub, ast.Assign):
                    members.update(t.id for t in sub.targets if isinstance(t, ast.Name))
            names[node.name] = members
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.Assign):
            names.update({t.id: None for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = None
    return names


def _missing(file: str, name: str) -> str | None:
    """Why ``file::name`` does not resolve, or None when it does."""
    path = ROOT / file
    if not path.is_file():
        return f"{file}: no such file"
    names = _top_level(path)
    head, _, member = name.partition(".")
    if head not in names:
        return f"{file}: no top-level {head!r}"
    if member:
        if names[head] is None or "." in member:
            return f"{file}: {head!r} is not a class with a member {member!r}"
        if member not in names[head]:
            return f"{file}: class {head!r} has no member {member!r}"
    return None


def test_every_label_of_sections_iii_to_v_has_exactly_one_row():
    labels = paper_labels()
    assert len(labels) == len(set(labels)), "a label repeats in the paper"
    assert len(labels) >= 20  # the split into sections found the body
    listed = [_row_label(row) for row in index_rows()]
    repeated = sorted({label for label in listed if listed.count(label) > 1})
    assert not repeated, f"labels listed more than once: {repeated}"
    assert not sorted(set(labels) - set(listed)), f"labels missing from the index: {sorted(set(labels) - set(listed))}"
    assert not sorted(set(listed) - set(labels)), f"rows for labels outside Sections III-V: {sorted(set(listed) - set(labels))}"
    assert listed == labels, "the rows are not in the paper's order"


def test_every_named_function_exists():
    problems, count = [], 0
    for row in index_rows():
        label = _row_label(row)
        refs = [ref for cell in row[2:4] for ref in CODE_REF.findall(cell)]
        if not CODE_REF.findall(row[2]) and "analysis only" not in row[2]:
            problems.append(f"{label}: no reference implementation and not marked 'analysis only'")
        for file, name in refs:
            if not file.startswith(("native/", "phy/", "learning/", "cosim/")):
                problems.append(f"{label}: {file} is not in native/, phy/, learning/ or cosim/")
            elif (why := _missing(file, name)) is not None:
                problems.append(f"{label}: {why}")
        count += len(refs)
    assert count > 50  # the pattern found the names
    assert not problems, "\n".join(problems)


def test_every_named_test_exists():
    problems, count = [], 0
    for row in index_rows():
        for file, name in CODE_REF.findall(row[4]):
            count += 1
            if not file.startswith("tests/"):
                problems.append(f"{_row_label(row)}: {file} is not a test file")
            elif (why := _missing(file, name)) is not None or not name.startswith("test_"):
                problems.append(f"{_row_label(row)}: {why or name + ' is not a test'}")
        if not CODE_REF.findall(row[4]) and "analysis only" not in row[2]:
            problems.append(f"{_row_label(row)}: implemented but no test named")
    assert count > 30
    assert not problems, "\n".join(problems)
