"""Every Numba kernel that Python launches compiles once (native/launch.py).

Numba compiles a kernel once per tuple of argument types, and an array's writeable
flag is part of its type; a kernel that one path reaches with a TensorFlow tensor's
read-only memory and another with a writeable array compiles twice (20 s for the
largest). This test runs a few rounds of the main paths in a fresh process (the exact
and the local reparameterization estimator on the Numba backend, the TensorFlow
backend with Philox noise, the time-domain uplink, two covariance readings, the KKT
power control and a generic one in both domains, FedAvg's Numba steps, moving devices'
analog phases, digital OFDMA's quantized sums) and counts
the specialisations of the kernels launched from Python.

It lives at the root of tests/, collected last, so that it runs after most of the
other tests (the other worker may still be on its last file), with Numba's cache of
most kernels written; a kernel still uncached is compiled here, which changes no
count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "cosim"))
from tiny_scenario import time_domain, write_tiny

KERNELS = {  # the kernels launched from Python, by module
    "native.sampling": ["_fill", "_grad"],
    "learning.local.fused_local": ["phase1_std", "_rho_update", "_shifted_mean", "_nu_update",
                             "precision_change", "phase2_ratio", "phase2_update"],
    "learning.local.fused_lrt": ["_rho_phase", "_nu_phase"],
    "learning.local.fused_mlp": ["_dense_forward", "_dense_backward", "_bias_backward"],
    "learning.local.fused_sgd": ["_sgd_phase"],
    "phy.grid_sums": ["_grid_sums", "_gather"],
    "phy.aggregate_error": ["_aggregate_error", "_accumulate"],
    "phy.optimal_rows": ["_multipliers", "_corrections", "_amplitudes"],
    "phy.ofdm_time": ["_clean_sum", "_precode", "_combine", "_cfo_series"],
    "phy.symbol_gains": ["_equal", "_gains"],
    "phy.doppler": ["_at", "_along", "_along_narrow", "_rotations"],
    "phy.quantized_sums": ["_add_quantized"],
    "phy.moving_tr38901": ["_turns"],
}

TIME_DOMAIN = time_domain(20.0, 0.02)  # offsets beyond the prefix, and CFOs
# offsets whose taps (4 taps, sinc tails of 6) stay inside the prefix: the CFO series
TIME_DOMAIN_IN_PREFIX = time_domain(1.0, 0.02)

PATHS = [
    ['algorithm.estimator="reparameterization"'],
    ['algorithm.estimator="reparameterization"', 'algorithm.covariance_parameter="softplus_std"'],
    ['algorithm.estimator="local_reparameterization"'],
    ['algorithm.estimator="local_reparameterization"',
     'algorithm.covariance_parameter="softplus_std"', *TIME_DOMAIN],
    ['algorithm.estimator="reparameterization"', 'runtime.backend="tensorflow"',
     'runtime.noise="philox"', 'power.control="truncated_inversion"'],
    ['algorithm.estimator="local_reparameterization"', 'power.control="truncated_inversion"',
     *TIME_DOMAIN_IN_PREFIX],
    ['algorithm.name="fedavg"', 'runtime.backend="numba"'],
    ['mobility.model="straight"', "mobility.speed_mps=[1.0, 30.0]",  # the channel per symbol
     'mobility.channel_within_phase="per_symbol"'],
    ['mobility.model="straight"', "mobility.speed_mps=1.0", 'channel.model="flat_rayleigh"',
     'mobility.channel_within_phase="per_symbol"'],  # one process a device: float64 steps
    ['mobility.model="straight"', "mobility.speed_mps=1.0", 'channel.model="umi"'],  # a 3GPP cell's rays
    ['algorithm.estimator="local_reparameterization"', "runtime.devices_in_memory=3"],  # a streamed round
    ['uplink.scheme="digital_ofdma"', 'algorithm.name="fedavg"'],  # the quantized sums
]

SCRIPT = """
import importlib, json, sys
from cosim.engine import Engine
from cosim.scenario import load_scenario

path, paths, kernels = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
for overrides in paths:
    engine = Engine(load_scenario(path, overrides))
    state = engine.initial_state()
    for t in range(2):
        state, _ = engine.run_round(t, state)
counts = {f"{module}.{name}": [str(s) for s in getattr(importlib.import_module(module), name).signatures]
          for module, names in kernels.items() for name in names}
print(json.dumps(counts))
"""


def test_every_kernel_launched_from_python_compiles_once(tmp_path):
    scenario = write_tiny(tmp_path, rounds=2, every=100, hidden=8)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(scenario), json.dumps(PATHS),
                           json.dumps(KERNELS)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    signatures = json.loads(done.stdout.strip().splitlines()[-1])
    unused = [name for name, found in signatures.items() if not found]
    assert not unused, f"not launched by these paths (the list is stale?): {unused}"
    twice = {name: found for name, found in signatures.items() if len(found) > 1}
    assert not twice, f"compiled more than once (an input not passed read_only?): {twice}"
