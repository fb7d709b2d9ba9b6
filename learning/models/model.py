"""Architectures as pure functions of sampled weights, for all devices and samples at once.

A :class:`Model` holds no weights. Every network is evaluated from a *flat* weight
vector of length ``d`` (``num_params``) laid out parameter by parameter in the order
of :attr:`Model.param_shapes` (for a dense layer: kernel ``[in, out]`` row-major,
then bias ``[out]``). Weights carry two leading axes, devices K and samples S, so one
call evaluates K devices times S weight samples:

* ``logits(w [K, S, d], x [K, B, *input_shape]) -> [K, S, B, C]``: per-(device,
  sample) weights. Point weights (FedAvg & co.) are S = 1.
* ``logits_from_params(params, x)``: the same from the per-parameter tensors
  ``[K, S, *shape]`` (what :meth:`Model.unflatten` returns). The exact
  reparameterization path of ``learning/local/objective.py`` samples each parameter tensor
  directly in this form, so the flat ``[K, S, d]`` sample is never materialised.
* ``logits_sampled(mean [K or 1, d], std, device_seeds [K, 2], num_samples, x,
  mask)``: the exact reparameterization estimator's logits under the fused weight
  sampler (:mod:`native.sampling`), differentiable in ``mean`` and ``std``:
  :func:`native.sampling.sample_weights` then ``logits_from_params``.
* ``logits_lrt(mu [K, d], var [K, d], x, num_samples, device_seeds [K, 2])``: the
  local reparameterization trick (Kingma, Salimans & Welling 2015). For a dense
  layer with input ``h`` and a factorised Gaussian posterior over its weights, the
  pre-activation ``a = h W + b`` is Gaussian with mean ``h mu_W + mu_b`` and variance
  ``h^2 var_W + var_b`` (independent across output units), so it is sampled
  directly, with fresh noise for every (sample, row). The gradient of the objective
  is the same in expectation as with full weight samples, with lower variance and
  ``S B out`` instead of ``S in out`` random numbers per layer. Device k's noise
  depends only on ``device_seeds[k]``; the MLP takes the generator as ``noise``
  (TensorFlow's by default, or :func:`learning.local.objective.philox_lrt_noise`).

Conventions of the MLP (the paper's MNIST network, 784-256x5-10, d = 466,698):
ReLU after every hidden layer, biases on every layer, inputs flattened. Mean
initialisation: He-normal kernels (std ``sqrt(2 / fan_in)``), zero biases.

Other architectures (``learning/models/convnets.py``) subclass :class:`Model` and implement
``param_shapes``, ``init_mean``, ``logits_from_params`` and ``logits_lrt``;
:func:`learning.models.architectures.build_model` builds every architecture by name. Per-device noise is drawn with
:func:`learning.posterior.device_normal` (one stream per device and layer).
"""

from __future__ import annotations

import abc
import itertools
import math

import tensorflow as tf

from learning.local import fused_mlp
from learning.models import shapes
from learning.posterior import device_normal
from native.sampling import sample_weights


