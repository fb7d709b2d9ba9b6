"""HDF5 trace: schema and shapes, atomic commit, crash + resume, concurrent reading, checkpoints."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest

from cosim.trace.compact import drop_checkpoint
from cosim.trace.writer import (
    SCHEMA_VERSION,
    TraceError,
    TraceExistsError,
    TraceWriter,
    read_trace,
    summarize,
)

K, C, B = 6, 10, 10
SCENARIO = 'name = "t"\nseed = 3\nrounds = 6\n'
ROOT = Path(__file__).resolve().parents[2]


def write_round(writer: TraceWriter, t: int, checkpoint: bool = True) -> None:
    """Deterministic content for round t, as the engine writes it (eval every 2nd round)."""
    rng = np.random.default_rng(t)
    writer.append_round({"uplink_symbols": 912, "downlink_symbols": 40 + t,
                         "cumulative_channel_uses": 952 * (t + 1) + t * (t + 1) // 2,
                         "train_loss": float(rng.normal()), "delta_bar_rho": float(rng.random()),
                         "delta_bar_nu": float(rng.random()), "precision_floor_hits": int(t % 3),
                         "wall_s": 0.25})
    if t % 2 == 0:
        writer.append_round({"test_accuracy": 0.1 * t, "test_nll": 2.0 - 0.1 * t, "ece": 0.01 * t})
        writer.append_series("reliability", "bin_confidence", rng.random(B))
        writer.append_series("reliability", "bin_accuracy", rng.random(B))
        writer.append_series("reliability", "bin_count", rng.integers(0, 50, B))
    for name in ("local_distortion", "tx_power_w", "clipped_fraction", "mean_channel_gain", "csi_nmse"):
        writer.append_per_device(name, rng.random(K))
    if checkpoint:
        writer.write_checkpoint(
            {"mu": rng.normal(size=20).astype(np.float32), "rho": rng.random(20).astype(np.float32),
             "step": np.array(t, dtype=np.int64)},
            {"cumulative_channel_uses": 952 * (t + 1), "note": f"after round {t}", "x": 0.1 + 0.2})


def new_trace(path: Path, rounds: int, **kw) -> TraceWriter:
    devices = {"position_m": np.arange(2 * K, dtype=float).reshape(K, 2),
               "distance_m": np.arange(1, K + 1, dtype=float),
               "num_samples": np.arange(K), "label_hist": np.ones((K, C), dtype=np.int64)}
    writer = TraceWriter.create(path, SCENARIO, seed=3, devices=devices, **kw)
    for t in range(rounds):
        write_round(writer, t)
        writer.commit()
    return writer


def content(path: Path) -> dict:
    """Every dataset of a file (committed rows only) and the attributes that must match."""
    data = read_trace(path)
    out = {f"rounds/{k}": v for k, v in data.rounds.items()}
    out |= {f"{g}/{k}": v for g, cols in data.series.items() for k, v in cols.items()}
    out |= {f"devices/{k}": v for k, v in data.devices.items()}
    writer, ck, _ = TraceWriter.resume(path)  # reads the checkpoint back
    writer.close()
    out |= {f"checkpoint/{k}": v for k, v in ck.arrays.items()}
    out["checkpoint_attrs"] = json.dumps(ck.attrs)
    out["completed"] = data.completed_rounds
    return out


def assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_schema_and_shapes(tmp_path):
    path = tmp_path / "runs" / "t.h5"
    new_trace(path, 3).close()
    with h5py.File(path, "r") as f:
        assert f.attrs["schema_version"] == SCHEMA_VERSION and f.attrs["completed_rounds"] == 3
        assert f.attrs["scenario"] == SCENARIO and f.attrs["seed"] == 3
        for key in ("started_at", "version_tensorflow", "version_tensorflow-probability",
                    "version_sionna", "version_sionna-rt", "version_aircomp-cosim"):
            assert key in f.attrs
        assert f["devices/position_m"].shape == (K, 2) and f["devices/label_hist"].shape == (K, C)
        assert f["rounds/round"].dtype == np.int64 and f["rounds/test_accuracy"].dtype == np.float64
        assert f["rounds/per_device/tx_power_w"].shape == (3, K)
        assert f["rounds/reliability/bin_count"].shape == (3, B)
        assert f["rounds/reliability/bin_count"].dtype == np.int64
        assert f["rounds/wall_s"].maxshape == (None,)
    data = read_trace(path)
    assert data.completed_rounds == 3
    np.testing.assert_array_equal(data.rounds["round"], [0, 1, 2])
    np.testing.assert_array_equal(data.rounds["test_accuracy"], [0.0, np.nan, 0.2])  # NaN: no eval
    np.testing.assert_array_equal(data.reliability["bin_count"][1], np.full(B, -1))
    assert set(data.per_device) == {"local_distortion", "tx_power_w", "clipped_fraction",
                                    "mean_channel_gain", "csi_nmse"}
    assert data.last_evaluated_round() == 2 and data.checkpoint_round == 3
    text = summarize(path)
    assert "3 of 6 completed" in text and "per_device/tx_power_w" in text
    assert "final    (round 2) test_accuracy 0.2" in text


def test_refuses_to_overwrite(tmp_path):
    path = tmp_path / "t.h5"
    new_trace(path, 1).close()
    with pytest.raises(TraceExistsError, match=r"t\.h5 already exists.*--resume.*--overwrite"):
        TraceWriter.create(path, SCENARIO, seed=3)
    assert read_trace(path).completed_rounds == 1  # untouched
    new_trace(path, 2, overwrite=True).close()
    assert read_trace(path).completed_rounds == 2


def test_checkpoint_round_trip_and_in_place(tmp_path):
    path = tmp_path / "t.h5"
    new_trace(path, 2).close()
    writer, ck, start = TraceWriter.resume(path)
    assert start == ck.completed_rounds == 2 and ck.arrays["mu"].dtype == np.float32
    assert ck.attrs == {"cumulative_channel_uses": 952 * 2, "note": "after round 1", "x": 0.1 + 0.2}
    arrays = {"w": np.linspace(0, 1, 7, dtype=np.float64), "c": (np.arange(3) + 1j).astype(np.complex64)}
    writer.write_checkpoint(arrays, {"k": 1})
    writer.close()  # stopped before the commit: not valid
    writer, ck, start = TraceWriter.resume(path)
    assert start == ck.completed_rounds == 2 and ck.attrs["note"] == "after round 1"
    writer.write_checkpoint(arrays, {"k": 1})
    writer.commit()
    writer.close()
    writer, got, start = TraceWriter.resume(path)
    assert start == got.completed_rounds == 3 and got.attrs == {"k": 1} and set(got.arrays) == {"w", "c"}
    for key, value in arrays.items():
        assert got.arrays[key].dtype == value.dtype
        np.testing.assert_array_equal(got.arrays[key], value)
    # same names and shapes: checkpoints are rewritten in place, so a mark put on each of
    # their datasets survives later checkpoints (a dataset deleted and created again loses
    # it; the file's size cannot tell: HDF5 reuses the space freed)
    for t in range(3, 5):
        write_round(writer, t)
        writer.commit()
    writer.close()
    with h5py.File(path, "r+") as f:
        marked = [ds.name for slot in f["checkpoint"].values() for ds in slot.values()]
        for name in marked:
            f[name].attrs["mark"] = 1
    assert len(marked) == 6  # mu, rho, step in each of the two slots
    writer, _, start = TraceWriter.resume(path)
    for t in range(start, start + 4):
        write_round(writer, t)
        writer.commit()
    writer.close()
    with h5py.File(path, "r") as f:
        assert [name for name in marked if f[name].attrs.get("mark") != 1] == []
    assert read_trace(path).completed_rounds == 9


def test_resume_after_simulated_crash_equals_uninterrupted(tmp_path):
    reference = tmp_path / "ref.h5"
    new_trace(reference, 6).close()
    path = tmp_path / "crash.h5"
    writer = new_trace(path, 3)
    write_round(writer, 3)  # round 3 fully written, checkpoint included, but never committed
    writer.close()
    assert read_trace(path).completed_rounds == 3
    with h5py.File(path, "r") as f:
        assert f["rounds/train_loss"].shape == (4,)  # the partial row is in the file
    writer, ck, start = TraceWriter.resume(path, SCENARIO)
    assert start == writer.completed_rounds == 3 and ck.completed_rounds == 3
    assert ck.attrs["cumulative_channel_uses"] == 952 * 3
    with h5py.File(path, "r", locking=False) as f:  # same process as the open writer
        assert f["rounds/train_loss"].shape == (3,)  # truncated back
    for t in range(3, 6):
        write_round(writer, t)
        writer.commit()
    writer.close()
    assert_same(content(path), content(reference))
    assert read_trace(path).attrs["resume_count"] == 2  # content() resumed once more


def test_resume_goes_back_to_last_checkpoint(tmp_path):
    reference = tmp_path / "ref.h5"
    new_trace(reference, 4).close()
    path = tmp_path / "t.h5"
    writer = new_trace(path, 2)
    write_round(writer, 2, checkpoint=False)  # checkpoint_every = 2: none after round 2
    writer.commit()
    writer.close()
    assert read_trace(path).completed_rounds == 3
    writer, ck, start = TraceWriter.resume(path)
    assert start == writer.completed_rounds == 2 == ck.completed_rounds
    for t in range(2, 4):
        write_round(writer, t)
        writer.commit()
    writer.close()
    assert_same(content(path), content(reference))


def test_resume_errors(tmp_path):
    with pytest.raises(TraceError, match="does not exist"):
        TraceWriter.resume(tmp_path / "none.h5")
    path = tmp_path / "t.h5"
    new_trace(path, 1).close()
    with pytest.raises(TraceError, match=r"(?s)scenario differs.*-rounds = 6\n  \+rounds = 7"):
        TraceWriter.resume(path, SCENARIO.replace("rounds = 6", "rounds = 7"))
    with h5py.File(path, "r+") as f:
        f.attrs["schema_version"] = 99
    with pytest.raises(TraceError, match="schema version 99"):
        TraceWriter.resume(path)


def test_bad_appends(tmp_path):
    with new_trace(tmp_path / "t.h5", 1) as writer:
        with pytest.raises(ValueError, match="per_device/tx_power_w"):
            writer.append_per_device("tx_power_w", np.zeros(K + 1))
        with pytest.raises(ValueError, match="round 5"):
            writer.append_round({"round": 5})
        with pytest.raises(ValueError, match="holds integers"):
            writer.append_round({"uplink_symbols": 1.5})


READER = textwrap.dedent("""
    import sys, h5py
    from cosim.trace import read_trace, TraceError, TraceWriter
    data = read_trace(sys.argv[1])
    with h5py.File(sys.argv[1], "r") as f:  # plain h5py, default file locking
        raw = f["rounds/train_loss"].shape[0]
    try:
        TraceWriter.resume(sys.argv[1])
        second = "allowed"
    except TraceError as exc:
        second = "refused" if "another process" in str(exc) else str(exc)
    print(data.completed_rounds, data.rounds["train_loss"].shape[0], raw, second)
