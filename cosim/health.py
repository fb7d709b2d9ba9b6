"""A run's health, computed from its trace alone: did the air interface and the posterior behave?

:func:`health` reads a trace (``docs/trace.md``) and returns a plain dict;
:func:`health_lines` turns it into the few lines ``cosim run`` prints at its end and
``cosim inspect`` prints as its ``health`` section. No TensorFlow.

What it looks at (each only when the trace has the columns; ``docs/health.md`` says
why each threshold is what it is):

* a sign-carrying scheme's phases (``vote_error_rate_<phase>``): the median vote error and
  tie rates, and not their NMSE (a vote against the senders' mean sign);
* the median over rounds of ``aggregate_nmse_<phase>``, per phase; the phase's estimate is
  **noise-dominated** when that median is at least :data:`NOISE_DOMINATED_NMSE` (1: the
  over-the-air error carries at least as much energy as the sum it estimates) and the
  phase has receiver noise (``noise_power_<phase>``: the analog scheme; a digital
  phase's error is its quantization and outage, and is reported as such), and the
  share of that error the receiver noise explains (``n * noise_power_<phase>`` over
  ``aggregate_error_<phase>``, n = the trace's ``num_params``);
* devices over the power budget (``power_over_budget_<phase>``): rounds with any, the
  most in one round;
* the posterior std (``posterior_std_p05`` / ``_p50`` / ``_p95``): first and last
  committed rounds, and whether it moved: it **did not move** when each of the three
  changed by less than :data:`POSTERIOR_MOVED_RELATIVE` (0.1 %) of its first value;
* the worst device: the largest mean over rounds of ``local_distortion_<phase>``, its
  distance and the share of its values the power constraint clipped
  (``clipped_fraction_<phase>``); flagged when that share is at least
  :data:`CLIPPED_FRACTION_FLAG`;
* divergence (from the stored rows, as :mod:`cosim.divergence` checks it: a non-finite
  model or update, a non-finite training loss outside discarded rounds, a loss above
  ``LOSS_EXPLOSION_FACTOR`` times round 0's; not its check of other metrics) and its early
  sign: the training loss at the evaluated rounds rising :data:`LOSS_RISING_EVALUATIONS`
  times in a row by at least :data:`LOSS_RISING_RELATIVE` in all;
* a model **at chance**: the last evaluated test accuracy at most
  (1 + :data:`CHANCE_MARGIN`) / C (C classes, the columns of ``devices/label_hist``)
  after an evaluation of at least 2 / C: a run that learned and lost it, whether or not
  its loss crossed the divergence stop; short of chance, a model that **fell from its
  best**: the last evaluated test accuracy at least :data:`FELL_FROM_BEST` below the best;
* with ``[participation]``: dropouts, stragglers (``per_device/participated``) and the
  rounds the BS discarded (``round_discarded``, an outage of the whole uplink).
* with devices that move (``per_device/aging_correlation_<phase>``): the median and least
  correlation between a device's estimate and its channel at the phase's middle, flagged
  **aged** below :data:`AGED_CSI_CORRELATION`, and the devices digital OFDMA lost to aging.

Every flag names the docs section that explains it (:data:`DOCS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cosim.divergence import LOSS_EXPLOSION_FACTOR
from cosim.trace.read import TraceData, quiet_numerics, read_trace

NOISE_DOMINATED_NMSE = 1.0
"""A phase's estimate is noise-dominated when its median ``aggregate_nmse`` is at least this."""

POSTERIOR_MOVED_RELATIVE = 1e-3
"""The posterior std "did not move" when p05, p50 and p95 each changed by less than this
fraction of their first committed value."""

CLIPPED_FRACTION_FLAG = 0.5
"""The worst device is flagged when the power constraint clipped at least this share of its
values, averaged over the rounds it sent in."""
PRIVACY_CLIPPED_SHARE = 0.5
"""``privacy_clipped``: a phase whose clip norm (``privacy.clip_norm``) scaled down more
than this share of the round's senders (``privacy_clipped_devices_<phase>``) in more than
this share of its rounds: most of what most devices send is the clip norm's size, not
their update's."""

LOSS_RISING_EVALUATIONS = 3
"""An early sign of divergence: the training loss rose at this many evaluations in a row..."""

LOSS_RISING_RELATIVE = 0.10
"""...and by at least this fraction of its value at the start of the rise."""