class Model(abc.ABC):
    """A network as a function of (device, sample)-batched weights.

    Attributes
    ----------
    name : str
        Architecture name (``"mlp"``, ``"cnn"``, ``"resnet56"``).
    input_shape : tuple[int, ...]
        Shape of one input sample (e.g. ``(28, 28, 1)``).
    num_classes : int
        C, the number of output classes.
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    dense_layer_sizes: tuple[tuple[int, int], ...] | None = None
    """``(in, out)`` of every dense layer when the network is a plain ReLU MLP (the
    layout the Numba backend runs, :mod:`learning.local.fused_local` and
    :mod:`learning.local.fused_lrt`; its :meth:`logits_lrt` also takes Philox noise); None
    for other architectures."""
    lrt_shared_params: bool = False
    """True when :meth:`logits_lrt` accepts ``mu`` or ``var`` of shape [1, d] shared by
    all devices (saves a [K, d] broadcast and its gradient); False: pass [K, d]."""

    @property
    @abc.abstractmethod
    def param_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Shapes of the parameter tensors, in the order of the flat layout."""

    @property
    def num_params(self) -> int:
        """d, the total number of weights."""
        return sum(math.prod(s) for s in self.param_shapes)

    def unflatten(self, flat: tf.Tensor) -> list[tf.Tensor]:
        """Split a flat vector ``[..., d]`` into the parameter tensors ``[..., *shape]``."""
        static = flat.shape[:-1]
        lead = static.as_list() if static.is_fully_defined() else tf.shape(flat)[:-1]
        sizes = [math.prod(s) for s in self.param_shapes]
        parts = tf.split(flat, sizes, axis=-1)
        return [
            tf.reshape(p, tf.concat([lead, tf.constant(s, tf.int32)], 0))
            if isinstance(lead, tf.Tensor)
            else tf.reshape(p, [*lead, *s])
            for p, s in zip(parts, self.param_shapes, strict=True)
        ]

    def flatten(self, params: list[tf.Tensor], lead_ndims: int) -> tf.Tensor:
        """Inverse of :meth:`unflatten`: parameter tensors ``[*lead, *shape]`` -> ``[*lead, d]``."""
        lead = tf.shape(params[0])[:lead_ndims]
        flat = [tf.reshape(p, tf.concat([lead, [-1]], 0)) for p in params]
        return tf.concat(flat, axis=-1)

    @abc.abstractmethod
    def init_mean(self, seed: tf.Tensor) -> tf.Tensor:
        """Initial weight means, ``[d]`` tf.float32, from a stateless ``seed`` [2] tf.int32."""

    @abc.abstractmethod
    def logits_from_params(
        self, params: list[tf.Tensor], x: tf.Tensor, mask: tf.Tensor | None = None
    ) -> tf.Tensor:
        """Logits from parameter tensors ``[K, S, *shape]`` and inputs ``[K, B, *input_shape]``.

        ``mask`` ``[K, B]`` (optional, 1 = real row) keeps padding rows out of any batch
        statistics (the convnets' batch norm); row-independent models ignore it.
        Output: ``[K, S, B, C]`` tf.float32.
        """

    def logits(self, w: tf.Tensor, x: tf.Tensor, mask: tf.Tensor | None = None) -> tf.Tensor:
        """Logits ``[K, S, B, C]`` for weights ``w`` ``[K, S, d]`` and inputs ``x`` ``[K, B, ...]``."""
        return self.logits_from_params(self.unflatten(w), x, mask)

    def logits_sampled(
        self,
        mean: tf.Tensor,
        std: tf.Tensor,
        device_seeds: tf.Tensor,
        num_samples: int,
        x: tf.Tensor,
        mask: tf.Tensor,
    ) -> tf.Tensor:
        """Logits ``[K, S, B, C]`` of S weight samples ``mean + std * eps`` per device,
        drawn by the fused sampler (:func:`native.sampling.sample_weights`, device k
        keyed by ``device_seeds[k]``).

        Input: ``mean``, ``std`` ``[K or 1, d]`` tf.float32, ``device_seeds`` ``[K, 2]``
        tf.int32, ``x`` ``[K, B, *input_shape]``, ``mask`` ``[K, B]``. Gradients flow to
        ``mean`` and ``std``. Graph mode only (the sampler runs outside XLA).
        """
        params = sample_weights(mean, std, device_seeds, num_samples, self.param_shapes)
        return self.logits_from_params(params, x, mask=mask)

    def fused_network(self, num_samples: int):
        """The model's forward/backward in Numba on the fused sample
        (:class:`learning.local.fused_mlp.FusedMLP`), or None where there is none (convnets)."""
        return None

    @abc.abstractmethod
    def logits_lrt(
        self,
        mu: tf.Tensor,
        var: tf.Tensor,
        x: tf.Tensor,
        num_samples: int,
        device_seeds: tf.Tensor,
        mask: tf.Tensor | None = None,
    ) -> tf.Tensor:
        """Logits ``[K, S, B, C]`` with sampled pre-activations (local reparameterization).

        Input: means ``mu`` and variances ``var`` ``[K, d]``, inputs ``x`` ``[K, B, ...]``,
        ``num_samples`` S, ``device_seeds`` ``[K, 2]`` tf.int32 (one stateless seed per device),
        optional ``mask`` ``[K, B]`` as in :meth:`logits_from_params`.
        """


