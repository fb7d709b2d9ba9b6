"""Run traces: the HDF5 file's format and open (:mod:`.file_format`), the writer
(:mod:`.writer`), reading (:mod:`.read`), ``cosim verify`` (:mod:`.verify`), what a
resume checks before it writes (the file, the stored scenario: :mod:`.compare`) and
``cosim study compact``'s rewrite without the model state (:mod:`.compact`).

The public API is :mod:`.writer`'s, re-exported here: ``from cosim.trace import
read_trace``.
"""

from cosim.trace import writer as _writer
from cosim.trace.compact import drop_checkpoint
from cosim.trace.writer import *  # noqa: F403

__all__ = [*_writer.__all__, "drop_checkpoint"]
