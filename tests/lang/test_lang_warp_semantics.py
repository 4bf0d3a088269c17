"""Kernel-language values that used to differ from Python's / Warp's semantics (issue 23 item 7),
each from a case of NVIDIA Warp's own tests (warp/tests/test_codegen.py, test_spatial.py,
test_struct.py, test_func.py): the expected values are Python's and Warp 1.19's."""
import typing

import numpy as np
import pytest

import tapegrad as tg

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]


# ------------------------------------------------------------------ a if c else b: only the taken branch

@tg.func
def bump(c: tg.array(dtype=tg.int32)) -> float:
    tg.atomic_add(c, 0, 1)
    return 1.0


@tg.kernel
def ternary_side_effect(c: tg.array(dtype=tg.int32), out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = bump(c) if i < 0 else 2.0


@tg.kernel
def ternary_guarded_read(a: tg.array(dtype=float), n: int, out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = a[i] if i < n else a[i + 1000]


@tg.kernel
def ternary_grad(a: tg.array(dtype=tg.float64), b: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    out[i] = a[i] * a[i] if i % 2 == 0 else 3.0 * b[i]


@pytest.mark.parametrize("device", DEVICES)
def test_ternary_runs_only_the_taken_branch(device):
    c = tg.zeros(1, dtype=tg.int32, device=device)
    out = tg.zeros(5, dtype=float, device=device)
    tg.launch(ternary_side_effect, dim=5, inputs=[c, out], device=device)
    assert c.numpy()[0] == 0           # was 5: the untaken branch's atomic ran in every thread
    np.testing.assert_array_equal(out.numpy(), 2.0)


@pytest.mark.parametrize("device", DEVICES)
def test_ternary_untaken_branch_does_not_read_out_of_bounds(device):
    prev = tg.config.mode
    tg.config.mode = "debug"           # a debug build raises KernelIndexError on any out-of-range read
    try:
        a = tg.array(np.arange(4.0), dtype=float, device=device)
        out = tg.zeros(4, dtype=float, device=device)
        tg.launch(ternary_guarded_read, dim=4, inputs=[a, 4, out], device=device)
        np.testing.assert_array_equal(out.numpy(), np.arange(4.0))
    finally:
        tg.config.mode = prev


@pytest.mark.parametrize("device", DEVICES)
def test_ternary_gradient(device):
    an = np.linspace(-1.0, 2.0, 6)
    bn = np.linspace(0.5, 1.5, 6)
    a = tg.array(an, dtype=tg.float64, requires_grad=True, device=device)
    b = tg.array(bn, dtype=tg.float64, requires_grad=True, device=device)
    out = tg.zeros(6, dtype=tg.float64, requires_grad=True, device=device)
    tape = tg.Tape()
    with tape:
        tg.launch(ternary_grad, dim=6, inputs=[a, b], outputs=[out], device=device)
    even = np.arange(6) % 2 == 0
    np.testing.assert_allclose(out.numpy(), np.where(even, an * an, 3.0 * bn))
    tape.backward(grads={out: tg.ones(6, dtype=tg.float64, device=device)})
    np.testing.assert_allclose(a.grad.numpy(), np.where(even, 2 * an, 0.0))
    np.testing.assert_allclose(b.grad.numpy(), np.where(even, 0.0, 3.0))


# ------------------------------------------------------------------ a loop index reused after its loop

@tg.kernel
def for_iter_mutated_reuse_self_ref(out: tg.array(dtype=tg.int32)):
    s = int(0)
    for i in range(2):
        s = s + i
    k = int(0)
    while k < 3:
        i = i + 1
        k = k + 1
    out[0] = i


@tg.kernel
def for_iter_mutated_reuse_augassign(out: tg.array(dtype=tg.int32)):
    s = int(0)
    for i in range(2):
        s = s + i
    k = int(0)
    while k < 3:
        i += 1
        k += 1
    out[0] = i


@tg.kernel
def for_iter_mutated_reuse_indirect(out: tg.array(dtype=tg.int32)):
    s = int(0)
    for i in range(2):
        s = s + i
    k = int(0)
    while k < 3:
        tmp = i
        i = tmp + 1
        k = k + 1
    out[0] = i


@tg.kernel
def for_iter_after_break(n: int, out: tg.array(dtype=tg.int32)):
    for i in range(6):
        if i == n:
            break
    out[0] = i


@tg.kernel
def for_iter_rebound_in_body(out: tg.array(dtype=tg.int32)):
    s = int(0)
    for i in range(4):
        s = s + 1
        i = 10
    out[0] = s + i


@pytest.mark.parametrize("device", DEVICES)
def test_loop_index_is_an_ordinary_local_after_its_loop(device):
    for k, args, want in [(for_iter_mutated_reuse_self_ref, [], 4), (for_iter_mutated_reuse_augassign, [], 4),
                          (for_iter_mutated_reuse_indirect, [], 4),   # were 2
                          (for_iter_after_break, [2], 2), (for_iter_after_break, [9], 5),
                          (for_iter_rebound_in_body, [], 14)]:
        out = tg.zeros(1, dtype=tg.int32, device=device)
        tg.launch(k, 1, inputs=args + [out], device=device)
        assert out.numpy()[0] == want, (k.key, args, out.numpy())


# ------------------------------------------------------------------ transform() and += / -=

@tg.kernel
def transform_add_inplace(x: tg.array(dtype=tg.transform), y: tg.array(dtype=tg.transform)):
    i = tg.tid()
    a = tg.transform()
    b = x[i]
    a[0] += 1.0 * b[0]
    a[1] += 2.0 * b[1]
    a[2] += 3.0 * b[2]
    a[3] += 4.0 * b[3]
    a[4] += 5.0 * b[4]
    a[5] += 6.0 * b[5]
    a[6] += 7.0 * b[6]
    y[i] = a


@tg.kernel
def transform_sub_inplace(x: tg.array(dtype=tg.transform), y: tg.array(dtype=tg.transform)):
    i = tg.tid()
    a = tg.transform()
    b = x[i]
    a[0] -= 1.0 * b[0]
    a[1] -= 2.0 * b[1]
    a[2] -= 3.0 * b[2]
    a[3] -= 4.0 * b[3]
    a[4] -= 5.0 * b[4]
    a[5] -= 6.0 * b[5]
    a[6] -= 7.0 * b[6]
    y[i] = a


@pytest.mark.parametrize("device", DEVICES)
def test_transform_add_sub_inplace(device):
    """Warp's test_transform_add_inplace / _sub_inplace: ``tg.transform()`` in a kernel is all
    zeros (the last component was 8 / -6: the identity's w = 1)."""
    w = np.arange(1.0, 8.0)
    for kern, sign in ((transform_add_inplace, 1.0), (transform_sub_inplace, -1.0)):
        x = tg.ones(1, dtype=tg.transform, requires_grad=True, device=device)
        y = tg.zeros(1, dtype=tg.transform, requires_grad=True, device=device)
        tape = tg.Tape()
        with tape:
            tg.launch(kern, 1, inputs=[x], outputs=[y], device=device)
        tape.backward(grads={y: tg.ones(1, dtype=tg.transform, device=device)})
        np.testing.assert_array_equal(y.numpy(), [sign * w])
        np.testing.assert_array_equal(x.grad.numpy(), [sign * w])


# ------------------------------------------------------------------ overloads: the exact one first

@tg.func
def pick(x: typing.Any) -> float:
    return 1.0


@tg.func
def pick(x: float) -> float:   # noqa: F811  an overload
    return 2.0


@tg.func
def pick(x: tg.int32) -> float:   # noqa: F811
    return 3.0


@tg.kernel
def overload_kernel(out: tg.array(dtype=float)):
    out[0] = pick(1.0)
    out[1] = pick(1)
    out[2] = pick(tg.float64(1.0))
    out[3] = pick(tg.vec2(1.0, 2.0))


@pytest.mark.parametrize("device", DEVICES)
def test_exact_overload_wins_over_generic(device):
    out = tg.zeros(4, dtype=float, device=device)
    tg.launch(overload_kernel, 1, inputs=[out], device=device)
    np.testing.assert_array_equal(out.numpy(), [2.0, 3.0, 1.0, 1.0])   # was [1, 1, 1, 1]


# ------------------------------------------------------------------ a struct parameter's array field in a @func

@tg.struct
class Nested:
    f: float


@tg.struct
class WithArray:
    i: int
    v: tg.vec3
    a: tg.array(dtype=tg.int32)
    s: Nested


@tg.func
def field_shape(data: WithArray, out: tg.array(dtype=tg.int32)):
    out[0] = data.a.shape[0]
    out[1] = data.i


@tg.kernel
def field_shape_kernel(data: WithArray, out: tg.array(dtype=tg.int32)):
    field_shape(data, out)


@tg.kernel
def field_shape_default_kernel(out: tg.array(dtype=tg.int32)):
    s = WithArray()
    field_shape(s, out)


@pytest.mark.parametrize("device", DEVICES)
def test_func_reads_struct_array_field_shape(device):
    """Warp's test_struct_default_attributes: the @func's replay function assigned an adjoint
    variable it did not declare (the C++ did not compile)."""
    s = WithArray()
    s.a = tg.zeros(7, dtype=tg.int32, device=device)
    s.i = 3
    out = tg.zeros(2, dtype=tg.int32, device=device)
    tg.launch(field_shape_kernel, 1, inputs=[s, out], device=device)
    np.testing.assert_array_equal(out.numpy(), [7, 3])
    tg.launch(field_shape_default_kernel, 1, inputs=[out], device=device)
    np.testing.assert_array_equal(out.numpy(), [0, 0])


@tg.kernel
def _int_vector_products(out: tg.array(dtype=int), out64: tg.array(dtype=tg.int64)):
    v = tg.vec3i(1, 2, 3)
    w = tg.vec3i(-2, 5, 1)
    out[0] = tg.dot(v, w)
    c = tg.cross(v, w)
    out[1] = c[0]
    out[2] = c[1]
    out[3] = c[2]
    out[4] = tg.length_sq(w)
    u = tg.vector(tg.int64(3), tg.int64(4))
    out64[0] = tg.dot(u, u)


def test_dot_cross_and_length_sq_of_integer_vectors(device):
    """As Warp's: dot, cross and length_sq take integer vectors (a KernelError before)."""
    out = tg.zeros(5, dtype=int, device=device)
    out64 = tg.zeros(1, dtype=tg.int64, device=device)
    tg.launch(_int_vector_products, dim=1, inputs=[out, out64], device=device)
    v, w = np.array([1, 2, 3]), np.array([-2, 5, 1])
    assert out.numpy().tolist() == [int(v @ w), *np.cross(v, w).tolist(), int(w @ w)]
    assert out64.numpy().tolist() == [25]
