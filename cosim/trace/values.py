"""What a stored number may be, checked where a trace is read: a number that no run
writes (a count of -3 or 2.5, an accuracy of 7, a round index out of place, text where a
number belongs) is refused in one line naming the file, the dataset and the value,
before any reader uses it.

What a run may write stays readable: NaN (the fill of a row a block did not write, a
diverged round's loss) and +-inf where a quantity may overflow; a non-finite training
loss or metric is then the documented fault, a divergence (:mod:`cosim.divergence`), not
a refusal. The rules (by the dataset's name under ``/rounds``, ``docs/trace.md``):

* ``round``: the row's own index;
* counts (symbols, devices, entries, hits; :data:`COUNT_NAMES`, :data:`COUNT_PREFIXES`):
  whole numbers >= 0, or NaN;
* flags (``model_finite``, ``round_discarded``, ``per_device/outage_*``): 0 or 1, or NaN;
* ``per_device/participated``: a participation code 0-4, or NaN;
* times (``wall_s``, ``cpu_s``): >= 0, or NaN;
* ``/devices`` tables: finite numbers; integer tables (``num_samples``, ``label_hist``)
  >= 0;
* any other column, accuracies and shares included: a number of any value (stored as a
  number: integers or floats); the readers show what is stored, inf and NaN included
  (an accuracy above 1 from another writer is shown, not refused).

Standard library and NumPy only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["column_problem", "device_problem", "numeric_problem", "stored_problems"]

COUNT_NAMES = frozenset({
    "uplink_symbols", "downlink_symbols", "cumulative_uplink_symbols",
    "cumulative_downlink_symbols", "cumulative_channel_uses", "nonfinite_update_entries",
    "precision_floor_hits", "devices_scheduled"})
COUNT_PREFIXES = ("power_over_budget_", "precision_floor_hits_", "local_precision_floor_hits_",
                  "devices_sent_", "outage_devices_", "artificial_noise_over_budget_",
                  "privacy_clipped_devices_", "per_device/symbols_", "per_device/subcarriers_",
                  "per_device/local_steps", "reliability/bin_count")
FLAG_NAMES = frozenset({"model_finite", "round_discarded"})
FLAG_PREFIXES = ("per_device/outage_",)
TIME_NAMES = frozenset({"wall_s", "cpu_s"})
PARTICIPATION_CODES = (0, 1, 2, 3, 4)

_WHOLE_LIMIT = 2.0**53
"""The largest count stored exactly as a float64 (and far beyond any run's)."""


def _kind(name: str) -> str | None:
    if name == "round":
        return "round"
    if name == "per_device/participated":
        return "code"
    for kind, names, prefixes in (("count", COUNT_NAMES, COUNT_PREFIXES),
                                  ("flag", FLAG_NAMES, FLAG_PREFIXES),
                                  ("time", TIME_NAMES, ())):
        if name in names or name.startswith(prefixes):
            return kind
    return None


_WHAT = {"round": "not its row's round index", "count": "not a count (a whole number >= 0)",
         "flag": "not a flag (0 or 1)",
         "code": "not a participation code (0 to 4)", "time": "not a time >= 0"}


def numeric_problem(where: str, values: np.ndarray) -> str | None:
    """``"WHERE holds text (dtype |S4), not numbers"`` for a dataset that is not stored
    as integers, booleans or real floats; None when it is."""
    if values.dtype.kind in "biuf":
        return None
    return f"{where} holds {values.dtype.name if values.dtype.kind != 'S' else 'text'} " \
           f"(dtype {values.dtype.str}), not real numbers"


def _first_bad(values: np.ndarray, bad: np.ndarray) -> str:
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    shown = values[index]
    return f"[{']['.join(map(str, index))}] = {float(shown)!r}"


def column_problem(name: str, values: np.ndarray) -> str | None:
    """Why the committed rows ``values`` of ``/rounds/<name>`` (``name`` relative to
    ``/rounds``, ``"per_device/tx_power_w_rho"`` for a group's) cannot be real, in one
    phrase naming the dataset, the first bad entry and its value; None when they can."""
    where = f"/rounds/{name}"
    problem = numeric_problem(where, values)
    if problem is not None:
        return problem
    kind = _kind(name)
    if kind is None or values.size == 0:
        return None
    v = np.asarray(values, dtype=np.float64)
    if kind == "round":
        rows = np.arange(v.shape[0], dtype=np.float64).reshape((-1,) + (1,) * (v.ndim - 1))
        bad = v != rows
    else:
        # NaN: a float row not written; -1: an integer row not written (the writer's fills)
        nan = np.isnan(v) | ((v == -1) if values.dtype.kind in "iu" else False)
        with np.errstate(invalid="ignore"):
            if kind == "count":
                ok = (v >= 0) & (v <= _WHOLE_LIMIT) & (np.floor(v) == v)
            elif kind == "flag":
                ok = (v == 0) | (v == 1)
            elif kind == "code":
                ok = np.isin(v, PARTICIPATION_CODES)
            else:
                ok = (v >= 0) & np.isfinite(v)
        bad = ~(ok | nan)
    if not bad.any():
        return None
    return f"{where}{_first_bad(v, bad)} is {_WHAT[kind]}"


def device_problem(name: str, values: np.ndarray) -> str | None:
    """Why the table ``/devices/<name>`` cannot be a run's (not numbers, a float not
    finite, an integer < 0), in one phrase; None when it can."""
    where = f"/devices/{name}"
    problem = numeric_problem(where, values)
    if problem is not None or values.size == 0:
        return problem
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values)
        what = "not a finite number"
    else:
        bad = values < 0
        what = "not a count (a whole number >= 0)"
    if not bad.any():
        return None
    return f"{where}{_first_bad(values, bad)} is {what}"


def stored_problems(rounds: Mapping[str, np.ndarray], devices: Mapping[str, np.ndarray]) -> list[str]:
    """Every problem of :func:`column_problem` and :func:`device_problem` over a trace's
    committed columns (``rounds``: name relative to ``/rounds`` -> rows) and its
    ``/devices`` tables."""
    problems = [column_problem(name, values) for name, values in rounds.items()]
    problems += [device_problem(name, values) for name, values in devices.items()]
    return [p for p in problems if p is not None]
