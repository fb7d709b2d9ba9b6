"""What each place of ``geometry_quickstart`` gives its devices, without training.

For every place (a shipped scenario) and seed, the drop the run would make (its
deployment and path gains, the ray-traced drops from the cache in ``--cache-dir``'s
working directory) and the channel of a few rounds, and from them:

* the path gain per device [dB]: its 5th, 50th and 95th percentiles and their spread,
  and the SNR at the transmit power P over the noise sigma_z^2 at the median device;
* the frequency correlation |sum_f H_f H*_(f+lag)| / sum_f |H_f|^2 at lags of 1, 10
  and 100 subcarriers (30 kHz, 300 kHz, 3 MHz), the median over devices and rounds;
* the correlation of a device's channel between two rounds (its coefficients' inner
  product over the subcarriers, normalised), the median over devices;
* for the ray-traced places, the strongest path's share of the power (a Rician
  K-factor-like measure: 1 for a single path) and the paths per device.

Usage: ``python benchmarks/geometry_places.py [--seeds 1 2 3 4 5] [--rounds 4]
[--set KEY=VALUE ...]`` from the directory whose ``runs/ray_traced_cache`` holds the
drops (else they are traced, about a minute each). Prints one block per place.
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

from cosim import rng as rngs
from cosim.scenario import load_scenario
from cosim.scenario.scene import traces_scene
from cosim.world import _channel_of, _static_data
from native.streams import CHANNEL

PLACES = ("quickstart", "umi_quickstart", "munich_quickstart", "etoile_quickstart")
LAGS = (1, 10, 100)


def _frequency_correlation(h: np.ndarray, lag: int) -> np.ndarray:
    """``[K]``: |sum_f H_f H*_(f+lag)| / sum_f |H_f|^2 per device of ``h`` [K, F]."""
    inner = np.abs(np.sum(h[:, lag:] * np.conj(h[:, :-lag]), axis=1))
    return inner / np.maximum(np.sum(np.abs(h) ** 2, axis=1), 1e-300)


def _round_correlation(h0: np.ndarray, h1: np.ndarray) -> np.ndarray:
    """``[K]``: |<h0_k, h1_k>| / (||h0_k|| ||h1_k||) over the subcarriers."""
    inner = np.abs(np.sum(h0 * np.conj(h1), axis=1))
    norms = np.linalg.norm(h0, axis=1) * np.linalg.norm(h1, axis=1)
    return inner / np.maximum(norms, 1e-300)


def place_facts(name: str, seed: int, rounds: int, overrides: list[str]) -> dict:
    """The facts of one place's drop at ``seed`` (the module docstring's list)."""
    scenario = load_scenario(name, [*overrides, f"seed={seed}"])
    static = _static_data(scenario)
    channel = static["channel"] or _channel_of(scenario, static["deployment"])
    gain_db = 10.0 * np.log10(static["path_gain"])
    path_gain = tf.constant(static["path_gain"], tf.float32)
    responses = [channel(path_gain, rngs.stream_seed(seed, t, CHANNEL)).numpy()
                 for t in range(1, rounds + 1)]
    facts = {
        "gain_db": np.percentile(gain_db, [5, 50, 95]),
        "snr_median_db": scenario.power.tx_power_dbm - scenario.power.noise_power_dbm + np.median(gain_db),
        "freq_corr": {lag: float(np.median([_frequency_correlation(h, lag) for h in responses])) for lag in LAGS},
        "round_corr": float(np.median(_round_correlation(responses[0], responses[1]))),
    }
    if traces_scene(scenario.channel.model):
        a, _ = channel.cir(None, rngs.stream_seed(seed, 1, CHANNEL))
        power = np.abs(a.numpy()) ** 2
        facts["strongest_share"] = float(np.median(power.max(axis=1) / np.maximum(power.sum(axis=1), 1e-300)))
        facts["paths"] = float(np.median(np.sum(power > 0, axis=1)))
    return facts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--places", nargs="+", default=list(PLACES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--set", dest="overrides", action="append", default=["cell.radius_m=200.0"])
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error(f"--rounds: at least 2, for the round-to-round correlation (got {args.rounds})")
    for name in args.places:
        rows = [place_facts(name, seed, args.rounds, args.overrides) for seed in args.seeds]
        gains = np.mean([r["gain_db"] for r in rows], axis=0)
        print(f"{name}: path gain p5/p50/p95 {gains[0]:.1f}/{gains[1]:.1f}/{gains[2]:.1f} dB "
              f"(spread p95-p5 {gains[2] - gains[0]:.1f} dB), median device's SNR at P "
              f"{np.mean([r['snr_median_db'] for r in rows]):.1f} dB (mean over {len(rows)} seeds)")
        corr = ", ".join(f"{lag}: {np.mean([r['freq_corr'][lag] for r in rows]):.3f}" for lag in LAGS)
        print(f"  frequency correlation by lag in subcarriers {corr}; round to round "
              f"{np.mean([r['round_corr'] for r in rows]):.3f}")
        if "paths" in rows[0]:
            print(f"  strongest path's share of the power {np.mean([r['strongest_share'] for r in rows]):.2f}, "
                  f"paths per device {np.mean([r['paths'] for r in rows]):.1f} (medians over devices)")


if __name__ == "__main__":
    main()