""")


def test_other_process_reads_while_writer_is_open(tmp_path):
    path = tmp_path / "t.h5"
    writer = new_trace(path, 2)
    write_round(writer, 2)  # mid-round: rows of round 2 exist, not committed
    writer.flush()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", READER, str(path)], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "2", "3", "refused"]
    writer.commit()
    writer.close()


KILLED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from tests.cosim.test_trace import new_trace, write_round
    from pathlib import Path
    writer = new_trace(Path(sys.argv[1]), 3)
    write_round(writer, 3)
    writer.flush()
    print("mid-round", flush=True)
    time.sleep(60)
""")


def test_resume_after_real_kill(tmp_path):
    reference = tmp_path / "ref.h5"
    new_trace(reference, 5).close()
    path = tmp_path / "killed.h5"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(path), str(ROOT)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "mid-round"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=300)
    assert read_trace(path).completed_rounds == 3
    writer, ck, start = TraceWriter.resume(path, SCENARIO)
    assert ck.completed_rounds == 3 == start
    for t in range(3, 5):
        write_round(writer, t)
        writer.commit()
    writer.close()
    assert_same(content(path), content(reference))


def test_engine_record_interface(tmp_path):
    """append(record) + commit_round(): the engine's one-call-per-round path."""
    from types import SimpleNamespace

    writer = TraceWriter.create(tmp_path / "t.h5", SCENARIO, seed=3, name="t")
    for t in range(2):
        record = SimpleNamespace(round=t, scalars={"round": float(t), "test_accuracy": 0.5 * t},
                                 per_device={"tx_power_w": np.full(K, 0.1)},
                                 reliability={"bin_count": np.arange(B)},
                                 signals={"h": np.ones((K, 4), np.complex64)} if t == 1 else {})
        writer.append(record)
        assert writer.commit_round(t, checkpoint={"w": np.full(3, t, np.float32)},
                                   checkpoint_attrs={"cumulative_channel_uses": 10.0 * t}) == t + 1
    with pytest.raises(ValueError, match="current round is 2"):
        writer.commit_round(5)
    writer.set_attrs(num_params=123)
    writer.close()
    data = read_trace(tmp_path / "t.h5")
    assert data.rounds["round"].dtype == np.int64 and data.attrs["name"] == "t"
    assert data.attrs["num_params"] == 123 and data.signal_rounds == [1]
    assert data.reliability["bin_count"].shape == (2, B)
    writer, ck, start = TraceWriter.resume(tmp_path / "t.h5", SCENARIO)
    writer.close()
    assert start == 2 and ck.attrs == {"cumulative_channel_uses": 10.0}


