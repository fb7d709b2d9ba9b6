"""The models: their names and parameter layouts without TensorFlow (:mod:`.shapes`), the
:class:`~learning.models.model.Model` interface and the MLP (:mod:`.model`), the CNN and
ResNet-56 (:mod:`.convnets`) and the registry that builds one by name
(:mod:`.architectures`). Importing the package imports none of them (the scenario reads
:mod:`.shapes` without TensorFlow).
"""