AGED_CSI_CORRELATION = 0.9
"""``csi_aged``: a phase whose median over the device-rounds of ``aging_correlation_<phase>``
(Jakes' correlation between the channel a device estimated and the one at the phase's
middle) is below this: the aging alone is then an estimation error of 2 (1 - rho) = 0.2 of
the channel's power (-7 dB), more than a -10 dB Gaussian CSI error."""

CHANCE_MARGIN = 0.5
"""A model is at chance when its last evaluated test accuracy is at most
(1 + CHANCE_MARGIN) / C (0.15 for C = 10), after an evaluation of at least 2 / C."""

FELL_FROM_BEST = 0.1
"""A model fell from its best when its last evaluated test accuracy is at least this much
(absolute) below its best evaluation, and not at chance. Chosen by measurement
(docs/health.md, "A model that fell from its best"): between the largest drop of a run
that kept what it learned (0.047) and the smallest of one that collapsed without a
divergence stop (0.233), over the 91 runs of 200 rounds of the full-length studies."""

DOCS = {
    "noise_dominated": "docs/network.md#the-over-the-air-estimates-nmse-when-it-is-noise-dominated",
    "over_power_budget": "docs/health.md#devices-over-the-power-budget",
    "posterior_frozen": "docs/reproduction.md#a-posterior-that-does-not-move",
    "device_clipped": "docs/health.md#the-worst-device",
    "diverged": "docs/faults.md#running-cosim-run-divergence-kills-trace-paths",
    "loss_rising": "docs/health.md#a-rising-training-loss",
    "at_chance": "docs/health.md#a-model-at-chance",
    "fell_from_best": "docs/health.md#a-model-that-fell-from-its-best",
    "dropouts": "docs/network.md#who-takes-part-in-a-round",
    "rounds_discarded": "docs/network.md#who-takes-part-in-a-round",
    "privacy_clipped": "docs/health.md#most-senders-clipped-by-the-privacy-clip-norm",
    "csi_aged": "docs/health.md#csi-aged-by-motion",
}
"""Every flag's name and the docs section (file#anchor) that explains it."""

PARTICIPATION_CODES = {0: "not_scheduled", 1: "sent", 2: "dropped", 3: "straggler_silent",
                       4: "straggler_fewer_steps"}
"""``per_device/participated`` codes (``docs/trace.md``)."""


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, np.float64)
    return values[np.isfinite(values)]


def _phases(rounds: Mapping[str, np.ndarray], prefix: str) -> list[str]:
    return sorted(name.removeprefix(prefix) for name in rounds if name.startswith(prefix))


def _number(value: Any) -> float | None:
    """A float for the dict (None for NaN, so that the dict is JSON-clean)."""
    value = float(value)
    return None if math.isnan(value) else value


def _nmse(data: TraceData) -> dict[str, dict[str, Any]]:
    out = {}
    num_params = data.attrs.get("num_params")
    for phase in _phases(data.rounds, "aggregate_nmse_"):
        if f"vote_error_rate_{phase}" in data.rounds:  # a vote: its NMSE against the mean sign is no noise measure
            continue
        values = _finite(data.rounds[f"aggregate_nmse_{phase}"])
        if not values.size:
            continue
        median = float(np.median(values))
        noise, error = data.rounds.get(f"noise_power_{phase}"), data.rounds.get(f"aggregate_error_{phase}")
        entry: dict[str, Any] = {"median": median, "rounds": int(values.size),
                                 "noise_dominated": noise is not None and median >= NOISE_DOMINATED_NMSE,
                                 "receiver_noise": noise is not None, "noise_share": None}
        if isinstance(num_params, (int, np.integer)) and noise is not None and error is not None:
            ok = np.isfinite(noise) & np.isfinite(error) & (error > 0)
            if ok.any():
                entry["noise_share"] = float(np.median(num_params * noise[ok] / error[ok]))
        out[phase] = entry
    return out


def _votes(data: TraceData) -> dict[str, dict[str, Any]]:
    """Per phase of a sign-carrying scheme: the median over rounds of
    ``vote_error_rate_<phase>`` and of ``vote_tie_rate_<phase>``."""
    out = {}
    for phase in _phases(data.rounds, "vote_error_rate_"):
        errors = _finite(data.rounds[f"vote_error_rate_{phase}"])
        ties = _finite(data.rounds.get(f"vote_tie_rate_{phase}", np.array([])))
        if errors.size:
            out[phase] = {"median_error_rate": float(np.median(errors)), "rounds": int(errors.size),
                          "median_tie_rate": float(np.median(ties)) if ties.size else None}
    return out