def test_summarize_posterior_and_channel_split(tmp_path):
    """`cosim inspect` shows the last round's posterior metrics and the uplink / downlink split;
    a trace written before the split gets it from the per-round symbol counts."""
    old = tmp_path / "old.h5"
    new_trace(old, 3).close()  # no cumulative_uplink_symbols, no round metrics
    text = summarize(old)
    assert "  posterior (" not in text
    # uplink 3 x 912 = 2736, downlink 40 + 41 + 42 = 123 symbols
    assert "channel  2859 OFDM symbols: uplink 2736 (95.7 %), downlink 123 (4.3 %)" in text

    path = tmp_path / "new.h5"
    with TraceWriter.create(path, SCENARIO, seed=3) as writer:
        for t, (change, fraction, std) in enumerate([(0.5, 1.0, 0.05), (0.0, 0.0, 0.04)]):
            writer.append_round({"uplink_symbols": 912.0, "downlink_symbols": 6.6e6,
                                 "cumulative_uplink_symbols": 912.0 * (t + 1),
                                 "cumulative_downlink_symbols": 6.6e6 * (t + 1),
                                 "precision_rel_change": change, "precision_changed_fraction": fraction,
                                 "posterior_std_p50": std})
            writer.commit()
    text = summarize(path)
    assert ("posterior (round 1) precision_rel_change 0, precision_changed_fraction 0, "
            "posterior_std_p50 0.04") in text
    assert "channel  1.32018e+07 OFDM symbols: uplink 1824 (0.0138 %), downlink 1.32e+07 (100 %)" in text


