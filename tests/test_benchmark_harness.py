"""The round-time benchmark (benchmarks/round_time.py) runs end to end on a tiny configuration.

No timing assertions: only that the harness runs every configuration, that the last
line of its output is the JSON summary with positive figures, and that rounds whose
training diverged are flagged.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "round_time.py"
KEYS = ("exact_s", "lrt_s", "reference_s", "floor_s", "phy_share", "peak_rss_gib", "shipped_exact_s",
        "shipped_lrt_s", "shipped_over_literal_exact", "shipped_over_literal_lrt")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--repeats", "1", "--warmup", "1", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )


def test_tiny_round_time_prints_json_summary_last():
    result = _run("--in-process")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert not summary["errors"], summary["errors"]
    for key in KEYS:
        assert isinstance(summary[key], float) and summary[key] > 0, (key, summary[key])
    assert summary["phy_share"] < 1.0
    assert summary["nonfinite_rounds"] == {"exact": 0, "lrt": 0}
    table = "\n".join(lines[:-1])
    for name in ("reparameterization", "local_reparameterization", "reference", "RNG floor"):
        assert name in table


def test_subprocess_worker_reports_its_own_peak_memory():
    result = _run("--only", "floor")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["floor_s"] > 0 and summary["floor_generator"]
    assert summary["exact_s"] is None and not summary["errors"]


def test_diverged_rounds_are_flagged_not_timed_silently():
    result = _run("--in-process", "--only", "exact", "--set", "algorithm.learning_rate=1e8")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert not summary["errors"], summary["errors"]
    assert summary["nonfinite_rounds"] == {"exact": 1}
    assert any(line.startswith("WARNING: 1 timed exact round(s) diverged") for line in lines)


def test_worker_over_the_memory_limit_is_killed_and_reported():
    result = _run("--only", "floor,lrt", "--memory-limit-gib", "0.3")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    for config in ("floor", "lrt"):
        assert summary["errors"][config].startswith("killed: RSS passed the 0.3 GiB limit")
    assert summary["floor_s"] is None and summary["lrt_s"] is None


@pytest.mark.parametrize("option,value", [("--repeats", "0"), ("--reference-repeats", "0"),
                                          ("--warmup", "-1"), ("--memory-limit-gib", "0")])
def test_bad_options_are_refused_naming_the_option(option, value):
    result = subprocess.run([sys.executable, str(SCRIPT), option, value], capture_output=True,
                            text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 2
    assert f"{option} must be" in result.stderr and f"got {value}" in result.stderr


def test_tiny_uplink_time_prints_json_summary_last():
    """benchmarks/uplink_time.py (issue 21's cost figure) runs on a tiny grid: every
    configuration timed, both rounds run without divergence, the ratio printed."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "uplink_time.py"), "--tiny"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("frequency_s", "time_aligned_s", "time_in_CP_and_CFO_s",
                "time_beyond_CP_and_CFO_s", "lrt_frequency_round_s", "lrt_time_round_s",
                "time_uplink_per_lrt_round"):
        assert isinstance(summary[key], float) and summary[key] > 0, (key, summary[key])
    assert summary["lrt_frequency_nonfinite_rounds"] == summary["lrt_time_nonfinite_rounds"] == 0
