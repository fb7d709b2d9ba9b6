"""learning: posteriors, models, local objectives, FL algorithms, datasets, metrics.

Importing the package (or any module of it) prints nothing: TensorFlow's import-time
log lines are filtered (:mod:`native.tensorflow_import`).
"""

from native import tensorflow_import

tensorflow_import.install()