def test_summarize_uplink_seconds_and_energy(tmp_path):
    """`cosim inspect` shows the uplink's seconds and joules in total (the last running
    total) and per round (their mean); a trace without the running totals sums the rounds;
    one without the per-round columns has no such line."""
    old = tmp_path / "old.h5"
    new_trace(old, 3).close()
    assert "  uplink   " not in summarize(old)
    for cumulative in (True, False):
        path = tmp_path / f"cost-{cumulative}.h5"
        seconds, joules = [0.25, 0.5, 0.75], [1.5, 2.5, 3.5]
        with TraceWriter.create(path, SCENARIO, seed=3) as writer:
            for t in range(3):
                row = {"uplink_symbols": 912.0, "downlink_symbols": 40.0,
                       "uplink_seconds": seconds[t], "uplink_energy_j": joules[t]}
                if cumulative:  # as the run writes them
                    row |= {"cumulative_uplink_seconds": sum(seconds[:t + 1]),
                            "cumulative_uplink_energy_j": sum(joules[:t + 1])}
                writer.append_round(row)
                writer.commit()
        assert ("  uplink   1.5 s and 7.5 J (devices' transmit energy) in 3 rounds; "
                "per round 0.5 s, 2.5 J") in summarize(path).splitlines()


def test_resume_of_a_trace_damaged_by_a_full_disk_names_the_file(tmp_path):
    """``data/full_disk_trace.h5``: a real FedAvg trace at the paper's size whose first
    round was being written when the disk filled up (22,688 bytes; it opens, its groups
    point past its end)."""
    path = tmp_path / "t.h5"
    damaged = (ROOT / "tests" / "cosim" / "data" / "full_disk_trace.h5").read_bytes()
    path.write_bytes(damaged)
    with pytest.raises(TraceError, match=rf"cannot resume {path}: damaged HDF5 file .*--overwrite"):
        TraceWriter.resume(path)
    with pytest.raises(TraceError, match=rf"cannot (compact|read) trace {path}: "):
        drop_checkpoint(path)
    assert path.read_bytes() == damaged
    assert not list(tmp_path.glob(".*"))  # no .compact sibling left behind


