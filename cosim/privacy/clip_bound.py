"""The clip norm's bound on a device's sensitivity, before the run (``cosim validate``).

With ``privacy.clip_norm`` C and the BS forming ``delta_bar`` from it
(``privacy.delta_bar = "clip_norm"``, :func:`phy.privacy.public_delta_bar`:
``C^2 sum_k pi_k / n`` over the senders), bound (a) of docs/privacy.md with perfect CSI
is ``pi_k sqrt(gamma n / sum_k pi_k)``: C cancels, and the worst device is the one with
the largest data share pi_k. That share is known before the run: the local dataset
sizes are the partition's first draw (:func:`learning.data.sizes.sample_sizes` from the
run's ``partition`` stream), NumPy only. With a cohort of m < K devices the weights are
renormalised over the cohort, and the largest device's share is at most
``|D_max| / (|D_max| + the m - 1 smallest others)``; that bound is taken.
"""

from __future__ import annotations

import math

import numpy as np


def largest_data_share(scenario) -> float:
    """pi_max: the largest share ``|D_k| / sum |D|`` any sender can have in a round of
    ``scenario`` (its seed's dataset sizes; a cohort's renormalisation bounded from above
    as the module says). 0 when every device drew no sample."""
    from learning.data.sizes import sample_sizes
    from native.streams import PARTITION, STATIC_ROUND, numpy_rng

    num_devices = scenario.cell.num_devices
    data = scenario.data
    sizes = np.sort(sample_sizes(num_devices, float(data.mean_samples_per_device),
                                 data.size_distribution,
                                 numpy_rng(scenario.seed, STATIC_ROUND, PARTITION)))
    largest = float(sizes[-1])
    cohort = scenario.participation.cohort_size(num_devices)
    rest = float(np.sum(sizes[:-1][: cohort - 1]))
    return largest / (largest + rest) if largest > 0.0 else 0.0


def clip_sensitivity_bounds(scenario, phase_values: dict[str, int]) -> tuple[dict[str, float], str]:
    """Per phase, the clip norm's bound on the worst device's sensitivity
    ``pi_max sqrt(gamma n)`` (``inf`` for a phase it does not bound: no clip norm, the
    reported ``delta_bar``, or Poisson subsampling, whose population bound is the run's),
    and what it assumes (one clause, empty when no phase is bounded)."""
    from phy.privacy import UplinkPrivacy

    config = scenario.privacy
    unbounded = dict.fromkeys(phase_values, math.inf)
    # the uplink's own rule for a phase's public delta_bar (a clip norm, delta_bar = "clip_norm")
    public = UplinkPrivacy(clip_norm=config.clip_norm, delta_bar=config.delta_bar).public_delta_bar
    if config.subsampling == "poisson" or not any(public(name) for name in phase_values):
        return unbounded, ""
    share, gamma_w = largest_data_share(scenario), scenario.power.gamma_w
    bounds = {name: share * math.sqrt(gamma_w * values) if public(name) else math.inf
              for name, values in phase_values.items()}
    return bounds, (f"the clip norm's bound pi_max sqrt(gamma n) with pi_max = {share:.4g} (this "
                    "seed's dataset sizes) and perfect CSI")
