"""``cosim.run`` around the engine, with a fake engine (no training, milliseconds per round):
the split channel-use totals across resume, and the warning when phase 1 is inert."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
from tiny_scenario import write_tiny

from cosim.engine import ChannelUses, Engine, RoundRecord
from cosim.inert_precision import INERT_ROUNDS, InertPrecisionWatch
from cosim.run import run_scenario
from cosim.scenario import load_scenario
from cosim.trace import TIMING_COLUMNS, read_trace

K = 2


def _seconds(t):
    """Round t's uplink seconds of the fake engine: not whole, so sums depend on their order."""
    return (3.0 + t % 2) * 7.1e-5 / 3.0


def _energy_j(t):
    return 1e-3 * math.sqrt(t + 1.0) / 7.0


def _running(values):
    """The running sums of ``values`` added one by one in order (as the run adds them)."""
    total, out = 0.0, []
    for value in values:
        total += value
        out.append(total)
    return np.array(out)


class FakeEngine:
    """What ``run_scenario`` needs of an engine; round t sends 3 + t % 2 uplink and 100 + t
    downlink symbols in ``_seconds(t)`` seconds with ``_energy_j(t)`` joules and reports ``fractions[t]`` as ``precision_rel_change``
    (None: the column is not written). ``stop_at``: raise KeyboardInterrupt before that round.
    The round loop is the real :meth:`Engine.rounds` (it adds the cumulative totals), with
    divergence not checked: a NaN ``precision_rel_change`` stands for a diverged round the
    run goes past (``--continue-on-divergence``)."""

    def rounds(self, state, start_round=0, divergence=None, channel_uses=None):
        never = SimpleNamespace(check=lambda t, scalars: [])
        return Engine.rounds(self, state, start_round, never, channel_uses)

    def __init__(self, scenario, fractions=None, stop_at=None):
        self.scenario = scenario
        self.fractions = fractions
        self.stop_at = stop_at
        self.num_params = 3
        self.world = SimpleNamespace(
            deployment=SimpleNamespace(positions_m=np.zeros((K, 2)), distances_m=np.ones(K)),
            path_gain=np.ones(K),
            partition=SimpleNamespace(num_samples=np.ones(K, np.int64)),
            label_histogram=np.ones((K, 4), np.int64),
        )
        self.algorithm = SimpleNamespace(
            state_to_arrays=lambda state: {"w": np.full(3, state, np.float32)},
            state_from_arrays=lambda arrays: float(arrays["w"][0]),
        )

    def initial_state(self):
        return 0.0

    def run_round(self, t, state):
        if t == self.stop_at:
            raise KeyboardInterrupt
        scalars = {"uplink_symbols": 3.0 + t % 2, "downlink_symbols": 100.0 + t,
                   "uplink_seconds": _seconds(t), "uplink_energy_j": _energy_j(t),
                   "test_accuracy": math.nan, "ece": math.nan, "model_finite": 1.0,
                   "wall_s": 0.0}
        if self.fractions is not None and self.fractions[t] is not None:
            scalars["precision_rel_change"] = self.fractions[t]
        return state + 1.0, RoundRecord(t, scalars=scalars)


def _scenario(directory, rounds):
    return load_scenario(write_tiny(directory, rounds=rounds, every=rounds))


def _straight_and_stopped(tmp_path, rounds: int = 6, stop_at: int = 4):
    """The same scenario run straight through ``rounds`` rounds (in ``tmp_path/full``) and
    stopped by a KeyboardInterrupt at round ``stop_at`` (in ``tmp_path/cut``), both with
    :class:`FakeEngine`: ``(straight, stopped)`` scenarios."""
    (tmp_path / "full").mkdir()
    (tmp_path / "cut").mkdir()
    full, cut = _scenario(tmp_path / "full", rounds), _scenario(tmp_path / "cut", rounds)
    run_scenario(full, progress=False, engine=FakeEngine(full))
    with pytest.raises(KeyboardInterrupt):
        run_scenario(cut, progress=False, engine=FakeEngine(cut, stop_at=stop_at))
    return full, cut


def _as_an_older_version_wrote_it(path, rows, keep_attr) -> None:
    """The trace at ``path`` without the ``/rounds`` datasets ``rows`` and with only the
    checkpoint attributes for which ``keep_attr(key)`` holds."""
    with h5py.File(path, "r+") as f:
        for name in rows:
            del f[f"rounds/{name}"]
        for slot in f["checkpoint"].values():
            attrs = json.loads(slot.attrs["attrs_json"])
            slot.attrs["attrs_json"] = json.dumps({k: v for k, v in attrs.items() if keep_attr(k)})


