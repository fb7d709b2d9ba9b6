"""Convolutional architectures as pure functions of (device, sample)-batched weights.

Two networks implement :class:`learning.models.model.Model`:

* :class:`CNN`: conv3x3(32)-ReLU-maxpool2 -> conv3x3(64)-ReLU-maxpool2 -> dense(128)-ReLU
  -> dense(C); biases everywhere, no normalisation. d = 421,642 for 28x28x1 / 10 classes,
  545,098 for 32x32x3 / 10 classes, 556,708 for 32x32x3 / 100 classes.
* :class:`ResNet56`: the CIFAR ResNet of He et al. (2016) as in bayesian-torch's
  ``resnet56`` (the paper's model): conv3x3(16)-BN-ReLU, 3 stages x 9 basic blocks
  (16/32/64 filters, stride 2 at the start of stages 2 and 3), option-A shortcuts
  (subsample by 2, zero-pad the channels), global average pooling, dense(C) with bias;
  convolutions without bias. d = 858,868 for 32x32x3 / 100 classes: 848,304 conv
  kernels + 6,500 dense + 4,064 batch-norm scales and shifts. The paper quotes
  857,736 (1,132 fewer); bayesian-torch's own count of the same definition is the
  858,868 here (its variational layers hold 854,804 of them, the batch norms 4,064).

Flat layout (``param_shapes``, row-major): conv kernels ``[kh, kw, C_in, C_out]``
(TensorFlow's HWIO), dense kernels ``[in, out]``, each followed by its bias ``[out]`` if
it has one; a batch norm is its scale ``[C]`` then its shift ``[C]``. The order is the
order of evaluation (ResNet: stem conv, stem BN, then per block conv1, BN1, conv2,
BN2, finally the dense kernel and bias), the same as PyTorch's ``named_parameters``.
Convolutions pad by 1 on every side (PyTorch ``padding=1``; for stride 2 this differs
from TensorFlow's ``"SAME"``, which pads bottom/right only).

Batching. All K devices and S samples run in one call. Activations are held as
``[G, R * B, H, W, C]``: with per-sample weights (``logits``) ``G = K S`` groups and
``R = 1``; with local reparameterization (``logits_lrt``) the weights are per device, so
``G = K`` and the samples share the batch axis (``R = S``). A convolution is a
``tf.map_fn`` (one graph-level while loop, no Python loop) of native convolutions, one
per group over its ``R B`` images; dense layers are batched matmuls. Measured on this
2-core CPU (one 32x32x16 3x3 conv layer, G = 10, 16 images per group, forward and
backward): the map_fn runs as fast as one convolution with a single shared filter over
all G * 16 images (the lower bound); ``tf.vectorized_map`` falls back to the same loop
(pfor vectorizes Conv2D only for loop-invariant filters); grouped convolution
(channels folded, ``feature_group_count``) has no CPU gradient kernel outside XLA and
is ~200x slower under XLA; im2col + batched matmul is 3-10x slower and needs 9x the
activation memory.

Batch normalisation (ResNet). Weights are per (device, sample) and the network is a
pure function, so there are no running statistics: every batch norm normalises with
the statistics of the batch it sees, per (device, sample) and channel, over that
device's (unpadded) samples and all positions (PyTorch training mode, biased variance,
eps = 1e-5). Pass ``mask [K, B]`` to exclude padding rows from the statistics. The
scale and shift are part of ``w`` (so of the Gaussian posterior, unlike the paper's
deterministic ``nn.BatchNorm2d``). At evaluation the global model normalises with the
evaluation batch's statistics, so evaluate in batches of ~100 or more samples.

Local reparameterization (Kingma, Salimans & Welling 2015; Molchanov et al. 2017). For
a convolution or dense layer with input ``h`` and a factorised Gaussian posterior,
each pre-activation is Gaussian with mean ``conv(h, mu) + mu_b`` and variance
``conv(h^2, var) + var_b``; it is sampled directly with one fresh normal per
(sample, row, position, channel). For dense layers this is exact in distribution; for
convolutions each output position has the right marginal but the correlation between
positions (which share the kernel) is dropped, the usual approximation. The batch-norm
scale and shift (a few numbers per channel) are sampled per (device, sample) by plain
reparameterization. Noise is drawn with :func:`learning.posterior.device_normal`, one
stream per layer, so device k's noise depends only on ``device_seeds[k]``.
"""

from __future__ import annotations

import math

import tensorflow as tf

from learning.models import shapes
from learning.models.model import Model
from learning.posterior import device_normal

BN_EPSILON = 1e-5
_PAD1 = [[0, 0], [1, 1], [1, 1], [0, 0]]


