"""docs/trace.md lists every dataset a real trace holds, with its stored dtype and shape.

The doc's tables follow the convention stated in its "Layout" section: header
``| name | shape | dtype | unit | meaning |``, the group given by the first backticked
path of the ``###`` heading above, ``<phase>`` in a name standing for any phase name.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from tiny_scenario import time_domain, write_tiny

from cosim.engine import Engine
from cosim.run import run_scenario
from cosim.scenario import load_scenario

DOC = Path(__file__).resolve().parents[2] / "docs" / "trace.md"
HEADER = ["name", "shape", "dtype", "unit", "meaning"]
K, B, C = 8, 10, 4  # the tiny scenario: 8 devices, 4 classes, 10 ECE bins (default)


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` inside a cell is not a separator)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def documented_tables(text: str) -> dict[str, list[tuple[str, str, str]]]:
    """``{group: [(name, shape, dtype), ...]}`` from every ``name | shape | dtype | unit |
    meaning`` table; the group is the first backticked path of the ``###`` heading above,
    without its leading and trailing slashes (``rounds/per_device``, ``checkpoint/slot_N``)."""
    tables: dict[str, list[tuple[str, str, str]]] = {}
    group, header = None, None
    for line in text.splitlines():
        if line.startswith("#"):
            found = re.search(r"`([^`]+)`", line) if line.startswith("### ") else None
            group, header = (found.group(1).strip("/") if found else None), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
        elif header == HEADER and group is not None and not re.fullmatch(r"[-: ]*", "".join(cells)):
            name = re.fullmatch(r"`([^`]+)`", cells[0])
            assert name, f"docs/trace.md, {group}: the name cell {cells[0]!r} is not one `name`"
            tables.setdefault(group, []).append((name.group(1), cells[1], cells[2]))
    return tables


def _pattern(name: str, phases: tuple[str, ...]) -> re.Pattern:
    alternatives = "|".join(map(re.escape, phases))
    return re.compile(re.escape(name).replace(re.escape("<phase>"), f"(?:{alternatives})"))


def _shape(text: str, sizes: dict[str, int]) -> tuple[int, ...]:
    dims = [d.strip() for d in text.strip("[]").split(",")]
    return tuple(int(d) if d.isdigit() else sizes[d] for d in dims)


def test_the_convention_parses():
    tables = documented_tables(DOC.read_text())
    assert {"devices", "rounds", "rounds/per_device", "rounds/reliability",
            "checkpoint/slot_N"} <= set(tables)
    names = {name for rows in tables.values() for name, _, _ in rows}
    assert {"delta_bar_<phase>", "cumulative_uplink_symbols", "precision_changed_fraction",
            "local_distortion_<phase>", "bin_count", "rho"} <= names
    for rows in tables.values():
        for name, _, dtype in rows:
            assert np.dtype(dtype).name == dtype, (name, dtype)  # a real dtype, spelled as stored
    assert _pattern("delta_bar_<phase>", ("rho", "nu")).fullmatch("delta_bar_nu")
    assert not _pattern("precision_floor_hits_<phase>", ("rho",)).fullmatch(
        "local_precision_floor_hits_rho")


TIME_DOMAIN = time_domain(4.0, 0.01)


@pytest.mark.parametrize(("algorithm", "learning_rate", "overrides"),
                         [("bayes_aircomp", 0.05, []), ("fedavg", 0.3, []),
                          ("bayes_aircomp", 0.05, TIME_DOMAIN),
                          ("bayes_aircomp", 0.05, ["power.tx_power_dbm=-60", "privacy.delta=1e-5"]),
                          ("bayes_aircomp", 0.05, ["privacy.target_epsilon=4", "privacy.noise_source=devices",
                                                   "privacy.eavesdropper_distance_m=50"]),
                          ("signsgd", 0.3, ['uplink.scheme="one_bit"', "algorithm.signsgd.error_feedback=true"]),
                          ("signsgd", 0.3, ['uplink.scheme="noncoherent_mv"', *TIME_DOMAIN]),
                          ("bayes_aircomp", 0.05, ['power.gamma="joint"'])])
def test_docs_list_every_dataset_of_a_fresh_trace(tmp_path, algorithm, learning_rate, overrides):
    scenario = load_scenario(
        write_tiny(tmp_path, rounds=1, every=1, algorithm=algorithm, learning_rate=learning_rate,
                   hidden=4),
        ["trace.per_device=true", *overrides],
    )
    engine = Engine(scenario)
    phases = tuple(phase.name for phase in engine.algorithm.phases())
    summary = run_scenario(scenario, progress=False, engine=engine)
    sizes = {"T": 1, "K": K, "B": B, "C": C, "d": engine.num_params}
    text = DOC.read_text()
    tables = documented_tables(text)

    stored, attrs_keys = {}, set()
    with h5py.File(summary.trace_path, "r") as f:
        f.visititems(lambda name, obj: stored.__setitem__(name, (obj.shape, obj.dtype))
                     if isinstance(obj, h5py.Dataset) else None)
        for slot in f["checkpoint"].values():
            attrs_keys |= set(json.loads(slot.attrs["attrs_json"]))
    assert stored, "the run wrote no dataset"

    problems = []
    for path, (shape, dtype) in sorted(stored.items()):
        group, name = path.rsplit("/", 1)
        group = re.sub(r"slot_\d+$", "slot_N", group)
        rows = [row for row in tables.get(group, []) if _pattern(row[0], phases).fullmatch(name)]
        if not rows:
            problems.append(f"{path}: not in the /{group}/ table of docs/trace.md")
            continue
        doc_name, doc_shape, doc_dtype = rows[0]
        if doc_dtype != dtype.name:
            problems.append(f"{path}: stored as {dtype.name}, documented ({doc_name}) as {doc_dtype}")
        if _shape(doc_shape, sizes) != shape:
            problems.append(f"{path}: shape {shape}, documented ({doc_name}) as {doc_shape}")
    checkpoint_section = text.split("### `/checkpoint/", 1)[1].split("\n## ", 1)[0]
    problems += [f"checkpoint attrs_json key {key!r} not documented"
                 for key in sorted(attrs_keys) if f"`{key}`" not in checkpoint_section
                 and f'"{key}"' not in checkpoint_section]
    assert not problems, "docs/trace.md does not match the trace:\n  " + "\n  ".join(problems)
