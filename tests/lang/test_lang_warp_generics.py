"""Warp's generics and overloads (issue 28): @overload stubs, @func overload resolution in
Python scope, defaults and keywords, user_overloads, type(x) and type attributes in kernels,
identity(n, dtype), the Int/Float/Scalar annotations, tg.grad(f) and Warp's error texts."""

import math
import typing
from typing import Any

import numpy as np
import pytest

import tapegrad as tg

# ------------------------------------------------------------------ @overload stubs


def test_overload_stub_of_a_nested_and_a_custom_named_kernel():
    @tg.kernel
    def nested_kernel(x: Any, out: tg.array(dtype=float)):
        out[0] = float(x) * 2.0

    @tg.overload
    def nested_kernel(x: tg.float64, out: tg.array(dtype=float)): ...   # noqa: F811

    assert isinstance(nested_kernel, tg.Kernel) and len(nested_kernel.overloads) == 1
    out = tg.zeros(1, dtype=float)
    tg.launch(nested_kernel, dim=1, inputs=[np.float64(1.5), out])
    assert out.numpy()[0] == 3.0

    @tg.kernel(name="custom_named_stub_kernel")
    def named(x: Any):
        return

    @tg.overload
    def named(x: float): ...   # noqa: F811

    assert named.key == "custom_named_stub_kernel" and len(named.overloads) == 1


def test_overload_stub_ambiguous_and_return_annotation_errors():
    def factory_kernel(x: Any):
        return

    a = tg.kernel(name="factory_kernel_a")(factory_kernel)
    b = tg.kernel(name="factory_kernel_b")(factory_kernel)
    with pytest.raises(RuntimeError, match="Ambiguous kernel lookup"):
        @tg.overload
        def factory_kernel(x: float): ...   # noqa: F811
    assert a is not b

    @tg.kernel
    def with_return(x: Any):
        return

    kept = with_return   # a kernel lives as long as something refers to it (the stubs below rebind its name)
    def with_return(x: float) -> float: ...   # noqa: F811
    with pytest.raises(TypeError, match=r"Return annotations are not allowed on @wp\.overload stubs"):
        tg.overload(with_return)

    def with_return(x: float) -> type(None): ...   # noqa: F811
    tg.overload(with_return)   # -> None is allowed
    assert kept.is_generic()


# ------------------------------------------------------------------ @func calls


@tg.func
def custom(x: int):
    return x + 1


@tg.func
def custom(x: float):   # noqa: F811
    return x + 1.0


@tg.func
def custom(x: tg.vec3):   # noqa: F811
    return x + tg.vec3(1.0, 0.0, 0.0)


@tg.func
def divide_float64(x: tg.float64):
    return x / tg.float64(1.23)


@tg.func
def with_defaults(a: int = 123, b: int = 234) -> int:
    return a + b


@tg.kernel
def defaults_kernel(out: tg.array(dtype=int)):
    out[0] = with_defaults()
    out[1] = with_defaults(111)
    out[2] = with_defaults(111, 222)
    out[3] = with_defaults(a=111)
    out[4] = with_defaults(b=111)


def test_func_python_scope_picks_the_overload_by_argument_types():
    assert custom(1) == 2 and isinstance(custom(1), int)
    assert custom(1.0) == 2.0
    np.testing.assert_array_equal(custom(tg.vec3(1.0, 0.0, 0.0)), [2.0, 0.0, 0.0])
    assert math.isclose(divide_float64(np.float64(2.46)), 2.0)
    with pytest.raises(RuntimeError, match=r"^Error calling function 'divide_float64', no overload found for "
                                           r"arguments \(1.0,\)$"):
        divide_float64(1.0)   # a Python float is a float32, as in Warp


def test_func_defaults_and_keywords_in_kernels_and_python():
    out = tg.zeros(5, dtype=int)
    tg.launch(defaults_kernel, dim=1, inputs=[out])
    np.testing.assert_array_equal(out.numpy(), [357, 345, 333, 345, 234])
    assert [with_defaults(), with_defaults(111), with_defaults(b=111)] == [357, 345, 234]


@tg.func
def array_length(x: tg.array(dtype=Any)):
    return x.shape[0]


@tg.kernel
def array_length_kernel(x: tg.array(dtype=tg.float32), out: tg.array(dtype=tg.int32)):
    out[0] = array_length(x)


def test_user_overloads_count_specializations_without_keeping_arrays():
    import gc
    import weakref
    out = tg.zeros(1, dtype=tg.int32)
    tg.launch(array_length_kernel, dim=1, inputs=[tg.zeros(1, dtype=tg.float32), out])
    assert array_length_kernel.ir is not None   # lowered (a launch from the warm kernel cache does not lower)
    before = len(array_length.user_overloads)
    assert before == 1
    a = tg.zeros(2, dtype=tg.int32)
    ref = weakref.ref(a)
    assert array_length(a) == 2
    ids = {id(o) for o in array_length.user_overloads.values()}
    assert len(ids) == before + 1
    del a
    gc.collect()
    assert ref() is None
    assert array_length(tg.zeros(3, dtype=tg.int32)) == 3
    assert {id(o) for o in array_length.user_overloads.values()} == ids
    assert len(custom.user_overloads) == 3   # the concrete overloads


