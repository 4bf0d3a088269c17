"""Adjoint launches on the native path (tapegrad.launch.fastlaunch): ``launch(..., adjoint=True)`` and
``Tape.backward``'s replays give bit-identical gradients to the Python path for every argument
kind, the cases the helper leaves to the Python path fall back (and raise its errors), and a
float64 tape backward through the native path matches finite differences.

Which path ran is read from the helper's adjoint counters (``fastlaunch.stats(adjoint=True)``);
the Python path is forced by ``tapegrad.launch.core.native_launches(False)`` (``python_path``).
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.launch import fastlaunch
from tests.core.test_fast_launch import Params, counted, native_helper, python_path  # noqa: F401

N = 16


@tg.kernel
def k_sin(x: tg.array(dtype=float), y: tg.array(dtype=float), s: float):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * s + x[i] * x[i]


@tg.kernel
def k_kinds(x: tg.array(dtype=float), y: tg.array(dtype=float), s: float, n: int, v: tg.vec3, m: tg.mat22,
            h: tg.float16, d: tg.float64):
    i = tg.tid()
    y[i] = x[i] * s * v[1] + m[0, 1] * x[i] * x[i] + float(n) + float(h) * x[i] + float(d)


@tg.kernel
def k_2d(x: tg.array(dtype=float, ndim=2), y: tg.array(dtype=float, ndim=2)):
    i, j = tg.tid()
    y[i, j] = x[i, j] * x[i, j] * float(i + 2 * j + 1)


@tg.kernel
def k_vec(x: tg.array(dtype=tg.vec3), y: tg.array(dtype=tg.vec3), m: tg.mat33):
    i = tg.tid()
    y[i] = m * x[i] + x[i] * tg.dot(x[i], x[i])


@tg.kernel
def k_struct(x: tg.array(dtype=float), y: tg.array(dtype=float), p: Params):
    i = tg.tid()
    y[i] = x[i] * p.scale + p.offset[0] * x[i] * x[i]


@tg.struct
class Body:
    pos: tg.array(dtype=float)
    mass: float


@tg.kernel
def k_body(b: Body, y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = b.pos[i] * b.pos[i] * b.mass


@tg.kernel(enable_backward=False)
def k_forward_only(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = x[i] * 3.0


@tg.kernel
def k_adjoint_only(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = tg.exp(x[i])


@tg.kernel
def k_square64(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64), s: tg.float64):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * s + x[i] * x[i]


@tg.kernel
def k_mix64(y: tg.array(dtype=tg.float64), z: tg.array(dtype=tg.float64), w: tg.vec3d):
    i = tg.tid()
    z[i] = y[i] * y[i] * w[0] + tg.cos(y[i]) * w[2]


@tg.kernel
def k_sum64(z: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(loss, 0, z[i] * z[i])


def _values(n=N, dtype=np.float32):
    return np.linspace(-1.0, 1.5, n).astype(dtype)


def grads_of(arrays):
    """The values and gradients (None where there is none) of the arrays among ``arrays``, as bytes."""
    out = []
    for a in arrays:
        if not isinstance(a, (tg.array, np.ndarray)):
            continue
        out.append(a.numpy().tobytes() if isinstance(a, tg.array) else np.asarray(a).tobytes())
        g = a.grad if isinstance(a, tg.array) else None
        out.append(None if g is None else g.numpy().tobytes())
    return out


def adjoint_both(kernel, dim, make, n_in, native=1, fallback=0, **kw):
    """One forward launch (registers the module), then the adjoint launched natively and through
    the Python path, each on fresh arguments from ``make()``; returns both arguments' gradients.
    ``native``/``fallback``: the adjoint launches the helper must make / pass on (1/0 or 0/1)."""
    warm = make()
    tg.synchronize()
    tg.launch(kernel, dim, inputs=warm[:n_in], outputs=warm[n_in:], **{k: v for k, v in kw.items()
                                                                         if not k.startswith("adj_")})
    fast_args = make()
    tg.synchronize()    # arguments made on the current stream, launched on stream= (CUDA), and back
    with counted(fast=native, fallback=fallback, adjoint=True):
        tg.launch(kernel, dim, inputs=fast_args[:n_in], outputs=fast_args[n_in:], adjoint=True, **kw)
    slow_args = make()
    tg.synchronize()
    with python_path():
        tg.launch(kernel, dim, inputs=slow_args[:n_in], outputs=slow_args[n_in:], adjoint=True, **kw)
    tg.synchronize()
    return grads_of(fast_args), grads_of(slow_args)


def seeded(shape, device, dtype=float, fill=None):
    """An array with a gradient holding deterministic nonzero values."""
    a = tg.zeros(shape, dtype=dtype, device=device, requires_grad=True)
    g = np.cos(np.arange(int(np.prod(shape)), dtype=np.float64)).reshape(shape) + 2.0 if fill is None else fill
    a.grad.assign(tg.array(np.asarray(g, dtype=a.grad.numpy().dtype), dtype=dtype, device=device))
    return a


# ------------------------------------------------------------------------------ same results

def test_arrays_and_a_scalar(device):
    def make():
        return [tg.array(_values(), device=device, requires_grad=True), seeded(N, device), 0.75]
    f, s = adjoint_both(k_sin, N, make, 1)
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


def test_scalar_vector_matrix_and_half_arguments(device):
    def make():
        return [tg.array(_values(), device=device, requires_grad=True), seeded(N, device), 1.5, 3,
                (0.5, 2.0, -1.0), ((1.0, 0.25), (2.0, 3.0)), 0.5, -2.0]
    f, s = adjoint_both(k_kinds, N, make, 1)
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


def test_strided_views(device):
    def make():
        base = tg.array(np.arange(48, dtype=np.float32).reshape(6, 8) / 10, device=device, requires_grad=True)
        out = seeded((6, 8), device)
        return [base[::2, 1::3], out[1::2, ::3]]
    f, s = adjoint_both(k_2d, (3, 3), make, 1)
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


def test_vector_arrays_and_a_matrix(device):
    def make():
        x = tg.array(_values(3 * N).reshape(N, 3), dtype=tg.vec3, device=device, requires_grad=True)
        y = seeded(N, device, dtype=tg.vec3, fill=np.linspace(1, 2, 3 * N).reshape(N, 3))
        return [x, y, np.arange(9, dtype=np.float32).reshape(3, 3) / 4]
    f, s = adjoint_both(k_vec, N, make, 1)
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


def test_explicit_adjoint_buffers(device):
    gx = {}

    def make():
        x = tg.array(_values(), device=device, requires_grad=True)
        y = tg.zeros(N, device=device, requires_grad=True)
        gx["x"], gx["y"] = tg.zeros(N, device=device), tg.full(N, 2.0, device=device)
        return [x, y, 0.5]

    grads = []
    tg.launch(k_sin, N, inputs=make()[:1], outputs=make()[1:])   # registers the module
    for path in ("native", "python"):   # the buffers are made with the arguments: launched here
        args = make()
        # an explicit buffer of a written array (y) is copied by the Python path (the store
        # consumes the copy: tests/core/test_explicit_adjoint_exact.py)
        ctx = counted(fast=0, adjoint=True) if path == "native" else python_path()
        with ctx:
            tg.launch(k_sin, N, inputs=args[:1], outputs=args[1:], adjoint=True, adj_inputs=[gx["x"]],
                      adj_outputs=[gx["y"], None])
        grads.append((gx["x"].numpy().tobytes(), gx["y"].numpy().tobytes(), args[0].grad.numpy().tobytes(),
                      args[1].grad.numpy().tobytes()))
    assert grads[0] == grads[1]
    assert np.abs(np.frombuffer(grads[0][0], np.float32)).sum() > 0
    np.testing.assert_array_equal(np.frombuffer(grads[0][2], np.float32), 0)   # .grad untouched


def test_explicit_adjoints_none_entries_use_the_grads(device):
    def make():
        return [tg.array(_values(), device=device, requires_grad=True), seeded(N, device), 1.25]
    f, s = adjoint_both(k_sin, N, make, 1, adj_inputs=[None], adj_outputs=[None, None])
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


def test_explicit_adjoints_given_as_numpy_on_the_cpu():
    bufs = []
    for path in ("native", "python"):
        x = tg.array(_values(), requires_grad=True)
        y = tg.zeros(N, requires_grad=True)
        tg.launch(k_sin, N, inputs=[x, y, 0.5])
        gx, gy = np.zeros(N, np.float32), np.full(N, 3.0, np.float32)
        # an explicit buffer of a written array (y) is copied by the Python path (the store
        # consumes the copy: tests/core/test_explicit_adjoint_exact.py)
        ctx = counted(fast=0, adjoint=True) if path == "native" else python_path()
        with ctx:
            tg.launch(k_sin, N, inputs=[x, y, 0.5], adjoint=True, adj_inputs=[gx, gy, 0.0])
        bufs.append((gx.tobytes(), gy.tobytes()))
    assert bufs[0] == bufs[1]
    assert np.abs(np.frombuffer(bufs[0][0], np.float32)).sum() > 0


def test_arrays_whose_grad_is_none(device):
    def make():
        return [tg.array(_values(), device=device), seeded(N, device), 0.75]   # x has no gradient
    f, s = adjoint_both(k_sin, N, make, 1)
    assert f == s
    assert f[1] is None


def test_numpy_inputs_have_no_gradient_on_the_cpu():
    def make():
        return [_values(), seeded(N, "cpu"), 0.75]
    f, s = adjoint_both(k_sin, N, make, 1)
    assert f == s


def test_tape_backward_takes_the_native_path(device):
    def run():
        x = tg.array(_values(), device=device, requires_grad=True)
        y = tg.zeros(N, device=device, requires_grad=True)
        z = tg.zeros(N, device=device, requires_grad=True)
        tape = tg.Tape()
        with tape:
            tg.launch(k_sin, N, inputs=[x, y, 0.5])
            tg.launch(k_sin, N, inputs=[y, z, -1.5])
        tape.backward(grads={z: tg.full(N, 1.0, device=device)})
        return grads_of([x, y, z])
    run()   # compiles and registers the module
    with counted(fast=2, adjoint=True):
        fast = run()
    with python_path():
        slow = run()
    assert fast == slow


# ------------------------------------------------------------------------ the Python path's

def test_struct_arguments(device):
    # the struct's adjoint slot is zero bytes natively, its default instance in Python: the
    # backward entries never read it, so both give the same gradients
    def make():
        p = Params()
        p.scale, p.offset, p.n = 2.0, (0.5, 0.0, 0.0), 1
        return [tg.array(_values(), device=device, requires_grad=True), seeded(N, device), p]
    f, s = adjoint_both(k_struct, N, make, 1)
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


def test_struct_arguments_holding_arrays_with_grads(device):
    # an array field's gradient comes through the forward struct's descriptor (its grad pointer)
    tape_grads = []
    for path in ("warm", "native", "python"):
        b = Body()
        b.pos, b.mass = tg.array(_values(), device=device, requires_grad=True), 1.5
        y = tg.zeros(N, device=device, requires_grad=True)
        tape = tg.Tape()
        with tape:
            tg.launch(k_body, N, inputs=[b], outputs=[y])
        ctx = {"warm": contextlib.nullcontext(), "native": counted(fast=1, adjoint=True),
               "python": python_path()}[path]
        with ctx:
            tape.backward(grads={y: tg.full(N, 1.0, device=device)})
        tape_grads.append(b.pos.grad.numpy().tobytes())
    assert tape_grads[1] == tape_grads[2]
    np.testing.assert_allclose(np.frombuffer(tape_grads[1], np.float32), 2 * _values() * 1.5, rtol=1e-6)


def test_kernel_without_backward_raises_naming_it(device):
    x, y = tg.array(_values(), device=device, requires_grad=True), seeded(N, device)
    tg.launch(k_forward_only, N, inputs=[x], outputs=[y])
    with counted(fallback=1, adjoint=True), pytest.raises(RuntimeError, match=r"k_forward_only.*enable_backward=False"):
        tg.launch(k_forward_only, N, inputs=[x], outputs=[y], adjoint=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_forward_only, N, inputs=[x], outputs=[y])
    with pytest.raises(RuntimeError, match=r"k_forward_only.*enable_backward=False"):
        tape.backward(grads={y: tg.full(N, 1.0, device=device)})


def test_wrong_adjoint_counts_raise_from_the_python_path(device):
    x, y = tg.array(_values(), device=device, requires_grad=True), seeded(N, device)
    tg.launch(k_sin, N, inputs=[x, y, 1.0])
    with counted(fallback=1, adjoint=True), pytest.raises(TypeError, match=r"adj_inputs/adj_outputs must have 3/0"):
        tg.launch(k_sin, N, inputs=[x, y, 1.0], adjoint=True, adj_inputs=[None])


def test_a_kernel_launched_only_as_an_adjoint_goes_native_from_its_second_launch(device):
    x, y = tg.array(_values(), device=device, requires_grad=True), seeded(N, device)
    with counted(fallback=1, adjoint=True):   # no forward launch registered its module yet
        tg.launch(k_adjoint_only, N, inputs=[x], outputs=[y], adjoint=True)
    first = x.grad.numpy().copy()
    y.grad.assign(tg.array(np.cos(np.arange(N)) + 2.0, dtype=float, device=device))
    with counted(fast=1, adjoint=True):
        tg.launch(k_adjoint_only, N, inputs=[x], outputs=[y], adjoint=True)
    np.testing.assert_array_equal(x.grad.numpy(), 2 * first)


def test_the_helper_switched_off_runs_adjoints_in_python(device):
    x, y = tg.array(_values(), device=device, requires_grad=True), seeded(N, device)
    tg.launch(k_sin, N, inputs=[x, y, 1.0])
    with python_path(), counted(adjoint=True):
        tg.launch(k_sin, N, inputs=[x, y, 1.0], adjoint=True)
    assert fastlaunch.error() is None


# ------------------------------------------------------------------------------- gradients

def test_float64_tape_backward_through_the_native_path_matches_finite_differences(device):
    n = 12
    x0 = np.linspace(-0.8, 1.1, n)
    w = (0.7, 0.0, -1.3)

    def forward(xv, tape=None):
        x = tg.array(xv, dtype=tg.float64, device=device, requires_grad=tape is not None)
        y = tg.zeros(n, dtype=tg.float64, device=device, requires_grad=tape is not None)
        z = tg.zeros(n, dtype=tg.float64, device=device, requires_grad=tape is not None)
        loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=tape is not None)
        if tape is None:
            tg.launch(k_square64, n, inputs=[x, y, 1.7])
            tg.launch(k_mix64, n, inputs=[y, z, w])
            tg.launch(k_sum64, n, inputs=[z, loss])
        else:
            with tape:
                tg.launch(k_square64, n, inputs=[x, y, 1.7])
                tg.launch(k_mix64, n, inputs=[y, z, w])
                tg.launch(k_sum64, n, inputs=[z, loss])
        return x, loss

    forward(x0, tg.Tape())   # compiles; the recorded launches register the modules
    tape = tg.Tape()
    x, loss = forward(x0, tape)
    with counted(fast=3, adjoint=True):
        tape.backward(loss=loss)
    grad = x.grad.numpy()
    eps = 1e-6
    fd = np.empty(n)
    for k in range(n):
        e = np.zeros(n)
        e[k] = eps
        fd[k] = (forward(x0 + e)[1].numpy()[0] - forward(x0 - e)[1].numpy()[0]) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------------ CUDA

@pytest.mark.cuda
@pytest.mark.parametrize("block_dim,max_blocks", [(32, 0), (64, 1), (0, 2)])
def test_cuda_adjoint_block_dims_max_blocks_and_streams(block_dim, max_blocks):
    dev = tg.get_device("cuda:0")
    stream = tg.Stream(dev)

    def make():
        return [tg.array(_values(1000), device=dev, requires_grad=True), seeded(1000, dev), 0.75]
    f, s = adjoint_both(k_sin, 1000, make, 1, block_dim=block_dim, max_blocks=max_blocks, stream=stream)
    assert f == s
    assert np.abs(np.frombuffer(f[1], np.float32)).sum() > 0


@tg.kernel
def _square_scaled(x: tg.array(dtype=tg.float64), s: tg.float64, y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i] * s


@pytest.mark.parametrize("bad", [tg.float32, tg.vec2d, tg.int64])
def test_an_adjoint_buffer_of_another_element_type_is_refused(bad):
    """A tapegrad array given as an adjoint buffer must have its parameter's element type: a
    float32 buffer for a float64 array was accepted (native and Python paths) and written as
    float64, past its end ([0, 0, 0, 2.625, ...] in the memory after it)."""
    x = tg.array(np.array([1.0, 2.0, 3.0]), dtype=tg.float64, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, requires_grad=True)
    y.grad.fill_(1.0)      # the output's own gradient: a launch the native helper takes
    good = tg.zeros(3, dtype=tg.float64)
    tg.launch(_square_scaled, dim=3, inputs=[x, 2.0], outputs=[y], adjoint=True, adj_inputs=[good, None])
    y.grad.fill_(1.0)      # the store's adjoint consumed it
    with counted(fast=1, fallback=0, adjoint=True):
        tg.launch(_square_scaled, dim=3, inputs=[x, 2.0], outputs=[y], adjoint=True, adj_inputs=[good, None])
    np.testing.assert_array_equal(good.numpy(), [8.0, 16.0, 24.0])
    y.grad.fill_(1.0)
    room = tg.zeros(8, dtype=bad)
    buf = room[0:3]
    # the native helper passes it to the Python path, which raises
    with counted(fast=0, fallback=1, adjoint=True), \
            pytest.raises(TypeError, match=r"adjoint buffer of kernel .*argument 0 \('x'\).*float64"):
        tg.launch(_square_scaled, dim=3, inputs=[x, 2.0], outputs=[y], adjoint=True, adj_inputs=[buf, None])
    assert not room.numpy().any()
    cmd = tg.launch(_square_scaled, dim=3, inputs=[x, 2.0], outputs=[y], adjoint=True, record_cmd=True)
    with pytest.raises(TypeError, match="adjoint buffer"):
        cmd.set_param_at_index(0, buf, adjoint=True)


@pytest.mark.cuda
def test_an_adjoint_buffer_on_another_device_is_refused():
    """A host buffer for a CUDA array's adjoint (the kernel would write host memory through a
    device pointer) is refused, naming the argument and both devices."""
    x = tg.array(np.array([1.0, 2.0, 3.0]), dtype=tg.float64, requires_grad=True, device="cuda:0")
    y = tg.zeros(3, dtype=tg.float64, requires_grad=True, device="cuda:0")
    y.grad.fill_(1.0)
    host = tg.zeros(3, dtype=tg.float64, device="cpu")
    with pytest.raises(RuntimeError, match=r"adjoint buffer of kernel .*argument 0 \('x'\).*device cpu"):
        tg.launch(_square_scaled, dim=3, inputs=[x, 2.0], outputs=[y], adjoint=True, adj_inputs=[host, None],
                  device="cuda:0")
    assert not host.numpy().any()
