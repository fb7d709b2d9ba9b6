"""The architectures' names and parameter shapes, without TensorFlow.

One list of names (:data:`ARCHITECTURE_NAMES`) and one definition of every model's flat
layout: :func:`param_shapes` gives the shapes and :func:`param_kinds` what each tensor
is, in the order of the flat parameter vector. ``learning/models/model.py`` and
``learning/models/convnets.py`` build their models from these, the scenario validates
``model.architecture`` against the names and computes d from the shapes by arithmetic
(any size, nothing allocated). Standard library only.

Layouts (row-major): dense kernels ``[in, out]`` then their bias ``[out]``; conv kernels
``[kh, kw, C_in, C_out]`` (TensorFlow's HWIO) then their bias; a batch norm is its scale
``[C]`` then its shift ``[C]``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

__all__ = [
    "ARCHITECTURE_NAMES",
    "CONVOLUTIONAL",
    "SIZE_KEYS",
    "image_shape",
    "num_params",
    "param_kinds",
    "param_shapes",
]

ARCHITECTURE_NAMES = ("mlp", "cnn", "resnet56")
"""Every ``model.architecture`` a scenario may name (``learning.models.architectures`` builds each)."""

SIZE_KEYS = {"mlp": ("hidden_units",), "cnn": (), "resnet56": ()}
"""Per architecture, the ``model.*`` keys its size depends on besides the data's shape
(``cosim validate`` names them among the keys that drive the memory estimate)."""

CONVOLUTIONAL = frozenset({"cnn", "resnet56"})
"""The architectures that take an image ``(H, W, C)`` (:func:`image_shape` pads to it)."""

RESNET_WIDTHS = (16, 32, 64)
"""The channel widths of the CIFAR ResNet's three stages."""

Shapes = tuple[tuple[int, ...], ...]


def image_shape(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """``(H, W, C)`` of an input shape of 1 to 3 sizes, padded with trailing ones (as
    ``learning.data.datasets`` pads a synthetic shape)."""
    shape = tuple(int(n) for n in input_shape)
    return (*shape, *(1,) * (3 - len(shape)))[:3]


def _mlp(input_shape: Sequence[int], num_classes: int, hidden_units: Sequence[int]):
    widths = [math.prod(int(n) for n in input_shape), *(int(h) for h in hidden_units),
              int(num_classes)]
    shapes: list[tuple[int, ...]] = []
    for n_in, n_out in itertools.pairwise(widths):
        shapes += [(n_in, n_out), (n_out,)]
    return tuple(shapes), ("kernel", "bias") * (len(widths) - 1)


def _cnn(input_shape: Sequence[int], num_classes: int):
    """conv3x3(32)-pool-conv3x3(64)-pool-dense(128)-dense(C)."""
    h, w, c = image_shape(input_shape)
    flat = (h // 2 // 2) * (w // 2 // 2) * 64
    c_out = int(num_classes)
    shapes = ((3, 3, c, 32), (32,), (3, 3, 32, 64), (64,),
              (flat, 128), (128,), (128, c_out), (c_out,))  # fmt: skip
    return shapes, ("kernel", "bias") * 4


def _resnet(input_shape: Sequence[int], num_classes: int, blocks_per_stage: int):
    """conv3x3-BN, then per stage ``blocks_per_stage`` blocks of two conv3x3-BN, then
    dense(C) after global pooling (He et al. 2016, CIFAR variant)."""
    shapes: list[tuple[int, ...]] = []
    kinds: list[str] = []

    def conv_bn(c_in: int, c_out: int) -> None:
        shapes.extend([(3, 3, c_in, c_out), (c_out,), (c_out,)])
        kinds.extend(["kernel", "scale", "shift"])

    conv_bn(image_shape(input_shape)[2], RESNET_WIDTHS[0])
    c_in = RESNET_WIDTHS[0]
    for width in RESNET_WIDTHS:
        for _ in range(int(blocks_per_stage)):
            conv_bn(c_in, width)
            conv_bn(width, width)
            c_in = width
    shapes.extend([(c_in, int(num_classes)), (int(num_classes),)])
    kinds.extend(["kernel", "bias"])
    return tuple(shapes), tuple(kinds)


def _layout(architecture: str, input_shape: Sequence[int], num_classes: int,
            hidden_units: Sequence[int], blocks_per_stage: int):
    if architecture == "mlp":
        return _mlp(input_shape, num_classes, hidden_units)
    if architecture == "cnn":
        return _cnn(input_shape, num_classes)
    if architecture == "resnet56":
        return _resnet(input_shape, num_classes, blocks_per_stage)
    names = ", ".join(repr(name) for name in ARCHITECTURE_NAMES)
    raise ValueError(f"architecture must be one of {names}, got {architecture!r}")


def param_shapes(
    architecture: str,
    input_shape: Sequence[int],
    num_classes: int,
    hidden_units: Sequence[int] = (256,) * 5,
    *,
    blocks_per_stage: int = 9,
) -> Shapes:
    """The shapes of the model's parameter tensors, in flat-vector order.

    Input: ``architecture`` (one of :data:`ARCHITECTURE_NAMES`), ``input_shape`` (one
    example's shape; a convnet's is padded by :func:`image_shape`), ``num_classes``,
    ``hidden_units`` (the MLP's widths only), ``blocks_per_stage`` (the ResNet's; 9 is
    ResNet-56).
    Output: a tuple of int tuples. A ``ValueError`` names the architectures for any other
    name.
    """
    return _layout(architecture, input_shape, num_classes, hidden_units, blocks_per_stage)[0]


def param_kinds(
    architecture: str,
    input_shape: Sequence[int],
    num_classes: int,
    hidden_units: Sequence[int] = (256,) * 5,
    *,
    blocks_per_stage: int = 9,
) -> tuple[str, ...]:
    """What each tensor of :func:`param_shapes` is (``"kernel"``, ``"bias"``, ``"scale"``,
    ``"shift"``), same arguments, same order."""
    return _layout(architecture, input_shape, num_classes, hidden_units, blocks_per_stage)[1]


def num_params(architecture: str, input_shape: Sequence[int], num_classes: int,
               hidden_units: Sequence[int] = (256,) * 5) -> int:
    """d: the sum of the :func:`param_shapes`' sizes (arithmetic; a hidden layer of 10^8
    units gives d = 7.9e10 without touching memory)."""
    return sum(math.prod(s) for s in param_shapes(architecture, input_shape, num_classes,
                                                   hidden_units))


def dense_layer_rows(layer_sizes: Sequence[tuple[int, int]]) -> tuple[list[tuple[int, int, int, int]], int]:
    """Where an MLP's dense layers sit in its flat parameter vector (each layer's kernel,
    row-major [n_in, n_out], then its bias): ``([(n_in, n_out, kernel_start, bias_start),
    ...], d)`` for ``layer_sizes`` ``[(n_in, n_out), ...]``."""
    rows, at = [], 0
    for n_in, n_out in layer_sizes:
        n_in, n_out = int(n_in), int(n_out)
        rows.append((n_in, n_out, at, at + n_in * n_out))
        at += n_in * n_out + n_out
    return rows, at
