"""Cost of the privacy accountant per round at the paper's size (issue 43).

Times what a round adds with ``[privacy]``: :func:`phy.privacy.phase_mechanism` for both
phases (K = 100 devices, F = 1024 subcarriers, N = 456 symbols) and
:func:`cosim.privacy.privacy_columns` (the library accountant composing the round), over
``--rounds`` rounds, in two regimes: the paper's PHY (20 dBm, -74 dBm noise: noise
multipliers near 1e-5, epsilon astronomically large, so the RDP bound is reported) and a
private one (every noise multiplier near 1, where the PLD accountant runs every round).
Prints, per accountant and regime, the mean and the last rounds' mean seconds per round
and their share of a 1.0 s LRT round (README/benchmarks/README.md). NumPy only.

    .venv/bin/python benchmarks/privacy_cost.py               # 100 rounds
    .venv/bin/python benchmarks/privacy_cost.py --rounds 20
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cosim.privacy import PrivacyLedger, privacy_columns, projected_epsilon, round_event
from phy.privacy import phase_mechanism

ROUND_S = 1.0  # the LRT round at the paper's size (benchmarks/README.md)


def _regime(rng, num_devices, num_subcarriers, noise_power_w):
    distance_m = np.sqrt(rng.uniform(10.0**2, 300.0**2, num_devices))
    gain = distance_m[:, None] ** -4.0 * rng.exponential(size=(num_devices, num_subcarriers))
    scaling = 0.01 / np.sqrt(gain)  # pi sqrt(gamma / delta_bar) / |h|, perfect CSI
    return gain, scaling, noise_power_w


def run(rounds: int) -> None:
    rng = np.random.default_rng(0)
    k, f, n, power_w = 100, 1024, 456, 0.1
    regimes = {"paper PHY": 10**(-7.4 - 3), "z ~ 1": None}
    for regime, noise_w in regimes.items():
        gain, scaling, _ = _regime(rng, k, f, noise_w)
        if noise_w is None:  # the noise that puts the worst device's multiplier at 1
            noise_w = 2.0 * n * power_w * gain.max()
        for accountant in ("pld", "rdp"):
            mechanisms = {name: phase_mechanism(
                channel_gain=gain, tx_scaling=scaling, sent=np.ones(k, bool), num_symbols=n,
                tx_power_w=power_w, noise_power_w=noise_w, budgeted=True) for name in ("rho", "nu")}
            z = [m.worst_noise_multiplier for m in mechanisms.values()]
            expected = projected_epsilon(round_event(z), rounds, 1e-5, "rdp")
            ledger = PrivacyLedger(1e-5, accountant, expected_epsilon=expected)
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                mechanisms = {name: phase_mechanism(
                    channel_gain=gain, tx_scaling=scaling, sent=np.ones(k, bool), num_symbols=n,
                    tx_power_w=power_w, noise_power_w=noise_w, budgeted=True)
                    for name in ("rho", "nu")}
                columns = privacy_columns(ledger, mechanisms)
                times.append(time.perf_counter() - started)
            last = np.mean(times[-10:])
            print(f"{regime:10s} {accountant}: z = {z[0]:.3g}, epsilon after {rounds} rounds = "
                  f"{columns['privacy_epsilon']:.6g}; {np.mean(times) * 1e3:.2f} ms/round mean, "
                  f"{last * 1e3:.2f} ms over the last 10 ({100 * last / ROUND_S:.2f} % of a "
                  f"{ROUND_S:g} s round)", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    run(parser.parse_args().rounds)
