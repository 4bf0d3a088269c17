"""Issue 28 (types): Warp's ``wp.types.type_is_*`` / ``is_*`` introspection helpers, constants of
NumPy scalar values with Warp's ``.value``, and the refused transform copy across dtypes in a
kernel. Expected answers are Warp 1.19's (checked against ``import warp``)."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import types as T


@tg.struct
class Point:
    x: int


TYPE_QUERIES = ("type_is_int", "type_is_float", "type_is_scalar", "type_is_vector", "type_is_matrix",
                "type_is_quaternion", "type_is_transformation", "type_is_composite", "type_is_value",
                "type_is_struct", "type_is_array")
VALUE_QUERIES = tuple(q[len("type_"):] for q in TYPE_QUERIES)

vec8us = T.vector(8, tg.uint8)
mat55d = T.matrix((5, 5), tg.float64)

# what each query answers True for (Warp 1.19's answers; the rest answer False)
SCALAR_INT = {"int", "scalar", "value"}
SCALAR_FLOAT = {"float", "scalar", "value"}
CASES = [
    (int, SCALAR_INT), (tg.int16, SCALAR_INT), (tg.uint64, SCALAR_INT),
    (float, SCALAR_FLOAT), (tg.float16, SCALAR_FLOAT), (tg.float64, SCALAR_FLOAT),
    (bool, {"value"}), (tg.bool, {"value"}),
    (tg.vec3, {"vector", "composite", "value"}), (vec8us, {"vector", "composite", "value"}),
    (tg.spatial_vector, {"vector", "composite", "value"}),
    (tg.mat33h, {"matrix", "composite", "value"}), (mat55d, {"matrix", "composite", "value"}),
    (tg.quat, {"quaternion", "composite", "value"}), (tg.quath, {"quaternion", "composite", "value"}),
    (tg.transform, {"transformation", "composite", "value"}),
    (tg.transformd, {"transformation", "composite", "value"}),
    (Point, {"struct"}), (tg.array, {"array"}),
]


def answers(queries, x):
    return {q.split("is_")[1] for q in queries if getattr(T, q)(x)}


@pytest.mark.parametrize("t, expected", CASES, ids=[str(c[0]) for c in CASES])
def test_type_queries_answer_as_warp(t, expected):
    assert answers(TYPE_QUERIES, t) == expected
    assert answers(VALUE_QUERIES, t) == set()       # a type is no value


VALUES = [
    (123, SCALAR_INT), (tg.int16(123), SCALAR_INT), (tg.uint64(123), SCALAR_INT),
    (1.5, SCALAR_FLOAT), (tg.float16(1.5), SCALAR_FLOAT), (tg.float32(1.5), SCALAR_FLOAT),
    (True, {"value"}),
    (tg.vec3(0, 1, 2), {"vector", "composite", "value"}), (vec8us(*range(8)), {"vector", "composite", "value"}),
    (mat55d(*range(25)), {"matrix", "composite", "value"}), (tg.mat22(*range(4)), {"matrix", "composite", "value"}),
    (tg.quath(*range(4)), {"quaternion", "composite", "value"}),
    (tg.transformd(*range(7)), {"transformation", "composite", "value"}),
    (Point(), {"struct"}),
    (tg.array(dtype=int), {"array"}), (tg.array(ndim=3, dtype=float), {"array"}), (tg.zeros(2), {"array"}),
    (tg.array2d[tg.vec3], {"array"}),
    (None, set()), ("x", set()), (np.zeros(3), set()), ([1, 2], set()),
]


@pytest.mark.parametrize("x, expected", VALUES, ids=[repr(v[0])[:24] for v in VALUES])
def test_value_queries_answer_as_warp(x, expected):
    assert answers(VALUE_QUERIES, x) == expected
    if not isinstance(x, T.ArrayType):
        assert answers(TYPE_QUERIES, x) == set()     # a value is no type


def test_numpy_scalar_types_count_as_their_tapegrad_types():
    # tapegrad's scalar values are NumPy scalars (tg.int8(3) is an np.int8), so their types agree
    assert T.type_is_int(np.int8) and T.type_is_float(np.float64) and not T.type_is_int(np.float32)
    assert T.is_int(np.int64(3)) and T.is_float(np.float32(2)) and not T.is_scalar(np.bool_(True))


def test_constant_of_numpy_scalars_has_warp_value():
    c = tg.constant(tg.float16(1.25))
    assert c.value == 1.25 and type(c.value) is float
    assert isinstance(c, np.float16) and c == 1.25 and c.dtype == np.float16
    i = tg.constant(tg.int16(123))
    assert i.value == 123 and type(i.value) is int and isinstance(i, np.int16)
    assert tg.constant(123) == 123 and tg.constant(1.25) == 1.25 and tg.constant(True) is True
    assert tg.constant(tg.vec3i(1, 2, 3)) == tg.vec3i(1, 2, 3)


H = tg.constant(tg.float16(0.5))
S = tg.constant(tg.int16(-7))


@tg.kernel
def read_constants(h: tg.array(dtype=tg.float16), s: tg.array(dtype=tg.int16), f: tg.array(dtype=float)):
    h[0] = H + h[0]
    s[0] = S
    f[0] = float(H) * 3.0


def test_numpy_scalar_constants_keep_their_type_in_kernels(device):
    h = tg.full(1, 1.0, dtype=tg.float16, device=device)
    s = tg.zeros(1, dtype=tg.int16, device=device)
    f = tg.zeros(1, dtype=float, device=device)
    tg.launch(read_constants, dim=1, inputs=[h, s, f], device=device)
    assert h.numpy()[0] == np.float16(1.5) and s.numpy()[0] == -7 and f.numpy()[0] == 1.5


@tg.kernel(module="unique")
def transform_copy_across_dtypes():
    tg.transformd(tg.transform(1.0))


@tg.kernel(module="unique")
def transform_copy_of_argument(a: tg.array(dtype=tg.transformh), out: tg.array(dtype=tg.transformd)):
    out[0] = tg.transformd(a[0])


@tg.kernel(module="unique")
def transform_copy_same_dtype(a: tg.array(dtype=tg.transformd), out: tg.array(dtype=tg.transformd)):
    out[0] = tg.transformd(a[0])


def test_transform_copy_across_dtypes_is_refused_as_warp():
    with pytest.raises(RuntimeError, match=r"copy constructing a transform requires matching source and target "
                                           r"dtypes, got `float32` and `float64`$"):
        tg.launch(transform_copy_across_dtypes, dim=1, device="cpu")
    a = tg.zeros(1, dtype=tg.transformh)
    out = tg.zeros(1, dtype=tg.transformd)
    with pytest.raises(tg.WarpCodegenError, match="got `float16` and `float64`"):
        tg.launch(transform_copy_of_argument, dim=1, inputs=[a, out], device="cpu")


def test_transform_copy_of_the_same_dtype_still_works(device):
    a = tg.array([tg.transformd(1, 2, 3, 0, 0, 0, 1)], dtype=tg.transformd, device=device)
    out = tg.zeros(1, dtype=tg.transformd, device=device)
    tg.launch(transform_copy_same_dtype, dim=1, inputs=[a, out], device=device)
    np.testing.assert_array_equal(out.numpy(), [[1, 2, 3, 0, 0, 0, 1]])