def batched_conv2d(x: tf.Tensor, filters: tf.Tensor, stride: int) -> tf.Tensor:
    """One convolution per group, padding 1 on every side (PyTorch ``padding=1``).

    Input: ``x [G, N, H, W, C_in]``, ``filters [G, kh, kw, C_in, C_out]``, tf.float32.
    Output: ``[G, N, H', W', C_out]``. A ``tf.map_fn`` (a graph-level loop, parallel
    iterations) of native convolutions, each over N images; see the module docstring
    for why not grouped convolutions.
    """
    return tf.map_fn(
        lambda a: tf.nn.conv2d(a[0], a[1], stride, _PAD1),
        (x, filters),
        fn_output_signature=tf.float32,
    )


def _check_shape(input_shape, num_classes, min_hw: int) -> tuple[tuple[int, int, int], int]:
    shape = tuple(int(n) for n in input_shape)
    if len(shape) != 3 or any(n < 1 for n in shape) or min(shape[:2]) < min_hw:
        raise ValueError(
            f"input_shape must be (H, W, C) with H, W >= {min_hw}, got {input_shape!r}"
        )
    if int(num_classes) < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes!r}")
    return shape, int(num_classes)


class _Pass:
    """One evaluation of a network: the activation layout and the per-layer operations.

    Activations are ``[G, R * B, H, W, C]`` with ``G = K * Sg`` groups (see the module
    docstring). Subclasses differ in where the weights come from: per-(device, sample)
    tensors (:class:`_PointPass`) or per-device means and variances (:class:`_LrtPass`).
    """

    def __init__(self, x: tf.Tensor, num_devices, num_samples, batch):
        self.k, self.s, self.b = num_devices, num_samples, batch
        self.r = 1  # samples on the batch axis
        self.sg = 1  # samples in the group axis
        self.input = tf.cast(x, tf.float32)  # [K, B, H, W, C]

    # -- operations -----------------------------------------------------------------------
    def batch_norm(self, h, scale, shift, mask):
        """Batch norm per (device, sample, channel) with batch statistics; ``mask [K, B]``."""
        shape = tf.shape(h)
        channels = scale.shape[-1]
        g = tf.reshape(h, [self.k, self.sg, self.r, self.b, shape[2], shape[3], channels])
        if mask is None:
            mean, var = tf.nn.moments(g, axes=[3, 4, 5], keepdims=True)
        else:
            m = tf.cast(mask, tf.float32)[:, None, None, :, None, None, None]
            count = tf.reduce_sum(m, axis=3, keepdims=True) * tf.cast(
                shape[2] * shape[3], tf.float32
            )
            count = tf.maximum(count, 1.0)
            mean = tf.reduce_sum(g * m, axis=[3, 4, 5], keepdims=True) / count
            var = tf.reduce_sum(tf.square(g - mean) * m, axis=[3, 4, 5], keepdims=True) / count
        affine = [self.k, self.sg, self.r, 1, 1, 1, channels]  # [K, S, C]: S = Sg * R
        gain = tf.reshape(scale, affine) * tf.math.rsqrt(var + BN_EPSILON)
        offset = tf.reshape(shift, affine) - mean * gain  # one full-size op: less memory
        return tf.reshape(g * gain + offset, shape)

    @staticmethod
    def shortcut_a(h: tf.Tensor, in_channels: int, out_channels: int) -> tf.Tensor:
        """Option-A shortcut: subsample by 2 and zero-pad the channels."""
        pad = (out_channels - in_channels) // 2
        return tf.pad(
            h[:, :, ::2, ::2, :], [[0, 0]] * 4 + [[pad, out_channels - in_channels - pad]]
        )

    @staticmethod
    def max_pool(h: tf.Tensor) -> tf.Tensor:
        """2x2 max pooling (stride 2, no padding) of ``[G, N, H, W, C]``."""
        shape = tf.shape(h)
        flat = tf.reshape(h, tf.concat([[-1], shape[2:]], 0))
        out = tf.nn.max_pool2d(flat, 2, 2, "VALID")
        return tf.reshape(out, tf.concat([shape[:2], tf.shape(out)[1:]], 0))

    def flatten(self, h: tf.Tensor) -> tf.Tensor:
        """``[G, R*B, H, W, C]`` -> ``[K, Sg, R, B, H*W*C]`` (Keras ``Flatten`` order)."""
        return tf.reshape(h, [self.k, self.sg, self.r, self.b, -1])

    def global_pool(self, h: tf.Tensor) -> tf.Tensor:
        """Global average pooling -> ``[K, Sg, R, B, C]``."""
        return self.flatten(tf.reduce_mean(h, axis=[2, 3]))

    def output(self, logits: tf.Tensor) -> tf.Tensor:
        """``[K, Sg, R, B, C]`` -> ``[K, S, B, C]``."""
        return tf.reshape(logits, [self.k, self.s, self.b, -1])