def test_func_decorator_has_typing_overloads():
    overloads = typing.get_overloads(tg.func)
    assert len(overloads) >= 2
    assert any("Callable" in str(o.__annotations__.get("return", "")) for o in overloads)


# ------------------------------------------------------------------ types in kernels


@tg.func
def twice(a: Any, b: Any):
    return a + b


@tg.kernel
def type_cast_kernel(a: Any, b: Any, out: tg.array(dtype=Any)):
    a = type(a)(b)
    c = type(twice(b, b))(a)
    out[0] = type(out[0])(c)


@tg.kernel
def type_construction_kernel(a: tg.array(dtype=Any), out: tg.array(dtype=Any)):
    zero = type(a[0])()
    copy = type(a).dtype(a[0]) * a.dtype.dtype(2.0)
    copy += zero
    out[0] = copy


@tg.kernel
def type_as_argument_kernel(a: Any, out: tg.array(dtype=Any)):
    v = tg.types.vector(length=2, dtype=type(a))
    m = tg.identity(n=v.length, dtype=v.dtype) * a
    out[0] = tg.trace(m) + type(a)(v.length)


@tg.struct
class Triple:
    x: float
    y: float
    z: float


@tg.kernel
def struct_construction_kernel(a: Any, out: tg.array(dtype=float)):
    b = type(a)(a.z, a.y, a.x)
    out[0] = b.x
    out[1] = b.z


def test_type_of_a_value_casts_and_constructs(device):
    out = tg.zeros(1, dtype=tg.float64, device=device)
    tg.launch(type_cast_kernel, dim=1, inputs=[1.0, np.float64(2.5), out], device=device)
    assert out.numpy()[0] == 2.5
    outv = tg.zeros(1, dtype=tg.vec3f, device=device)
    tg.launch(type_cast_kernel, dim=1, inputs=[tg.vec3f(0.0), tg.vec3d(4.0, 5.0, 6.0), outv], device=device)
    np.testing.assert_array_equal(outv.numpy()[0], [4.0, 5.0, 6.0])

    a = tg.array([[1.0, 2.0, 3.0]], dtype=tg.vec3f, device=device)
    o = tg.zeros(1, dtype=tg.vec3f, device=device)
    tg.launch(type_construction_kernel, dim=1, inputs=[a, o], device=device)
    np.testing.assert_array_equal(o.numpy()[0], [2.0, 4.0, 6.0])
    m = tg.array([np.eye(2) * 3.0], dtype=tg.mat22d, device=device)
    om = tg.zeros(1, dtype=tg.mat22d, device=device)
    tg.launch(type_construction_kernel, dim=1, inputs=[m, om], device=device)
    np.testing.assert_array_equal(om.numpy()[0], np.eye(2) * 6.0)

    for value, dtype in ((2.0, tg.float32), (np.float64(-1.5), tg.float64)):
        o = tg.zeros(1, dtype=dtype, device=device)
        tg.launch(type_as_argument_kernel, dim=1, inputs=[value, o], device=device)
        assert o.numpy()[0] == 2.0 * float(value) + 2.0

    s = Triple()
    s.x, s.y, s.z = 1.0, 2.0, 3.0
    o = tg.zeros(2, dtype=float, device=device)
    tg.launch(struct_construction_kernel, dim=1, inputs=[s, o], device=device)
    np.testing.assert_array_equal(o.numpy(), [3.0, 1.0])


def test_identity_in_python_scope():
    np.testing.assert_array_equal(tg.identity(3, tg.float64), np.eye(3))
    assert type(tg.identity(n=2)) is type(tg.mat22(0.0))


# ------------------------------------------------------------------ Int / Float / Scalar


@tg.func
def vec_sum_int(v: tg.types.vector(3, tg.Int)) -> tg.Int:
    return v[0] + v[1] + v[2]


@tg.func
def vec_sum_scalar(v: tg.types.vector(3, tg.Scalar)) -> tg.Scalar:
    return v[0] + v[1] + v[2]


@tg.func
def mat_sum_float(m: tg.types.matrix((2, 2), tg.Float)) -> tg.Float:
    return m[0, 0] + m[0, 1] + m[1, 0] + m[1, 1]


mat22d = tg.types.matrix((2, 2), tg.float64)


@tg.kernel
def generic_annotations_kernel(oi: tg.array(dtype=tg.int16), of: tg.array(dtype=tg.float64)):
    oi[0] = vec_sum_int(tg.vec3s(1, 2, 3))
    oi[1] = vec_sum_scalar(tg.vec3s(1, 2, 4))
    of[0] = vec_sum_scalar(tg.vec3d(1.0, 2.0, 3.5))
    of[1] = mat_sum_float(mat22d(1.0, 2.0, 3.0, 4.5))


