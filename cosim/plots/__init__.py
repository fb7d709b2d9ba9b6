"""Publication figures from traces: the look and common pieces (:mod:`.style`), the
learning figures (:mod:`.learning`), the PHY figures (:mod:`.phy`) and the writer of them
all (:mod:`.figures`). Matplotlib with Agg; no TensorFlow.

The public API is :mod:`.figures`'s, re-exported here: ``from cosim.plots import
plot_traces``.
"""

from cosim.plots import figures as _figures
from cosim.plots.figures import *  # noqa: F403

__all__ = _figures.__all__
