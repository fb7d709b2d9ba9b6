"""A tiny synthetic scenario shared by the engine and CLI tests (seconds, not minutes)."""

from __future__ import annotations

from pathlib import Path

TINY_TOML = """
name = "tiny"
seed = 3
rounds = {rounds}

[cell]
num_devices = 8
radius_m = 100.0
min_distance_m = 10.0

[ofdm]
num_subcarriers = 64

[data]
dataset = "synthetic"
partition = "labels_per_device"
labels_per_device = 2
mean_samples_per_device = 20
size_distribution = "shifted_poisson"
synthetic_classes = 4
synthetic_shape = [6, 6, 1]
synthetic_train_size = 1200
synthetic_test_size = 300

[model]
architecture = "mlp"
hidden_units = [{hidden}]

[algorithm]
name = "{algorithm}"
learning_rate = {learning_rate}

[eval]
every = {every}
predictive_samples = 4

[trace]
path = "{trace_dir}/{{name}}-seed{{seed}}.h5"
"""


def write_tiny(
    directory: Path,
    *,
    rounds: int = 4,
    every: int = 2,
    algorithm: str = "bayes_aircomp",
    learning_rate: float = 0.05,
    hidden: int = 16,
    trace_dir: Path | None = None,
    file_name: str = "tiny.toml",
) -> Path:
    path = directory / file_name
    path.write_text(
        TINY_TOML.format(
            rounds=rounds,
            every=every,
            algorithm=algorithm,
            learning_rate=learning_rate,
            hidden=hidden,
            trace_dir=(trace_dir or directory).as_posix(),
        )
    )
    return path


def time_domain(timing_offset_max_samples: float, cfo_max_subcarriers: float) -> list[str]:
    """``--set`` overrides for the time-domain uplink of the tiny scenario: a 16-sample
    cyclic prefix, 4-tap channels, timing offsets U[0, max] samples (beyond the prefix
    above 16) and CFOs U[-max, max] subcarriers."""
    return ['ofdm.domain="time"', "ofdm.cyclic_prefix_length=16", "channel.num_taps=4",
            f"sync.timing_offset_max_samples={timing_offset_max_samples}",
            f"sync.cfo_max_subcarriers={cfo_max_subcarriers}"]
