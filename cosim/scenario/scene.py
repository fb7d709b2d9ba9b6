"""Where the cell is: the rules between ``[cell]`` and ``[channel]``, and the scene file.

:func:`check_cell_and_channel` holds the cross-table rules of the geometry (the 3GPP
cells' least distance, the scene layouts with the ray-traced channel and only with
it); :func:`confine_scene` resolves ``channel.scene``'s Mitsuba file against the
scenario's folder and refuses one outside it. pydantic and the standard library only
(``cosim validate`` imports it without Sionna RT).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from phy.parameters import BUILTIN_SCENES, CELL_LAYOUTS, CHANNEL_MODELS, SCENE_LAYOUTS


def traces_scene(model: str) -> bool:
    """Whether ``channel.model = model`` stands its devices in a traced scene (its
    registry entry's ``scene_coordinates``: :mod:`phy.ray_traced`)."""
    return CHANNEL_MODELS[model].parameters.scene_coordinates


def _scene_models() -> str:
    return " or ".join(repr(name) for name in CHANNEL_MODELS if traces_scene(name))


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{field}: {message}")


def check_cell_and_channel(scenario) -> None:
    """ValueError ``"table.key: rule"`` when ``[cell]`` and ``[channel]`` do not go
    together: a 3GPP cell with devices closer than TR 38.901 allows, a scene layout
    without the ray-traced channel, the ray-traced channel with a layout around the
    origin (its devices stand in the scene's coordinates)."""
    cell, channel = scenario.cell, scenario.channel
    least = CHANNEL_MODELS[channel.model].parameters.least_distance_m  # its registry entry says
    if least is not None:
        _require(cell.min_distance_m >= least, "cell.min_distance_m",
                 f"= {cell.min_distance_m:g} m: channel.model = {channel.model!r} needs "
                 f"devices at least {least:g} m from the BS (TR 38.901 Table 7.4.1-1)")
    scene_layouts = " or ".join(repr(name) for name in SCENE_LAYOUTS)
    if cell.layout in SCENE_LAYOUTS:
        _require(traces_scene(channel.model), "cell.layout",
                 f"= {cell.layout!r} places devices in a ray-traced scene: it needs "
                 f"channel.model = {_scene_models()} (got {channel.model!r})")
    elif traces_scene(channel.model):
        _require(False, "cell.layout",
                 f"= {cell.layout!r} drops devices around the origin; channel.model = "
                 f"{channel.model!r} needs devices in the scene: set cell.layout = {scene_layouts}")
    _check_redrop(scenario)


def _check_redrop(scenario) -> None:
    """``channel.redrop_every_rounds`` against a layout of given positions (a new drop would
    be the same) and the eavesdropper of ``[privacy]`` (its gains are the first drop's)."""
    every, layout = scenario.channel.redrop_every_rounds, scenario.cell.layout
    if every is None or not traces_scene(scenario.channel.model):
        return
    _require("rng" in CELL_LAYOUTS[layout].extras, "channel.redrop_every_rounds",  # a layout that draws
             f"= {every}: cell.layout = {layout!r} places the devices at given positions, so a new "
             "drop is the same drop; unset it or set cell.layout = 'radio_map'")
    privacy = scenario.privacy
    _require(privacy is None or privacy.eavesdropper_distance_m is None, "channel.redrop_every_rounds",
             f"= {every}: privacy.eavesdropper_distance_m places its eavesdropper against the first "
             "drop's devices only; unset one of them")


def is_scene_file(scene: str) -> bool:
    """Whether ``channel.scene`` names a file (not a built-in scene)."""
    return scene not in BUILTIN_SCENES


def confine_scene(scene: str, folder: Path) -> str:
    """``channel.scene``'s file as an absolute path: resolved against ``folder`` (the
    scenario file's folder, or the working directory), which must hold it (in it or
    below it, links followed); ValueError naming ``channel.scene`` otherwise. A
    built-in scene's name is returned as it is."""
    if not is_scene_file(scene):
        return scene
    base = folder.resolve()
    path = (base / scene).resolve()
    _require(path.is_relative_to(base), "channel.scene",
             f"= {scene!r} resolves to {path}, outside the scenario's folder {base}: a scene "
             "file must lie beside the scenario (in its folder or below)")
    _require(path.is_file(), "channel.scene", f"= {scene!r}: no such file ({path})")
    return str(path)


TRACING_SECONDS_PER_DEVICE = 0.5
"""Wall seconds one device adds to a traced drop at 1e6 rays and depth 3. Measured
2026-12-02 on this project's 2-core machine under a load average of 10 (other jobs),
the ``munich`` scene, BS at [8.5, 21, 27], 100 devices from ``cell.layout =
"radio_map"``: LoS + specular 46.9 s for 100 devices and 9.8 s for the 14 that replaced
those without a path (19.7 CPU s for the whole drop); with diffraction 46.1 s + 6.6 s for
100 + 4 (26.2 CPU s), 216 paths per device at most instead of 18."""
TRACING_FIXED_SECONDS = 6.0
"""Wall seconds a drop costs whatever K, measured with the above: loading the scene
(2.4-3.4 s) and the radio map of 6,400 cells of 5 m (2.4 s; 11.9 s with diffraction)."""


def tracing_cost_line(scenario) -> str | None:
    """What ``cosim validate`` prints of a ray-traced scenario's tracing: the estimated
    wall time of a new drop (:data:`TRACING_FIXED_SECONDS` plus
    :data:`TRACING_SECONDS_PER_DEVICE` per device, scaled by the rays / 1e6 and the
    depth / 3; a rough scale, stated as such), none for a drop already in the cache;
    with ``channel.redrop_every_rounds`` = N, times the run's ceil(rounds / N) drops;
    None for the other channel models."""
    channel = scenario.channel
    if not traces_scene(channel.model):
        return None
    parameters = channel.variant_parameters()
    rays, depth = parameters.resolved("samples_per_source"), parameters.resolved("max_depth")
    devices = scenario.cell.num_devices
    seconds = TRACING_FIXED_SECONDS + TRACING_SECONDS_PER_DEVICE * devices * rays / 1e6 * max(depth, 1) / 3
    return (f"  tracing   about {seconds:.0f} s wall per new drop ({devices} devices, {rays:,} rays, "
            f"depth {depth}; measured 2026-12-02 in 'munich' on 2 shared cores: 59 s for 100 devices "
            f"at 1e6 rays, depth 3), none when {parameters.resolved('cache_dir')} holds the drop"
            + _drops_cost(scenario, seconds) + _retrace_cost(scenario, rays, depth))


def _retrace_cost(scenario, rays: int, depth: int) -> str:
    """``"; re-traced every R m: ..."`` with ``channel.retrace_every_m``, else ``""``: the
    per-device rate above for each anchor a device reaches, and how many the fastest
    device reaches per second of the run's clock."""
    every = getattr(scenario.channel, "retrace_every_m", None)
    if every is None or scenario.mobility is None:
        return ""
    per_anchor = TRACING_SECONDS_PER_DEVICE * rays / 1e6 * max(depth, 1) / 3
    fastest = float(np.max(scenario.mobility.speed_mps))
    return (f"; re-traced every {every:g} m walked: about {per_anchor:.1f} s per anchor a device reaches, "
            f"at most {fastest / every:.3g} anchors per device per second of the run's clock ({fastest:g} m/s)")


def _drops_cost(scenario, seconds: float) -> str:
    """``"; N drops: about S s"`` with ``channel.redrop_every_rounds``, else ``""``."""
    every = scenario.channel.redrop_every_rounds
    if every is None:
        return ""
    drops = -(-scenario.rounds // every)
    return f"; {drops} drops (a new one every {every} rounds): about {drops * seconds:.0f} s"