def test_int_float_scalar_annotations_specialize_per_type():
    oi = tg.zeros(2, dtype=tg.int16)
    of = tg.zeros(2, dtype=tg.float64)
    tg.launch(generic_annotations_kernel, dim=1, inputs=[oi, of])
    np.testing.assert_array_equal(oi.numpy(), [6, 7])
    np.testing.assert_array_equal(of.numpy(), [6.5, 10.5])
    assert vec_sum_scalar(tg.vec3d(1.0, 2.0, 3.5)) == 6.5
    with pytest.raises(RuntimeError, match="no overload found"):
        vec_sum_int(tg.vec3d(1.0, 2.0, 3.0))   # Int takes no float vector


# ------------------------------------------------------------------ tg.grad


@tg.func
def square(x: float):
    return x * x


@tg.func
def square_plus_grad(x: float):
    return x + tg.grad(square)(x)


@tg.kernel(enable_backward=False)
def grad_kernel(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    g = tg.grad(square)
    out[4 * i] = tg.float64(g(float(x[i])))
    dy, dx = tg.grad(tg.atan2)(y[i], x[i])
    out[4 * i + 1] = dy
    out[4 * i + 2] = dx
    out[4 * i + 3] = tg.float64(square_plus_grad(float(x[i])))


@tg.func
def safe_sqrt(x: float):
    return tg.sqrt(x)


@tg.func_grad(safe_sqrt)
def adj_safe_sqrt(x: float, adj_ret: float):
    if x > 0.0:
        tg.adjoint[x] += tg.grad(tg.sqrt)(x) * adj_ret


@tg.kernel
def safe_sqrt_kernel(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = safe_sqrt(x[i])


def test_grad_of_funcs_and_builtins_in_kernels(device):
    xs = np.array([0.5, 1.0, 2.0, 3.0])
    ys = np.array([1.0, -2.0, 0.25, 4.0])
    out = tg.zeros(16, dtype=tg.float64, device=device)
    tg.launch(grad_kernel, dim=4, inputs=[tg.array(xs, dtype=tg.float64, device=device),
                                          tg.array(ys, dtype=tg.float64, device=device), out], device=device)
    o = out.numpy().reshape(4, 4)
    h = 1e-6   # float64 central differences of the same functions
    np.testing.assert_allclose(o[:, 0], 2 * xs.astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(o[:, 1], (np.arctan2(ys + h, xs) - np.arctan2(ys - h, xs)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(o[:, 2], (np.arctan2(ys, xs + h) - np.arctan2(ys, xs - h)) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(o[:, 3], 3 * xs, rtol=1e-6)


def test_grad_inside_a_custom_adjoint(device):
    xs = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    x = tg.array(xs, dtype=float, device=device, requires_grad=True)
    y = tg.zeros_like(x, requires_grad=True)
    with tg.Tape() as tape:
        tg.launch(safe_sqrt_kernel, dim=4, inputs=[x, y], device=device)
    tape.backward(grads={y: tg.ones(4, dtype=float, device=device)})
    np.testing.assert_allclose(x.grad.numpy(), 0.5 / np.sqrt(xs.astype(np.float64)), rtol=1e-6)


@tg.func
def _sin_times(x: tg.float64, y: tg.float64):
    return tg.sin(x) * y


@tg.kernel
def grad_values_kernel(x: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    dy, dx = tg.grad(tg.atan2)(x[i] * x[i], x[i] + 1.0)
    gx, gy = tg.grad(_sin_times)(x[i], x[i] * x[i])
    out[i] = dy + 2.0 * dx + tg.grad(tg.sin)(x[i]) + gx * gy


def _grad_values_np(x):
    y, xx = x * x, x + 1.0
    r = y * y + xx * xx
    return xx / r + 2.0 * (-y / r) + np.cos(x) + np.cos(x) * x * x * np.sin(x)


def test_forward_mode_through_grad_values(device):
    """tg.grad(f)(x) in a kernel under forward mode: its tangent is f's second derivative along x's
    (the tangent build called f's plain adjoint, which it does not define, and passed a plain 1.0
    seed to the builtins' dual adjoints: a C++ compile error)."""
    x0 = np.array([0.3, -0.7, 1.4])
    x = tg.array(x0, dtype=tg.float64, device=device)
    out = tg.zeros(3, dtype=tg.float64, device=device)
    tan = tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(grad_values_kernel, dim=3, inputs=[x, out], device=device, tangent=True,
              tan_inputs=[tg.ones(3, dtype=tg.float64, device=device), tan])
    np.testing.assert_allclose(out.numpy(), _grad_values_np(x0), rtol=1e-12)
    h = 1e-6
    np.testing.assert_allclose(tan.numpy(), (_grad_values_np(x0 + h) - _grad_values_np(x0 - h)) / (2 * h), rtol=1e-6)


def test_second_order_through_grad_inside_a_custom_adjoint(device):
    """Tape.hvp of a kernel whose custom adjoint calls tg.grad: d2/dx2 sqrt(x) = -x^-1.5 / 4."""
    xs = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    x = tg.array(xs, dtype=float, device=device, requires_grad=True)
    y = tg.zeros_like(x, requires_grad=True)
    loss = tg.zeros(1, dtype=float, device=device, requires_grad=True)
    with tg.Tape() as tape:
        tg.launch(safe_sqrt_kernel, dim=4, inputs=[x, y], device=device)
        tg.launch(_sum_kernel, dim=4, inputs=[y, loss], device=device)
    hv = tape.hvp(loss, {x: np.ones(4, dtype=np.float32)})[x].numpy()
    np.testing.assert_allclose(hv, -0.25 * xs.astype(np.float64) ** -1.5, rtol=1e-5)


@tg.kernel
def _sum_kernel(y: tg.array(dtype=float), loss: tg.array(dtype=float)):
    tg.atomic_add(loss, 0, y[tg.tid()])


def test_grad_rejects_what_is_not_a_function():
    with pytest.raises(TypeError, match="grad\\(\\) expects a Warp function"):
        tg.grad(3.0)
    with pytest.raises(RuntimeError, match="only be called inside a kernel"):
        tg.grad(square)(1.0)


# ------------------------------------------------------------------ Python scope, messages


def test_expect_eq_in_python_scope(capsys):
    tg.expect_eq(tg.vec3(1.0, 2.0, 3.0), tg.vec3(1.0, 2.0, 3.0))
    assert capsys.readouterr().out == ""
    tg.expect_eq(1.0, 2.0)
    assert "expect_eq() failed" in capsys.readouterr().out
    tg.expect_neq(tg.vec3(0.0), tg.vec2(0.0))
    assert capsys.readouterr().out == ""
    tg.expect_near(1.0, 1.0 + 1e-7)
    assert capsys.readouterr().out == ""


def test_expect_neq_of_different_types_is_warps_error():
    @tg.kernel(module="unique")
    def mismatch():
        tg.expect_neq(tg.vec3f(0.0, 0.0, 0.0), tg.vec2f(0.0, 0.0))

    with pytest.raises(RuntimeError, match=r"Can't test equality for objects with different types$"):
        tg.launch(mismatch, dim=1, inputs=[])


def test_attribute_errors_use_warps_words():
    @tg.kernel(module="unique")
    def missing_function():
        tg.missing_func(42)

    with pytest.raises(AttributeError, match="Could not find function tg.missing_func"):
        tg.launch(missing_function, dim=1, inputs=[])

    @tg.kernel(module="unique")
    def bad_intermediate():
        tg.foo.bar.tid()

    with pytest.raises(AttributeError, match="`foo` is not an attribute of"):
        tg.launch(bad_intermediate, dim=1, inputs=[])

    @tg.kernel(module="unique")
    def bad_field(s: Triple):
        s.nonexisting = 1.0 if s.x > 0.0 else s.nonexisting

    with pytest.raises(AttributeError, match=r"`nonexisting` is not an attribute of 's' \([\w.]+\.Triple\)$"):
        tg.launch(bad_field, dim=1, inputs=[Triple()])

    @tg.kernel(module="unique")
    def type_attribute():
        a = tg.vec3(0.0)
        _ = a.dtype.shape

    with pytest.raises(AttributeError, match="`shape` is not an attribute of"):
        tg.launch(type_attribute, dim=1, inputs=[])


# ------------------------------------------------------------------ codegen details


@tg.func
def ret_mismatch(x: tg.int32) -> tg.int16:
    return tg.int8(x)


@tg.func
def ret_tuple_for_scalar(x: int) -> int:
    return (x + x, x * x)


@tg.func
def ret_tuple_types(x: int) -> tuple[int, int]:
    return (x, 1.23)


@tg.func
def ret_tuple_count(x: int) -> tuple[int, int, int]:
    return (x + x, x * x)


def test_return_annotation_mismatch_texts():
    def k1():
        _ = ret_mismatch(123)

    def k2():
        _ = ret_tuple_for_scalar(123)

    def k3():
        _x, _y = ret_tuple_types(123)

    def k4():
        _x, _y, _z = ret_tuple_count(123)

    cases = [(k1, r"The function `ret_mismatch` has its return type annotated as `int16` but the code returns a "
                  r"value of type `int8`\."),
             (k2, r"annotated as `int` but the code returns 2 values\."),
             (k3, r"annotated as `tuple\[int, int\]` but the code returns a tuple with types `\(int32, float32\)`\."),
             (k4, r"annotated as a tuple of 3 elements but the code returns 2 values\.")]
    for fn, text in cases:
        with pytest.raises(tg.WarpCodegenError, match=text):
            tg.launch(tg.kernel(fn, module="unique"), dim=1, inputs=[])


@tg.func
def doubled(x: float):
    return 2.0 * x


@tg.func
def halved(x: float):
    return 0.5 * x


def test_function_valued_locals_cannot_be_rebound():
    def to_function(out: tg.array(dtype=float)):
        f = doubled
        f = halved
        out[0] = f(3.0)

    def to_value(out: tg.array(dtype=float)):
        f = doubled
        f = 1.0
        out[0] = f

    def grad_to_value(out: tg.array(dtype=float)):
        g = tg.grad(doubled)
        g, x = (1.0, 2.0)  # noqa: F841  (the rebinding is what is tested)
        out[0] = x

    def grad_augassign(out: tg.array(dtype=float)):
        g = tg.grad(doubled)
        g += 1.0

    def bound_then_grad(out: tg.array(dtype=float)):
        f = doubled
        g = tg.grad(f)
        out[0] = g(3.0) + f(1.0)

    for fn, text in ((to_function, "rebinding function-valued local 'f' to another function"),
                     (to_value, "rebinding function-valued local.*non-function"),
                     (grad_to_value, "Cannot reassign local 'g'.*wp.grad"),
                     (grad_augassign, "Cannot reassign local 'g'.*wp.grad")):
        with pytest.raises(tg.WarpCodegenError, match=text):
            tg.launch(tg.kernel(fn, module="unique"), dim=1, inputs=[tg.zeros(1, dtype=float)])
    out = tg.zeros(1, dtype=float)
    tg.launch(tg.kernel(bound_then_grad, module="unique"), dim=1, inputs=[out])
    assert out.numpy()[0] == 4.0


@tg.struct
class Pun:
    f: tg.float16
    i: tg.int16


@tg.kernel
def keywords_and_casts_kernel(out: tg.array(dtype=float), bits: tg.array(dtype=tg.int32)):
    out[0] = tg.cast(tg.int32(0x3FA00000), tg.float32)
    p = Pun()
    p.f = tg.float16(2.0)
    p.i = tg.int16(123)
    bits[0] = tg.cast(p, tg.int32)
    out[1] = tg.pow(y=4.0, x=2.0) + tg.pow(2.0, y=1.0)
    out[2] = tg.float(tg.int(2.7))
    m = tg.transform_compose(rotation=tg.quat(0.0, 0.0, 0.0, 1.0), position=tg.vec3(1.0, 2.0, 3.0),
                             scale=tg.vec3(2.0, 3.0, 4.0))
    out[3] = m[0, 0] + m[1, 3]


def test_builtin_keywords_bit_cast_and_python_casts(device):
    out = tg.zeros(4, dtype=float, device=device)
    bits = tg.zeros(1, dtype=tg.int32, device=device)
    tg.launch(keywords_and_casts_kernel, dim=1, inputs=[out, bits], device=device)
    expected_bits = np.frombuffer(np.array([2.0], np.float16).tobytes() + np.array([123], np.int16).tobytes(),
                                  np.int32)[0]
    np.testing.assert_array_equal(out.numpy(), [1.25, 18.0, 2.0, 4.0])
    assert bits.numpy()[0] == expected_bits


def test_bit_cast_needs_equal_sizes():
    def k():
        _ = tg.cast(tg.int64(1), tg.float32)

    with pytest.raises(tg.KernelError, match="cannot be reinterpreted"):
        tg.launch(tg.kernel(k, module="unique"), dim=1, inputs=[])
    with pytest.raises(RuntimeError, match="only be called inside a kernel"):
        tg.cast(1, tg.float32)


def test_module_load_of_a_generic_kernel_loads_its_overloads():
    @tg.kernel(module="unique")
    def generic_load(x: Any, out: tg.array(dtype=float)):
        out[0] = float(x)

    assert generic_load.module.load("cpu") == {}     # no overload yet: nothing to build
    spec = tg.overload(generic_load, [tg.float64, tg.array(dtype=float)])
    assert generic_load.module.load("cpu") == {spec.key: spec.module_for("cpu")}


# ------------------------------------------------------------------ structs and scalar types


def test_struct_rules_as_warp():
    with pytest.raises(RuntimeError, match=r"Warp structs must be defined as base classes$"):
        @tg.struct
        class Child(Pun):
            y: int

    @tg.struct
    class Fields:
        u8: tg.uint8
        v: tg.vec3
        t: tg.transform

    s = Fields()
    assert isinstance(s.u8, tg.uint8) and not isinstance(s.u8, tg.int32)
    assert isinstance(np.float16(1), tg.float16) and not isinstance(1, tg.int32)
    for value in (123, 1.5, tg.float32(1.5)):
        with pytest.raises(TypeError, match="Struct field 'v' expects vec3f but got a single value"):
            s.v = value
        with pytest.raises(TypeError, match="Struct field 't' expects transformf but got a single value"):
            s.t = value
    s.v = None               # None zero-initializes
    np.testing.assert_array_equal(s.v, [0.0, 0.0, 0.0])
    s.v = [1.0, 2.0, 3.0]    # sequences still convert
    s.u8 = 7
    assert s.u8 == 7


@tg.kernel
def transformation_keywords_kernel(vs: tg.array(dtype=tg.vec3), qs: tg.array(dtype=tg.quat),
                                   out: tg.array(dtype=tg.transform)):
    out[0] = tg.transformation(p=vs[0], q=qs[0])
    out[1] = tg.transformation(q=qs[0], dtype=float)


def test_transformation_keywords_in_kernels(device):
    vs = tg.array([[2.0, 3.0, 4.0]], dtype=tg.vec3, device=device)
    qs = tg.array([[5.0, 6.0, 7.0, 8.0]], dtype=tg.quat, device=device)
    out = tg.zeros(2, dtype=tg.transform, device=device)
    tg.launch(transformation_keywords_kernel, dim=1, inputs=[vs, qs, out], device=device)
    np.testing.assert_array_equal(out.numpy(), [[2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 5, 6, 7, 8]])


# ------------------------------------------------------------------ custom adjoints of tuple returns


@tg.func
def two_outputs(x: float, y: float):
    return x * 3.0 + y / 3.0, y * y


@tg.func_grad(two_outputs)
def two_outputs_grad(x: float, y: float, adj_ret0: float, adj_ret1: float):
    # deliberately not the true derivative: the test sees this body ran
    tg.adjoint[x] += x * adj_ret0 * 42.0 + y * adj_ret1 * 10.0
    tg.adjoint[y] += y * adj_ret1 * 3.0


@tg.kernel
def two_outputs_kernel(xs: tg.array(dtype=float), ys: tg.array(dtype=float), o0: tg.array(dtype=float),
                       o1: tg.array(dtype=float)):
    i = tg.tid()
    a, b = two_outputs(xs[i], ys[i])
    o0[i] = a
    o1[i] = b


def test_custom_adjoint_of_a_tuple_returning_function(device):
    xs_np, ys_np = np.array([1.0, 2.0, 3.0]), np.array([10.0, 11.0, 12.0])
    xs = tg.array(xs_np, dtype=float, requires_grad=True, device=device)
    ys = tg.array(ys_np, dtype=float, requires_grad=True, device=device)
    o0 = tg.zeros(3, dtype=float, requires_grad=True, device=device)
    o1 = tg.zeros(3, dtype=float, requires_grad=True, device=device)
    with tg.Tape() as tape:
        tg.launch(two_outputs_kernel, dim=3, inputs=[xs, ys, o0, o1], device=device)
    tape.backward(grads={o0: tg.ones(3, dtype=float, device=device), o1: tg.full(3, 2.0, dtype=float, device=device)})
    np.testing.assert_allclose(xs.grad.numpy(), xs_np * 42.0 + ys_np * 2.0 * 10.0, rtol=1e-6)
    np.testing.assert_allclose(ys.grad.numpy(), ys_np * 2.0 * 3.0, rtol=1e-6)


@tg.func
def sigmoid(x: float):
    return 1.0 / (1.0 + tg.exp(-x))


@tg.func_grad(sigmoid)
def adj_sigmoid(x: float, adj: float):
    # the adjoint calls the function it differentiates (its forward), as Warp allows
    tg.adjoint[x] += adj * sigmoid(x) * (1.0 - sigmoid(x))


@tg.func
def sigmoid_into(i: int, xs: tg.array(dtype=float), ys: tg.array(dtype=float)):
    ys[i] = sigmoid(xs[i])


@tg.func_grad(sigmoid_into)
def adj_sigmoid_into(i: int, xs: tg.array(dtype=float), ys: tg.array(dtype=float)):
    tg.adjoint[xs][i] += ys[i] * (1.0 - ys[i])   # into the gradient array of xs


@tg.kernel
def sigmoid_value_kernel(xs: tg.array(dtype=float), ys: tg.array(dtype=float)):
    i = tg.tid()
    ys[i] = sigmoid(xs[i])


@tg.kernel
def sigmoid_into_kernel(xs: tg.array(dtype=float), ys: tg.array(dtype=float)):
    i = tg.tid()
    sigmoid_into(i, xs, ys)


def test_custom_adjoints_calling_their_function_and_writing_array_adjoints(device):
    xs_np = np.array([1.0, 2.0, -3.0, 0.5])
    s = 1.0 / (1.0 + np.exp(-xs_np))
    for kernel in (sigmoid_value_kernel, sigmoid_into_kernel):
        xs = tg.array(xs_np, dtype=float, requires_grad=True, device=device)
        ys = tg.zeros(4, dtype=float, requires_grad=True, device=device)
        with tg.Tape() as tape:
            tg.launch(kernel, dim=4, inputs=[xs, ys], device=device)
        tape.backward(grads={ys: tg.ones(4, dtype=float, device=device)})
        np.testing.assert_allclose(xs.grad.numpy(), s * (1.0 - s), rtol=1e-5)


@tg.func
def take_slot(counter: tg.array(dtype=int), value: int, slots: tg.array(dtype=int), tid: int):
    """Hands out slots: an atomic that must not run again in the adjoint's replay."""
    slot = tg.atomic_add(counter, 0, value)
    slots[tid] = slot
    return slot


@tg.func_replay(take_slot)
def take_slot_replay(counter: tg.array(dtype=int), value: int, slots: tg.array(dtype=int), tid: int):
    """The replay reads the slot the forward recorded."""
    return slots[tid]


@tg.kernel
def slots_kernel(x: tg.array(dtype=float), counter: tg.array(dtype=int), slots: tg.array(dtype=int),
                 y: tg.array(dtype=float)):
    tid = tg.tid()
    k = take_slot(counter, 1, slots, tid)
    y[k] = x[k] * x[k]


def test_func_replay_replaces_the_forward_in_the_adjoint(device):
    n = 64
    x_np = np.arange(n, dtype=np.float32)
    x = tg.array(x_np, dtype=float, requires_grad=True, device=device)
    y = tg.zeros(n, dtype=float, requires_grad=True, device=device)
    counter = tg.zeros(1, dtype=tg.int32, device=device)
    slots = tg.zeros(n, dtype=tg.int32, device=device)
    with tg.Tape() as tape:
        tg.launch(slots_kernel, dim=n, inputs=[x, counter, slots, y], device=device)
    tape.backward(grads={y: tg.ones(n, dtype=float, device=device)})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * x_np)
    assert counter.numpy()[0] == n       # the replay did not hand out slots again
    assert "recorded" in take_slot_replay.__doc__


@tg.struct
class Sv:
    scalar: float
    vec: tg.vec3


@tg.func
def struct_outputs(x: Sv):
    return x.vec[0] * x.vec[1] * 4.0, x.scalar * x.scalar


@tg.func_grad(struct_outputs)
def struct_outputs_grad(x: Sv, adj_ret0: float, adj_ret1: float):
    tg.adjoint[x.scalar] += 2.0 * x.scalar * adj_ret1
    tg.adjoint[x.vec][0] += adj_ret0 * x.vec[1] * 4.0
    tg.adjoint[x.vec][1] += adj_ret0 * x.vec[0] * 4.0


@tg.kernel
def struct_outputs_kernel(xs: tg.array(dtype=Sv), out: tg.array(dtype=float)):
    i = tg.tid()
    a, b = struct_outputs(xs[i])
    out[i] = a + 3.0 * b


def test_custom_adjoint_into_struct_fields_and_components(device):
    vals = [(4.0, (1.0, 2.0, 3.0)), (-1.5, (5.0, -6.0, 7.0))]
    items = []
    for sc, v in vals:
        s = Sv()
        s.scalar, s.vec = sc, tg.vec3(*v)
        items.append(s)
    xs = tg.array(items, dtype=Sv, requires_grad=True, device=device)
    out = tg.zeros(2, dtype=float, requires_grad=True, device=device)
    with tg.Tape() as tape:
        tg.launch(struct_outputs_kernel, dim=2, inputs=[xs, out], device=device)
    tape.backward(grads={out: tg.ones(2, dtype=float, device=device)})
    g = xs.grad.numpy()
    for k, (sc, (vx, vy, _)) in enumerate(vals):   # the true derivatives of a + 3 b
        assert g[k][0] == pytest.approx(6.0 * sc)
        np.testing.assert_allclose(g[k][1], [4.0 * vy, 4.0 * vx, 0.0])


def test_dlpack_dtype_mismatch_in_warps_words():
    source = tg.zeros(1, dtype=tg.bool)
    with pytest.raises(RuntimeError, match=r"Incompatible data types: DLPack bool8 and Warp float32"):
        tg.from_dlpack(tg.to_dlpack(source), dtype=tg.float32)


def test_transform_positional_and_keyword_parts_on_the_host():
    expected = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert list(tg.transform((1.0, 2.0, 3.0), q=(4.0, 5.0, 6.0, 7.0))) == expected
    assert list(tg.transform(q=(4.0, 5.0, 6.0, 7.0), p=(1.0, 2.0, 3.0))) == expected
    assert list(tg.transform(q=(4.0, 5.0, 6.0, 7.0))) == [0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 7.0]
    with pytest.raises(TypeError, match=r"^got an unexpected keyword argument 'pos'$"):
        tg.transform(pos=tg.vec3(), rot=tg.quat())
    with pytest.raises(TypeError, match="multiple values for argument 'p'"):
        tg.transform((1.0, 2.0, 3.0), p=(1.0, 2.0, 3.0))


def test_transform_with_a_wrong_number_of_values_in_a_kernel():
    def two():
        tg.transform(1.0, 2.0)

    def three(x: float):
        tg.transform(x, 2.0, 3.0)

    for fn, n, args in ((two, 2, []), (three, 3, [1.0])):
        with pytest.raises(tg.WarpCodegenError, match=rf"incompatible number of values given \({n}\) when "
                                                      rf"constructing a transform; expected 0, 1, or 7$"):
            tg.launch(tg.kernel(fn, module="unique"), dim=1, inputs=args)


@tg.func_native("return a + 2.0f;", adj_snippet="adj_a += adj_ret;")
def add_two_native(a: float) -> float:
    """C++: a + 2."""
    ...


@tg.func_native("return a * 2.0f;", adj_snippet="adj_a += 2.0f * adj_ret;")
def times_two_native(a: float) -> float:
    ...


@tg.func
def plus_one(x: float):
    return x + 1.0


@tg.func_grad(plus_one)
def plus_one_grad(x: float, adj_ret: float):
    tg.adjoint[x] += times_two_native(1.0) * adj_ret   # deliberately 2: a native call in an adjoint


@tg.kernel
def native_kernel(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = add_two_native(x[i]) * 3.0 + plus_one(x[i])


def test_func_native_forward_adjoint_and_from_custom_adjoints(device):
    xs = np.array([1.0, 2.0, -3.0], dtype=np.float32)
    x = tg.array(xs, dtype=float, requires_grad=True, device=device)
    y = tg.zeros(3, dtype=float, requires_grad=True, device=device)
    with tg.Tape() as tape:
        tg.launch(native_kernel, dim=3, inputs=[x, y], device=device)
    tape.backward(grads={y: tg.ones(3, dtype=float, device=device)})
    np.testing.assert_allclose(y.numpy(), (xs + 2.0) * 3.0 + xs + 1.0)
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 3.0 + 2.0))
    with pytest.raises(RuntimeError, match="can only be called inside a kernel"):
        add_two_native(1.0)
    assert add_two_native.__doc__ == "C++: a + 2."


@tg.kernel(enable_backward=False)
def any_size_kernel(v: tg.types.vector(Any, float), m: tg.types.matrix((Any, Any), float),
                    out: tg.array(dtype=int)):
    out[0] = len(v)
    out[1] = len(m)
    out[2] = int(v[0])


def test_vector_and_matrix_of_any_size_annotations():
    out = tg.zeros(3, dtype=int)
    tg.launch(any_size_kernel, dim=1, inputs=[tg.vec4(7.0), tg.mat22(), out])
    np.testing.assert_array_equal(out.numpy(), [4, 2, 7])
    tg.launch(any_size_kernel, dim=1, inputs=[tg.vec2(3.0), tg.types.matrix((3, 5), float)(), out])
    np.testing.assert_array_equal(out.numpy(), [2, 3, 3])
    with pytest.raises(TypeError, match="expected a value fitting"):
        tg.launch(any_size_kernel, dim=1, inputs=[tg.vec2d(1.0), tg.mat22(), out])   # float64: not float
    with pytest.raises(ValueError, match="typing.Any"):
        tg.vector(-2, float)


captured_array = tg.array((1.0, 2.0, 3.0), dtype=float)


def test_a_captured_array_is_refused_not_baked_in():
    def element(out: tg.array(dtype=float)):
        out[0] = captured_array[0]    # would read the array once, when the kernel compiles

    with pytest.raises(TypeError, match=r"Invalid external reference type: <class 'tapegrad\.array\.array'>"):
        tg.launch(tg.kernel(element, module="unique"), dim=1, inputs=[tg.zeros(1, dtype=float)])


def test_transform_constructor_errors_on_the_host():
    comps = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert list(tg.transformd(tg.transformh(*comps))) == comps      # a copy across dtypes
    assert list(tg.transform(np.float64(1.5))) == [1.5] * 7
    with pytest.raises(TypeError, match="expected a scalar value, got object"):
        tg.transform(object())
    with pytest.raises(TypeError, match="Invalid argument 'p' in transformation constructor: expected a sequence"):
        tg.transform(1.5, 2.5)
    with pytest.raises(TypeError, match="Invalid argument 'q' in transformation constructor: expected a sequence"):
        tg.transform((1.0, 2.0, 3.0), 1.0)
    with pytest.raises(TypeError, match="Invalid argument 'q'"):
        tg.transform(q=1.0)
    with pytest.raises(TypeError, match=r"^multiple values for argument 'q'$"):
        tg.transform(*comps, q=(8.0, 9.0, 10.0, 11.0))


@tg.kernel
def _low_bit_times(x: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    b = tg.cast(x[i], tg.int64)                 # the bits of x: no derivative
    out[i] = x[i] * x[i] * tg.float64(b & tg.int64(1)) + tg.cast(b, tg.float64)


def test_forward_mode_through_a_bit_cast(device):
    """tg.cast (a bit reinterpretation) under forward mode: the bits of the value, a float
    result with a zero tangent, as the adjoint (the tangent build cast the dual, twice the
    size: tg.cast's size check failed at compile time)."""
    x0 = np.array([0.3, 0.7, 1.9])
    x = tg.array(x0, dtype=tg.float64, device=device)
    out = tg.zeros(3, dtype=tg.float64, device=device)
    tan = tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(_low_bit_times, dim=3, inputs=[x, out], device=device, tangent=True,
              tan_inputs=[tg.ones(3, dtype=tg.float64, device=device), tan])
    low = x0.view(np.int64) & 1
    np.testing.assert_array_equal(out.numpy(), x0 * x0 * low + x0)
    np.testing.assert_allclose(tan.numpy(), 2 * x0 * low, rtol=1e-12)
