"""Cost of the privacy accountant per round at the paper's size (issue 43).

Times what a round adds with ``[privacy]``: :func:`phy.privacy.phase_mechanism` for both
phases (K = 100 devices, F = 1024 subcarriers, N = 456 symbols) and
:func:`cosim.privacy.privacy_columns` (the library accountant composing the round), over
``--rounds`` rounds, in two regimes: the paper's PHY (20 dBm, -74 dBm noise: noise
multipliers near 1e-5, epsilon astronomically large, so the RDP bound is reported) and a
private one (every noise multiplier near 1, where the PLD accountant runs every round).
Prints, per accountant and regime, the mean and the last rounds' mean seconds per round
and their share of a 1.0 s LRT round (README/benchmarks/README.md). NumPy only.

With ``--project-rounds S`` it times the project's own rounds instead, in one process:
the paper's MNIST scenario (``scenarios/paper_mnist.toml``, the LRT estimator, no
evaluation in the timed rounds) without and with ``[privacy]``, at the paper's power (the
RDP bound reported) and at -47 dBm (noise multipliers near 1, the PLD accountant
composing every round); each configuration built and warmed up, its account fed
``--ledger-rounds`` copies of its warm-up round (untimed: the timed rounds are those of a
run that far on), then S rounds of each interleaved.
What privacy adds to a round is timed inside that round: the uplink's mechanisms
(``RoundLink._private`` of both phases) and the account's
:meth:`cosim.privacy.PrivacyAccount.add` (the library's composition and both epsilons);
their share of the same round is the ratio reported (both timed under the same load),
with the paired ratio of whole rounds to the adjacent round without privacy at the same
power beside it.

    .venv/bin/python benchmarks/privacy_cost.py               # 100 rounds
    .venv/bin/python benchmarks/privacy_cost.py --rounds 20
    .venv/bin/python benchmarks/privacy_cost.py --project-rounds 4
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


PROJECT_CONFIGS = {
    "20 dBm off": [],
    "20 dBm on": ["privacy.delta=1e-5"],
    "-47 dBm off": ["power.tx_power_dbm=-47"],
    "-47 dBm on": ["power.tx_power_dbm=-47", "privacy.delta=1e-5"],
}
"""The configurations of ``--project-rounds``: overrides of the paper's MNIST scenario, each
power without and with ``[privacy]`` (at -47 dBm the realised worst multiplier of seed 1's
drop is near 1: its nearest device is farther than the 10 m the projection assumes)."""


def run_project_rounds(steps: int, ledger_rounds: int, warmup: int = 1) -> None:
    import statistics
    from pathlib import Path

    from cosim.engine import Engine
    from cosim.scenario import load_scenario
    from phy.uplink import block as block_module

    path = Path(__file__).resolve().parents[1] / "scenarios" / "paper_mnist.toml"
    base = ["algorithm.estimator=local_reparameterization", "rounds=100000", "eval.every=100000"]
    mechanism_s = [0.0]
    private = block_module.RoundLink._private

    def timed(self, phase, link):
        started = time.perf_counter()
        out = private(self, phase, link)
        mechanism_s[0] += time.perf_counter() - started
        return out

    block_module.RoundLink._private = timed
    runs = {}
    for name, overrides in PROJECT_CONFIGS.items():
        engine = Engine(load_scenario(str(path), [*base, *overrides]))
        run_ = {"engine": engine, "state": engine.initial_state(), "t": 0,
                "account": engine.privacy_account(), "mechanism_s": mechanism_s}
        runs[name] = run_
        for _ in range(warmup):
            _project_step(run_)
        if run_["account"] is not None:  # the timed rounds are rounds ledger_rounds + 1, ...
            for _ in range(ledger_rounds):
                run_["account"].ledger.compose(run_["account"].event(run_["last"]))
        for key in ("round_s", "account_s", "phy_s"):
            run_[key] = []
        print(f"built and warmed up: {name}", flush=True)
    for _ in range(steps):
        for run_ in runs.values():
            _project_step(run_)
    for name, run_ in runs.items():
        line = f"{name:12s} round {statistics.median(run_['round_s']):.3f} s (median of {steps})"
        if name.endswith(" on"):
            off = runs[name.replace(" on", " off")]["round_s"]
            record = run_["last"]
            share = [(m + a) / r for m, a, r in zip(run_["phy_s"], run_["account_s"], run_["round_s"],
                                                    strict=True)]
            paired = [(r + a) / o for r, a, o in zip(run_["round_s"], run_["account_s"], off, strict=True)]
            line += (f", mechanisms {statistics.median(run_['phy_s']) * 1e3:.2f} ms, account "
                     f"{statistics.median(run_['account_s']) * 1e3:.2f} ms after {ledger_rounds} "
                     f"rounds; (mechanisms + account) / its round {100 * statistics.median(share):.3f} % "
                     f"(median; {', '.join(f'{100 * x:.3f}' for x in share)}); paired (round + "
                     f"account) / its off round {statistics.median(paired):.3f} "
                     f"({', '.join(f'{x:.3f}' for x in paired)}); z_rho = "
                     f"{record['privacy_noise_multiplier_rho']:.3g}, epsilon "
                     f"{record['privacy_epsilon']:.6g}")
        print(line, flush=True)


def _project_step(run_: dict) -> None:
    run_["mechanism_s"][0] = 0.0
    started = time.perf_counter()
    run_["state"], record = run_["engine"].run_round(run_["t"], run_["state"])
    middle = time.perf_counter()
    if run_["account"] is not None:
        run_["account"].add(record.scalars)
    if "round_s" in run_:
        run_["round_s"].append(middle - started)
        run_["account_s"].append(time.perf_counter() - middle)
        run_["phy_s"].append(run_["mechanism_s"][0])
    run_["last"] = record.scalars
    run_["t"] += 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--project-rounds", type=int, default=None,
                        help="time S of the project's paper-size rounds per configuration")
    parser.add_argument("--ledger-rounds", type=int, default=195,
                        help="rounds composed (untimed) before the timed project rounds")
    args = parser.parse_args()
    if args.project_rounds is not None:
        run_project_rounds(args.project_rounds, args.ledger_rounds)
    else:
        run(args.rounds)
