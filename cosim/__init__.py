"""cosim: scenario files, randomness, the round loop, traces, plots, the CLI, the notebook API.

Importing the package (or any module of it) prints nothing: TensorFlow's import-time
log lines are filtered (:mod:`native.tensorflow_import`).
"""

from native import tensorflow_import

tensorflow_import.install()
