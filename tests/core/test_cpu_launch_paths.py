"""The CPU forward loop's two paths (dense arrays: vectorizable copy; anything else: generic) and
launch's cached numpy path must give the generic, sequential-per-thread results and checks."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def k_saxpy(x: tg.array[float], y: tg.array[float], a: float):
    i = tg.tid()
    y[i] = a * x[i] + y[i]


@tg.kernel
def k_shift(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    if i > 0:
        y[i] = x[i - 1]


@tg.kernel
def k_2d(x: tg.array2d[float], y: tg.array2d[float]):
    i, j = tg.tid()
    y[i, j] = x[i, j] * 2.0 + float(j)


@tg.kernel
def k_sum(x: tg.array[tg.vec3], s: tg.array[float]):
    i = tg.tid()
    tg.atomic_add(s, 0, tg.length_sq(x[i]))


@pytest.mark.parametrize("n", [1, 1000, 4096, 100003])
def test_dense_strided_and_aliased_arrays(n):
    rng = np.random.default_rng(n)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    ref = np.float32(1.5) * x + y
    tx, ty = tg.array(x, device="cpu"), tg.array(y.copy(), device="cpu")
    tg.launch(k_saxpy, n, inputs=[tx, ty, 1.5])
    np.testing.assert_allclose(ty.numpy(), ref, rtol=1e-6)
    big = np.zeros(2 * n, np.float32)   # a strided output: the generic loop
    big[::2] = y
    tg.launch(k_saxpy, n, inputs=[x, big[::2], 1.5], device="cpu")
    np.testing.assert_allclose(big[::2], ref, rtol=1e-6)
    assert not big[1::2].any()
    z = y.copy()                        # x and y are one buffer
    tg.launch(k_saxpy, n, inputs=[z, z, 1.0], device="cpu")
    np.testing.assert_allclose(z, 2 * y, rtol=1e-6)


@pytest.mark.parametrize("n", [2, 17, 1000])
def test_overlapping_views_keep_sequential_order(n):
    # one thread below 4096: iterations run in order, as without vectorization
    w = np.arange(n + 1, dtype=np.float32)
    tg.launch(k_shift, n, inputs=[w[:n], w[1:]], device="cpu")
    ref = np.arange(n + 1, dtype=np.float32)
    for i in range(1, n):
        ref[i + 1] = ref[i - 1]
    np.testing.assert_array_equal(w, ref)


@pytest.mark.parametrize("shape", [(3, 5), (70, 100), (129, 257)])
def test_2d_dense_and_transposed(shape):
    r, c = shape
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    for y in (np.zeros(shape, np.float32), np.zeros((c, r), np.float32).T):
        tg.launch(k_2d, shape, inputs=[x, y], device="cpu")
        np.testing.assert_allclose(y, 2 * x + np.arange(c, dtype=np.float32), rtol=1e-6)


@pytest.mark.parametrize("n", [10, 5000, 200000])
def test_vector_elements_and_atomics(n):
    v = np.random.default_rng(1).random((n, 3), dtype=np.float32)
    s = np.zeros(1, np.float32)
    tg.launch(k_sum, n, inputs=[v, s], device="cpu")
    assert np.isclose(s[0], (v.astype(np.float64) ** 2).sum(), rtol=1e-3)


def test_numpy_layout_cache_keeps_checks():
    x = np.ones(8, np.float32)
    y = np.zeros(8, np.float32)
    for k in range(3):   # the second and later launches take the cached layout
        tg.launch(k_saxpy, 8, inputs=[x, y, 1.0], device="cpu")
    np.testing.assert_allclose(y, 3.0)
    y2 = np.zeros(8, np.float32)   # same layout, other buffer
    tg.launch(k_saxpy, 8, inputs=[x, y2, 2.0], device="cpu")
    np.testing.assert_allclose(y2, 2.0)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    for _ in range(2):
        with pytest.raises(RuntimeError, match="read-only"):
            tg.launch(k_saxpy, 8, inputs=[x, ro, 1.0], device="cpu")
    for _ in range(2):
        with pytest.raises(TypeError, match="float32"):
            tg.launch(k_saxpy, 8, inputs=[x.astype(np.float64), y, 1.0], device="cpu")
        with pytest.raises(TypeError, match="1-D"):
            tg.launch(k_saxpy, 8, inputs=[x.reshape(2, 4), y, 1.0], device="cpu")
