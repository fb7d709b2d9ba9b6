"""Each device's L2 sensitivity on the received signal of one AirComp phase.

The receiver noise of eq. ``ReceivedSignal`` is a Gaussian mechanism on the devices'
contributions ``h_k o x_k``: an observer (the BS, or an eavesdropper with its own
channel) sees ``y[n] = sum_k h_k o x_k[n] + z[n]`` with ``z ~ CN(0, sigma^2 I_F)``, i.e.
real Gaussian noise of variance ``sigma^2 / 2`` on each of the ``2 N F`` real dimensions
of the phase. Removing one device's data changes ``y`` by at most that device's
contribution ``||h_k o x_k||`` over the phase's N symbols (add/remove neighbouring), so
the device's *noise multiplier* is ``sqrt(sigma^2 / 2) / sensitivity_k`` and the worst
device (the smallest multiplier) decides the phase's privacy. The derivation, the
threat model and what is not covered are in ``docs/privacy.md``.

A device sends ``|x_kf| = sqrt(u_kf) v_kf`` (eqs. ``PowerAlloc_1``, ``Gen_x``) with
``0 <= v <= |Delta|`` under every power control of :mod:`phy.power`, so two bounds hold:

- **clip**: with ``||Delta_k||_2 <= C`` (the update clipped before power control),
  ``||h_k o x_k|| <= C max_f |h_kf| sqrt(u_kf)`` over the subcarriers the device sends on;
- **budget**: with ``sum_f u_kf v_knf^2 <= P`` per symbol (eq. ``PowerConst``; the KKT
  control and TCI), ``||h_k o x_k||^2 <= N P max_f |h_kf|^2`` whatever the data.

The sensitivity is the smaller of the bounds that hold (infinite if none does: full
inversion without clipping). NumPy only; no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class PhaseMechanism:
    """The Gaussian mechanism of one phase as one observer sees it.

    Attributes
    ----------
    sensitivity : [K], np.float64
        Each device's L2 sensitivity on the observer's received signal (W^1/2 over the
        phase's N symbols); 0 for a device that did not send, ``inf`` where no bound holds.
    noise_std : float
        Standard deviation of the observer's noise per real dimension,
        ``sqrt((sigma_z^2 + sigma_a^2) / 2)`` (W^1/2).
    noise_multiplier : [K], np.float64
        ``noise_std / sensitivity`` (``inf`` for a device that did not send, 0 where the
        sensitivity is unbounded).
    worst_device : int
        Index of the smallest multiplier (the device that decides; -1 if none sent).
    """

    sensitivity: np.ndarray
    noise_std: float
    noise_multiplier: np.ndarray
    worst_device: int

    @property
    def worst_noise_multiplier(self) -> float:
        """The phase's noise multiplier: the worst device's (``inf`` if none sent)."""
        if self.worst_device < 0:
            return float("inf")
        return float(self.noise_multiplier[self.worst_device])

    def restricted(self, sent) -> PhaseMechanism:
        """The mechanism of the devices ``sent`` [K] bool only: sensitivity 0 and
        multiplier ``inf`` for the others, the worst device among the senders (-1 if none)."""
        sent = np.asarray(sent, bool)
        sensitivity = np.where(sent, self.sensitivity, 0.0)
        multiplier = np.where(sent, self.noise_multiplier, np.inf)
        worst = int(np.argmin(multiplier)) if sent.any() else -1
        return PhaseMechanism(sensitivity, self.noise_std, multiplier, worst)

    def with_noise_std(self, noise_std: float) -> PhaseMechanism:
        """The same sensitivities against a noise of standard deviation ``noise_std`` per
        real dimension (W^1/2; the receiver's and an artificial noise together)."""
        with np.errstate(divide="ignore"):
            multiplier = np.where(self.sensitivity > 0.0, noise_std / self.sensitivity, np.inf)
        return PhaseMechanism(self.sensitivity, float(noise_std), multiplier, self.worst_device)

    def scaled(self, scale: float) -> PhaseMechanism:
        """Every device's signal, so its sensitivity, scaled by ``scale`` > 0 (a common
        transmit scaling s, :class:`phy.power.PrivacyScaling`)."""
        if scale == 1.0:
            return self
        return PhaseMechanism(self.sensitivity * scale, self.noise_std,
                              self.noise_multiplier / scale, self.worst_device)


@dataclass(frozen=True)
class Eavesdropper:
    """A second observer of the uplink with its own single antenna, channel and noise.

    Attributes
    ----------
    path_gain : [K], np.float64
        Each device's large-scale power gain to the eavesdropper (``d_k^-alpha``).
    noise_power_w : float
        Its receiver noise power per subcarrier (W).
    """

    path_gain: np.ndarray
    noise_power_w: float

    def channel_gain(self, num_subcarriers: int, rng: np.random.Generator) -> np.ndarray:
        """One round's ``|h_e,kf|^2`` [K, F] float64: i.i.d. Rayleigh fading per device
        and subcarrier (exponential power of mean ``path_gain_k``), drawn from ``rng``."""
        gain = np.asarray(self.path_gain, np.float64)
        return gain[:, None] * rng.standard_exponential((gain.shape[0], int(num_subcarriers)))


def eavesdropper_path_gain(positions_m, distance_m: float, path_loss_exponent: float,
                           min_distance_m: float) -> np.ndarray:
    """``max(d_k, min_distance_m)^-alpha`` [K] float64, ``d_k`` the distance of device k
    (``positions_m`` [K, 2], the BS at the origin) to an eavesdropper at
    ``(distance_m, 0)``; the floor keeps a device on top of it finite, as the cell's
    ``min_distance_m`` does for the BS."""
    positions = np.asarray(positions_m, np.float64)
    distance = np.hypot(positions[:, 0] - float(distance_m), positions[:, 1])
    return np.maximum(distance, float(min_distance_m)) ** -float(path_loss_exponent)


@dataclass(frozen=True)
class UplinkPrivacy:
    """What the uplink traces and enforces of its privacy (the accounting is
    ``cosim/privacy/``'s; nothing here composes).

    Attributes
    ----------
    noise_floor : mapping str -> float
        Per phase, the least noise multiplier the phase's worst device may have (the plan
        for ``privacy.target_epsilon``): in a phase whose receiver noise alone gives less,
        the uplink adds the least artificial noise that reaches it
        (:func:`artificial_noise_power_w`). Empty: no target, no noise added.
    clip_norm : float, mapping str -> float, or None
        C, the L2 norm every device's phase update is clipped to before power control:
        one for every phase, or per phase (a phase not named is not clipped); None: no
        clipping. :meth:`clip_norm_of` reads it.
    noise_source : "designated" or "devices"
        Who adds the artificial noise: a designated source (its power is not the
        devices'), or the senders themselves, each its share on top of its signal
        (:func:`device_noise_tx_power_w`; the same noise at the BS).
    eavesdropper : Eavesdropper or None
        A second observer whose mechanism is traced too (its own channel and noise; the
        artificial noise, planned for the BS, is not counted at it).
    delta_bar : "clip_norm" or "reported"
        How the BS forms ``delta_bar`` (eq. ``rho_avg``) in a phase with a clip norm: from
        the clip norm alone (:func:`public_delta_bar`; no device's data enters another's
        transmission) or from the norms the senders report (the paper's; the sensitivity
        then holds given those norms). A phase without a clip norm always uses the reported
        norms.
    subsampled : bool
        Poisson subsampling is accounted (``privacy.subsampling = "poisson"``): the round's
        mechanism is every device's *as if it had been sampled*, so the artificial noise and
        the joint multiplier are the population's worst device's, not the cohort's.
    downlink_in_clear : bool
        The global model is multicast unencrypted, so the eavesdropper also sees what the
        BS's received signals reveal (post-processing of them): its mechanism is composed
        with the BS's.
    """

    noise_floor: Mapping[str, float] = field(default_factory=dict)
    clip_norm: float | Mapping[str, float] | None = None
    noise_source: str = "designated"
    eavesdropper: Eavesdropper | None = None
    delta_bar: str = "clip_norm"
    subsampled: bool = False
    downlink_in_clear: bool = True

    def clip_norm_of(self, phase: str) -> float | None:
        """C of ``phase`` (None: its updates are not clipped)."""
        if isinstance(self.clip_norm, Mapping):
            return self.clip_norm.get(phase)
        return self.clip_norm

    def public_delta_bar(self, phase: str) -> bool:
        """Whether the BS forms ``phase``'s ``delta_bar`` from the clip norm
        (:func:`public_delta_bar`: data-independent, so the epsilon is unconditional) rather
        than from the senders' reported update norms (the epsilon is then conditional on
        them)."""
        return self.delta_bar == "clip_norm" and self.clip_norm_of(phase) is not None


NOISE_SOURCES = ("designated", "devices")
"""``privacy.noise_source`` values."""


def public_delta_bar(clip_norm: float, weights, num_values: int) -> float:
    """``delta_bar`` formed from the clip norm instead of the senders' reported norms:
    every sender's ``||Delta_k||^2`` taken as C^2 in eq. ``rho_avg``,
    ``C^2 sum_k pi_k / n`` over the senders' weights ``pi_k`` [K_T].

    It depends on the clip norm, the weights and n only, so removing one device's data
    changes no other device's transmission: the sensitivity bounds then hold
    unconditionally (``docs/privacy.md``). Where every sender is clipped it equals the
    reported ``delta_bar`` (up to float32 rounding); where some are below C it is larger,
    so those devices send less power than under the reported one.
    """
    if not clip_norm > 0.0 or num_values < 1:
        raise ValueError(f"clip_norm must be positive and num_values >= 1, got {clip_norm!r} "
                         f"and {num_values!r}")
    return float(clip_norm) ** 2 * float(np.sum(np.asarray(weights, np.float64))) / int(num_values)


def device_noise_tx_power_w(channel_gain, artificial_noise_power_w: float) -> np.ndarray:
    """Each sender's transmit power (W per OFDM symbol) of its share of the artificial
    noise when the K_T senders add it themselves: sender k sends independent Gaussian
    noise of power ``sigma_a^2 / (K_T |h_kf|^2)`` on subcarrier f (its channel inverted, as
    its signal is), so the BS receives ``sum_k |h_kf|^2 sigma_a^2 / (K_T |h_kf|^2) =
    sigma_a^2`` per subcarrier, the designated source's noise; per OFDM symbol that is
    ``sum_f sigma_a^2 / (K_T |h_kf|^2)``. The noise comes on top of the signal's budget P
    (the power control does not see it).

    Parameters
    ----------
    channel_gain : [K_T, F], float
        The senders' power gains ``|h_kf|^2`` to the BS (single antenna).
    artificial_noise_power_w : float
        sigma_a^2 at the BS per subcarrier (W), >= 0.

    Returns
    -------
    [K_T], np.float64
        ``inf`` for a sender with a zero gain on some subcarrier (it cannot deliver its share
        there); 0 without noise.
    """
    g = np.asarray(channel_gain, np.float64)
    if artificial_noise_power_w < 0.0:
        raise ValueError(f"artificial_noise_power_w must be >= 0, got {artificial_noise_power_w!r}")
    if g.ndim != 2:
        raise ValueError(f"channel_gain must be [K_T, F], got {g.shape}")
    if artificial_noise_power_w == 0.0 or g.shape[0] == 0:
        return np.zeros(g.shape[0])
    with np.errstate(divide="ignore"):
        inverse = np.where(g > 0.0, 1.0 / g, np.inf)
    return artificial_noise_power_w / g.shape[0] * np.sum(inverse, axis=-1)


def artificial_noise_power_w(mechanism: PhaseMechanism, noise_floor: float | None,
                             noise_power_w: float) -> float:
    """The least artificial noise power per subcarrier (W, on top of ``noise_power_w``)
    that puts ``mechanism``'s worst device at a noise multiplier of at least
    ``noise_floor``: ``max(0, 2 (floor max_k sensitivity_k)^2 - sigma_z^2)``. 0 without a
    floor or a sender; ``inf`` when a sender's sensitivity is unbounded."""
    if noise_floor is None or mechanism.worst_device < 0:
        return 0.0
    largest = float(np.max(mechanism.sensitivity))
    needed = 2.0 * (float(noise_floor) * largest) ** 2 - float(noise_power_w)
    return max(needed, 0.0)


def transmit_scaling(weights, estimated_gain, gamma_w: float, delta_bar: float, mask=None
                     ) -> np.ndarray:
    """``sqrt(u_kf) = pi_k sqrt(gamma / delta_bar) / |h_hat_kf|`` (eq. ``PowerAlloc_1``): a
    device's transmit amplitude per unit of v, as :func:`phase_mechanism` takes it.

    Parameters
    ----------
    weights : [K], float
        pi_k of the devices that send in the phase.
    estimated_gain : [K, F], float
        ``|h_hat_kf|^2`` (with N_r > 1: of the effective channel the devices see).
    gamma_w, delta_bar : float
        gamma and the phase's ``delta_bar`` (eq. ``rho_avg``; > 0).
    mask : [K, F], optional
        1 where the device may send (``PowerControl.transmit_mask``), else 0.

    Returns
    -------
    [K, F], np.float64
        0 where the device does not send (no estimate, masked, pi_k = 0).
    """
    if not (gamma_w > 0.0 and delta_bar > 0.0):
        raise ValueError(f"gamma_w and delta_bar must be positive, got {gamma_w!r} and {delta_bar!r}")
    g = np.asarray(estimated_gain, np.float64)
    pi = np.asarray(weights, np.float64)[:, None]
    with np.errstate(divide="ignore"):
        scaling = np.where(g > 0.0, pi * np.sqrt(gamma_w / delta_bar) / np.sqrt(g), 0.0)
    if mask is not None:
        scaling = np.where(np.asarray(mask) > 0, scaling, 0.0)
    return scaling


def clip_sensitivity(clip_norm: float, received_amplitude) -> np.ndarray:
    """Sensitivity bound from an update clip norm: ``C max_f a_kf``.

    Parameters
    ----------
    clip_norm : float
        C > 0, the L2 norm every device's phase update is clipped to.
    received_amplitude : [K, F], float
        ``a_kf = |h_kf| sqrt(u_kf)``: the observer's received amplitude per unit of
        transmitted amplitude v (0 where the device does not send).

    Returns
    -------
    [K], np.float64
    """
    if not clip_norm > 0.0:
        raise ValueError(f"clip_norm must be positive, got {clip_norm!r}")
    a = np.asarray(received_amplitude, np.float64)
    return clip_norm * np.max(a, axis=-1, initial=0.0)


def budget_sensitivity(tx_power_w: float, num_symbols: int, channel_gain, on=None) -> np.ndarray:
    """Sensitivity bound from the symbol power budget: ``sqrt(N P max_f |h_kf|^2)``.

    Parameters
    ----------
    tx_power_w : float
        P, the per-OFDM-symbol budget (W).
    num_symbols : int
        N, the phase's OFDM symbols.
    channel_gain : [K, F], float
        The observer's power gain ``|h_kf|^2`` (summed over its antennas).
    on : [K, F], bool, optional
        Where the device may send (TCI's on-subcarriers); every subcarrier if None.

    Returns
    -------
    [K], np.float64
    """
    if not tx_power_w > 0.0:
        raise ValueError(f"tx_power_w must be positive, got {tx_power_w!r}")
    if num_symbols < 1:
        raise ValueError(f"num_symbols must be >= 1, got {num_symbols!r}")
    g = np.asarray(channel_gain, np.float64)
    if on is not None:
        g = np.where(on, g, 0.0)
    return np.sqrt(num_symbols * tx_power_w * np.max(g, axis=-1, initial=0.0))


def phase_mechanism(*, channel_gain, tx_scaling, sent, num_symbols: int, tx_power_w: float,
                    noise_power_w: float, budgeted: bool, clip_norm: float | None = None,
                    artificial_noise_power_w: float = 0.0) -> PhaseMechanism:
    """The phase's per-device sensitivity and noise multiplier from the PHY quantities.

    Parameters
    ----------
    channel_gain : [K, F], float
        The observer's true power gain ``|h_kf|^2`` (the BS's, summed over its antennas;
        or an eavesdropper's).
    tx_scaling : [K, F], float
        ``sqrt(u_kf)``, each device's transmit amplitude per unit of v (eq.
        ``PowerAlloc_1``: ``pi_k sqrt(gamma / delta_bar) / |h_hat_kf|``); 0 (or inf, taken
        as 0) where the device does not send (no channel estimate, a TCI off-subcarrier).
    sent : [K], bool
        Who sent in this phase.
    num_symbols : int
        N, the phase's OFDM symbols.
    tx_power_w : float
        P (W).
    noise_power_w : float
        sigma_z^2, the observer's receiver noise power per subcarrier (W).
    budgeted : bool
        Whether the power control keeps ``sum_f u v^2 <= P`` (``PowerControl.budgeted``).
    clip_norm : float, optional
        C, the clip norm of every device's phase update (None: no clipping).
    artificial_noise_power_w : float
        sigma_a^2, noise added on top of the receiver's per subcarrier (W), >= 0.

    Returns
    -------
    PhaseMechanism
    """
    g = np.asarray(channel_gain, np.float64)
    s = np.asarray(tx_scaling, np.float64)
    s = np.where(np.isfinite(s), s, 0.0)
    sent = np.asarray(sent, bool)
    if g.ndim != 2 or s.shape != g.shape or sent.shape != g.shape[:1]:
        raise ValueError(f"channel_gain and tx_scaling must be [K, F] and sent [K], got "
                         f"{g.shape}, {s.shape} and {sent.shape}")
    if not noise_power_w + artificial_noise_power_w > 0.0 or artificial_noise_power_w < 0.0:
        raise ValueError(f"noise_power_w must be > 0 and artificial_noise_power_w >= 0, got "
                         f"{noise_power_w!r} and {artificial_noise_power_w!r}")
    sensitivity = np.full(g.shape[0], np.inf)
    if clip_norm is not None:
        sensitivity = np.minimum(sensitivity, clip_sensitivity(clip_norm, np.sqrt(g) * s))
    if budgeted:
        sensitivity = np.minimum(sensitivity, budget_sensitivity(tx_power_w, num_symbols, g, s > 0))
    sensitivity = np.where(sent, sensitivity, 0.0)
    noise_std = float(np.sqrt((noise_power_w + artificial_noise_power_w) / 2.0))
    with np.errstate(divide="ignore"):
        multiplier = np.where(sensitivity > 0.0, noise_std / sensitivity, np.inf)
    worst = int(np.argmin(multiplier)) if sent.any() else -1
    return PhaseMechanism(sensitivity, noise_std, multiplier, worst)


def joint_noise_multiplier(mechanisms) -> tuple[float, int]:
    """The round's noise multiplier when its phases are taken as one Gaussian mechanism
    on the observer's received signals of all phases (the stacked vector
    ``[y_1; y_2]``): each device's whitened L2 sensitivity is
    ``sqrt(sum_p (sensitivity_pk / noise_std_p)^2)``, and the worst device decides.
    Used where the library cannot compose the phases inside a subsampled event.

    Parameters
    ----------
    mechanisms : sequence of :class:`PhaseMechanism`
        The round's phases, over the same K devices.

    Returns
    -------
    (noise_multiplier, worst_device) : (float, int)
        ``inf`` and -1 if no device sent in any phase.
    """
    whitened = np.zeros_like(mechanisms[0].sensitivity)
    for m in mechanisms:
        whitened = whitened + (m.sensitivity / m.noise_std) ** 2
    if not np.any(whitened > 0.0):
        return float("inf"), -1
    worst = int(np.argmax(whitened))
    return float(1.0 / np.sqrt(whitened[worst])), worst