def test_a_trace_without_its_checkpoint_reads_the_same_and_refuses_resume(tmp_path):
    path = tmp_path / "t.h5"
    new_trace(path, 4, name="run").close()
    before = read_trace(path)
    size = path.stat().st_size
    freed = drop_checkpoint(path)
    assert freed == size - path.stat().st_size > 0
    after = read_trace(path)
    assert after.completed_rounds == 4 and after.checkpoint_round is None
    assert after.attrs.pop("checkpoint_dropped") == 1 and after.attrs == before.attrs
    for name in before.rounds:
        np.testing.assert_array_equal(after.rounds[name], before.rounds[name], err_msg=name)
    for group, columns in before.series.items():
        for name, values in columns.items():
            np.testing.assert_array_equal(after.series[group][name], values, err_msg=name)
    for name, values in before.devices.items():
        np.testing.assert_array_equal(after.devices[name], values, err_msg=name)
    with h5py.File(path, "r") as f:
        assert "checkpoint" not in f
    assert not list(tmp_path.glob(".*"))
    with pytest.raises(TraceError, match="model state was dropped"):
        TraceWriter.resume(path)
    assert drop_checkpoint(path) == 0  # nothing left to drop
    bare = tmp_path / "bare.h5"  # no checkpoint ever written: marked all the same
    TraceWriter.create(bare, SCENARIO, seed=3).close()
    assert drop_checkpoint(bare) >= 0 and read_trace(bare).attrs["checkpoint_dropped"] == 1
    with pytest.raises(TraceError, match="model state was dropped after round 0"):
        TraceWriter.resume(bare)
    assert "(dropped by `cosim study compact`)" in summarize(path)


def test_a_trace_another_process_writes_is_not_compacted(tmp_path):
    path = tmp_path / "t.h5"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(path), str(ROOT)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "mid-round"
        before = path.read_bytes()
        with pytest.raises(TraceError, match="being written by another process"):
            drop_checkpoint(path)
        assert path.read_bytes() == before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=300)
    assert drop_checkpoint(path) > 0  # its writer gone, it is compacted
