"""Doppler and time-correlated Rayleigh fading: Jakes' (Clarke's) spectrum as a sum of sinusoids.

A device moving at speed ``v`` under a carrier ``f_c`` sees the maximum Doppler shift
``f_D = v f_c / c`` (:func:`doppler_hz`). With isotropic scattering (Clarke 1968, Jakes
1974) the plane waves arrive from angles uniform in ``[0, 2 pi)`` relative to the
direction of motion and the channel's autocorrelation over a lag ``tau`` is

``E[h(t) h(t + tau)^*] / E|h|^2 = J0(2 pi f_D tau)``              (Jakes' correlation)

(:func:`jakes_correlation`); its first zero is at ``f_D tau = 0.383`` and the usual
coherence time is ``T_c = 0.423 / f_D`` (Rappaport, Wireless Communications, eq. 5.40.c;
:func:`coherence_time_s`).

:class:`SumOfSinusoids` generates it. Each of its processes (a device's subcarrier, or a
device's single coefficient for a flat channel) is a sum of M sinusoids whose arrival
angles ``alpha_m`` are uniform and whose complex gains ``c_m`` are i.i.d. ``CN(0, 1/M)``,
all drawn once per run:

``h(s) = sum_m c_m exp(j 2 pi (s / lambda) cos alpha_m)``

as a function of the distance ``s`` the device has travelled (``s = v t`` at constant
speed), ``lambda = c / f_c``. Given the angles, ``h(s)`` is a sum of independent complex
Gaussians of total variance 1 at every ``s``, so the marginal is exactly ``CN(0, 1)`` (the
block-fading models' marginal, :mod:`phy.channel`); over the angles,
``E[h(s) h(s + Delta)^*] = E_alpha[exp(-j 2 pi (Delta / lambda) cos alpha)] =
J0(2 pi Delta / lambda)``, Jakes' correlation at ``Delta = v tau`` exactly (the ensemble
over processes; with a finite M one realisation's time average deviates from it, the
known non-ergodicity of sums of sinusoids: Patzold, Mobile Radio Channels, 2nd ed., ch. 4).
Using the travelled distance instead of the time keeps the process continuous when a
device turns (isotropic scattering: the angles relative to the motion stay uniform).

At equally spaced distances (the OFDM symbols of a phase, :meth:`SumOfSinusoids.along`) each
sinusoid is stepped by one complex rotation per symbol instead of evaluated anew.

No TensorFlow: NumPy and Numba kernels, float64 phases (the phase ``2 pi s / lambda``
reaches 1e5 rad over a few kilometres) whose cosines and sines are computed without a call
(:mod:`native.sincos`), complex64 output.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from scipy.special import j0

from native.launch import LAUNCH, aligned_empty
from native.sincos import cos_sin, needs_libm, rounded_cos_sin
from phy.parameters import FLOAT32_STEPS_FROM_PROCESSES

SPEED_OF_LIGHT_MPS = 299_792_458.0
"""c [m/s]."""

COHERENCE_TIME_FACTOR = 0.423
"""T_c = 0.423 / f_D: the time over which Jakes' correlation stays above 0.5 (Rappaport,
eq. 5.40.c, the geometric mean of the 0.5-correlation and the 9/(16 pi) rules)."""


def doppler_hz(speed_mps, carrier_frequency_hz: float):
    """Maximum Doppler shift ``f_D = v f_c / c`` [Hz] of a speed ``v`` [m/s] (array or
    float) at the carrier ``f_c`` [Hz]."""
    return np.asarray(speed_mps, np.float64) * float(carrier_frequency_hz) / SPEED_OF_LIGHT_MPS


def wavelength_m(carrier_frequency_hz: float) -> float:
    """``lambda = c / f_c`` [m]."""
    return SPEED_OF_LIGHT_MPS / float(carrier_frequency_hz)


def coherence_time_s(doppler_hz_value):
    """``T_c = 0.423 / f_D`` [s] (inf at ``f_D = 0``), array or float."""
    f = np.asarray(doppler_hz_value, np.float64)
    with np.errstate(divide="ignore"):
        return np.where(f > 0.0, COHERENCE_TIME_FACTOR / np.where(f > 0.0, f, 1.0), np.inf)


def jakes_correlation(doppler_hz_value, lag_s):
    """``J0(2 pi f_D tau)``: Jakes' autocorrelation of a unit-power channel at the lag
    ``tau`` [s] (arrays broadcast)."""
    return j0(2.0 * np.pi * np.asarray(doppler_hz_value, np.float64) * np.asarray(lag_s, np.float64))


class SumOfSinusoids:
    """Unit-power Rayleigh processes with Jakes' spectrum, evaluated at any travelled distance.

    Parameters
    ----------
    num_devices : int
        K.
    num_coefficients : int
        F_c: independent processes per device (F for i.i.d. subcarriers, 1 for a flat channel).
    num_sinusoids : int
        M >= 1 sinusoids per process.
    carrier_frequency_hz : float
        f_c [Hz] (the wavelength ``c / f_c``).
    rng : np.random.Generator
        The run's stream the angles and gains are drawn from (once, at construction).

    Input (:meth:`at`)
    ------------------
    distance_m : [K] or [T, K], float
        The distance each device has travelled [m] (``v_k t`` at constant speed).

    Output
    ------
    h : [K, F_c] or [T, K, F_c], np.complex64
        ``sum_m c_m exp(j 2 pi (s / lambda) cos alpha_m)``, marginally ``CN(0, 1)``.
    """

    def __init__(self, num_devices: int, num_coefficients: int, num_sinusoids: int,
                 carrier_frequency_hz: float, rng: np.random.Generator):
        for name, value in (("num_devices", num_devices), ("num_coefficients", num_coefficients),
                            ("num_sinusoids", num_sinusoids)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not np.isfinite(carrier_frequency_hz) or carrier_frequency_hz <= 0:
            raise ValueError(f"carrier_frequency_hz must be positive and finite, got {carrier_frequency_hz!r}")
        shape = (int(num_devices), int(num_coefficients), int(num_sinusoids))
        angles = rng.uniform(0.0, 2.0 * np.pi, size=shape)
        # 2 pi cos(alpha) / lambda [rad/m], float64: the phase at kilometres is ~1e5 rad
        self.wavenumber = (2.0 * np.pi / wavelength_m(carrier_frequency_hz)) * np.cos(angles)
        parts = rng.standard_normal(size=(2, *shape)) * np.sqrt(0.5 / num_sinusoids)
        self.gains = (parts[0] + 1j * parts[1]).astype(np.complex64)
        self.shape = shape
        self._rotation_of = None  # (step [K], its rotations): :meth:`along` of every device

    @classmethod
    def of(cls, wavenumber, gains) -> SumOfSinusoids:
        """Processes of given sinusoids instead of drawn ones: ``wavenumber`` [K, F_c, M]
        (``2 pi cos(alpha_m) / lambda``, rad/m) and ``gains`` [K, F_c, M] (complex; a
        process is unit-power when its gains' squared moduli sum to one)."""
        fading = cls.__new__(cls)
        fading.wavenumber = np.ascontiguousarray(wavenumber, np.float64)
        fading.gains = np.ascontiguousarray(gains, np.complex64)
        if fading.wavenumber.ndim != 3 or fading.gains.shape != fading.wavenumber.shape:
            raise ValueError(f"wavenumber and gains must both be [K, F_c, M], got {fading.wavenumber.shape} "
                             f"and {fading.gains.shape}")
        fading.shape = fading.wavenumber.shape
        fading._rotation_of = None
        return fading

    def at(self, distance_m, rows: slice = slice(None)) -> np.ndarray:
        """The processes at the travelled distances ``distance_m`` ([K] or [T, K], metres):
        each term's phase ``s w_m`` in float64, its rotation (libm's cosine and sine,
        :func:`native.sincos.rounded_cos_sin`, bit for bit) rounded to complex64 and
        multiplied by the complex64 gain, the M terms summed in complex64. With ``rows``
        (a slice of the devices) only theirs, ``distance_m`` [P] or [T, P]: each device's
        values are the same as in the whole evaluation."""
        wavenumber, gains = self.wavenumber[rows], self.gains[rows]
        count = wavenumber.shape[0]
        s = np.asarray(distance_m, np.float64)
        if s.shape[-1:] != (count,) or s.ndim > 2:
            raise ValueError(f"distance_m must have shape [K] or [T, K] with K = {count}, got {s.shape}")
        times = np.ascontiguousarray(s.reshape(-1, count))
        out = np.empty((times.shape[0], count, self.shape[1]), np.complex64)
        with LAUNCH:
            _at(wavenumber, gains, times, out)
        return out[0] if s.ndim == 1 else out

    def at_pairs(self, distance_m, devices, coefficients) -> np.ndarray:
        """Selected processes only: ``[T, P]`` complex64 at the travelled distances
        ``distance_m`` [T, P] (metres) of the pairs ``(devices [P], coefficients [P])``
        (e.g. each subcarrier with the device that owns it)."""
        s = np.asarray(distance_m, np.float64)
        phase = s[..., None] * self.wavenumber[devices, coefficients][None]  # [T, P, M]
        return np.einsum("tpm,pm->tp", np.exp(1j * phase).astype(np.complex64),
                         self.gains[devices, coefficients])

    def along(self, start_m, step_m, num_steps: int, amplitude, rows: slice = slice(None),
              out: np.ndarray | None = None) -> np.ndarray:
        """The processes at ``num_steps`` equally spaced distances, each scaled:
        ``[K, T, F_c]`` complex64, entry (k, n, f) = ``amplitude[n, k] h_kf(s_k + n ds_k)``
        with ``start_m`` s [K], ``step_m`` ds [K] (metres) and ``amplitude`` [T, K]; with
        ``rows`` (a slice of the devices) only theirs (K their count), each device's values
        those of the whole evaluation. ``out``: the C-contiguous complex64 [K, T, F_c]
        array to write them to (every entry is written), else a new one.

        Each sinusoid ``c_m exp(j w s)`` is evaluated at s_k in float64, then stepped:
        blocks of :data:`STEPS_PER_BLOCK` steps start from it in float32 and multiply it
        by the float32 ``exp(j w ds_k)`` once per step, while the float64 value is
        multiplied by ``exp(j w B ds_k)`` once per block. A step thus adds at most some
        1e-7 of the term's modulus to its error, and a block's errors do not carry to the
        next: this equals :meth:`at` at the same distances within 1.1e-6 of the largest
        amplitude at the quickstart's size (K = 100, F_c = 1024, M = 8, 116 steps;
        measured), 2e-6 tested over 300 steps, without a complex exponential per step.
        Devices of fewer than :data:`phy.parameters.FLOAT32_STEPS_FROM_PROCESSES`
        processes (a flat channel, the time-domain uplink's paths) are stepped in float64
        throughout (within 5e-7): a float32 loop over so few lanes does not vectorise
        (16 processes measured 2.7 times slower than in float64)."""
        start = np.asarray(start_m, np.float64)
        step = np.asarray(step_m, np.float64)
        amplitude = np.asarray(amplitude, np.float64)
        wavenumber, gains = self.wavenumber[rows], self.gains[rows]
        num_devices, num_coefficients = wavenumber.shape[:2]
        if start.shape != (num_devices,) or step.shape != (num_devices,) \
                or amplitude.shape != (int(num_steps), num_devices):
            raise ValueError(f"start_m, step_m must be [K = {num_devices}] and amplitude "
                             f"[T = {num_steps}, K], got {start.shape}, {step.shape}, {amplitude.shape}")
        rotations = self._rotation(step, rows)
        shape = (num_devices, int(num_steps), self.shape[1])
        if out is None:
            out = aligned_empty(shape, np.complex64)  # a tensor as it is
        elif out.shape != shape or out.dtype != np.complex64 or not out.flags.c_contiguous:
            raise ValueError(f"out must be C-contiguous complex64 {shape}, got {out.dtype} {out.shape}")
        with LAUNCH:
            if num_coefficients >= FLOAT32_STEPS_FROM_PROCESSES:  # _rotation's four planes
                _along(wavenumber, gains, start, *rotations, amplitude, out.view(np.float32))
            else:
                _along_narrow(wavenumber, gains, start, *rotations, amplitude, out)
        return out

    def _rotation(self, step: np.ndarray, rows: slice) -> tuple[np.ndarray, ...]:
        """Each sinusoid's rotations of ``rows``, [K, M, F_c] planes of real and imaginary
        parts: over the step ``ds_k``, ``exp(j w_m ds_k)``, in float32 and over a block of
        :data:`STEPS_PER_BLOCK` steps, ``exp(j w_m B ds_k)``, in float64 (four planes);
        with fewer than :data:`phy.parameters.FLOAT32_STEPS_FROM_PROCESSES` processes
        per device the step's in float64 only (two). Kept for the next call when of every
        device (the step of constant speeds is the same every phase)."""
        whole = isinstance(rows, slice) and rows == slice(None)
        if whole and self._rotation_of is not None and np.array_equal(self._rotation_of[0], step):
            return self._rotation_of[1]
        wavenumber = self.wavenumber[rows]
        num_devices, num_coefficients, num_sinusoids = wavenumber.shape
        shape = (num_devices, num_sinusoids, num_coefficients)
        rotation = (np.empty(shape), np.empty(shape))
        with LAUNCH:
            _rotations(wavenumber, step, *rotation)
        if num_coefficients >= FLOAT32_STEPS_FROM_PROCESSES:
            block = (np.empty(shape), np.empty(shape))
            with LAUNCH:
                _rotations(wavenumber, STEPS_PER_BLOCK * step, *block)
            rotation = (rotation[0].astype(np.float32), rotation[1].astype(np.float32), *block)
        if whole:
            self._rotation_of = (step.copy(), rotation)
        return rotation


STEPS_PER_BLOCK = 8
"""B: the steps :meth:`SumOfSinusoids.along` takes in float32 from each float64 value
(benchmarks/README.md: the choice, measured)."""

_TILE = 256
"""Processes of a device per work item of :meth:`SumOfSinusoids.along`: its M x 256
float32 terms and rotations (32 kB) stay in the core's 48 kB L1 over the steps (tiles of
128 to 1024 measured within 5 % of each other)."""


@njit(parallel=True, nogil=True, cache=True)
def _at(wavenumber, gains, distance, out):
    # one (time, device) per job: its F_c M rotations rounded to complex64 (libm's bits,
    # native.sincos.rounded_cos_sin), then each process's M terms summed in order
    num_times, num_devices = distance.shape
    num_coefficients, num_sinusoids = wavenumber.shape[1], wavenumber.shape[2]
    size = num_coefficients * num_sinusoids
    for job in prange(num_times * num_devices):
        t, k = job // num_devices, job % num_devices
        s = distance[t, k]
        numbers = wavenumber[k].reshape(size)
        phase = np.empty(size)
        for i in range(size):
            phase[i] = s * numbers[i]
        cosine, sine = np.empty(size, np.float32), np.empty(size, np.float32)
        rounded_cos_sin(phase, cosine, sine, np.empty(size, np.bool_))
        for f in range(num_coefficients):
            total = np.complex64(0.0)
            for m in range(num_sinusoids):
                i = f * num_sinusoids + m
                total += np.complex64(complex(cosine[i], sine[i])) * gains[k, f, m]
            out[t, k, f] = total


@njit(parallel=True, nogil=True, cache=True)
def _rotations(wavenumber, step, step_re, step_im):
    # exp(j w_m ds_k) per sinusoid, [K, M, F_c] planes (the stepping's layout)
    num_devices, num_coefficients, num_sinusoids = wavenumber.shape
    for k in prange(num_devices):
        for f in range(num_coefficients):
            for m in range(num_sinusoids):
                advance = step[k] * wavenumber[k, f, m]
                step_re[k, m, f], step_im[k, m, f] = np.cos(advance), np.sin(advance)


@njit(parallel=True, nogil=True, cache=True, fastmath={"contract", "nnan", "ninf", "nsz", "arcp"})
def _along(wavenumber, gains, start, step_re, step_im, block_re, block_im, amplitude, out):
    # one (device, tile of about _TILE processes) per work item: the M x tile terms
    # c_m exp(j w_m s) in float64 (cos_sin, vectorised), then blocks of float32 steps from
    # them, the sinusoid index outermost so that the process loop is contiguous (vectorised)
    num_devices, num_coefficients, num_sinusoids = wavenumber.shape
    num_steps = out.shape[1]  # out: [K, T, 2 F_c] float32, the complex64 output's parts
    num_tiles = -(-num_coefficients // _TILE)
    tile = -(-num_coefficients // num_tiles)  # tiles of equal width, none narrow
    for job in prange(num_devices * num_tiles):
        k, first = job // num_tiles, (job % num_tiles) * tile
        width = min(tile, num_coefficients - first)
        shape = (num_sinusoids, width)
        exact_re, exact_im = np.empty(shape), np.empty(shape)
        re, im = np.empty(shape, np.float32), np.empty(shape, np.float32)
        rot_re, rot_im = np.empty(shape, np.float32), np.empty(shape, np.float32)
        jump_re, jump_im = np.empty(shape), np.empty(shape)
        total_re, total_im = np.empty(width, np.float32), np.empty(width, np.float32)
        row = np.empty(2 * width, np.float32)  # a step's output, real and imaginary parts interleaved
        phase, cosine, sine = np.empty(width), np.empty(width), np.empty(width)
        for m in range(num_sinusoids):
            for f in range(width):
                phase[f] = start[k] * wavenumber[k, first + f, m]
            for f in range(width):
                cosine[f], sine[f] = cos_sin(phase[f])
            for f in range(width):
                if needs_libm(phase[f]):
                    cosine[f], sine[f] = np.cos(phase[f]), np.sin(phase[f])
            for f in range(width):
                g = gains[k, first + f, m]
                g_re, g_im = np.float64(g.real), np.float64(g.imag)
                exact_re[m, f] = g_re * cosine[f] - g_im * sine[f]
                exact_im[m, f] = g_re * sine[f] + g_im * cosine[f]
                re[m, f], im[m, f] = exact_re[m, f], exact_im[m, f]
                rot_re[m, f], rot_im[m, f] = step_re[k, m, first + f], step_im[k, m, first + f]
                jump_re[m, f], jump_im[m, f] = block_re[k, m, first + f], block_im[k, m, first + f]
        for block_start in range(0, num_steps, STEPS_PER_BLOCK):
            if block_start > 0:  # the float64 terms a block on, and the float32 steps from them
                for m in range(num_sinusoids):
                    for f in range(width):
                        r, i = exact_re[m, f], exact_im[m, f]
                        r, i = r * jump_re[m, f] - i * jump_im[m, f], r * jump_im[m, f] + i * jump_re[m, f]
                        exact_re[m, f], exact_im[m, f] = r, i
                        re[m, f], im[m, f] = r, i
            for n in range(block_start, min(block_start + STEPS_PER_BLOCK, num_steps)):
                total_re[:] = 0.0
                total_im[:] = 0.0
                for m in range(num_sinusoids):
                    for f in range(width):  # sinusoid m's terms added, then stepped
                        r, i = re[m, f], im[m, f]
                        total_re[f] += r
                        total_im[f] += i
                        re[m, f] = r * rot_re[m, f] - i * rot_im[m, f]
                        im[m, f] = r * rot_im[m, f] + i * rot_re[m, f]
                a = amplitude[n, k]
                for f in range(width):
                    row[2 * f] = np.float32(a * total_re[f])
                    row[2 * f + 1] = np.float32(a * total_im[f])
                out[k, n, 2 * first:2 * (first + width)] = row


@njit(parallel=True, nogil=True, cache=True)
def _along_narrow(wavenumber, gains, start, step_re, step_im, amplitude, out):
    # per device: the M x F_c terms c_m exp(j w_m s) as real and imaginary planes, stepped in
    # float64, the sinusoid index outermost so that the process loop is contiguous
    num_devices, num_coefficients, num_sinusoids = wavenumber.shape
    for k in prange(num_devices):
        shape = (num_sinusoids, num_coefficients)
        re, im = np.empty(shape), np.empty(shape)
        for f in range(num_coefficients):
            for m in range(num_sinusoids):
                term = np.complex128(gains[k, f, m]) * np.exp(1j * (start[k] * wavenumber[k, f, m]))
                re[m, f], im[m, f] = term.real, term.imag
        total_re, total_im = np.empty(num_coefficients), np.empty(num_coefficients)
        for n in range(out.shape[1]):
            total_re[:] = 0.0
            total_im[:] = 0.0
            for m in range(num_sinusoids):
                _rotate(re[m], im[m], step_re[k, m], step_im[k, m], total_re, total_im)
            a = amplitude[n, k]
            for f in range(num_coefficients):
                out[k, n, f] = np.complex64(complex(a * total_re[f], a * total_im[f]))


@njit(inline="always", fastmath={"contract", "nnan", "ninf", "nsz", "arcp"})
def _rotate(re, im, step_re, step_im, total_re, total_im):
    """One sinusoid's term on every process added to the totals, then stepped."""
    for f in range(re.size):
        r, i = re[f], im[f]
        total_re[f] += r
        total_im[f] += i
        re[f] = r * step_re[f] - i * step_im[f]
        im[f] = r * step_im[f] + i * step_re[f]
