"""A real place as the cell: a Sionna RT scene with the BS in it, traced once per drop.

:class:`RayTracedPlace` holds a scene (a built-in Sionna RT scene or a Mitsuba XML
file), the BS's position and array, the carrier and the solver's settings, and answers
two questions, each traced once and kept in a :class:`phy.path_cache.PathCache`:

* :meth:`RayTracedPlace.paths`: the uplink paths of devices at given ``[x, y]``
  positions (at ``ut_height_m`` above z = 0): Sionna RT's :class:`sionna.rt.PathSolver`
  with the BS as the one source (the cost does not grow with the rays per device) and
  the devices as receivers, the coefficients read back by reciprocity (a reciprocal
  scene: the uplink coefficient of device k at BS antenna n is the downlink one).
  Baseband coefficients and delays from :meth:`sionna.rt.Paths.cir` with
  ``normalize_delays=True`` (each device's first path at 0), so the per-device
  propagation delay is not part of the channel (the devices are synchronised).
  A place built with ``arrivals=True`` (devices that move, :mod:`phy.moving_rays`) also
  keeps each path's direction of arrival at the device (:func:`arrival_xy`), in cache
  entries of their own.
  :meth:`RayTracedPlace.paths_each` keeps one entry per position instead (the anchors of
  devices traced anew as they walk, :mod:`phy.retraced_rays`): a receiver's paths can
  depend on the receivers traced beside it, so a position traced once is read back alike.
* :meth:`RayTracedPlace.radio_map`: the path gain on a grid of cells at the devices'
  height around the BS (:class:`sionna.rt.RadioMapSolver`), to drop devices where a
  person can stand (:mod:`phy.scene_layouts`).

The BS is an ``N_r``-element uniform linear array along y of isotropic, vertically
polarised elements (``sionna.rt.PlanarArray`` with one row), applied synthetically; a
device is one isotropic, vertically polarised element. Refraction (through walls) is
not traced: a device inside a building has no path. Sionna RT (Mitsuba, Dr.Jit) is
imported only when something must be traced: a drop found in the cache needs neither
the import nor the scene. Where Dr.Jit finds no LLVM, the import's failure is one
line naming ``channel.model`` and what to install. A BS inside a closed mesh (a
building) is refused, naming ``channel.bs_position_m``.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from phy.geometry import horizontal_direction
from phy.parameters import BUILTIN_SCENES, RayTracedChannel
from phy.path_cache import PathCache, TracedPaths, cache_key

SOLVER_SEED = 42
"""The solver's seed (Sionna RT's default): the rays' directions, hence the traced
paths, are the same for the same settings."""


def _import_rt():
    """``(sionna.rt, mitsuba)``, or ValueError naming ``channel.model`` and what to install."""
    try:
        import mitsuba
        import sionna.rt
    except (ImportError, OSError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"channel.model = \"ray_traced\": Sionna RT cannot start ({first}); its CPU backend "
            "needs LLVM: install it (Debian/Ubuntu: apt-get install libllvm15) or point "
            "DRJIT_LIBLLVM_PATH at libLLVM.so") from None
    return sionna.rt, mitsuba


def scene_file(scene: str) -> Path:
    """The XML file of ``channel.scene``: a built-in scene's in the installed Sionna RT
    (found without importing it), else the path itself."""
    if scene in BUILTIN_SCENES:
        return Path(str(metadata.distribution("sionna-rt").locate_file(
            f"sionna/rt/scenes/{scene}/{scene}.xml")))
    return Path(scene)


def scene_digest(path: Path) -> str:
    """SHA-256 (hex) of the scene: its XML and every file it names (``filename``
    values, relative to the XML's folder), in the order named."""
    digest = hashlib.sha256()
    text = path.read_bytes()
    digest.update(text)
    for name in re.findall(rb'name="filename"\s+value="([^"]+)"', text):
        digest.update(name)
        digest.update((path.parent / name.decode("utf-8")).read_bytes())
    return digest.hexdigest()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class RayTracedPlace:
    """A scene with the BS in it; its traced paths and radio map, cached.

    Parameters
    ----------
    parameters : RayTracedChannel
        ``[channel]``'s ray-tracing keys (:class:`phy.parameters.RayTracedChannel`;
        unset keys take their defaults).
    num_bs_antennas : int
        N_r >= 1, the BS's elements.
    log : callable, optional
        Receives the progress lines of a trace (default: standard error).
    arrivals : bool
        Whether traced paths carry their directions of arrival
        (:attr:`phy.path_cache.TracedPaths.arrival_xy`; default False: a place at rest,
        whose cache entries stay those it always wrote).

    Attributes
    ----------
    traces : int
        Number of solver runs (path or radio-map traces) this object made.
    entry : str
        ``"<key>.npz sha256:<checksum>"`` of the last :meth:`paths` entry used.
    """

    def __init__(self, parameters: RayTracedChannel, num_bs_antennas: int,
                 log: Callable[[str], None] = _stderr, arrivals: bool = False):
        self.parameters = parameters
        self.arrivals = bool(arrivals)
        self.num_bs_antennas = int(num_bs_antennas)
        self.file = scene_file(parameters.scene)
        if not self.file.is_file():
            raise ValueError(f"channel.scene = {parameters.scene!r}: no such file ({self.file})")
        self.cache = PathCache(parameters.resolved("cache_dir"))
        self.log = log
        self.traces = 0
        self.entry = ""
        self._scene = None
        self._settings = {
            "scene_sha256": scene_digest(self.file),
            "bs_position_m": [float(v) for v in parameters.bs_position_m],
            "num_bs_antennas": self.num_bs_antennas,
            "bs_antenna_spacing_wavelengths": float(parameters.resolved("bs_antenna_spacing_wavelengths")),
            "carrier_frequency_hz": float(parameters.carrier_frequency_hz),
            "ut_height_m": float(parameters.ut_height_m),
            "max_depth": int(parameters.resolved("max_depth")),
            "samples_per_source": int(parameters.resolved("samples_per_source")),
            "interactions": sorted(parameters.resolved("interactions")),
            "solver_seed": SOLVER_SEED,
            "sionna_rt": metadata.version("sionna-rt"),
        }
        self._path_settings = {**self._settings, "arrivals": True} if self.arrivals else self._settings

    @property
    def bs_xy_m(self) -> np.ndarray:
        """``[2]`` float64: the BS's x, y [m]."""
        return np.asarray(self.parameters.bs_position_m[:2], np.float64)

    def _solver_flags(self) -> dict:
        chosen = set(self._settings["interactions"])
        return dict(max_depth=self._settings["max_depth"], los="los" in chosen,
                    specular_reflection="specular" in chosen, diffuse_reflection="diffuse" in chosen,
                    diffraction="diffraction" in chosen, refraction=False, seed=SOLVER_SEED)

    def _loaded(self):
        """The Sionna RT scene with its arrays and the BS (loaded once, on first need)."""
        if self._scene is not None:
            return self._scene
        rt, mi = _import_rt()
        started = time.perf_counter()
        scene = rt.load_scene(str(self.file))
        scene.frequency = self._settings["carrier_frequency_hz"]
        spacing = self._settings["bs_antenna_spacing_wavelengths"]
        scene.tx_array = rt.PlanarArray(num_rows=1, num_cols=self.num_bs_antennas, vertical_spacing=spacing,
                                        horizontal_spacing=spacing, pattern="iso", polarization="V")
        scene.rx_array = rt.PlanarArray(num_rows=1, num_cols=1, pattern="iso", polarization="V")
        position = [float(v) for v in self.parameters.bs_position_m]
        if _inside_closed_mesh(scene, mi, position):
            raise ValueError(f"channel.bs_position_m = {position}: the BS stands inside a building of "
                             f"the scene {self.parameters.scene!r} (a ray up from it leaves through a "
                             "roof); move it outside or onto a roof")
        scene.add(rt.Transmitter("bs", position=mi.Point3f(*position)))
        self.log(f"ray tracing: scene {self.file.name} loaded in {time.perf_counter() - started:.1f} s")
        self._scene = scene
        return scene

    def paths(self, positions_m: np.ndarray) -> TracedPaths:
        """The uplink paths of devices at ``positions_m`` ``[K, 2]`` (scene x, y [m]):
        from the cache, else traced and stored. Sets :attr:`entry`."""
        positions = np.asarray(positions_m, np.float64).reshape(-1, 2)
        key = cache_key({"kind": "paths", **self._path_settings, "positions_m": positions.tolist()})
        found = self.cache.load(key)
        if found is None:
            traced = self._trace(positions)
            checksum = self.cache.store(key, traced.arrays())
        else:
            arrays, checksum = found
            traced = TracedPaths.of(arrays)
        self.entry = f"{self.cache.path(key).name} sha256:{checksum}"
        return traced

    def paths_each(self, positions_m: np.ndarray) -> TracedPaths:
        """The uplink paths of devices at ``positions_m`` ``[K, 2]``, each from a cache entry
        of its own position: those not in the cache are traced in one solver call and each
        stored under its position. So a device's paths are the same whichever devices it is
        asked with (a batch's paths can depend on the receivers traced beside them in a large
        scene), once traced. Does not set :attr:`entry`."""
        positions = np.asarray(positions_m, np.float64).reshape(-1, 2)
        keys = [cache_key({"kind": "paths_each", **self._path_settings, "position_m": row.tolist()})
                for row in positions]  # not a one-device drop's key: that one is traced alone
        rows: list[TracedPaths | None] = []
        for key in keys:
            found = self.cache.load(key)
            rows.append(None if found is None else TracedPaths.of(found[0]))
        missing = [i for i, row in enumerate(rows) if row is None]
        if missing:
            traced = self._trace(positions[missing])
            for i, index in enumerate(missing):
                rows[index] = traced.select([i])
                self.cache.store(keys[index], rows[index].arrays())
        return TracedPaths.concatenate(rows)

    def remember(self, positions_m: np.ndarray, paths: TracedPaths) -> None:
        """Store ``paths`` (traced by parts) as the entry of ``positions_m``, so that
        :meth:`paths` finds it."""
        positions = np.asarray(positions_m, np.float64).reshape(-1, 2)
        key = cache_key({"kind": "paths", **self._path_settings, "positions_m": positions.tolist()})
        if not self.cache.path(key).exists():
            self.cache.store(key, paths.arrays())

    def _trace(self, positions: np.ndarray) -> TracedPaths:
        rt, mi = _import_rt()
        scene = self._loaded()
        settings = self._settings
        self.log(f"ray tracing: {len(positions)} devices in {self.file.name} (depth {settings['max_depth']}, "
                 f"{settings['samples_per_source']:,} rays, {'+'.join(settings['interactions'])}) ...")
        started = time.perf_counter()
        height = settings["ut_height_m"]
        names = [f"device-{k}" for k in range(len(positions))]
        for name, (x, y) in zip(names, positions, strict=True):  # mitsuba takes Python floats only
            scene.add(rt.Receiver(name, position=mi.Point3f(float(x), float(y), float(height))))
        try:
            paths = rt.PathSolver()(scene, samples_per_src=settings["samples_per_source"],
                                    max_num_paths_per_src=settings["samples_per_source"], **self._solver_flags())
            a, tau = paths.cir(normalize_delays=True, out_type="numpy")
        finally:
            for name in names:
                scene.remove(name)
        self.traces += 1
        # [K rx, 1, 1 tx, N_r, P, 1 step] -> [K, N_r, P]; tau [K, 1 tx, P], -1 where no path
        a = np.asarray(a)[:, 0, 0, :, :, 0]
        tau = np.asarray(tau)[:, 0, :]
        valid = tau >= 0
        a = np.where(valid[:, None, :], a, 0)
        tau = np.where(valid, tau, 0)
        arrival = np.where(valid[..., None], arrival_xy(paths), 0) if self.arrivals else None
        traced = TracedPaths(a, tau, arrival).select(np.arange(len(positions)))
        self.log(f"ray tracing: done in {time.perf_counter() - started:.1f} s, "
                 f"{int(np.sum(traced.has_path))} of {len(positions)} devices with a path")
        return traced

    def radio_map(self, radius_m: float, cell_m: float) -> tuple[np.ndarray, np.ndarray]:
        """``(centres [M, 2], gain [M])``: the x, y [m] of the radio map's cells (squares of
        side ``cell_m`` covering the square of half-side ``radius_m`` around the BS, at
        ``ut_height_m``) and their path gain (linear, 0 where no ray arrives); cached."""
        key = cache_key({"kind": "radio_map", **self._settings, "radius_m": float(radius_m),
                         "cell_m": float(cell_m)})
        found = self.cache.load(key)
        if found is not None:
            return found[0]["centres_m"], found[0]["gain"]
        rt, mi = _import_rt()
        scene = self._loaded()
        started = time.perf_counter()
        flags = self._solver_flags()
        max_depth, seed = flags.pop("max_depth"), flags.pop("seed")
        x, y = (float(v) for v in self.bs_xy_m)
        radio_map = rt.RadioMapSolver()(
            scene, center=mi.Point3f(x, y, self._settings["ut_height_m"]), orientation=mi.Point3f(0.0, 0.0, 0.0),
            size=mi.Point2f(2.0 * float(radius_m), 2.0 * float(radius_m)),
            cell_size=mi.Point2f(float(cell_m), float(cell_m)),
            samples_per_tx=self._settings["samples_per_source"], max_depth=max_depth, seed=seed, **flags)
        self.traces += 1
        centres = np.asarray(radio_map.cell_centers.numpy(), np.float64).reshape(-1, 3)[:, :2]
        gain = np.asarray(radio_map.path_gain.numpy(), np.float64)[0].reshape(-1)
        self.cache.store(key, {"centres_m": centres, "gain": gain})
        self.log(f"ray tracing: radio map of {gain.size} cells in {time.perf_counter() - started:.1f} s")
        return centres, gain


def arrival_xy(paths) -> np.ndarray:
    """``[K, P, 2]`` float32: the x, y of ``r(theta_R, phi_R)`` (Sionna RT's unit vector
    towards where path p arrives from at receiver k) of a :class:`sionna.rt.Paths` traced
    from one transmitter (the BS) to K one-element receivers. A receiver moving at
    ``v = (v_x, v_y, 0)`` sees path p shifted by ``(v_x x + v_y y) / lambda`` [Hz], Sionna
    RT's :attr:`sionna.rt.Paths.doppler` with a still transmitter and still scene."""
    def angles(tensor) -> np.ndarray:
        values = np.asarray(tensor.numpy(), np.float64)
        # [rx, rx_ant, tx, tx_ant, P] (per-antenna arrays) or [rx, tx, P] (synthetic)
        return values[:, 0, 0, 0, :] if values.ndim == 5 else values[:, 0, :]

    return horizontal_direction(angles(paths.phi_r), angles(paths.theta_r)).astype(np.float32)


def _inside_closed_mesh(scene, mi, position: list[float], max_crossings: int = 64) -> bool:
    """Whether ``position`` is inside a closed mesh: a ray straight up from it crosses
    the scene's surfaces an odd number of times."""
    origin = list(position)
    crossings = 0
    for _ in range(max_crossings):
        hit = scene.mi_scene.ray_intersect(mi.Ray3f(mi.Point3f(*origin), mi.Vector3f(0.0, 0.0, 1.0)))
        if not bool(hit.is_valid()[0]):
            break
        crossings += 1
        origin[2] += float(hit.t[0]) + 1e-3
    return crossings % 2 == 1


GROUND_NAMES = re.compile(r"ground|plane|floor|terrain", re.IGNORECASE)
"""Names of a scene's ground meshes (Munich's ``ground``, the street canyon's ``floor``),
left out of :func:`scene_footprints`."""

GROUND_TOLERANCE_M = 0.5
"""A face whose vertices all lie within this height of the scene's lowest point is ground."""


def scene_footprints(scene: str, min_area_m2: float = 1e-4) -> np.ndarray:
    """The scene seen from above: ``[T, 3, 2]`` float64, the x, y [m] of every triangle
    of the scene's meshes projected onto the x-y plane, for drawing the buildings'
    footprints. Left out: the objects named like ground (:data:`GROUND_NAMES`), the faces
    at ground height (:data:`GROUND_TOLERANCE_M` of the lowest vertex) and the faces seen
    edge-on from above (walls: projected area under ``min_area_m2``).

    ``scene`` is ``channel.scene`` (a built-in scene or a Mitsuba XML file). Loads the
    scene (about a second for Munich), traces nothing. ValueError when Sionna RT cannot
    start (:func:`_import_rt`) or the scene file is missing or cannot be read.
    """
    path = scene_file(scene)
    if not path.is_file():
        raise ValueError(f"channel.scene = {scene!r}: no such file ({path})")
    rt, _ = _import_rt()
    try:
        loaded = rt.load_scene(str(path))
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ValueError(f"channel.scene = {scene!r}: cannot load it ({first})") from None
    meshes = []
    for name, item in loaded.objects.items():
        if GROUND_NAMES.search(name):
            continue
        vertices = np.asarray(item.mi_mesh.vertex_positions_buffer().numpy(), np.float64).reshape(-1, 3)
        faces = np.asarray(item.mi_mesh.faces_buffer().numpy(), np.int64).reshape(-1, 3)
        meshes.append(vertices[faces])  # [n, 3 corners, xyz]
    if not meshes:
        return np.zeros((0, 3, 2))
    triangles = np.concatenate(meshes)
    ground = triangles[..., 2].min(initial=np.inf)
    raised = triangles[..., 2].max(axis=1) > ground + GROUND_TOLERANCE_M
    a, b, c = (triangles[:, i, :2] for i in range(3))
    area = 0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0]))
    return triangles[raised & (area >= min_area_m2)][..., :2].copy()
