"""The registry of random streams (:mod:`native.streams`): every purpose named once there.

The sources of ``native/``, ``phy/``, ``learning/`` and ``cosim/`` are read with
:mod:`ast`: a purpose passed to ``stream_seed``, ``numpy_rng`` or ``purpose_id`` must
not hold a string literal (``"channel"``, ``f"noise/{phase}"``), and a seed folded with
``stateless_fold_in`` must not take an integer literal as its sub-stream; both name the
registry's constants instead. The registry's names must not collide: no two purposes
(the phase families spelled out for every phase of the catalogue's algorithms) share a
string or a CRC-32 id, no purpose starts with a family's prefix, and no two sub-streams
of one purpose share an index.
"""

from __future__ import annotations

import ast
from pathlib import Path

from learning.catalog import CATALOG
from native import streams

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("native", "phy", "learning", "cosim")
REGISTRY = ROOT / "native" / "streams.py"
PURPOSE_ARGUMENT = {"stream_seed": 2, "numpy_rng": 2, "purpose_id": 0}
"""The functions that take a purpose, and its position."""
FOLD_IN = "stateless_fold_in"


def _called(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _holds_text(node: ast.expr) -> bool:
    return any(isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str))
               for n in ast.walk(node))


def literal_streams(source: str, name: str) -> list[str]:
    """``name:line: ...`` for every stream named by a literal in ``source``: a purpose
    holding a string, a fold-in's sub-stream an integer (also through a local alias,
    ``fold = tf.random.experimental.stateless_fold_in``)."""
    tree = ast.parse(source, name)
    folds = {FOLD_IN}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _called(node.value) == FOLD_IN:
            folds.update(t.id for t in node.targets if isinstance(t, ast.Name))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _called(node.func)
        if called in PURPOSE_ARGUMENT:
            purpose = _argument(node, PURPOSE_ARGUMENT[called], "purpose")
            if purpose is not None and _holds_text(purpose):
                found.append(f"{name}:{node.lineno}: {called}(...) names its purpose by a literal "
                             f"({ast.unparse(purpose)}): use a constant of native/streams.py")
        elif called in folds and len(node.args) > 1:
            index = node.args[1]
            if isinstance(index, ast.Constant) and isinstance(index.value, int):
                found.append(f"{name}:{node.lineno}: {called}(..., {index.value}) folds a literal "
                             "sub-stream: name it in native/streams.py's SUB_STREAMS")
    return found


def _sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if p != REGISTRY)


def test_no_stream_is_named_by_a_literal_outside_the_registry():
    found = [line for path in _sources()
             for line in literal_streams(path.read_text(), path.relative_to(ROOT).as_posix())]
    assert found == []


def test_the_scan_sees_the_call_sites_and_flags_a_literal():
    calls = [node for path in _sources() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and _called(node.func) in {"stream_seed", "numpy_rng", FOLD_IN}]
    assert len(calls) >= 15  # the uplink block's, the world's, the round's, the CSI's...
    flagged = literal_streams(
        "a = stream_seed(s, t, 'channel')\nb = rngs.numpy_rng(s, t, purpose=f'noise/{p}')\n"
        "c = purpose_id('x' + y)\nd = stream_seed(s, t, streams.CSI)\n"
        "fold = tf.random.experimental.stateless_fold_in\ne = fold(s, 2)\nf = fold(s, i)\n", "toy.py")
    assert [line.split(": ")[0] for line in flagged] == ["toy.py:1", "toy.py:2", "toy.py:3", "toy.py:6"]
    assert "use a constant of native/streams.py" in flagged[0] and "SUB_STREAMS" in flagged[3]


def _every_purpose() -> list[str]:
    phases = sorted({phase for entry in CATALOG.values() for phase in entry.uplink})
    return [*streams.PURPOSES, *(streams.local_purpose(p) for p in phases),
            *(streams.noise_purpose(p) for p in phases)]


def test_no_two_purposes_collide():
    purposes = _every_purpose()
    assert len(set(purposes)) == len(purposes)
    ids = [streams.purpose_id(p) for p in purposes]
    assert len(set(ids)) == len(ids), "two purposes share a CRC-32 id: their streams would be one"
    families = streams.PHASE_FAMILIES
    assert not [p for p in streams.PURPOSES for f in families if p.startswith(f)]
    assert not [(a, b) for a in families for b in families if a != b and b.startswith(a)]


def test_every_purpose_constant_is_registered_and_the_sub_streams_apart():
    texts = {name: value for name, value in vars(streams).items() if name.isupper() and isinstance(value, str)}
    assert set(texts.values()) == {*streams.PURPOSES, *streams.PHASE_FAMILIES}
    pairs = list(streams.SUB_STREAMS.values())
    assert len(set(pairs)) == len(pairs)
    for name, (parent, index) in streams.SUB_STREAMS.items():
        assert getattr(streams, name) == index
        assert parent in streams.PURPOSES or parent in streams.PHASE_FAMILIES


def test_the_purposes_keep_the_strings_the_traces_were_drawn_with():
    """A purpose's string is its stream: changing one moves every trace (the digests of
    ``tests/test_trace_bits.py`` fail then). These are the strings of the call sites
    before the registry (commit becab30), and of the motion's (``[mobility]``)."""
    assert streams.PURPOSES == ("cell", "geometry", "partition", "init", "channel", "csi", "sync",
                                "participation", "eavesdropper", "eval", "mobility")
    assert (streams.local_purpose("rho"), streams.noise_purpose("nu"),
            streams.phase_csi_purpose("nu")) == ("local/rho", "noise/nu", "csi/nu")
    assert (streams.IMAGINARY_NOISE, streams.CSI_AGING, streams.LIBRARY_INIT_MEAN, streams.LIBRARY_INIT_RHO) == (
        1, 1, 1, 2)
