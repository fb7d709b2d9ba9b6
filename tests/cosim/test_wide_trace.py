"""A trace of many devices (issue 61): its per-device chunks stay bounded, its readers say
what they say of a narrow one, and a trace written with one chunk per row reads the same.

The wide trace here has 20,000 devices (rows of 160 KB, more than
``MAX_CHUNK_BYTES``): each of its devices is a copy of one of the narrow trace's 8, so
every column's range, last value, worst device and median are the narrow trace's.
``benchmarks/wide_trace.py`` measures the commands at 100,000 devices.
"""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from cosim import api
from cosim.cli import inspect_command
from cosim.trace import TraceWriter, read_trace
from cosim.trace.file_format import MAX_CHUNK_BYTES, row_chunks
from cosim.trace.verify import verify_paths

NARROW, WIDE, ROUNDS = 8, 20_000, 4
PHASES = ("nu", "rho")


def _scenario(k: int) -> str:
    return (f'name = "wide"\nseed = 3\nrounds = {ROUNDS}\n\n[cell]\nnum_devices = {k}\nradius_m = 100.0\n\n'
            '[power]\ntx_power_dbm = 20.0\n')


def _narrow_rows(t: int) -> dict[str, np.ndarray]:
    """Round t's per-device rows of the narrow trace: a device that did not send is NaN."""
    rng = np.random.default_rng(t)
    sent = np.arange(NARROW) % 3 != t % 3
    rows = {}
    for phase in PHASES:
        for name in ("local_distortion", "tx_power_w", "clipped_fraction"):
            rows[f"{name}_{phase}"] = np.where(sent, rng.random(NARROW), np.nan)
    rows["tx_energy_j"] = np.where(sent, rng.random(NARROW) * 1e-5, 0.0)
    rows["mean_channel_gain"] = rng.random(NARROW) * 1e-6
    rows["csi_nmse"] = np.zeros(NARROW)
    return rows


def _write(path: Path, k: int) -> Path:
    """A trace of ``k`` devices (a multiple of 8): device i is the narrow trace's i % 8."""
    copies = k // NARROW
    distance = np.linspace(10.0, 100.0, NARROW)
    devices = {"distance_m": np.tile(distance, copies),
               "position_m": np.tile(np.stack([distance, np.zeros(NARROW)], axis=1), (copies, 1)),
               "num_samples": np.tile(np.arange(1, NARROW + 1), copies),
               "label_hist": np.tile(np.ones((NARROW, 4), np.int64), (copies, 1))}
    with TraceWriter.create(path, _scenario(k), seed=3, devices=devices, name="wide",
                            algorithm="bayes_aircomp", num_params=100) as writer:
        for t in range(ROUNDS):
            rng = np.random.default_rng(100 + t)
            evaluated = t % 2 == 1
            writer.append_round({
                "uplink_symbols": 22.0, "downlink_symbols": 333.0,
                "cumulative_uplink_symbols": 22.0 * (t + 1), "cumulative_downlink_symbols": 333.0 * (t + 1),
                "train_loss": 30.0 - t, "test_accuracy": 0.3 + 0.01 * t if evaluated else np.nan,
                "test_nll": 1.5 if evaluated else np.nan, "ece": 0.2 if evaluated else np.nan,
                **{f"aggregate_nmse_{p}": float(rng.random()) for p in PHASES},
                **{f"delta_bar_{p}": float(rng.random()) for p in PHASES},
                **{f"power_over_budget_{p}": 0.0 for p in PHASES},
                "posterior_std_p05": 0.04, "posterior_std_p50": 0.05 + 0.001 * t, "posterior_std_p95": 0.06})
            for name, row in _narrow_rows(t).items():
                writer.append_per_device(name, np.tile(row, copies))
            writer.append_series("reliability", "bin_count", rng.integers(0, 9, 10).astype(np.float64))
            writer.commit()
    return path


def _cells(text: str) -> list[list[str]]:
    """``cosim inspect``'s lines, split into words, the trace's path, every shape
    (``[4, 20000]``, ``[20000]``) and the time it was started (the two traces are written
    one after the other, so they may start in different seconds) left out: what must not
    depend on the width."""
    lines = [line for line in text.splitlines() if not line.startswith("trace ")]
    lines = [re.sub(r"started \S+", "started [time]", line) for line in lines]
    return [re.sub(r"\[[0-9, ]+\]", "[shape]", line).split() for line in lines]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("wide")
    return _write(folder / "narrow.h5", NARROW), _write(folder / "wide.h5", WIDE)


