"""Fixtures of the cosim tests."""

from __future__ import annotations

import pytest

from learning.algorithms.fedavg import LocalSGD, NumbaSGD


@pytest.fixture
def solver_calls(monkeypatch) -> dict[str, list]:
    """The names of the solver classes whose ``updates`` ran, per backend."""
    calls = {"numba": [], "tensorflow": []}
    for cls, backend in ((NumbaSGD, "numba"), (LocalSGD, "tensorflow")):
        original = cls.updates

        def spy(self, *args, _original=original, _calls=calls[backend], **kwargs):
            _calls.append(type(self).__name__)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "updates", spy)
    return calls