def _power_budget(data: TraceData) -> dict[str, dict[str, int]]:
    out = {}
    for phase in _phases(data.rounds, "power_over_budget_"):
        values = _finite(data.rounds[f"power_over_budget_{phase}"])
        out[phase] = {"rounds_over": int(np.count_nonzero(values > 0)),
                      "max_devices": int(values.max()) if values.size else 0}
    return out


def _posterior(data: TraceData) -> dict[str, Any] | None:
    names = ("p05", "p50", "p95")
    columns = [data.rounds.get(f"posterior_std_{name}") for name in names]
    if any(column is None for column in columns):
        return None
    rows = np.flatnonzero(np.all([np.isfinite(c) for c in columns], axis=0))
    if rows.size == 0:
        return None
    first, last = int(rows[0]), int(rows[-1])
    change = {name: abs(float(c[last]) - float(c[first])) / abs(float(c[first]))
              if c[first] != 0 else math.inf for name, c in zip(names, columns)}
    return {
        "first_round": first, "last_round": last,
        "first": {name: float(c[first]) for name, c in zip(names, columns)},
        "last": {name: float(c[last]) for name, c in zip(names, columns)},
        "relative_change": change,
        # one committed round cannot show movement: not judged
        "moved": None if first == last else max(change.values()) >= POSTERIOR_MOVED_RELATIVE,
    }


def _worst_device(data: TraceData) -> dict[str, Any] | None:
    per_device = data.per_device
    worst = None
    for phase in _phases(per_device, "local_distortion_"):
        values = np.asarray(per_device[f"local_distortion_{phase}"], np.float64)  # [T, K]
        sent = np.isfinite(values)
        if not sent.any():
            continue
        counts = sent.sum(axis=0)
        means = np.where(counts > 0, np.where(sent, values, 0.0).sum(axis=0) / np.maximum(counts, 1), -np.inf)
        device = int(np.argmax(means))
        if worst is not None and means[device] <= worst["mean_distortion"]:
            continue
        clipped = per_device.get(f"clipped_fraction_{phase}")
        clip = _finite(clipped[:, device]) if clipped is not None else np.empty(0)
        distances = data.devices.get("distance_m")
        finite_means = means[np.isfinite(means)]
        worst = {
            "phase": phase, "device": device,
            "distance_m": float(distances[device]) if distances is not None and len(distances) > device else None,
            "mean_distortion": float(means[device]),
            "median_device_distortion": float(np.median(finite_means)),
            "clipped_fraction": float(clip.mean()) if clip.size else None,
        }
    return worst


def _divergence(data: TraceData) -> dict[str, Any]:
    rounds = data.rounds
    t = data.completed_rounds
    reasons: dict[int, list[str]] = {}

    def add(mask: np.ndarray, text: str) -> None:
        for row in np.flatnonzero(mask):
            reasons.setdefault(int(row), []).append(text)

    if "model_finite" in rounds:
        add(rounds["model_finite"] == 0.0, "the global model holds or predicts NaN/Inf")
    if "nonfinite_update_entries" in rounds:
        add(_nan_to(rounds["nonfinite_update_entries"], 0.0) > 0, "non-finite entries in the devices' updates")
    loss = rounds.get("train_loss")
    # NaN by design only for an algorithm that reports no loss (no train_loss_<phase>
    # column, no finite value): a loss NaN in every round of one that does is divergence
    reports_loss = any(name.startswith("train_loss_") for name in rounds)
    if loss is not None and (reports_loss or np.isfinite(loss).any()):
        discarded = _nan_to(rounds.get("round_discarded", np.zeros(t)), 0.0) > 0
        add(np.isinf(loss) | (np.isnan(loss) & ~discarded), "training loss non-finite")
        reference = float(loss[0]) if t and np.isfinite(loss[0]) and loss[0] > 0 else None
        if reference is not None:
            finite = np.where(np.isfinite(loss), loss, 0.0)  # a non-finite loss is named above
            add(np.abs(finite) > LOSS_EXPLOSION_FACTOR * reference,
                f"training loss above {LOSS_EXPLOSION_FACTOR:g} times round 0's")
    first = min(reasons) if reasons else None
    out: dict[str, Any] = {"diverged_round": first, "reasons": reasons.get(first, []) if first is not None else []}
    out.update(_loss_rising(rounds))
    return out