def test_a_wide_row_is_split_into_chunks_of_bounded_bytes_and_narrow_ones_keep_theirs():
    assert row_chunks((8,), np.float64) == (256, 8)  # as every trace written before the split
    assert row_chunks((10,), np.float64) == (204, 10)
    assert row_chunks((), np.int64) == (512,)
    assert row_chunks((16_384,), np.float64) == (1, 16_384)  # one whole row: 128 KiB
    for k in (16_385, 20_000, 100_000, 1_000_000):
        chunk = row_chunks((k,), np.float64)
        pieces = -(-k // chunk[1])
        assert chunk[0] == 1 and chunk[1] * 8 <= MAX_CHUNK_BYTES and pieces > 1
        assert (pieces - 1) * chunk[1] < k  # no empty piece


def test_the_wide_traces_per_device_chunks_are_bounded_and_its_rows_read_back(traces):
    _, wide = traces
    with h5py.File(wide, "r") as file:
        for name, ds in file["rounds/per_device"].items():
            assert ds.shape == (ROUNDS, WIDE) and ds.chunks[0] == 1, name
            assert 8 * WIDE > ds.chunks[1] * ds.dtype.itemsize <= MAX_CHUNK_BYTES, name
    data = read_trace(wide)
    for t in range(ROUNDS):
        for name, row in _narrow_rows(t).items():
            np.testing.assert_array_equal(data.per_device[name][t], np.tile(row, WIDE // NARROW))


def test_inspect_of_the_wide_trace_says_what_it_says_of_the_narrow_one(traces, capsys):
    """Every line (the column table's ranges and last values, the health section's worst
    device, its distance and the median device) but the path and the shapes."""
    narrow, wide = traces
    inspect_command(str(narrow))
    small = capsys.readouterr().out
    inspect_command(str(wide))
    large = capsys.readouterr().out
    assert "worst    device" in small and "per_device/local_distortion_nu" in small
    assert f"[{ROUNDS}, {WIDE}]" in large and f"distance_m [{WIDE}]" in large
    assert _cells(large) == _cells(small)
    assert [line for line in verify_paths([narrow, wide]) if line.state != "ok"] == []


def test_a_trace_written_with_one_chunk_per_row_reads_and_summarises_the_same(traces, tmp_path, capsys):
    """A wide trace as the writer made it before the split (one chunk of a whole row)."""
    _, wide = traces
    older = tmp_path / "older.h5"
    older.write_bytes(wide.read_bytes())
    with h5py.File(older, "r+") as file:
        group = file["rounds/per_device"]
        for name in list(group):
            values = group[name][()]
            del group[name]
            group.create_dataset(name, data=values, maxshape=(None, WIDE), chunks=(1, WIDE),
                                 fillvalue=np.nan, fletcher32=True)
    with h5py.File(older, "r") as file:
        assert file["rounds/per_device/csi_nmse"].chunks == (1, WIDE)
    for name, values in read_trace(older).per_device.items():
        np.testing.assert_array_equal(values, read_trace(wide).per_device[name])
    inspect_command(str(wide))
    now = capsys.readouterr().out
    inspect_command(str(older))
    assert _cells(capsys.readouterr().out) == _cells(now)


def test_the_long_form_of_a_wide_trace_is_sorted_and_keeps_the_text_dtype(traces):
    narrow, _ = traces
    long = api.to_pandas(narrow).per_device
    data = read_trace(narrow)
    expected = pd.concat([pd.DataFrame({
        "round": np.repeat(np.arange(ROUNDS), NARROW), "device": np.tile(np.arange(NARROW), ROUNDS),
        "quantity": name.rsplit("_", 1)[0] if name.endswith(PHASES) else name,
        "phase": name.rsplit("_", 1)[1] if name.endswith(PHASES) else "",
        "value": values.reshape(-1)}) for name, values in data.per_device.items()], ignore_index=True)
    expected = expected.sort_values(["quantity", "phase", "round", "device"], kind="stable", ignore_index=True)
    pd.testing.assert_frame_equal(long, expected, check_exact=True)
    assert long["quantity"].dtype == pd.Series([""]).dtype


def test_the_room_reserved_for_a_wide_row_counts_every_chunk_it_touches(tmp_path):
    """A full disk stops the writer at the reservation before a flush: for a row split
    into chunks, that reservation holds all of them, not the first one only."""
    with TraceWriter.create(tmp_path / "t.h5", _scenario(WIDE), seed=3) as writer:
        writer.flush()
        writer.append_per_device("csi_nmse", np.zeros(WIDE))
        assert writer._pending >= 8 * WIDE