class _PointPass(_Pass):
    """Weights per (device, sample): parameter tensors ``[K, S, *shape]``."""

    def __init__(self, params, x):
        shape = tf.shape(params[0])
        super().__init__(x, shape[0], shape[1], tf.shape(x)[1])
        self.params = params
        # the input, shared by the S samples of a device: [K * S, B, H, W, C]
        self.input = tf.reshape(
            tf.repeat(self.input[:, None], self.s, axis=1),
            tf.concat([[-1], tf.shape(x)[1:]], 0),
        )
        self.sg = self.s

    def _groups(self, p: tf.Tensor) -> tf.Tensor:
        return tf.reshape(p, tf.concat([[-1], tf.shape(p)[2:]], 0))  # [K*S, ...]

    def conv(self, h, index, stride=1, bias_index=None):
        out = batched_conv2d(h, self._groups(self.params[index]), stride)
        if bias_index is not None:
            out = out + self._groups(self.params[bias_index])[:, None, None, None, :]
        return out

    def bn_params(self, index):
        return self.params[index], self.params[index + 1]

    def dense(self, h, index, bias_index):
        """``[K, S, 1, B, in]`` -> ``[K, S, 1, B, out]``."""
        kernel, bias = self.params[index], self.params[bias_index]
        return tf.einsum("ksrbi,ksio->ksrbo", h, kernel) + bias[:, :, None, None, :]


class _LrtPass(_Pass):
    """Local reparameterization: per-device means and variances ``[K, *shape]``."""

    def __init__(self, mus, vars_, x, num_samples, device_seeds):
        super().__init__(x, tf.shape(x)[0], num_samples, tf.shape(x)[1])
        self.mus, self.vars, self.seeds = mus, vars_, device_seeds

    def _sample(self, mean, var, index):
        """Moments ``[K, R*B, *tail]`` -> one sample ``[K, S*B, *tail]`` (stream ``index``)."""
        tail = tf.shape(mean)[2:]
        eps = device_normal(self.seeds, tf.concat([[self.s, self.b], tail], 0), index)
        mean = tf.reshape(mean, tf.concat([[self.k, self.r, self.b], tail], 0))
        std = tf.reshape(tf.sqrt(var), tf.shape(mean))
        self.r = self.s
        return tf.reshape(mean + std * eps, tf.concat([[self.k, self.s * self.b], tail], 0))

    def conv(self, h, index, stride=1, bias_index=None):
        mean = batched_conv2d(h, self.mus[index], stride)
        var = batched_conv2d(tf.square(h), self.vars[index], stride)
        if bias_index is not None:
            mean = mean + self.mus[bias_index][:, None, None, None, :]
            var = var + self.vars[bias_index][:, None, None, None, :]
        return self._sample(mean, var, index)

    def bn_params(self, index):
        shape = [self.s, self.mus[index].shape[-1]]
        out = []
        for i in (index, index + 1):
            eps = device_normal(self.seeds, shape, i)  # [K, S, C]
            out.append(self.mus[i][:, None] + tf.sqrt(self.vars[i])[:, None] * eps)
        return out

    def dense(self, h, index, bias_index):
        """``[K, 1, R, B, in]`` -> ``[K, 1, S, B, out]``."""
        h = tf.reshape(h, [self.k, self.r * self.b, -1])
        mean = tf.linalg.matmul(h, self.mus[index]) + self.mus[bias_index][:, None, :]
        var = tf.linalg.matmul(tf.square(h), self.vars[index]) + self.vars[bias_index][:, None, :]
        return self.flatten(self._sample(mean, var, index))


