"""Studies: the study file (:mod:`.file`), the runner (:mod:`.runner`), one run as a
worker runs it (:mod:`.task`), where runs execute (:mod:`.executor`), the cost estimate
(:mod:`.cost`, from the measured :mod:`.cost_table`) and ``cosim study report``
(:mod:`.report`).

The public API is :mod:`.runner`'s, re-exported here: ``from cosim.study import
run_study``.
"""

from cosim.study import runner as _runner
from cosim.study.runner import *  # noqa: F403

__all__ = _runner.__all__
