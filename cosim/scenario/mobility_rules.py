"""``[mobility]`` against the other tables: what a moving model supports.

A moving ``mobility.model`` (every model but ``"static"``, :data:`phy.parameters.MOBILITY_MODELS`)
evaluates the channel in time (:mod:`phy.moving_channel`): the i.i.d. and flat Rayleigh
models and TDL with the Doppler at the TDL's carrier (:mod:`phy.moving_tdl`; each device
at its speed, N_r BS antennas), the
ray-traced paths of one drop at the traced carrier with ``channel.variation = "static"``
(:mod:`phy.moving_rays`; traced anew every ``channel.retrace_every_m``, :mod:`phy.retraced_rays`), the 3GPP cells' rays of one draw at the cell's carrier
(:mod:`phy.moving_tr38901`), the frequency-domain uplink, and the time-domain one with the Rayleigh models and TDL, one BS antenna,
timing offsets and CFO without timing pre-compensation (:mod:`phy.moving_time`), devices kept off the BS by a positive
exclusion radius; ``[privacy]`` accounts for static path gains only. Each refusal is
``"table.key: rule"`` (:func:`check_mobility`, called by :class:`cosim.scenario.tables.Scenario`).
No TensorFlow.
"""

from __future__ import annotations

from phy.parameters import CHANNEL_MODELS, moves, moving_fading


def moving(scenario) -> bool:
    """Whether ``scenario`` has a ``[mobility]`` table whose model moves the devices."""
    return scenario.mobility is not None and moves(scenario.mobility.model)


def check_mobility(scenario) -> None:
    """ValueError ``"key: rule"`` for what a moving ``[mobility]`` model does not support
    (and for ``channel.retrace_every_m`` without one)."""
    retrace = getattr(scenario.channel, "retrace_every_m", None)
    if not moving(scenario):
        if retrace is not None:
            raise ValueError(f"channel.retrace_every_m: = {retrace:g}: traces the paths of moving devices anew "
                             "as they walk, and no [mobility] model moves them; remove the key or set "
                             "mobility.model")
        return
    model = f"mobility.model = {scenario.mobility.model!r}"
    fading = moving_fading(scenario.channel.model)  # the channel's fact, not its name
    rules = (
        (fading is not None, "channel.model",
         f"= {scenario.channel.model!r}: {model} evaluates "
         f"{', '.join(repr(m) for m in CHANNEL_MODELS if moving_fading(m))} in time; set one of them"),
        (scenario.ofdm.domain == "frequency" or fading in ("per_subcarrier", "flat", "sionna_tdl"), "ofdm.domain",
         f"= {scenario.ofdm.domain!r}: {model} runs the time-domain uplink with the Rayleigh models and TDL only "
         f"(channel.model = {scenario.channel.model!r}); set \"frequency\""),
        (scenario.ofdm.domain == "frequency" or scenario.mobility.channel_within_phase == "phase_middle",
         "mobility.channel_within_phase", f"= {scenario.mobility.channel_within_phase!r}: with ofdm.domain = "
         "'time' the waveform meets the channel sample by sample; leave \"phase_middle\""),
        (scenario.ofdm.domain == "frequency" or scenario.bs.num_antennas == 1, "bs.num_antennas",
         f"= {scenario.bs.num_antennas}: {model} runs the time-domain uplink for one BS antenna; set 1"),
        (scenario.ofdm.domain == "frequency" or scenario.sync.timing_offset_max_samples == 0.0
         or scenario.sync.precompensate in ("none", "cfo"),
         "sync.precompensate", f"= {scenario.sync.precompensate!r}: {model}'s devices estimate their channel "
         "without the timing offset (no pre-compensated timing in the moving time-domain uplink); set \"none\" or "
         "\"cfo\", or sync.timing_offset_max_samples = 0"),
        (scenario.privacy is None, "privacy",
         f"[privacy] accounts for static path gains; remove it or [mobility]'s {model}"),
        (fading not in ("sionna_tdl", "traced_paths", "cell_rays")
         or scenario.mobility.carrier_frequency_hz == scenario.channel.carrier_frequency_hz,
         "mobility.carrier_frequency_hz", f"= {scenario.mobility.carrier_frequency_hz:g}: with channel.model = "
         f"{scenario.channel.model!r} the Doppler is the channel's, at channel.carrier_frequency_hz = "
         f"{scenario.channel.carrier_frequency_hz:g}; set the two equal"),
        (fading != "traced_paths" or getattr(scenario.channel, "variation", None) == "static",
         "channel.variation", f"= {getattr(scenario.channel, 'variation', None)!r}: with {model} each traced "
         "path's phase follows its device's displacement (the unset default 'phase' redraws it every "
         "round); set \"static\""),
        (fading != "traced_paths" or getattr(scenario.channel, "redrop_every_rounds", None) is None,
         "channel.redrop_every_rounds", f"= {getattr(scenario.channel, 'redrop_every_rounds', None)}: "
         f"{model} moves the devices of one drop; remove the key or [mobility]"),
        (scenario.cell.min_distance_m > 0.0, "cell.min_distance_m",
         f"= {scenario.cell.min_distance_m:g}: {model} reflects the devices at this exclusion "
         "radius around the BS; set it > 0"),
    )
    for holds, key, rule in rules:
        if not holds:
            raise ValueError(f"{key}: {rule}")