class _ConvNet(Model):
    """Shared plumbing: the forward pass is written once for both weight sources."""

    def _forward(self, run: _Pass, mask) -> tf.Tensor:
        raise NotImplementedError

    def logits_from_params(self, params, x, mask=None):
        """Logits ``[K, S, B, C]`` from parameter tensors ``[K, S, *shape]``, ``x [K, B, H, W, C]``.

        ``mask [K, B]`` (optional) excludes padding rows from batch-norm statistics.
        """
        return self._forward(_PointPass(params, x), mask)

    def logits(self, w, x, mask=None):
        """Logits ``[K, S, B, C]`` for flat weights ``w [K, S, d]``, inputs ``x [K, B, H, W, C]``."""
        return self.logits_from_params(self.unflatten(w), x, mask)

    def logits_lrt(self, mu, var, x, num_samples, device_seeds, mask=None):
        """Logits ``[K, S, B, C]`` with sampled pre-activations (local reparameterization).

        Input: ``mu``, ``var`` ``[K, d]``, ``x [K, B, H, W, C]``, ``num_samples`` S,
        ``device_seeds [K, 2]`` tf.int32, optional ``mask [K, B]``.
        """
        run = _LrtPass(self.unflatten(mu), self.unflatten(var), x, num_samples, device_seeds)
        return self._forward(run, mask)

    def init_mean(self, seed: tf.Tensor) -> tf.Tensor:
        """He-normal kernels (std ``sqrt(2 / fan_in)``), zero biases and shifts, unit scales."""
        seeds = tf.random.experimental.stateless_split(seed, len(self.param_shapes))
        parts = []
        for i, (shape, kind) in enumerate(zip(self.param_shapes, self._kinds, strict=True)):
            n = math.prod(shape)
            if kind == "kernel":
                std = math.sqrt(2.0 / math.prod(shape[:-1]))
                parts.append(std * tf.random.stateless_normal([n], seeds[i]))
            else:
                parts.append(tf.fill([n], 1.0 if kind == "scale" else 0.0))
        return tf.concat(parts, axis=0)


class CNN(_ConvNet):
    """Small CNN: conv(32)-pool-conv(64)-pool-dense(128)-dense(C), 3x3 kernels, ReLU.

    Parameters
    ----------
    input_shape : tuple[int, int, int]
        (H, W, C) of one input, H, W >= 4.
    num_classes : int
        C.
    """

    def __init__(self, input_shape, num_classes):
        self.input_shape, self.num_classes = _check_shape(input_shape, num_classes, 4)
        self.name = "cnn"
        self._shapes = shapes.param_shapes("cnn", self.input_shape, self.num_classes)
        self._kinds = shapes.param_kinds("cnn", self.input_shape, self.num_classes)

    @property
    def param_shapes(self):
        return self._shapes

    def _forward(self, run, mask):
        h = tf.nn.relu(run.conv(run.input, 0, bias_index=1))
        h = run.max_pool(h)
        h = tf.nn.relu(run.conv(h, 2, bias_index=3))
        h = run.max_pool(h)
        h = tf.nn.relu(run.dense(run.flatten(h), 4, 5))
        return run.output(run.dense(h, 6, 7))


class ResNet56(_ConvNet):
    """CIFAR ResNet-56 (He et al. 2016), option-A shortcuts, batch norm with batch statistics.

    Parameters
    ----------
    input_shape : tuple[int, int, int]
        (H, W, C) of one input, H, W >= 4 (32x32x3 for CIFAR-100).
    num_classes : int
        C (100 for CIFAR-100).
    blocks_per_stage : int
        9 for ResNet-56 (3 -> ResNet-20, 5 -> ResNet-32).
    """

    widths = shapes.RESNET_WIDTHS

    def __init__(self, input_shape, num_classes, blocks_per_stage: int = 9):
        self.input_shape, self.num_classes = _check_shape(input_shape, num_classes, 4)
        if int(blocks_per_stage) < 1:
            raise ValueError(f"blocks_per_stage must be >= 1, got {blocks_per_stage!r}")
        self.blocks_per_stage = int(blocks_per_stage)
        self.name = f"resnet{6 * self.blocks_per_stage + 2}"
        layout = ("resnet56", self.input_shape, self.num_classes)
        self._shapes = shapes.param_shapes(*layout, blocks_per_stage=self.blocks_per_stage)
        self._kinds = shapes.param_kinds(*layout, blocks_per_stage=self.blocks_per_stage)

    @property
    def param_shapes(self):
        return self._shapes

    def _forward(self, run, mask):
        def conv_bn(h, i, stride=1):
            return run.batch_norm(run.conv(h, i, stride), *run.bn_params(i + 1), mask)

        h = tf.nn.relu(conv_bn(run.input, 0))
        i, c_in = 3, 16
        for width in self.widths:
            for block in range(self.blocks_per_stage):
                stride = 2 if (block == 0 and width != 16) else 1
                out = tf.nn.relu(conv_bn(h, i, stride))
                out = conv_bn(out, i + 3)
                short = h if (stride == 1 and c_in == width) else run.shortcut_a(h, c_in, width)
                h = tf.nn.relu(out + short)
                i, c_in = i + 6, width
        return run.output(run.dense(run.global_pool(h), i, i + 1))
