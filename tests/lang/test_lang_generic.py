"""Generic kernels and functions (issue 16, item 5): typing.Any parameters and arrays of
dtype=Any, specialized per argument types at launch (one kernel and binary each), tg.overload."""

from typing import Any

import numpy as np
import pytest

import tapegrad as tg


@tg.func
def square(v: Any):
    return v * v


@tg.func
def first(a: tg.array(dtype=Any), i: int):
    return a[i]


@tg.kernel
def scale(x: tg.array(dtype=Any), s: Any, out: tg.array(dtype=Any)):
    i = tg.tid()
    out[i] = s * square(first(x, i))


def test_generic_kernel_specializes_per_types(device):
    x32 = tg.array(np.array([1.0, 2.0, 3.0], np.float32), device=device)
    o32 = tg.zeros(3, dtype=tg.float32, device=device)
    tg.launch(scale, dim=3, inputs=[x32, 2.0, o32], device=device)
    np.testing.assert_allclose(o32.numpy(), [2.0, 8.0, 18.0])
    x64 = tg.array(np.array([1.0, -2.0]), dtype=tg.float64, device=device)
    o64 = tg.zeros(2, dtype=tg.float64, device=device)
    tg.launch(scale, dim=2, inputs=[x64, np.float64(0.5), o64], device=device)
    np.testing.assert_allclose(o64.numpy(), [0.5, 2.0])
    k1 = scale.specialize_for([x32, 2.0, o32])
    assert k1 is scale.specialize_for([x32, 1.0, o32])                 # one kernel per type combination
    assert k1 is not scale.specialize_for([x64, np.float64(1.0), o64])
    assert k1.symbol != scale.specialize_for([x64, np.float64(1.0), o64]).symbol


@tg.kernel
def add_int(a: tg.array(dtype=Any), n: Any):
    i = tg.tid()
    a[i] = a[i] + n


def test_generic_int_kinds_and_overload():
    a = tg.zeros(3, dtype=tg.int64)
    tg.launch(add_int, dim=3, inputs=[a, np.int64(1 << 40)])
    np.testing.assert_array_equal(a.numpy(), [1 << 40] * 3)
    k = tg.overload(add_int, [tg.array(dtype=tg.int32), tg.int32])
    assert k is tg.overload(add_int, {"a": tg.array(dtype=tg.int32), "n": tg.int32})
    b = tg.zeros(2, dtype=tg.int32)
    tg.launch(k, dim=2, inputs=[b, 7])
    np.testing.assert_array_equal(b.numpy(), [7, 7])
    assert k.arg_types[1] is tg.int32


def test_generic_adjoint():
    @tg.kernel
    def sq(x: tg.array(dtype=Any), y: tg.array(dtype=Any)):
        i = tg.tid()
        y[i] = square(x[i]) * x[i]

    x = tg.array(np.array([0.5, -2.0]), dtype=tg.float64, requires_grad=True)
    y = tg.zeros(2, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq, dim=2, inputs=[x, y])
    tape.backward(grads={y: tg.array(np.ones(2), dtype=tg.float64)})
    np.testing.assert_allclose(x.grad.numpy(), 3 * x.numpy() ** 2)


def test_generic_errors():
    with pytest.raises(tg.KernelError, match="is generic"):
        scale.arg_types
    with pytest.raises(TypeError, match="expected a 1-D array"):
        tg.launch(scale, dim=1, inputs=[tg.zeros((2, 2)), 1.0, tg.zeros(2)])
    with pytest.raises(TypeError, match="cannot tell the type of a str"):
        tg.launch(scale, dim=1, inputs=[tg.zeros(2), "x", tg.zeros(2)])
    with pytest.raises(TypeError, match="needs a type"):
        tg.overload(scale, {"x": tg.array(dtype=float)})


@tg.kernel
def norms(v: tg.array(dtype=Any), scale: Any, out: tg.array(dtype=Any)):
    i = tg.tid()
    out[i] = tg.length(v[i] * scale)


def test_generic_vectors_and_typed_scalars():
    v = tg.array(np.array([[3.0, 4.0, 0.0], [1.0, 2.0, 2.0]]), dtype=tg.vec3d)
    out = tg.zeros(2, dtype=tg.float64)
    tg.launch(norms, dim=2, inputs=[v, tg.float64(2.0), out])
    np.testing.assert_allclose(out.numpy(), [10.0, 6.0])
    v32 = tg.array(np.array([[3.0, 4.0]], np.float32), dtype=tg.vec2)
    out32 = tg.zeros(1, dtype=tg.float32)
    tg.launch(norms, dim=1, inputs=[v32, 1.0, out32])
    np.testing.assert_allclose(out32.numpy(), [5.0])


@tg.kernel
def fill_value(a: tg.array(dtype=Any), v: Any):
    i = tg.tid()
    a[i] = v


@tg.overload
def fill_value(a: tg.array(dtype=tg.float64), v: tg.float64):   # noqa: F811  (Warp's stub form)
    ...


def test_overload_decorator_keeps_the_generic_kernel():
    assert isinstance(fill_value, tg.Kernel) and fill_value.is_generic()
    spec = fill_value.specialize([tg.array(dtype=tg.float64), tg.float64])
    assert spec is tg.overload(fill_value, [tg.array(dtype=tg.float64), tg.float64])
    a = tg.zeros(3, dtype=tg.float64)
    tg.launch(fill_value, dim=3, inputs=[a, np.float64(2.5)])
    np.testing.assert_array_equal(a.numpy(), [2.5] * 3)
