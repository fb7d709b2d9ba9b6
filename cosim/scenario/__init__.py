"""Scenarios: the schema (:mod:`.tables`), loading and overrides (:mod:`.load`), what a
scenario implies (:mod:`.derived`), its one-line errors (:mod:`.errors`) and its TOML
text (:mod:`.as_toml`).

The public API is :mod:`.load`'s, re-exported here: ``from cosim.scenario import
load_scenario``.
"""

from cosim.scenario import load as _load
from cosim.scenario.load import *  # noqa: F403

__all__ = _load.__all__