def test_split_channel_uses_and_resume_from_a_checkpoint_without_them(tmp_path):
    """The three cumulative columns add up; a trace whose checkpoints predate the split
    resumes with the split summed from its rows and ends equal to an uninterrupted run."""
    full, old = _straight_and_stopped(tmp_path)
    rounds = read_trace(full.trace_path).rounds
    up, down = np.cumsum(3.0 + np.arange(6) % 2), np.cumsum(100.0 + np.arange(6))
    np.testing.assert_array_equal(rounds["cumulative_uplink_symbols"], up)
    np.testing.assert_array_equal(rounds["cumulative_downlink_symbols"], down)
    np.testing.assert_array_equal(rounds["cumulative_channel_uses"], up + down)

    _as_an_older_version_wrote_it(old.trace_path, ["cumulative_uplink_symbols", "cumulative_downlink_symbols"],
                                  lambda key: key == "cumulative_channel_uses")
    summary = run_scenario(old, resume=True, progress=False, engine=FakeEngine(old))
    assert summary.channel_uses == up[-1] + down[-1]
    resumed = read_trace(old.trace_path).rounds
    np.testing.assert_array_equal(resumed["cumulative_channel_uses"], up + down)
    for name, expected in (("cumulative_uplink_symbols", up), ("cumulative_downlink_symbols", down)):
        assert np.all(np.isnan(resumed[name][:4]))  # rows of the old version stay missing
        np.testing.assert_array_equal(resumed[name][4:], expected[4:])
    with h5py.File(old.trace_path, "r") as f:
        attrs = json.loads(f["checkpoint/slot_1"].attrs["attrs_json"])  # after round 5
    assert attrs == {"cumulative_channel_uses": up[-1] + down[-1],
                     "cumulative_uplink_symbols": up[-1], "cumulative_downlink_symbols": down[-1],
                     "cumulative_uplink_seconds": _running(map(_seconds, range(6)))[-1],
                     "cumulative_uplink_energy_j": _running(map(_energy_j, range(6)))[-1]}


TOTALS = (("cumulative_uplink_seconds", _seconds), ("cumulative_uplink_energy_j", _energy_j))


@pytest.mark.parametrize("checkpoint", ["with the totals", "without the totals", "without the rows"])
def test_uplink_seconds_and_energy_totals_resume_bit_for_bit(tmp_path, checkpoint):
    """cumulative_uplink_seconds / _energy_j are the rounds' values added in order; a run
    stopped after round 3 and resumed writes the same bits as one that never stopped,
    from the checkpoint's totals or, for a checkpoint written before them, from the
    committed rows (summed in the same order). A trace with no rows of them resumes with
    NaN totals (its earlier rounds' time and energy are unknown), never a partial sum."""
    full, cut = _straight_and_stopped(tmp_path)
    straight = read_trace(full.trace_path).rounds
    for name, value in TOTALS:
        expected = _running(map(value, range(6)))
        np.testing.assert_array_equal(straight[name], expected)

    if checkpoint != "with the totals":  # as a version before these totals wrote it
        rows = [name for name, _ in TOTALS]
        if checkpoint == "without the rows":
            rows += [name.removeprefix("cumulative_") for name in rows]
        _as_an_older_version_wrote_it(cut.trace_path, rows, lambda key: key not in dict(TOTALS))
    run_scenario(cut, resume=True, progress=False, engine=FakeEngine(cut))
    resumed = read_trace(cut.trace_path).rounds
    for name, _ in TOTALS:
        if checkpoint == "with the totals":
            np.testing.assert_array_equal(resumed[name], straight[name])
        elif checkpoint == "without the totals":
            assert np.all(np.isnan(resumed[name][:4]))  # rows of the old version stay missing
            np.testing.assert_array_equal(resumed[name][4:], straight[name][4:])
        else:
            assert np.all(np.isnan(resumed[name]))


def test_engine_rounds_carry_the_cumulative_channel_uses(tmp_path):
    """Engine.rounds writes the running totals into every record, from a fresh
    ChannelUses or continuing the one it is given; a later start needs the totals."""
    scenario = _scenario(tmp_path, 4)
    engine = FakeEngine(scenario)
    up, down = np.cumsum(3.0 + np.arange(4) % 2), np.cumsum(100.0 + np.arange(4))
    records = [record for _, record in engine.rounds(0.0)]
    for name, expected in (("cumulative_uplink_symbols", up), ("cumulative_downlink_symbols", down),
                           ("cumulative_channel_uses", up + down)):
        assert [r.scalars[name] for r in records] == expected.tolist(), name
    with pytest.raises(ValueError, match="start_round = 2 needs channel_uses"):
        next(engine.rounds(0.0, start_round=2))
    uses = ChannelUses(uplink=float(up[1]), downlink=float(down[1]))
    later = [record for _, record in engine.rounds(0.0, start_round=2, channel_uses=uses)]
    assert [r.scalars["cumulative_channel_uses"] for r in later] == (up + down)[2:].tolist()
    assert {name: later[-1].scalars[name] for name in uses.attrs()} == uses.attrs()
    assert uses.total == up[-1] + down[-1]


