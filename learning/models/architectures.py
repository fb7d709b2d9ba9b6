"""The model registry: an architecture's name in a scenario -> the :class:`Model` that builds it.

``learning/models/model.py`` (the :class:`~learning.models.model.Model` interface and the MLP) and
``learning/models/convnets.py`` (the CNN and ResNet-56) never import each other's builders:
both register here, and :func:`build_model` is the one place a name is resolved, so the
two modules hold no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable

from learning.models.convnets import CNN, ResNet56
from learning.models.model import MLP, Model

__all__ = ["ARCHITECTURES", "build_model"]

ARCHITECTURES: dict[str, Callable[..., Model]] = {
    "mlp": lambda input_shape, num_classes, hidden_units: MLP(input_shape, num_classes,
                                                              hidden_units),
    "cnn": lambda input_shape, num_classes, hidden_units: CNN(input_shape, num_classes),
    "resnet56": lambda input_shape, num_classes, hidden_units: ResNet56(input_shape,
                                                                        num_classes),
}
"""Architecture name -> builder ``(input_shape, num_classes, hidden_units) -> Model``;
``hidden_units`` is used by the MLP only."""


def build_model(
    architecture: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    hidden_units: tuple[int, ...] = (256,) * 5,
) -> Model:
    """Build a model by name (a key of :data:`ARCHITECTURES`).

    Input: ``architecture`` (``"mlp"``, ``"cnn"``, ``"resnet56"``), ``input_shape`` (one
    example's shape), ``num_classes``, ``hidden_units`` (the MLP's hidden widths).
    Output: the :class:`Model`; a ``ValueError`` naming the architectures for any other name.
    """
    try:
        builder = ARCHITECTURES[architecture]
    except KeyError:
        names = ", ".join(repr(name) for name in ARCHITECTURES)
        raise ValueError(f"architecture must be one of {names}, got {architecture!r}") from None
    return builder(input_shape, num_classes, hidden_units)
