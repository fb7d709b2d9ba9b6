""":class:`phy.redrop.Drops`: round t uses drop t // N, drop 0 the one given, each later
drop made once when its first round comes (and again, the same, if asked for after
another), and the round's columns of its drop."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from phy.redrop import Drops


def _drop(index: int):
    positions = np.array([[float(index), 1.0], [2.0, float(index)]])
    return SimpleNamespace(path_gain=np.array([1e-6, 2e-6]) * (index + 1)), positions


def test_round_t_uses_drop_t_over_n_made_once_per_drop():
    made = []

    def drop_of(index):
        made.append(index)
        return _drop(index)

    first = _drop(0)
    drops = Drops(3, first, drop_of)
    assert [drops.index(t) for t in range(7)] == [0, 0, 0, 1, 1, 1, 2]
    assert all(drops.at(t) is first for t in range(3)) and made == []
    assert drops.at(3) is drops.at(5) and made == [1]
    scalars, per_device = drops.columns(4)
    assert scalars == {"drop_index": 1.0}
    np.testing.assert_array_equal(per_device["position_x_m"], [1.0, 2.0])
    np.testing.assert_array_equal(per_device["position_y_m"], [1.0, 1.0])
    np.testing.assert_array_equal(per_device["path_gain"], [2e-6, 4e-6])
    assert drops.at(1) is first and made == [1]  # drop 0 is kept
    drops.at(6)
    drops.at(3)
    assert made == [1, 2, 1]  # an earlier drop is made again (from the cache in a run)


def test_every_rounds_must_be_positive():
    with pytest.raises(ValueError, match="every_rounds must be >= 1"):
        Drops(0, _drop(0), _drop)
