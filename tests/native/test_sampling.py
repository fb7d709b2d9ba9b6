"""The fused weight sampler: its normals are N(0, 1), keyed as documented, and its
TF op has the reparameterization gradient."""

import numba
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from learning.models.architectures import build_model
from learning.runtime import Runtime, resolve
from native import sampling

BASE_EDGE = 3.6541528853610088  # right edge of the ziggurat's base layer: the tail starts here


@pytest.fixture(scope="module")
def draws():
    return sampling.standard_normal([4_000_000], (11, 12)).astype(np.float64)


def test_ziggurat_tables_close():
    """The layer recursion of the 256-layer constants ends at the top of the density."""
    assert abs(sampling.ZIGGURAT_RESIDUAL) < 1e-9
    assert sampling._K[1] == 0  # the top layer has no rectangle fully under the curve
    assert np.all(np.diff(sampling._F[1:]) < 0)  # layers 1..255 run from the top down


def test_normals_follow_the_standard_normal(draws):
    n = draws.size
    assert abs(draws.mean()) < 5 / np.sqrt(n)
    assert abs(draws.var() - 1) < 5 * np.sqrt(2 / n)
    assert stats.kstest(draws[:1_000_000], "norm").pvalue > 1e-3
    edges = np.linspace(-4, 4, 201)  # the wedges of every layer fall in these bins
    counts, _ = np.histogram(draws, edges)
    expected = np.diff(stats.norm.cdf(edges))
    expected *= counts.sum() / expected.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-3


def test_tail_beyond_the_base_layer():
    """Values beyond the base layer come only from the tail algorithm: its mass and its
    shape (40M draws: about 10,000 beyond the edge, 2,500 beyond 4)."""
    size = 40_000_000
    tail = np.abs(sampling.standard_normal([size], (13, 14)))
    tail = tail[tail > BASE_EDGE]
    for edge in (BASE_EDGE, 4.0, 4.5):
        expected = size * 2 * stats.norm.sf(edge)
        got = np.count_nonzero(tail > edge)
        assert abs(got - expected) < 4 * np.sqrt(expected), (edge, got, expected)


def test_keys_streams_prefixes_and_threads():
    a = sampling.standard_normal([50_000], (1, 2), stream=3)
    assert np.array_equal(a, sampling.standard_normal([50_000], (1, 2), stream=3))
    assert np.array_equal(a[:777], sampling.standard_normal([777], (1, 2), stream=3))
    for other in (sampling.standard_normal([50_000], (1, 3), stream=3),
                  sampling.standard_normal([50_000], (1, 2), stream=4),
                  sampling.standard_normal([50_000], (2, 2), stream=3)):
        assert abs(np.corrcoef(a, other)[0, 1]) < 5 / np.sqrt(a.size)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = sampling.standard_normal([50_000], (1, 2), stream=3)
    finally:
        numba.set_num_threads(threads)
    assert np.array_equal(a, single)


def test_layout_fill_is_mean_plus_std_eps_per_tensor(rng):
    """Bit for bit: every element is ``mean + std * eps`` rounded the same way (one fused
    multiply-add where the CPU has it, else a rounded product), whether its chunk lies
    inside one sample or wraps into the next (2048-element chunks; 6001 and 3000 wrap,
    2048 * 4 does not)."""
    sizes = [6001, 7, 3000, 2048 * 4]
    layout = sampling.Layout(sizes, num_mc=3)
    mean = rng.normal(size=sum(sizes)).astype(np.float32)
    std = rng.uniform(0.1, 2.0, size=sum(sizes)).astype(np.float32)
    samples = layout.fill(mean, std, (5, 6))
    got, fused, rounded = [], [], []
    start = 0
    for stream, (n, w) in enumerate(zip(sizes, samples, strict=True)):
        assert w.shape == (3, n) and w.ctypes.data % 64 == 0
        eps = sampling.standard_normal([3, n], (5, 6), stream)
        m, s = mean[start : start + n], std[start : start + n]
        got.append(w.ravel())
        fused.append((m.astype(np.float64) + s.astype(np.float64) * eps).astype(np.float32).ravel())
        rounded.append((m + s * eps).ravel())
        start += n
    got, fused, rounded = (np.concatenate(v) for v in (got, fused, rounded))
    assert np.array_equal(got, fused) or np.array_equal(got, rounded)


# ResNet-56 has 167 parameter tensors; Numba passes at most 100 in a tuple to a parallel
# region, so the gradient runs in groups (sampling.GRAD_GROUP) with the same result
MANY_TENSORS = [3 * sampling.CHUNK + 5, *np.random.default_rng(5).integers(1, 40, size=116)]