def _nan_to(values: np.ndarray, fill: float) -> np.ndarray:
    values = np.asarray(values, np.float64)
    return np.where(np.isnan(values), fill, values)


def _loss_rising(rounds: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The longest run of rises of ``train_loss`` over the evaluated rounds (those with a
    finite ``test_accuracy``, or every round when none is), and whether it is a flag."""
    loss, accuracy = rounds.get("train_loss"), rounds.get("test_accuracy")
    none = {"loss_rising": False, "loss_rising_rounds": None, "loss_rising_relative": None,
            "loss_rising_at_end": False}
    if loss is None:
        return none
    rows = np.arange(len(loss))
    if accuracy is not None and np.isfinite(accuracy).any():
        rows = rows[np.isfinite(accuracy)]
    rows = rows[np.isfinite(loss[rows])]
    values = loss[rows]
    best: tuple[int, int] | None = None  # (start, end) indices into rows, end - start rises
    start = 0
    for i in range(1, len(values) + 1):
        if i < len(values) and values[i] > values[i - 1]:
            continue
        end = i - 1
        rise = (values[end] - values[start]) / abs(values[start]) if values[start] != 0 else math.inf
        if (end - start >= LOSS_RISING_EVALUATIONS and rise >= LOSS_RISING_RELATIVE
                and (best is None or end - start > best[1] - best[0])):
            best = (start, end)
        start = i
    if best is None:
        return none
    s, e = best
    return {"loss_rising": True, "loss_rising_rounds": [int(rows[s]), int(rows[e])],
            "loss_rising_relative": float((values[e] - values[s]) / abs(values[s])),
            "loss_rising_at_end": e == len(values) - 1}


def _chance(data: TraceData) -> dict[str, Any] | None:
    """The last and the best evaluated test accuracy against chance, 1 / C; None without
    an evaluation or without ``devices/label_hist``."""
    hist, accuracy = data.devices.get("label_hist"), data.rounds.get("test_accuracy")
    if hist is None or accuracy is None or np.ndim(hist) != 2 or hist.shape[1] < 2:
        return None
    rows = np.flatnonzero(np.isfinite(accuracy))
    if rows.size == 0:
        return None
    chance = 1.0 / hist.shape[1]
    last, best = int(rows[-1]), int(rows[np.argmax(accuracy[rows])])
    at_chance = bool(accuracy[last] <= (1 + CHANCE_MARGIN) * chance and accuracy[best] >= 2 * chance)
    return {"chance": chance, "last_round": last, "last_accuracy": float(accuracy[last]),
            "best_round": best, "best_accuracy": float(accuracy[best]), "at_chance": at_chance,
            "fell_from_best": bool(accuracy[best] - accuracy[last] >= FELL_FROM_BEST and not at_chance)}


def _participation(data: TraceData) -> dict[str, Any] | None:
    codes = data.per_device.get("participated")
    discarded = data.rounds.get("round_discarded")
    if codes is None and discarded is None:
        return None
    out: dict[str, Any] = {}
    if codes is not None:
        codes = np.asarray(codes)
        scheduled = int(np.count_nonzero(np.isfinite(codes) & (codes > 0)))
        counts = {name: int(np.count_nonzero(codes == code)) for code, name in PARTICIPATION_CODES.items()}
        out.update(scheduled_device_rounds=scheduled, **{f"{k}_device_rounds": v for k, v in counts.items()
                                                         if k not in ("not_scheduled",)})
        out["dropout_fraction"] = counts["dropped"] / scheduled if scheduled else 0.0
    out["rounds_discarded"] = int(np.count_nonzero(_nan_to(discarded, 0.0) > 0)) if discarded is not None else 0
    return out


def _senders(data: TraceData) -> np.ndarray:
    """The devices that sent in each committed round [T]: ``per_device/participated`` codes
    1 and 4 (sent; a straggler with fewer steps), else every device of the drop."""
    codes = data.per_device.get("participated")
    if codes is not None:
        return np.sum(np.isin(codes, (1, 4)), axis=1).astype(np.float64)
    devices = data.devices.get("distance_m")
    count = len(devices) if devices is not None else data.scenario.get("cell", {}).get("num_devices", 0)
    return np.full(data.completed_rounds, float(count))


def _privacy(data: TraceData) -> dict[str, Any] | None:
    """The privacy reached (``privacy_epsilon`` of the last committed round, at the
    scenario's ``privacy.delta``, against ``privacy.target_epsilon``) and, per phase with
    ``privacy_clipped_devices_<phase>``, the rounds in which the clip norm scaled down
    most senders; None without ``privacy_epsilon``."""
    epsilon = data.rounds.get("privacy_epsilon")
    if epsilon is None or not len(epsilon):
        return None
    table = data.scenario.get("privacy") or {}
    target = table.get("target_epsilon")
    senders = _senders(data)
    clipped = {}
    for name in sorted(n for n in data.rounds if n.startswith("privacy_clipped_devices_")):
        counts = np.asarray(data.rounds[name], np.float64)
        ok = np.isfinite(counts) & (senders > 0)
        share = counts[ok] / senders[ok]
        clipped[name.removeprefix("privacy_clipped_devices_")] = {
            "rounds": int(ok.sum()),
            "rounds_most_clipped": int(np.count_nonzero(share > PRIVACY_CLIPPED_SHARE)),
            "median_share": float(np.median(share)) if share.size else None}
    last = float(epsilon[-1])
    return {"epsilon": last, "delta": table.get("delta"), "target_epsilon": target,
            "target_met": None if target is None else bool(last <= target), "clipped": clipped}


def _aging(data: TraceData) -> dict[str, dict[str, Any]]:
    """Per phase with ``per_device/aging_correlation_<phase>`` (devices that move): the
    median and the smallest over the device-rounds that sent, their count, and the
    devices lost to aging (``aging_outage_devices_<phase>``, digital OFDMA) in all rounds."""
    out = {}
    for name in sorted(n for n in data.per_device if n.startswith("aging_correlation_")):
        phase = name.removeprefix("aging_correlation_")
        values = _finite(np.asarray(data.per_device[name], np.float64).ravel())
        lost = data.rounds.get(f"aging_outage_devices_{phase}")
        out[phase] = {"device_rounds": int(values.size),
                      "median_correlation": float(np.median(values)) if values.size else None,
                      "min_correlation": float(np.min(values)) if values.size else None,
                      "outage_device_rounds": None if lost is None else int(np.nansum(lost))}
    return out


@quiet_numerics()  # values near the float limits or all NaN: inf or None, never a warning
def health(trace: str | Path | TraceData) -> dict[str, Any]:
    """The health summary of a trace, as a plain dict (JSON-serialisable).

    Parameters
    ----------
    trace : str, Path or TraceData
        A trace file (committed rounds only), or what :func:`cosim.trace.read_trace`
        returned for one.

    Returns
    -------
    dict
        ``trace`` (str), ``rounds`` (committed), ``algorithm``; ``nmse`` ({phase: {median,
        rounds, noise_dominated, noise_share}}; not for a phase of a sign-carrying scheme),
        ``vote`` ({phase: {median_error_rate, rounds, median_tie_rate}}: the phases of a
        sign-carrying scheme, ``uplink.scheme = "one_bit"`` or ``"noncoherent_mv"``), ``power_over_budget`` ({phase:
        {rounds_over, max_devices}}), ``posterior_std`` (first / last p05, p50, p95,
        ``relative_change``, ``moved``; None without those columns), ``worst_device``
        (phase, device, distance_m, mean_distortion, median_device_distortion,
        clipped_fraction; None without per-device distortion), ``divergence``
        (diverged_round, reasons, loss_rising, loss_rising_rounds [first, last],
        loss_rising_relative, loss_rising_at_end), ``chance`` (chance, last_round,
        last_accuracy, best_round, best_accuracy, at_chance, fell_from_best; None without
        an evaluation or ``devices/label_hist``), ``participation`` (None without
        ``[participation]``), ``privacy`` (epsilon, delta, target_epsilon, target_met,
        clipped {phase: rounds, rounds_most_clipped, median_share}; None without
        ``privacy_epsilon``), ``aging`` ({phase: device_rounds, median_correlation,
        min_correlation, outage_device_rounds}: devices that move), and ``flags``: a list of {name, message, docs}, ``docs``
        the section that explains it (:data:`DOCS`). No flags: nothing found.

    Raises
    ------
    cosim.trace.TraceError
        A file that is not a readable trace (one line naming it).
    """
    data = trace if isinstance(trace, TraceData) else read_trace(trace)
    report: dict[str, Any] = {
        "trace": str(data.path), "rounds": data.completed_rounds,
        "algorithm": data.attrs.get("algorithm", data.scenario.get("algorithm", {}).get("name")),
        "nmse": _nmse(data), "vote": _votes(data), "power_over_budget": _power_budget(data),
        "posterior_std": _posterior(data), "worst_device": _worst_device(data),
        "divergence": _divergence(data), "chance": _chance(data),
        "participation": _participation(data), "privacy": _privacy(data), "aging": _aging(data),
    }
    report["flags"] = _flags(report)
    return report


def _flag(name: str, message: str) -> dict[str, str]:
    return {"name": name, "message": message, "docs": DOCS[name]}


def _flags(report: Mapping[str, Any]) -> list[dict[str, str]]:
    flags = []
    noisy = {p: e for p, e in report["nmse"].items() if e["noise_dominated"]}
    if noisy:
        flags.append(_flag("noise_dominated", "the over-the-air estimate is noise-dominated: median NMSE "
                           + ", ".join(f"{p} {e['median']:.3g}" for p, e in noisy.items())
                           + f" (>= {NOISE_DOMINATED_NMSE:g})"))
    over = {p: e for p, e in report["power_over_budget"].items() if e["rounds_over"]}
    if over:
        flags.append(_flag("over_power_budget", "devices over the power budget: " + ", ".join(
            f"{p} in {e['rounds_over']} round(s), up to {e['max_devices']} device(s)" for p, e in over.items())))
    posterior = report["posterior_std"]
    if posterior is not None and posterior["moved"] is False:
        flags.append(_flag("posterior_frozen", "the posterior std did not move (p05/p50/p95 changed by "
                           f"< {100 * POSTERIOR_MOVED_RELATIVE:g} % from round {posterior['first_round']} "
                           f"to round {posterior['last_round']})"))
    worst = report["worst_device"]
    if worst is not None and worst["clipped_fraction"] is not None and worst["clipped_fraction"] >= CLIPPED_FRACTION_FLAG:
        flags.append(_flag("device_clipped", f"device {worst['device']} (the largest distortion) had "
                           f"{100 * worst['clipped_fraction']:.0f} % of its values clipped by the power budget"))
    divergence = report["divergence"]
    if divergence["diverged_round"] is not None:
        flags.append(_flag("diverged", f"round {divergence['diverged_round']} diverged: "
                           + "; ".join(divergence["reasons"])))
    if divergence["loss_rising"]:
        first, last = divergence["loss_rising_rounds"]
        flags.append(_flag("loss_rising", f"the training loss rose at every evaluation from round {first} "
                           f"to round {last} (+{100 * divergence['loss_rising_relative']:.0f} %)"
                           + (", and still rises" if divergence["loss_rising_at_end"] else "")))
    chance = report.get("chance")
    if chance is not None and chance["at_chance"]:
        flags.append(_flag("at_chance", f"the model predicts at chance: test accuracy "
                           f"{chance['last_accuracy']:.3g} at round {chance['last_round']} against "
                           f"1/C = {chance['chance']:.3g}, after {chance['best_accuracy']:.3g} at "
                           f"round {chance['best_round']}"))
    if chance is not None and chance["fell_from_best"]:
        flags.append(_flag("fell_from_best", f"test accuracy {chance['last_accuracy']:.3g} at round "
                           f"{chance['last_round']}, "
                           f"{chance['best_accuracy'] - chance['last_accuracy']:.3g} below its best, "
                           f"{chance['best_accuracy']:.3g} at round {chance['best_round']}"))
    return flags + _network_flags(report)


def _network_flags(report: Mapping[str, Any]) -> list[dict[str, str]]:
    """The flags of the network, privacy and motion (:func:`_flags`' second half)."""
    flags = []
    participation = report["participation"]
    if participation is not None:
        if participation.get("dropped_device_rounds"):
            flags.append(_flag("dropouts", f"{participation['dropped_device_rounds']} device-rounds dropped "
                               f"({100 * participation['dropout_fraction']:.1f} % of the scheduled)"))
        if participation["rounds_discarded"]:
            flags.append(_flag("rounds_discarded", f"{participation['rounds_discarded']} round(s) discarded "
                               "by the BS (no device's phase reached it)"))
    privacy = report.get("privacy") or {}
    most = {p: e for p, e in (privacy.get("clipped") or {}).items()
            if e["rounds"] and e["rounds_most_clipped"] > PRIVACY_CLIPPED_SHARE * e["rounds"]}
    if most:
        flags.append(_flag("privacy_clipped", "privacy.clip_norm scaled down over "
                           f"{100 * PRIVACY_CLIPPED_SHARE:g} % of the senders in most rounds: " + ", ".join(
                               f"{p} in {e['rounds_most_clipped']} of {e['rounds']} rounds (median "
                               f"{100 * e['median_share']:.0f} % of the senders)" for p, e in most.items())
                           + "; what they send is the clip norm's size, not their update's"))
    aged = {p: e for p, e in report.get("aging", {}).items()
            if e["median_correlation"] is not None and e["median_correlation"] < AGED_CSI_CORRELATION}
    if aged:
        flags.append(_flag("csi_aged", "the devices' CSI aged by motion: median correlation between the "
                           "estimate and the channel at the phase's middle " + ", ".join(
                               f"{p} {e['median_correlation']:.3g}" for p, e in aged.items())
                           + f" (< {AGED_CSI_CORRELATION:g})"))
    return flags


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def docs_link(link: str) -> str:
    """A page of :data:`DOCS` (``docs/health.md#a-model-at-chance``) as the reader can open
    it: as written in a source tree (the repository's ``docs/`` beside the package), else
    the path of the copy an installed package ships (the package ``cosim.docs``)."""
    page, _, anchor = link.partition("#")
    package = Path(__file__).resolve().parent
    if (package.parent / page).is_file():
        return link
    installed = (package / "docs" / Path(page).name).as_posix()
    return f"{installed}#{anchor}" if anchor else installed


def _aging_lines(report: Mapping[str, Any]) -> list[str]:
    """The ``motion`` line of a run whose devices move (none otherwise)."""
    parts = [f"{phase} {entry['median_correlation']:.3g} (least {entry['min_correlation']:.3g})"
             + ("" if entry["outage_device_rounds"] is None
                else f", {entry['outage_device_rounds']} device-round(s) lost to aging")
             for phase, entry in (report.get("aging") or {}).items() if entry["device_rounds"]]
    return ["motion   median CSI aging correlation: " + "; ".join(parts)] if parts else []


def health_lines(report: Mapping[str, Any]) -> list[str]:
    """The summary of :func:`health` as a few lines of text (no trailing newlines): what
    ``cosim run`` prints at its end and ``cosim inspect`` in its ``health`` section."""
    return [*_air_lines(report), *_posterior_lines(report), _training_line(report["divergence"]),
            *_network_and_privacy_lines(report), *_flag_lines(report["flags"])]


def _air_lines(report: Mapping[str, Any]) -> list[str]:
    """The ``air`` lines (the estimate's NMSE, or the vote's error rate) and the ``power`` line."""
    lines = []
    if report["nmse"]:
        parts = []
        for phase, entry in report["nmse"].items():
            text = f"{phase} {entry['median']:.3g}"
            if entry["noise_share"] is not None:
                text += f" ({100 * min(entry['noise_share'], 9.99):.0f} % of it receiver noise)"
            parts.append(text)
        if not any(e.get("receiver_noise", True) for e in report["nmse"].values()):
            verdict = "quantization and outage (no receiver noise in this scheme)"
        else:
            verdict = ("noise-dominated" if any(e["noise_dominated"] for e in report["nmse"].values())
                       else "signal-dominated")
        lines.append(f"air      median NMSE of the estimate: {', '.join(parts)}: {verdict}")
    if report.get("vote"):
        parts = [f"{phase} {entry['median_error_rate']:.3g}"
                 + (f" ({100 * entry['median_tie_rate']:.0f} % of the entries tie)"
                    if entry["median_tie_rate"] is not None else "")
                 for phase, entry in report["vote"].items()]
        lines.append(f"air      median vote error rate: {', '.join(parts)}")
    if report["power_over_budget"]:
        worst = max(e["max_devices"] for e in report["power_over_budget"].values())
        lines.append("power    " + ("no device over the budget" if worst == 0
                                   else f"up to {worst} device(s) over the budget in a round"))
    return lines


def _posterior_lines(report: Mapping[str, Any]) -> list[str]:
    """The ``posterior`` line (the std's movement) and the ``worst`` device's line."""
    lines = []
    posterior = report["posterior_std"]
    if posterior is not None:
        first = "/".join(f"{posterior['first'][k]:.4g}" for k in ("p05", "p50", "p95"))
        last = "/".join(f"{posterior['last'][k]:.4g}" for k in ("p05", "p50", "p95"))
        moved = {None: "one round: not judged", True: "moved", False: "did not move"}[posterior["moved"]]
        biggest = max(posterior["relative_change"].values())
        lines.append(f"posterior std p05/p50/p95 {first} (round {posterior['first_round']}) -> {last} "
                     f"(round {posterior['last_round']}): {moved} (largest change {100 * biggest:.3g} %)")
    worst = report["worst_device"]
    if worst is not None:
        where = f" at {worst['distance_m']:.0f} m" if worst["distance_m"] is not None else ""
        clipped = (f", {100 * worst['clipped_fraction']:.0f} % of its values clipped"
                   if worst["clipped_fraction"] is not None else "")
        lines.append(f"worst    device {worst['device']}{where}: mean local distortion ({worst['phase']}) "
                     f"{_g(worst['mean_distortion'])} (median device {_g(worst['median_device_distortion'])})"
                     f"{clipped}")
    return lines


def _training_line(divergence: Mapping[str, Any]) -> str:
    """The ``training`` line: diverged, a rising loss, or neither."""
    if divergence["diverged_round"] is not None:
        loss = f"diverged at round {divergence['diverged_round']}"
    elif divergence["loss_rising"]:
        first, last = divergence["loss_rising_rounds"]
        loss = f"not diverged; training loss rising from round {first} to {last}"
    else:
        loss = "not diverged; no sustained rise of the training loss"
    return f"training {loss}"


def _network_and_privacy_lines(report: Mapping[str, Any]) -> list[str]:
    """The ``network`` line (dropouts, stragglers, discarded rounds) and the ``privacy``
    line (epsilon reached against the target)."""
    lines = []
    participation = report["participation"]
    if participation is not None:
        parts = []
        if "scheduled_device_rounds" in participation:
            stragglers = (participation["straggler_silent_device_rounds"]
                          + participation["straggler_fewer_steps_device_rounds"])
            parts.append(f"{participation['dropped_device_rounds']} dropped and {stragglers} straggling "
                         f"of {participation['scheduled_device_rounds']} scheduled device-rounds")
        parts.append(f"{participation['rounds_discarded']} round(s) discarded")
        lines.append("network  " + ", ".join(parts))
    privacy = report.get("privacy")
    if privacy is not None:
        delta = "" if privacy["delta"] is None else f" at delta {privacy['delta']:g}"
        target = ("no target" if privacy["target_epsilon"] is None else
                  f"target {privacy['target_epsilon']:g}: "
                  + ("met" if privacy["target_met"] else "above it"))
        lines.append(f"privacy  epsilon {privacy['epsilon']:.4g}{delta} after {report['rounds']} "
                     f"round(s) ({target})")
    lines.extend(_aging_lines(report))
    return lines


def _flag_lines(flags) -> list[str]:
    """One ``flag`` line per raised flag with its docs link, or ``flags    none``."""
    if not flags:
        return ["flags    none"]
    return [f"flag     {flag['name']}: {flag['message']} (see {docs_link(flag['docs'])})"
            for flag in flags]


def health_section(trace: str | Path | TraceData) -> str:
    """The ``health`` section ``cosim inspect`` prints after :func:`cosim.trace.summarize`
    (a line break, a blank line, a heading, the indented :func:`health_lines`; empty for
    a trace without committed rounds)."""
    data = trace if isinstance(trace, TraceData) else read_trace(trace)
    if data.completed_rounds == 0:
        return ""
    lines = ["", "", f"  health ({docs_link('docs/health.md')})",
             *(f"    {line}" for line in health_lines(health(data)))]
    return "\n".join(lines)