class MLP(Model):
    """Fully connected ReLU network (the paper's MNIST model with the default sizes).

    Parameters
    ----------
    input_shape : tuple[int, ...]
        Shape of one input (flattened to ``prod(input_shape)`` features).
    num_classes : int
        Number of classes C.
    hidden_units : tuple[int, ...]
        Width of every hidden layer (the paper: ``(256,) * 5``).
    """

    lrt_shared_params = True

    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, hidden_units: tuple[int, ...]
    ):
        if any(int(n) < 1 for n in input_shape) or not input_shape:
            raise ValueError(f"input_shape must be positive sizes, got {input_shape!r}")
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes!r}")
        if any(int(h) < 1 for h in hidden_units):
            raise ValueError(f"hidden_units must be positive, got {hidden_units!r}")
        self.name = "mlp"
        self.input_shape = tuple(int(n) for n in input_shape)
        self.num_classes = int(num_classes)
        self.hidden_units = tuple(int(h) for h in hidden_units)
        widths = [math.prod(self.input_shape), *self.hidden_units, self.num_classes]
        self.layer_sizes = tuple(itertools.pairwise(widths))
        self.dense_layer_sizes = self.layer_sizes

    @property
    def param_shapes(self) -> tuple[tuple[int, ...], ...]:
        return shapes.param_shapes("mlp", self.input_shape, self.num_classes, self.hidden_units)

    def init_mean(self, seed: tf.Tensor) -> tf.Tensor:
        seeds = tf.random.experimental.stateless_split(seed, len(self.layer_sizes))
        parts = []
        for i, (n_in, n_out) in enumerate(self.layer_sizes):
            std = math.sqrt(2.0 / n_in)
            kernel = std * tf.random.stateless_normal([n_in * n_out], seeds[i])
            parts += [kernel, tf.zeros([n_out])]
        return tf.concat(parts, axis=0)

    def _flat_inputs(self, x: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(x)
        return tf.reshape(tf.cast(x, tf.float32), [shape[0], shape[1], -1])

    def logits_from_params(
        self, params: list[tf.Tensor], x: tf.Tensor, mask: tf.Tensor | None = None
    ) -> tf.Tensor:
        """See :meth:`Model.logits_from_params`; rows are independent, ``mask`` is unused."""
        h = self._flat_inputs(x)  # [K, B, in]
        num_samples = tf.shape(params[0])[1]
        h = tf.repeat(h[:, None], num_samples, axis=1)  # [K, S, B, in]: small, keeps W untransposed
        last = len(self.layer_sizes) - 1
        for i in range(len(self.layer_sizes)):
            kernel, bias = params[2 * i], params[2 * i + 1]
            h = tf.linalg.matmul(h, kernel) + bias[:, :, None, :]
            if i < last:
                h = tf.nn.relu(h)
        return h

    def fused_network(self, num_samples: int) -> fused_mlp.FusedMLP:
        return fused_mlp.network(self.layer_sizes, int(num_samples))

    def logits_lrt(
        self,
        mu: tf.Tensor,
        var: tf.Tensor,
        x: tf.Tensor,
        num_samples: int,
        device_seeds: tf.Tensor,
        mask: tf.Tensor | None = None,
        noise=device_normal,
    ) -> tf.Tensor:
        """LRT logits ``[K, S, B, C]``; ``mu`` / ``var`` are ``[K, d]`` or shared ``[1, d]``.

        ``mask`` is unused (rows are independent). ``noise(device_seeds, shape, stream)``
        draws the pre-activation noise ``[K, *shape]`` (:func:`device_normal`, or
        :func:`learning.local.objective.philox_lrt_noise`).

        The S samples are folded into the rows of every matmul (``[K, S*B, in] @ [K, in,
        out]``, so the weight gradient comes out as ``[K, in, out]`` directly) and a
        shared operand is one plain GEMM ``[K*S*B, in] @ [in, out]``. Layer i's noise is
        ``noise(device_seeds, [S, B, out], stream=i)``.
        """
        shared_mu, shared_var = mu.shape[0] == 1, var.shape[0] == 1
        mus = self.unflatten(mu[0] if shared_mu else mu)
        vars_ = self.unflatten(var[0] if shared_var else var)
        k, batch = tf.shape(x)[0], tf.shape(x)[1]
        h = self._flat_inputs(x)  # [K, R, in]; R = B at layer 1, S*B after
        last = len(self.layer_sizes) - 1
        for i, (_, n_out) in enumerate(self.layer_sizes):
            w_mu, b_mu, w_var, b_var = mus[2 * i], mus[2 * i + 1], vars_[2 * i], vars_[2 * i + 1]
            act_mean = _dense(h, w_mu) + (b_mu if shared_mu else b_mu[:, None])
            act_var = _dense(tf.square(h), w_var) + (b_var if shared_var else b_var[:, None])
            eps = noise(device_seeds, [num_samples, batch, n_out], stream=i)
            if i == 0:  # the B input rows are shared by the S samples
                h = act_mean[:, None] + tf.sqrt(act_var)[:, None] * eps
                h = tf.reshape(h, [k, num_samples * batch, n_out])
            else:
                h = act_mean + tf.sqrt(act_var) * tf.reshape(eps, [k, num_samples * batch, n_out])
            if i < last:
                h = tf.nn.relu(h)
        return tf.reshape(h, [k, num_samples, batch, -1])


def _dense(h: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    """``h [K, R, in]`` times ``w``: shared ``[in, out]`` (one GEMM) or per device ``[K, in, out]``."""
    if w.shape.rank == 2:
        k, r = tf.shape(h)[0], tf.shape(h)[1]
        out = tf.linalg.matmul(tf.reshape(h, [k * r, -1]), w)
        return tf.reshape(out, [k, r, w.shape[-1]])
    return tf.linalg.matmul(h, w)