@pytest.mark.parametrize("sizes", [[5000, 13], MANY_TENSORS], ids=["two", "117"])
def test_layout_grad_is_the_reparameterization_gradient(rng, sizes):
    sizes = [int(n) for n in sizes]
    layout = sampling.Layout(sizes, num_mc=4)
    mean = rng.normal(size=sum(sizes)).astype(np.float32)
    std = rng.uniform(0.1, 2.0, size=sum(sizes)).astype(np.float32)
    samples = layout.fill(mean, std, (7, 8))
    grads = [rng.normal(size=w.shape).astype(np.float32) for w in samples]
    g_mean, g_std = layout.grad(grads, samples, mean, std)
    eps = np.concatenate(
        [sampling.standard_normal([4, n], (7, 8), i) for i, n in enumerate(sizes)], axis=1
    )
    g = np.concatenate(grads, axis=1)
    np.testing.assert_allclose(g_mean, g.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_std, (g * eps).sum(0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("num_devices,shared", [(3, "mean"), (3, "std"), (1, None)])
def test_sample_weights_op_values_and_gradients(rng, num_devices, shared):
    """The TF op: device k's sample uses its own key; gradients are sum_m g and sum_m g eps
    (summed over devices for a shared [1, d] input), in a compiled graph."""
    model = build_model("mlp", (5,), 3, (4,))
    d, num_mc = model.num_params, 2
    seeds = tf.constant(rng.integers(0, 2**31, size=(num_devices, 2)), tf.int32)
    mean = tf.constant(rng.normal(size=(1 if shared == "mean" else num_devices, d)), tf.float32)
    std = tf.constant(rng.uniform(0.5, 1.5, (1 if shared == "std" else num_devices, d)), tf.float32)
    coef = [tf.constant(rng.normal(size=(num_devices, num_mc, *s)), tf.float32)
            for s in model.param_shapes]

    @tf.function
    def run(mean, std):
        with tf.GradientTape() as tape:
            tape.watch([mean, std])
            params = sampling.sample_weights(mean, std, seeds, num_mc, model.param_shapes)
            loss = tf.add_n([tf.reduce_sum(c * p) for c, p in zip(coef, params, strict=True)])
        return params, tape.gradient(loss, [mean, std])

    params, (g_mean, g_std) = run(mean, std)
    eps = np.stack([
        np.concatenate([
            sampling.standard_normal([num_mc, int(np.prod(s))], seeds[k].numpy(), i)
            for i, s in enumerate(model.param_shapes)
        ], axis=1)
        for k in range(num_devices)
    ])  # [K, M, d]
    flat = np.concatenate(
        [p.numpy().reshape(num_devices, num_mc, -1) for p in params], axis=2
    )
    m_full = np.broadcast_to(mean.numpy()[:, None], eps.shape)
    s_full = np.broadcast_to(std.numpy()[:, None], eps.shape)
    np.testing.assert_allclose(flat, m_full + s_full * eps, rtol=1e-5, atol=1e-6)
    c = np.concatenate([x.numpy().reshape(num_devices, num_mc, -1) for x in coef], axis=2)
    want_mean, want_std = c.sum(1), (c * eps).sum(1)
    if shared == "mean":
        want_mean = want_mean.sum(0, keepdims=True)
    if shared == "std":
        want_std = want_std.sum(0, keepdims=True)
    np.testing.assert_allclose(g_mean.numpy(), want_mean, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g_std.numpy(), want_std, rtol=1e-4, atol=1e-5)


def test_philox_noise_refuses_xla():
    """The fused sampler runs outside XLA: XLA with Philox noise (or the Numba steps) is
    refused naming the key; with TensorFlow's noise it is allowed."""
    for backend, noise in (("tensorflow", "philox"), ("numba", "auto")):
        with pytest.raises(ValueError, match=r"runtime\.jit_compile"):
            resolve(Runtime(backend=backend, noise=noise, jit_compile=True), architecture="mlp")
    resolved = resolve(Runtime(backend="tensorflow", noise="tensorflow", jit_compile=True),
                       architecture="mlp")
    assert resolved.jit_compile and resolved.noise == "tensorflow"
    with pytest.raises(ValueError, match=r"runtime\.noise"):
        Runtime(noise="numpy")


def _philox_reference(counter, key):
    """Philox-4x32-10 in plain Python (Salmon et al. 2011)."""
    mask = 0xFFFFFFFF
    c, k = list(counter), list(key)
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & mask, p1 & mask, ((p0 >> 32) ^ c[3] ^ k[1]) & mask, p0 & mask]
        k = [(k[0] + 0x9E3779B9) & mask, (k[1] + 0xBB67AE85) & mask]
    return tuple(c)


def test_philox_known_answers_and_fast_path_against_plain_python():
    """Random123's known-answer vectors, then eps of the rectangle hits rebuilt by hand
    from (key, counter = (block, 0, stream, 0)) and the word-major chunk layout."""
    kat = {
        ((0, 0, 0, 0), (0, 0)): (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2): (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)):
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    }
    for (counter, key), want in kat.items():
        assert _philox_reference(counter, key) == want
        assert tuple(int(v) for v in sampling._philox(*map(np.uint32, (*counter, *key)))) == want
    eps = sampling.standard_normal([6000], (1, 2), stream=3)
    checked = 0
    for j in range(0, 6000, 37):
        chunk, pos = divmod(j, sampling.CHUNK)
        word_index, block = divmod(pos, sampling.CHUNK // 4)
        word = _philox_reference((chunk * (sampling.CHUNK // 4) + block, 0, 3, 0), (1, 2))[word_index]
        layer, u = word & 0xFF, word >> 9
        if u < sampling._K[layer]:
            x = np.float32(u) * sampling._W[layer]
            assert eps[j] == (-x if (word >> 8) & 1 else x)
            checked += 1
    assert checked > 150


@pytest.mark.parametrize("size", [1, 100, 2048, 2049, 30_000])
def test_serial_normals_equal_the_parallel_fill(size):
    """``normals_into`` (the serial form other kernels call) draws, bit for bit, what
    ``standard_normal`` draws for the same key, stream and positions, misses included."""
    for seed in ([3, 7], [-5, 123_456_789]):
        want = sampling.standard_normal([size], seed, stream=4)
        got = np.full(size, np.nan, np.float32)
        k0, k1 = sampling._key(seed)
        sampling.normals_into(got, k0, k1, np.uint32(4), *sampling.tables())
        np.testing.assert_array_equal(got, want)
    other = np.empty(size, np.float32)
    sampling.normals_into(other, k0, k1, np.uint32(5), *sampling.tables())
    assert size == 1 or not np.array_equal(other, want)