def test_inert_precision_warns_once_naming_the_key(tmp_path, capsys):
    zeros = [0.0, 1e-10] * 6  # no change, and the precision reading's 1e-10 per round
    fractions = [0.5, 0.0, 1e-6, *zeros, 0.3, *zeros]
    scenario = _scenario(tmp_path, len(fractions))
    run_scenario(scenario, progress=False, engine=FakeEngine(scenario, fractions))
    err = capsys.readouterr().err
    assert err.count("warning") == 1, err
    assert f"for {INERT_ROUNDS} rounds (trace rounds 3-12)" in err and "less than 1e-06" in err
    assert "phase 1 is inert" in err
    assert 'algorithm.covariance_parameter = "softplus_std" (or "log_std")' in err
    assert f'(it is "{scenario.algorithm.covariance_parameter}")' in err


@pytest.mark.parametrize(
    "fractions",
    [
        [0.0] * (INERT_ROUNDS - 1) + [0.1] + [0.0] * (INERT_ROUNDS - 1),  # never ten in a row
        [0.0] * 5 + [math.nan] + [0.0] * 5,  # NaN (a diverged round) breaks the streak
        [2e-6] * (2 * INERT_ROUNDS),  # small, but above the threshold: the posterior moves
        None,  # algorithms without the column (FedAvg)
    ],
)
def test_no_warning_without_ten_unchanged_rounds(tmp_path, capsys, fractions):
    scenario = _scenario(tmp_path, 2 * INERT_ROUNDS - 1 if fractions is None else len(fractions))
    run_scenario(scenario, progress=False, engine=FakeEngine(scenario, fractions))
    assert "warning" not in capsys.readouterr().err


def test_inert_streak_spans_a_resume(tmp_path, capsys):
    """Six unchanged rounds before an interruption and four after it are ten in a row."""
    fractions = [0.2] + [0.0] * 12
    scenario = _scenario(tmp_path, len(fractions))
    with pytest.raises(KeyboardInterrupt):
        run_scenario(scenario, progress=False, engine=FakeEngine(scenario, fractions, stop_at=7))
    assert "warning" not in capsys.readouterr().err
    run_scenario(scenario, resume=True, progress=False, engine=FakeEngine(scenario, fractions))
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "(trace rounds 1-10)" in err, err


def test_watch_alone():
    watch = InertPrecisionWatch(rounds=2, history=[0.0, 0.0], current="log_std")
    # history never warns by itself; the first new round of the streak does
    message = watch.observe(2, 0.0)
    assert "(trace rounds 0-1)" in message and message.endswith('(it is "log_std")')
    assert watch.warned
    assert watch.observe(3, 0.0) is None
    with pytest.raises(ValueError, match="rounds must be >= 1, got 0"):
        InertPrecisionWatch(rounds=0)


def test_tensorboard_scalars_equal_the_trace(tmp_path):
    """`cosim run --tensorboard DIR`: one TensorBoard scalar per finite /rounds value,
    tagged with the column's name, step = round."""
    import tensorflow as tf

    from cosim.cli import main

    board = tmp_path / "board"
    assert main(["run", str(write_tiny(tmp_path, rounds=3, every=2)), "--no-plots",
                 "--tensorboard", str(board)]) == 0
    found: dict[tuple[str, int], float] = {}
    for events in board.glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                found[(value.tag, event.step)] = float(tf.make_ndarray(value.tensor))
    trace = read_trace(tmp_path / "tiny-seed3.h5")
    expected = {(name, r): float(column[r]) for name, column in trace.rounds.items()
                if np.ndim(column) == 1 and name not in ("round", *TIMING_COLUMNS)
                for r in range(trace.completed_rounds) if np.isfinite(column[r])}
    assert ("test_accuracy", 1) in expected and ("test_accuracy", 0) not in found
    for key, value in expected.items():
        np.testing.assert_allclose(found[key], value, rtol=1e-6, err_msg=str(key))


def test_the_first_round_is_reported_apart_with_the_compile_in_it():
    """Plain progress lines (no terminal): the process's first round gets a line of its own
    at once, evaluated or not, with its own time and the compile named; the later lines
    give each round's own time. A resumed run's first round is the one it starts at."""
    import io

    from cosim.run import COMPILE_NOTE, Progress

    def record(t: int, wall: float, accuracy: float = math.nan) -> RoundRecord:
        return RoundRecord(t, scalars={"wall_s": wall, "test_accuracy": accuracy})

    for first in (0, 4):
        stream = io.StringIO()
        progress = Progress(total=first + 3, initial=first, name="q", stream=stream)
        progress.update(record(first, 134.2), 10.0)
        lines = stream.getvalue().splitlines()
        assert lines == [f"[q] round {first + 1}/{first + 3} acc=nan uses=10 (round {first}: "
                         "134.2 s, the kernels' compile included; the rounds after it are timed "
                         "apart)"]
        progress.update(record(first + 1, 0.41), 20.0)  # not evaluated: no line
        progress.update(record(first + 2, 0.43, 0.85), 30.0)
        assert stream.getvalue().splitlines()[1:] == [
            f"[q] round {first + 3}/{first + 3} acc=0.850 uses=30 (0.43 s/round)"]
    assert "134 s on 2026-12-01" in COMPILE_NOTE
