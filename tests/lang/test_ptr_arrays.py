"""Issue 28 (arrays): Warp's arrays built inside a kernel from an address
(``tg.array(ptr=..., shape=..., dtype=...)``) and an array's address in a kernel (``a.ptr``).
Their gradient cannot be tracked, so a kernel building a floating-point one has no adjoint: every
adjoint or tangent launch raises, naming the line (never a gradient that silently misses that
memory); integer ones leave the adjoint exact."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def write_rows(src: tg.array2d(dtype=tg.float32)):
    a = tg.array(ptr=src.ptr, shape=(2, 3), dtype=tg.float32)
    a[0, 0] = 1.0
    a[0, 1] = 2.0
    a[1, 2] = a[0, 0] + a[0, 1]


@tg.struct
class Triple:
    a: tg.float32
    b: tg.float32
    c: tg.float32


@tg.kernel
def write_structs(src: tg.array(dtype=Triple)):
    s = tg.array(ptr=src.ptr, shape=(2,), dtype=Triple)
    s[0].a = 1.0
    s[1].c = 6.0


@tg.kernel
def variable_shape(ptr: tg.uint64, nx: int, ny: int, out: tg.array(dtype=tg.int64)):
    a = tg.array(ptr=ptr, shape=(nx, ny), dtype=tg.float64)
    a[nx - 1, ny - 1] = 7.0
    out[0] = tg.int64(a.shape[0])
    out[1] = tg.int64(a.shape[1])


@tg.kernel
def addresses(a: tg.array(dtype=float), out: tg.array(dtype=tg.uint64)):
    out[0] = a.ptr
    out[1] = a[1:].ptr


def test_arrays_from_addresses_in_kernels(device):
    m = tg.zeros((2, 3), dtype=tg.float32, device=device)
    tg.launch(write_rows, dim=1, inputs=[m], device=device)
    np.testing.assert_array_equal(m.numpy(), [[1, 2, 0], [0, 0, 3]])
    s = tg.zeros(2, dtype=Triple, device=device)
    tg.launch(write_structs, dim=1, inputs=[s], device=device)
    assert [tuple(r) for r in s.numpy().tolist()] == [(1, 0, 0), (0, 0, 6)]
    d = tg.zeros((3, 4), dtype=tg.float64, device=device)
    out = tg.zeros(2, dtype=tg.int64, device=device)
    for nx, ny, where in ((2, 2, 1 * 2 + 1), (3, 4, 11)):   # a contiguous (nx, ny) view of d's memory
        tg.launch(variable_shape, dim=1, inputs=[d.ptr, nx, ny, out], device=device)
        assert d.numpy().reshape(-1)[where] == 7.0 and out.numpy().tolist() == [nx, ny]


def test_array_address_in_kernels(device):
    a = tg.zeros(4, dtype=float, device=device)
    out = tg.zeros(2, dtype=tg.uint64, device=device)
    tg.launch(addresses, dim=1, inputs=[a, out], device=device)
    assert out.numpy().tolist() == [a.ptr, a.ptr + 4]


@tg.kernel
def doubled_through_address(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    view = tg.array(ptr=x.ptr, shape=x.shape[0], dtype=tg.float64)
    y[i] = view[i] * 2.0


@tg.func
def through_address(p: tg.uint64, i: int) -> float:
    return tg.array(ptr=p, shape=(4,), dtype=float)[i]


@tg.kernel
def calls_a_function(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = through_address(x.ptr, i) + x[i]


def test_kernels_with_float_arrays_from_addresses_have_no_adjoint(device):
    x = tg.array([1.0, 2.0, 3.0], dtype=tg.float64, device=device, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, device=device, requires_grad=True)
    tg.launch(doubled_through_address, dim=3, inputs=[x], outputs=[y], device=device)   # forward: fine
    assert y.numpy().tolist() == [2.0, 4.0, 6.0]
    tape = tg.Tape()
    with tape:
        tg.launch(doubled_through_address, dim=3, inputs=[x], outputs=[y], device=device)
    # the gradient would miss x (read by address): the backward refuses, naming the line
    with pytest.raises(RuntimeError, match=r"has no adjoint: it builds a floating-point array from an address "
                                           r"\(tg\.array\(ptr=\.\.\.\) at .*test_ptr_arrays\.py:\d+\)"):
        tape.backward(grads={y: np.ones(3)})
    with pytest.raises(RuntimeError, match="has no adjoint"):
        tg.launch(doubled_through_address, dim=3, inputs=[x], outputs=[y], adjoint=True, device=device)
    with pytest.raises(RuntimeError, match="has no adjoint"):
        tg.Launch(doubled_through_address, device, adjoint=True)
    with pytest.raises(RuntimeError, match="has no adjoint"):
        tg.launch(doubled_through_address, dim=3, inputs=[x], outputs=[y], tangent=True, tan_inputs=[None],
                  tan_outputs=[None], device=device)
    xf = tg.ones(4, dtype=float, device=device, requires_grad=True)
    yf = tg.zeros(4, dtype=float, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="has no adjoint"):     # built inside a called @func
        tg.launch(calls_a_function, dim=4, inputs=[xf], outputs=[yf], adjoint=True, device=device)


@tg.kernel
def scaled_by_counts(counts: tg.array(dtype=tg.int32), x: tg.array(dtype=tg.float64),
                     y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    c = tg.array(ptr=counts.ptr, shape=(counts.shape[0],), dtype=tg.int32)
    y[i] = tg.float64(c[i]) * x[i] * x[i]


def test_integer_arrays_from_addresses_keep_an_exact_adjoint(device):
    counts = tg.array([1, 2, 3], dtype=tg.int32, device=device)
    x = tg.array([0.5, -1.0, 2.0], dtype=tg.float64, device=device, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(scaled_by_counts, dim=3, inputs=[counts, x], outputs=[y], device=device)
    tape.backward(grads={y: np.ones(3)})
    np.testing.assert_array_equal(x.grad.numpy(), 2.0 * np.array([1, 2, 3]) * x.numpy())


@tg.kernel
def reads_past(src: tg.array(dtype=float), out: tg.array(dtype=float)):
    a = tg.array(ptr=src.ptr, shape=(2,), dtype=float)
    out[0] = a[2]


def test_debug_builds_check_the_given_shape():
    old = tg.config.mode
    tg.config.mode = "debug"
    try:
        with pytest.raises(tg.KernelIndexError, match=r"index 2 is out of range for its shape \(2,\)"):
            tg.launch(reads_past, dim=1, inputs=[tg.zeros(4), tg.zeros(1)], device="cpu")
    finally:
        tg.config.mode = old


@tg.kernel
def no_dtype(a: tg.array(dtype=float)):
    b = tg.array(ptr=a.ptr, shape=(2,))  # noqa: F841


@tg.kernel
def positional(a: tg.array(dtype=float)):
    b = tg.array(a.ptr, (2,), float)  # noqa: F841


@tg.kernel
def float_address(a: tg.array(dtype=float)):
    b = tg.array(ptr=a[0], shape=(2,), dtype=float)  # noqa: F841


@tg.kernel
def float_extent(a: tg.array(dtype=float)):
    b = tg.array(ptr=a.ptr, shape=(a[0],), dtype=float)  # noqa: F841


@tg.kernel
def narrow_address(a: tg.array(dtype=float), p: tg.int32):
    b = tg.array(ptr=p, shape=(2,), dtype=float)  # noqa: F841


@pytest.mark.parametrize("kernel, message", [
    (no_dtype, "ptr=, shape= and dtype=.*missing dtype"), (positional, "keywords only"),
    (float_address, r"ptr=\.\.\.\) in a kernel must be an integer address"),
    (narrow_address, r"must be a 64-bit integer address \(a uint64, a\.ptr\), got int32, which cannot hold one"),
    (float_extent, "extents must be integers")])
def test_bad_calls_name_the_problem(kernel, message):
    with pytest.raises(tg.KernelError, match=message):
        kernel.module_for("cpu")


@tg.kernel
def doubled_through_address32(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    view = tg.array(ptr=x.ptr, shape=x.shape[0], dtype=tg.float32)
    y[i] = view[i] * 2.0


@pytest.mark.jax
def test_jax_kernel_derivatives_name_the_address_array():
    """jax.grad / vjp of a jax_kernel whose kernel builds a float array from an address: the
    refusal said "was built with enable_backward=False" (it was not); it names the line now, as
    every other adjoint path does."""
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    jk = tg.jax_kernel(doubled_through_address32, enable_backward=True)
    x = jnp.array([1.0, 2.0, 3.0], dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(jk(x)[0]), [2.0, 4.0, 6.0])
    for derivative in (lambda: jax.grad(lambda v: jk(v)[0].sum())(x),
                       lambda: jax.vjp(lambda v: jk(v)[0], x)[1](jnp.ones(3, dtype=x.dtype)),
                       lambda: jax.jvp(lambda v: jk(v)[0], (x,), (jnp.ones(3, dtype=x.dtype),))):
        with pytest.raises(RuntimeError, match=r"has no adjoint: it builds a floating-point array from an address"):
            derivative()
