"""Constants and types inside kernels (issue 16, item 6): math constants, tg.constant, module
constants, vectors/matrices built with tg.vector/tg.matrix in a kernel, integer mixing rules."""

import math

import numpy as np
import pytest

import tapegrad as tg

from ._lang_util import check_grad

F64 = tg.array(dtype=tg.float64)
SCALE = tg.constant(2.5)
OFFSET = 3
AXIS = tg.constant(tg.vec3(0.0, 1.0, 0.0))


@tg.kernel
def k_consts(out: tg.array(dtype=float)):
    out[0] = math.pi
    out[1] = SCALE * float(OFFSET)
    out[2] = AXIS[1] + AXIS.y
    out[3] = math.inf
    out[4] = math.nan
    out[5] = math.tau - math.e


def test_module_and_math_constants():
    out = tg.zeros(6, dtype=float)
    tg.launch(k_consts, dim=1, inputs=[out])
    o = out.numpy()
    np.testing.assert_allclose(o[[0, 1, 2, 5]], np.float32([math.pi, 7.5, 2.0, math.tau - math.e]))
    assert np.isposinf(o[3]) and np.isnan(o[4])


@pytest.mark.skipif(not all(hasattr(tg, n) for n in ("pi", "e", "inf", "nan", "tau")),
                    reason="tg.pi & co. are exported by the host API (issue 15)")
def test_tg_math_constants_in_kernels():
    @tg.kernel
    def k(out: tg.array(dtype=tg.float64)):
        out[0] = tg.pi
        out[1] = tg.e
        out[2] = tg.tau
        out[3] = tg.inf
        out[4] = -tg.inf
        out[5] = tg.nan

    out = tg.zeros(6, dtype=tg.float64)
    tg.launch(k, dim=1, inputs=[out])
    o = out.numpy()
    np.testing.assert_array_equal(o[:3], [math.pi, math.e, math.tau])
    assert o[3] == math.inf and o[4] == -math.inf and np.isnan(o[5])


@tg.kernel
def k_vectors(x: F64, out: F64):
    i = tg.tid()
    v = tg.vector(x[i], x[i] * 2.0, 3.0, x[i] * x[i], 5.0)          # length 5, float64 from x
    z = tg.vector(length=5, dtype=tg.float64)
    w = tg.types.vector(length=3, dtype=float)
    m = tg.matrix(x[i], 1.0, 2.0, x[i], shape=(2, 2))
    mz = tg.matrix(shape=(3, 4), dtype=tg.float64)
    out[i] = tg.dot(v, v) + z[4] + tg.float64(w[2]) + tg.determinant(m) + mz[2, 3]


def test_vector_matrix_values_in_kernel(device):
    x = np.array([0.5, -1.0, 2.0])
    out = tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(k_vectors, dim=3, inputs=[tg.array(x, dtype=tg.float64, device=device), out], device=device)
    exp = x ** 2 + 4 * x ** 2 + 9 + x ** 4 + 25 + x * x - 2
    np.testing.assert_allclose(out.numpy(), exp)
    check_grad(k_vectors, 3, [x], [np.zeros(3)], device=device)


def test_integer_mixing_follows_warp():
    @tg.kernel
    def ok(out: tg.array(dtype=tg.int64), n: tg.int64):
        i = tg.tid()
        out[i] = n + tg.int64(i) + 2        # a literal adapts; the int32 index is cast

    out = tg.zeros(2, dtype=tg.int64)
    tg.launch(ok, dim=2, inputs=[out, 1 << 40])
    np.testing.assert_array_equal(out.numpy(), [(1 << 40) + 2, (1 << 40) + 3])

    @tg.kernel
    def refused(out: tg.array(dtype=tg.int64), n: tg.int64):
        i = tg.tid()
        out[i] = n + i                       # Warp: "Input types must be the same"

    with pytest.raises(tg.KernelError, match=r"test_lang_constants.py:\d+.*add\(\) does not accept \(int64, int32\)"):
        tg.launch(refused, dim=2, inputs=[out, 1])


def test_constructor_component_type_error_names_the_cast():
    @tg.kernel
    def bad(out: tg.array(dtype=tg.vec3d)):
        e = 1.0e-3                  # a new variable from a literal is float32 (as in Warp)
        out[0] = tg.vec3d(e, 0.0, 0.0)

    with pytest.raises(tg.KernelError, match=r"vec3d\(\.\.\.\) takes float64 components, got float32; cast it"):
        tg.launch(bad, dim=1, inputs=[tg.zeros(1, dtype=tg.vec3d)])


@tg.kernel
def _int_mod_constants(out: tg.array(dtype=float), ints: tg.array(dtype=int)):
    v = tg.vec3(1.0, 2.0, 3.0)
    out[0] = v[1 % 3] + v[-7 % 3 + 2]
    out[1] = 7.5 % 2.0
    ints[0] = -7 % 3
    ints[1] = 7 % -3
    ints[2] = 17 % 5


def test_modulo_of_integer_constants_is_an_integer():
    """``1 % 3`` of two integer constants folds to the int 1 (C's sign, as kernels compute %):
    it folded through math.fmod to 1.0, which ``v[1 % 3]`` refused as an index."""
    out = tg.zeros(2)
    ints = tg.zeros(3, dtype=int)
    tg.launch(_int_mod_constants, dim=1, inputs=[out, ints])
    assert out.numpy().tolist() == [4.0, 1.5]
    assert ints.numpy().tolist() == [-1, 1, 2]
