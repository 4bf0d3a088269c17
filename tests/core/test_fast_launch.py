"""The native launch path (tapegrad.launch.fastlaunch): same results as the Python path for every
argument kind, every fallback condition taken, and no stale foreign layouts.

Each comparison runs a launch through the native helper and the same launch through the
Python path (``tapegrad.launch.core.native_launches(False)``), on fresh outputs, and checks that
the native path was actually taken with the helper's counters (``fastlaunch.stats()``), not with timings.
"""
from __future__ import annotations

import contextlib
import sys
import typing

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.launch import ArrayCtype, fastlaunch

L = sys.modules["tapegrad.launch.core"]   # launch() and its native switch (native_launches)


@pytest.fixture(autouse=True)
def native_helper():
    """Loads the native helper (tests/core/test_fast_adjoint.py uses it too)."""
    for _ in range(2):   # the kernel's first launch (the Python path) registers its module
        tg.launch(k_copy1, 1, inputs=[tg.zeros(1), tg.zeros(1)])
    if L._fast is None:
        if "TAPEGRAD_FAST_LAUNCH" in (fastlaunch.error() or ""):
            pytest.skip("the native launch helper is switched off (TAPEGRAD_FAST_LAUNCH=0)")
        pytest.fail(f"the native launch helper did not load: {fastlaunch.error()}")


@contextlib.contextmanager
def counted(fast=0, fallback=0, adjoint=False):
    """Asserts how many launches in the block the helper made and passed to the Python path
    (``adjoint``: how many adjoint launches)."""
    f0, b0 = fastlaunch.stats(adjoint)
    yield
    f1, b1 = fastlaunch.stats(adjoint)
    assert (f1 - f0, b1 - b0) == (fast, fallback)


@contextlib.contextmanager
def python_path():
    was = L.native_launches(False)
    try:
        yield
    finally:
        L.native_launches(was)


def both(kernel, dim, make_args, n_in, **kw):
    """Launch natively (after one warm-up launch that registers the module), then through the
    Python path, each on fresh arguments from ``make_args()``; returns both argument lists."""
    warm = make_args()
    tg.launch(kernel, dim, inputs=warm[:n_in], outputs=warm[n_in:], **kw)
    fast_args = make_args()
    with counted(fast=1):
        tg.launch(kernel, dim, inputs=fast_args[:n_in], outputs=fast_args[n_in:], **kw)
    slow_args = make_args()
    with python_path():
        tg.launch(kernel, dim, inputs=slow_args[:n_in], outputs=slow_args[n_in:], **kw)
    return fast_args, slow_args


def _framework(a):
    return type(a).__module__.split(".")[0]


def host(a):
    if isinstance(a, tg.array):
        return a.numpy()
    if _framework(a) == "torch":
        return a.detach().cpu().numpy()
    if _framework(a) == "cupy":
        return a.get()
    return np.asarray(a)


def same(fast_args, slow_args):
    for f, s in zip(fast_args, slow_args):
        if isinstance(f, (tg.array, np.ndarray)) or _framework(f) in ("torch", "cupy"):
            np.testing.assert_array_equal(host(f), host(s))


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001  the message is what is compared
        return type(e), str(e)
    return None


# ---------------------------------------------------------------------------------- kernels

@tg.kernel
def k_copy1(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = x[i] * 2.0 + 1.0


@tg.kernel
def k_copy2(x: tg.array(dtype=float, ndim=2), y: tg.array(dtype=float, ndim=2)):
    i, j = tg.tid()
    y[i, j] = x[i, j] + float(i * 10 + j)


@tg.kernel
def k_copy3(x: tg.array(dtype=float, ndim=3), y: tg.array(dtype=float, ndim=3)):
    i, j, k = tg.tid()
    y[i, j, k] = x[i, j, k] + float(i * 100 + j * 10 + k)


@tg.kernel
def k_copy4(x: tg.array(dtype=float, ndim=4), y: tg.array(dtype=float, ndim=4)):
    i, j, k, m = tg.tid()
    y[i, j, k, m] = x[i, j, k, m] + float(i * 1000 + j * 100 + k * 10 + m)


@tg.kernel
def k_add3(a: tg.array(dtype=float), b: tg.array(dtype=float), c: tg.array(dtype=float)):
    i = tg.tid()
    c[i] = a[i] + b[i]


@tg.kernel
def k_scalars(out: tg.array(dtype=tg.float64), f32: tg.float32, f64: tg.float64, i8: tg.int8, i16: tg.int16,
              i32: tg.int32, i64: tg.int64, u8: tg.uint8, u16: tg.uint16, u32: tg.uint32, u64: tg.uint64,
              b: bool):
    out[0] = tg.float64(f32)
    out[1] = f64
    out[2] = tg.float64(i8)
    out[3] = tg.float64(i16)
    out[4] = tg.float64(i32)
    out[5] = tg.float64(i64)
    out[6] = tg.float64(u8)
    out[7] = tg.float64(u16)
    out[8] = tg.float64(u32)
    out[9] = tg.float64(u64)
    if b:
        out[10] = 1.0
    else:
        out[10] = -1.0


@tg.kernel
def k_u64(out: tg.array(dtype=tg.uint64), v: tg.uint64, w: tg.int64):
    out[0] = v
    out[1] = tg.uint64(w)


@tg.kernel
def k_half(out: tg.array(dtype=tg.float32), h: tg.float16, b: tg.bfloat16):
    out[0] = tg.float32(h)
    out[1] = tg.float32(b)


@tg.struct
class Params:
    scale: float
    offset: tg.vec3
    n: int


@tg.kernel
def k_composite(out: tg.array(dtype=tg.vec3), v: tg.vec3, m: tg.mat22, p: Params):
    i = tg.tid()
    w = m * tg.vec2(1.0, 2.0)
    out[i] = v * p.scale + p.offset + tg.vec3(w[0], w[1], float(p.n + i))


@tg.kernel
def k_vec_arrays(x: tg.array(dtype=tg.vec3), y: tg.array(dtype=tg.vec3)):
    i = tg.tid()
    y[i] = x[i] * 2.0


@tg.kernel
def k_shape(x: tg.array(dtype=float), out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = x[i] + float(x.shape[0]) * 1000.0


@tg.kernel
def k_square(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def k_generic(x: tg.array(dtype=float), y: tg.array(dtype=float), s: typing.Any):
    i = tg.tid()
    y[i] = x[i] * float(s)


# ------------------------------------------------------------------------- argument kinds

@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
def test_arrays_1_to_4_d(device, ndim):
    kernel = {1: k_copy1, 2: k_copy2, 3: k_copy3, 4: k_copy4}[ndim]
    shape = (5, 4, 3, 2)[:ndim]
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    f, s = both(kernel, shape, lambda: [tg.array(x, device=device), tg.zeros(shape, device=device)], 1)
    same(f, s)
    assert f[1].numpy().sum() != 0


def test_strided_views(device):
    base = np.arange(40, dtype=np.float32).reshape(5, 8)

    def args():
        a = tg.array(base, device=device)
        return [a[:, 1::3], tg.zeros((5, 3), device=device)]   # non-contiguous: strides (32, 12)
    f, s = both(k_copy2, (5, 3), args, 1)
    assert not f[0].is_contiguous
    same(f, s)
    np.testing.assert_array_equal(f[1].numpy(), base[:, 1::3] + np.add.outer(np.arange(5) * 10, np.arange(3)))

    def transposed():
        return [tg.array(base, device=device).transpose(), tg.zeros((8, 5), device=device)]
    f, s = both(k_copy2, (8, 5), transposed, 1)
    same(f, s)


def test_output_sliced_view_writes_through(device):
    def args():
        out = tg.zeros(12, device=device)
        return [tg.full(4, 3.0, device=device), out[1::3], out]
    warm = args()
    tg.launch(k_copy1, 4, inputs=warm[:1], outputs=warm[1:2])
    a = args()
    with counted(fast=1):
        tg.launch(k_copy1, 4, inputs=a[:1], outputs=a[1:2])
    expect = np.zeros(12, np.float32)
    expect[1::3] = 7.0
    np.testing.assert_array_equal(a[2].numpy(), expect)


def test_scalars_of_every_type(device):
    vals = [1.5, -2.25, -128, -32768, -2 ** 31, -2 ** 63, 255, 65535, 2 ** 32 - 1, 2 ** 64 - 1, True]
    f, s = both(k_scalars, 1, lambda: [tg.zeros(11, dtype=tg.float64, device=device)] + vals, 1)
    same(f, s)
    assert f[0].numpy().tolist() == [1.5, -2.25, -128, -32768, -2 ** 31, -2 ** 63, 255, 65535, 2 ** 32 - 1,
                                     float(2 ** 64 - 1), 1.0]


def test_scalar_conversions_match_the_python_packers(device):
    out_f, out_s = (tg.zeros(11, dtype=tg.float64, device=device) for _ in range(2))
    cases = [  # (f32, f64, ..., b): ints for float params, bools for ints, ints for bool
        [3, 7, True, False, 5, 6, 0, 1, 2, 3, 0],
        [1e-40, 1e300, 0, 0, 0, 0, 0, 0, 0, 0, 5],
        [3.4028235e38 * 1.0000001, -0.0, 127, 32767, 2 ** 31 - 1, 2 ** 63 - 1, 0, 0, 0, 0, False],
        [2 ** 70, float("inf"), 0, 0, 0, 0, 0, 0, 0, 0, True],
    ]
    tg.launch(k_scalars, 1, inputs=[out_f] + cases[0])
    for vals in cases:
        with counted(fast=1):
            tg.launch(k_scalars, 1, inputs=[out_f] + vals)
        with python_path():
            tg.launch(k_scalars, 1, inputs=[out_s] + vals)
        np.testing.assert_array_equal(out_f.numpy(), out_s.numpy())


@pytest.mark.parametrize("value,kind", [(128, "int8"), (-129, "int8"), (2 ** 31, "int32"), (-1, "uint32"),
                                        (2 ** 64, "uint64"), (-1, "uint64"), (2 ** 63, "int64"), (3.0, "int32"),
                                        (0.5, "bool"), (np.int32(300), "int8"), (np.float64(2.5), "int32"),
                                        (np.float32(2.0), "int64"), (np.bool_(True), "bool"),
                                        (np.int64(3), "float32"), (np.uint64(2 ** 63), "uint64")])
def test_scalars_out_of_range_or_unusual_take_the_python_path(device, value, kind):
    base = [1.0, 2.0, 1, 2, 3, 4, 5, 6, 7, 8, True]
    index = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "bool"].index(kind)
    vals = list(base)
    vals[index] = value
    out_f, out_s = (tg.zeros(11, dtype=tg.float64, device=device) for _ in range(2))
    tg.launch(k_scalars, 1, inputs=[out_f] + base)
    tg.launch(k_scalars, 1, inputs=[out_s] + base)
    with counted(fallback=1):
        ef = error_of(lambda: tg.launch(k_scalars, 1, inputs=[out_f] + vals))
    with python_path():
        es = error_of(lambda: tg.launch(k_scalars, 1, inputs=[out_s] + vals))
    assert ef == es
    np.testing.assert_array_equal(out_f.numpy(), out_s.numpy())


def test_numpy_scalars_are_packed_natively_as_the_python_packers_do(device):
    # Warp-style code passes tg.float64(dt) / np.float32(x) / np.int32(n): numpy floating scalars
    # for float parameters (float(v)), numpy integers for integer ones (int(v), in range)
    cases = [
        [np.float32(1.1), np.float64(2.2), np.int8(-5), np.int16(300), np.int32(-70000), np.int64(-2 ** 40),
         np.uint8(250), np.uint16(65535), np.uint32(2 ** 32 - 1), np.uint64(2 ** 62), True],
        [np.float64(3.4028235e38 * 1.0000001), np.float16(0.1), np.int64(127), np.uint8(7), np.int16(2),
         np.int32(5), np.int64(255), np.int8(1), np.int16(9), np.uint32(3), False],
        [np.float16(-65504.0), np.float32(1e-40), 1, 2, 3, 4, 5, 6, 7, 8, True],
    ]
    out_f, out_s = (tg.zeros(11, dtype=tg.float64, device=device) for _ in range(2))
    tg.launch(k_scalars, 1, inputs=[out_f] + cases[0])
    for vals in cases:
        with counted(fast=1):
            tg.launch(k_scalars, 1, inputs=[out_f] + vals)
        with python_path():
            tg.launch(k_scalars, 1, inputs=[out_s] + vals)
        np.testing.assert_array_equal(out_f.numpy(), out_s.numpy())
    halfs = [np.float64(1.00048828125), np.float32(65519.99), np.float16(6.1e-5), np.float64(2.9802322387695312e-08)]
    hf, hs = tg.zeros(2, dtype=tg.float32, device=device), tg.zeros(2, dtype=tg.float32, device=device)
    tg.launch(k_half, 1, inputs=[hf, 1.0, 1.0])
    for v in halfs:
        with counted(fast=1):
            tg.launch(k_half, 1, inputs=[hf, v, v])
        with python_path():
            tg.launch(k_half, 1, inputs=[hs, v, v])
        np.testing.assert_array_equal(hf.numpy().view(np.uint32), hs.numpy().view(np.uint32), err_msg=repr(v))


def test_uint64_and_int64_extremes(device):
    for v, w in ((2 ** 64 - 1, -1), (2 ** 63, -2 ** 63), (0, 2 ** 63 - 1)):
        f, s = both(k_u64, 1, lambda v=v, w=w: [tg.zeros(2, dtype=tg.uint64, device=device), v, w], 1)
        same(f, s)
        assert f[0].numpy().tolist() == [v, w % 2 ** 64]


def _half_values():
    rng = np.random.default_rng(7)
    vals = [0.0, -0.0, 1.0, -1.0, 65504.0, -65504.0, 65519.99, 6.1e-5, 5.96e-8, 2.98e-8, 2.9802322387695312e-08,
            1e-9, 1e-300, 3.0e-8, 0.1, 1.0 / 3.0, 1.00048828125, 1.00146484375, 2049.0, 2051.0, 4097.0,
            float("inf"), float("-inf"), 7, True]
    vals += [float(x) for x in rng.standard_normal(150) * 10.0 ** rng.integers(-9, 5, 150)]
    # halfway cases between adjacent halfs (ties round to even), and just beside them
    h = np.array([0x0001, 0x0002, 0x03ff, 0x0400, 0x3c00, 0x3c01, 0x7bfe], dtype=np.uint16).view(np.float16)
    mids = (h.astype(np.float64) + np.nextafter(h, np.float16(np.inf)).astype(np.float64)) / 2
    vals += [float(m) for m in mids] + [float(np.nextafter(m, 0)) for m in mids] + [float(np.nextafter(m, 1e9))
                                                                                   for m in mids]
    return vals


def test_float16_and_bfloat16_scalars_round_as_numpy(device):
    out_f, out_s = (tg.zeros(2, dtype=tg.float32, device=device) for _ in range(2))
    tg.launch(k_half, 1, inputs=[out_f, 1.0, 1.0])
    fast = 0
    for v in _half_values():
        f0 = fastlaunch.stats()[0]
        tg.launch(k_half, 1, inputs=[out_f, v, v])
        fast += fastlaunch.stats()[0] - f0
        with python_path():
            tg.launch(k_half, 1, inputs=[out_s, v, v])
        np.testing.assert_array_equal(out_f.numpy().view(np.uint32), out_s.numpy().view(np.uint32), err_msg=repr(v))
        assert out_f.numpy()[0] == np.float32(np.float16(v))
    assert fast >= len(_half_values()) - 2     # only NaN / overflow take the Python path


def test_float16_overflow_and_nan_take_the_python_path(device):
    out_f, out_s = (tg.zeros(2, dtype=tg.float32, device=device) for _ in range(2))
    tg.launch(k_half, 1, inputs=[out_f, 1.0, 1.0])
    for v in (70000.0, 65520.0, float("nan"), 1e39):
        with counted(fallback=1), np.errstate(all="ignore"):
            tg.launch(k_half, 1, inputs=[out_f, v, 1.0])
        with python_path(), np.errstate(all="ignore"):
            tg.launch(k_half, 1, inputs=[out_s, v, 1.0])
        np.testing.assert_array_equal(out_f.numpy().view(np.uint32), out_s.numpy().view(np.uint32))


def test_vector_matrix_and_struct_arguments(device):
    p = Params()
    p.scale = 2.0
    p.offset = tg.vec3(0.5, 0.25, 0.125)
    p.n = 3
    args = lambda: [tg.zeros(4, dtype=tg.vec3, device=device), tg.vec3(1.0, 2.0, 3.0),  # noqa: E731
                    tg.mat22(1.0, 2.0, 3.0, 4.0), p]
    f, s = both(k_composite, 4, args, 0)
    same(f, s)
    np.testing.assert_allclose(f[0].numpy()[1], [2.5 + 5.0, 4.25 + 11.0, 6.125 + 4.0])
    # values as lists and dicts go through the same Python packers
    f, s = both(k_composite, 4, lambda: [tg.zeros(4, dtype=tg.vec3, device=device), [1.0, 2.0, 3.0],
                                         np.eye(2), {"scale": 1.0, "offset": [0.0, 1.0, 2.0], "n": 1}], 0)
    same(f, s)


def test_vector_arrays_and_numpy_component_dims(device):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    f, s = both(k_vec_arrays, 4, lambda: [tg.array(x, dtype=tg.vec3, device=device),
                                          tg.zeros(4, dtype=tg.vec3, device=device)], 1)
    same(f, s)
    np.testing.assert_array_equal(f[1].numpy(), 2 * x)


def test_array_ctype_descriptors(device):
    def args():
        x = tg.array(np.arange(6, dtype=np.float32), device=device)
        y = tg.zeros(6, device=device)
        d = ArrayCtype.from_buffer_copy(bytes(y.descriptor())).bind(y.dtype, y.device, (y,))
        return [x, d]
    f, s = both(k_copy1, 6, args, 1)
    np.testing.assert_array_equal(f[1].tg_refs[0].numpy(), np.arange(6) * 2 + 1)
    np.testing.assert_array_equal(f[1].tg_refs[0].numpy(), s[1].tg_refs[0].numpy())


def test_numpy_arrays_passed_directly():
    x = np.arange(8, dtype=np.float32)
    f, s = both(k_copy1, 8, lambda: [x, np.zeros(8, np.float32)], 1)
    same(f, s)
    np.testing.assert_array_equal(f[1], x * 2 + 1)
    f, s = both(k_copy1, 4, lambda: [x[::2], np.zeros(8, np.float32)[1::2]], 1)   # strided both ways
    same(f, s)


def test_lists_tuples_and_dims(device):
    a, b, c = (tg.full(6, 2.0, device=device) for _ in range(3))
    tg.launch(k_add3, 6, inputs=[a, b], outputs=[c])
    with counted(fast=3):
        tg.launch(k_add3, 6, inputs=(a, b), outputs=(c,))
        tg.launch(k_add3, (6,), inputs=[a, b, c])
        tg.launch(k_add3, dim=6, inputs=[a], outputs=[b, c])
    np.testing.assert_array_equal(c.numpy(), 4.0)
    with counted(fallback=2):
        tg.launch(k_add3, [6], inputs=[a, b], outputs=[c])          # a list dim: the Python path
        tg.launch(k_add3, np.int64(6), inputs=[a, b], outputs=[c])  # numpy int dim: likewise


def test_versions_of_written_arrays_only(device):
    a, b, c = (tg.zeros(3, device=device) for _ in range(3))
    tg.launch(k_add3, 3, inputs=[a, b], outputs=[c])
    v = (a.version, b.version, c.version)
    with counted(fast=2):
        tg.launch(k_add3, 3, inputs=[a, b], outputs=[c])
        tg.launch(k_add3, 0, inputs=[a, b], outputs=[c])   # an empty grid still counts as a write, as before
    assert (a.version, b.version, c.version) == (v[0], v[1], v[2] + 2)


def test_device_given_as_string_or_device(device):
    a, b, c = (tg.full(3, 1.0, device=device) for _ in range(3))
    tg.launch(k_add3, 3, inputs=[a, b], outputs=[c], device=device)
    with counted(fast=2):
        tg.launch(k_add3, 3, inputs=[a, b], outputs=[c], device=device)
        tg.launch(k_add3, 3, inputs=[a, b], outputs=[c], device=tg.get_device(device))
    np.testing.assert_array_equal(c.numpy(), 2.0)


# ---------------------------------------------------------------------------- fallbacks

def test_tape_active_records_natively_and_backward_is_right(device):
    x = tg.array(np.arange(4, dtype=np.float32), device=device, requires_grad=True)
    y = tg.zeros(4, device=device, requires_grad=True)
    tg.launch(k_copy1, 4, inputs=[x], outputs=[y])
    with counted(fast=1):     # packed natively, recorded through launch's recorder, launched
        with tg.Tape() as tape:
            tg.launch(k_copy1, 4, inputs=[x], outputs=[y])
    assert len(tape.launches) == 1 and tape.launches[0].dim == (4,) and tape.launches[0].device is x.device
    tape.backward(grads={y: tg.array(np.ones(4, np.float32), device=device)})
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)
    with counted(fast=1):     # record_tape=False under a tape: nothing to record
        with tg.Tape() as tape:
            tg.launch(k_copy1, 4, inputs=[x], outputs=[y], record_tape=False)
    assert not tape.records
    with counted(fallback=1):     # not exactly True or False: the Python path decides (falsy: no record)
        with tg.Tape() as tape:
            tg.launch(k_copy1, 4, inputs=[x], outputs=[y], record_tape=0)
    assert not tape.records


def test_a_record_that_raises_leaves_the_launch_to_the_python_path(device):
    # strict_tape: recording an in-place overwrite raises; natively the recorder raised, the helper
    # passed the launch on, and the Python path raised the same error: nothing ran or was recorded
    x = tg.array(np.arange(4, dtype=np.float32), device=device, requires_grad=True)
    y = tg.zeros(4, device=device, requires_grad=True)
    tg.launch(k_square, 4, inputs=[x], outputs=[y])
    before = x.numpy().copy()
    old = tg.config.strict_tape
    tg.config.strict_tape = True
    try:
        with tg.Tape(save_overwritten=False) as tape:
            tg.launch(k_square, 4, inputs=[x], outputs=[y])
            with counted(fallback=1), pytest.raises(RuntimeError, match="does not save overwritten values"):
                tg.launch(k_square, 4, inputs=[y], outputs=[x])    # overwrites x, whose values the first needs
    finally:
        tg.config.strict_tape = old
    assert len(tape.records) == 1
    np.testing.assert_array_equal(x.numpy(), before)


def test_adjoint_launches_take_the_native_path(device):
    # the adjoint cases in detail: tests/core/test_fast_adjoint.py
    x = tg.array(np.arange(4, dtype=np.float32), device=device, requires_grad=True)
    y = tg.zeros(4, device=device, requires_grad=True)
    tg.launch(k_copy1, 4, inputs=[x], outputs=[y])
    y.grad.fill_(1.0)
    with counted(fast=1):
        tg.launch(k_copy1, 4, inputs=[x], outputs=[y], adjoint=True)
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)


def test_cpu_capture_records_the_launch():
    x, y = tg.full(3, 1.0), tg.zeros(3)
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    tg.capture_begin(device="cpu")
    try:
        with counted(fallback=1):
            tg.launch(k_copy1, 3, inputs=[y], outputs=[x])
    finally:
        graph = tg.capture_end(device="cpu")
    np.testing.assert_array_equal(x.numpy(), 1.0)     # recorded, not run
    tg.capture_launch(graph)
    np.testing.assert_array_equal(x.numpy(), 7.0)


def test_generic_kernels_launch_correctly(device):
    x, y = tg.full(3, 2.0, device=device), tg.zeros(3, device=device)
    tg.launch(k_generic, 3, inputs=[x, y, 3.0])
    f0, b0 = fastlaunch.stats()
    tg.launch(k_generic, 3, inputs=[x, y, 4.0])
    assert fastlaunch.stats()[0] == f0     # the generic kernel has no plan of its own: Python path
    np.testing.assert_array_equal(y.numpy(), 8.0)


def test_debug_mode_builds_take_the_python_path(device):
    x, y = tg.full(3, 2.0, device=device), tg.zeros(3, device=device)
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    old = tg.config.mode
    try:
        tg.config.mode = "debug"
    except (ValueError, AttributeError):
        pytest.skip("no debug mode in this tree")
    try:
        for _ in range(2):
            with counted(fallback=1):
                tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    finally:
        tg.config.mode = old
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y])     # re-registers the release build
    with counted(fast=1):
        tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    np.testing.assert_array_equal(y.numpy(), 5.0)


def compare_errors(launch):
    """The launch falls back, and raises what the Python path raises."""
    with counted(fallback=1):
        ef = error_of(launch)
    with python_path():
        es = error_of(launch)
    assert ef is not None and ef == es
    return ef


def test_errors_are_the_python_paths(device):
    a, b, c = (tg.zeros(3, device=device) for _ in range(3))
    i32 = tg.zeros(3, dtype=tg.int32, device=device)
    tg.launch(k_add3, 3, inputs=[a, b], outputs=[c])
    t, msg = compare_errors(lambda: tg.launch(k_add3, 3, inputs=[a, i32], outputs=[c]))
    assert t is TypeError and "argument 1 ('b')" in msg and "int32" in msg
    t, msg = compare_errors(lambda: tg.launch(k_add3, 3, inputs=[a, b], outputs=[]))
    assert t is TypeError and "takes 3 arguments" in msg
    t, msg = compare_errors(lambda: tg.launch(k_add3, 3, inputs=[a, tg.zeros((3, 1), device=device)],
                                               outputs=[c]))
    assert t is TypeError and "1-D" in msg
    t, msg = compare_errors(lambda: tg.launch(k_add3, 3, inputs=[a, None], outputs=[c]))
    assert t is TypeError and "'b'): got None (Warp's null array" in msg   # dereferenced untested: refused
    t, msg = compare_errors(lambda: tg.launch(k_add3, -1, inputs=[a, b], outputs=[c]))
    assert t is ValueError
    t, msg = compare_errors(lambda: tg.launch(k_add3, 3, inputs=[a, b], outputs=[np.zeros(3, np.float64)],
                                               device="cpu"))
    # on the CPU the float64 numpy output is the wrong dtype; CUDA inputs mismatch the device first
    assert t is (TypeError if device == "cpu" else RuntimeError)
    out = tg.zeros(11, dtype=tg.float64, device=device)
    t, msg = compare_errors(lambda: tg.launch(k_scalars, 1, inputs=[out, "x", 1.0, 1, 2, 3, 4, 5, 6, 7, 8, True]))
    assert t is TypeError and "argument 1 ('f32')" in msg


def test_read_only_write_raises_and_leaves_the_version(device):
    a = tg.full(3, 1.0, device=device)
    ro = tg.array(np.zeros(3, np.float32), device=device, readonly=True)
    tg.launch(k_copy1, 3, inputs=[a], outputs=[tg.zeros(3, device=device)])
    v = ro.version
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 3, inputs=[a], outputs=[ro]))
    assert t is RuntimeError and "read-only" in msg
    assert ro.version == v
    np.testing.assert_array_equal(ro.numpy(), 0.0)
    with counted(fast=1):     # reading a read-only array is fine
        tg.launch(k_copy1, 3, inputs=[ro], outputs=[a])


def test_array_subclasses_take_the_python_path(device):
    class Sub(tg.array):
        pass
    s = Sub(np.ones(3, np.float32), device=device)
    y = tg.zeros(3, device=device)
    tg.launch(k_copy1, 3, inputs=[y], outputs=[tg.zeros(3, device=device)])
    v = s.version
    with counted(fallback=1):
        tg.launch(k_copy1, 3, inputs=[y], outputs=[s])
    assert s.version == v + 1
    np.testing.assert_array_equal(s.numpy(), 1.0)


def test_a_grad_set_after_the_first_launch_is_seen(device):
    # the descriptor cache of an array is rebuilt when its grad changes; the helper reads it anew
    x = tg.full(3, 1.0, device=device)
    y = tg.zeros(3, device=device)
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    x.requires_grad = True
    y.requires_grad = True
    with counted(fast=1):
        tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    with tg.Tape() as tape:
        tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    tape.backward(grads={y: tg.full(3, 1.0, device=device)})
    np.testing.assert_array_equal(x.grad.numpy(), 2.0)


# ------------------------------------------------------------------------------ torch

torch_only = pytest.mark.torch


def _torch():
    import torch

    import tapegrad.bridges.torch  # noqa: F401  registers the adapter and its layout source
    return torch


def _tdev(device):
    return "cuda:0" if device.startswith("cuda") else "cpu"


@torch_only
@pytest.mark.parametrize("requires_grad", [False, True])
def test_torch_tensors_passed_directly(device, requires_grad):
    torch = _torch()
    td = _tdev(device)

    def args():
        x = torch.arange(6, dtype=torch.float32, device=td).requires_grad_(requires_grad)
        return [x, torch.zeros(6, device=td)]
    f, s = both(k_copy1, 6, args, 1, device=device)
    same(f, s)
    np.testing.assert_array_equal(host(f[1]), np.arange(6) * 2 + 1)


@torch_only
def test_torch_parameters_and_strided_tensors(device):
    torch = _torch()
    td = _tdev(device)
    base = torch.arange(40, dtype=torch.float32, device=td).reshape(5, 8)

    def args():
        return [torch.nn.Parameter(base.clone())[:, 1::3], torch.zeros(5, 3, device=td)]
    f, s = both(k_copy2, (5, 3), args, 1, device=device)
    same(f, s)
    f, s = both(k_copy2, (8, 5), lambda: [base.t(), torch.zeros(8, 5, device=td)], 1, device=device)
    same(f, s)


@torch_only
def test_torch_layout_cache_is_never_stale(device):
    torch = _torch()
    td = _tdev(device)
    t = torch.arange(16, dtype=torch.float32, device=td)
    out = torch.zeros(16, device=td)

    def run(x, n):
        tg.launch(k_shape, n, inputs=[x], outputs=[out], device=device)
        return host(out)[:n].copy()

    run(t[:4], 4)
    with counted(fast=1):
        r = run(t[:4], 4)
    np.testing.assert_array_equal(r, np.arange(4) + 4000)
    # same pointer, another shape
    with counted(fast=1):
        r = run(t[:8], 8)
    np.testing.assert_array_equal(r, np.arange(8) + 8000)
    # same pointer and shape, other strides
    with counted(fast=1):
        r = run(t[::4], 4)
    np.testing.assert_array_equal(r, np.arange(0, 16, 4) + 4000)
    # same pointer and shape, another dtype: the Python path's error, not the cached layout
    with counted(fast=1):
        run(t[:4], 4)
    ti = t.view(torch.int32)[:4]
    assert ti.data_ptr() == t.data_ptr()
    with counted(fallback=1):
        e = error_of(lambda: run(ti, 4))
    assert issubclass(e[0], TypeError) and "int32" in e[1]
    # more layouts than the cache holds per parameter, in turn
    for rep in range(2):
        for n in (1, 2, 3, 5, 6, 7):
            np.testing.assert_array_equal(run(t[:n], n), np.arange(n) + 1000 * n)


@torch_only
def test_torch_tensor_on_another_device_is_the_python_paths_error():
    torch = _torch()
    if not tg.is_cuda_available() or not torch.cuda.is_available():
        pytest.skip("needs a GPU for two devices")
    x = torch.zeros(3, device="cuda:0")
    y = torch.zeros(3, device="cuda:0")
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y], device="cuda:0")
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 3, inputs=[torch.zeros(3)], outputs=[y], device="cuda:0"))
    assert "device" in msg


# ------------------------------------------------------------------------------- CUDA

@pytest.mark.cuda
def test_cupy_arrays_passed_directly():
    import cupy as cp
    x = cp.arange(8, dtype=cp.float32)
    f, s = both(k_copy1, 8, lambda: [x, cp.zeros(8, cp.float32)], 1, device="cuda:0")
    same(f, s)
    np.testing.assert_array_equal(host(f[1]), np.arange(8) * 2 + 1)


@pytest.mark.cuda
def test_cuda_streams_block_dims_and_max_blocks():
    dev = tg.get_device("cuda:0")
    n = 10000
    x = tg.array(np.arange(n, dtype=np.float32), device=dev)
    s = tg.Stream(dev)
    for kw in ({}, {"stream": s}, {"block_dim": 64}, {"block_dim": 0}, {"max_blocks": 3}, {"block_dim": 1024}):
        y = tg.zeros(n, device=dev)
        tg.launch(k_copy1, n, inputs=[x], outputs=[y], **kw)
        y2 = tg.zeros(n, device=dev)
        if "stream" in kw:     # y2 was zeroed on the current stream: order s after it (Warp's rule)
            s.wait_stream(dev.stream)
        with counted(fast=1):
            tg.launch(k_copy1, n, inputs=[x], outputs=[y2], **kw)
        tg.synchronize_device(dev)
        np.testing.assert_array_equal(y2.numpy(), np.arange(n) * 2 + 1, err_msg=repr(kw))
    with tg.ScopedStream(s):
        y = tg.zeros(n, device=dev)
        tg.launch(k_copy1, n, inputs=[x], outputs=[y])
        with counted(fast=1):
            tg.launch(k_copy1, n, inputs=[x], outputs=[y])
        s.synchronize()
    np.testing.assert_array_equal(y.numpy(), np.arange(n) * 2 + 1)


@pytest.mark.cuda
@pytest.mark.torch
def test_torch_cuda_on_an_unordered_torch_stream_tells_torchs_allocator():
    torch = _torch()
    x = torch.arange(4, dtype=torch.float32, device="cuda:0")
    y = torch.zeros(4, device="cuda:0")
    tg.launch(k_copy1, 4, inputs=[x], outputs=[y], device="cuda:0")
    with counted(fast=1):     # torch's default stream orders with tapegrad's blocking stream
        tg.launch(k_copy1, 4, inputs=[x], outputs=[y], device="cuda:0")
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        with counted(fallback=1):   # another torch stream: the Python path's record_stream
            tg.launch(k_copy1, 4, inputs=[x], outputs=[y], device="cuda:0")
    tg.synchronize_device("cuda:0")
    np.testing.assert_array_equal(host(y), np.arange(4) * 2 + 1)


# ------------------------------------------------------------------------------ numpy

def test_numpy_layout_cache_is_never_stale():
    buf = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)

    def run(x, n):
        tg.launch(k_shape, n, inputs=[x], outputs=[out], device="cpu")
        return out[:n].copy()

    run(buf[:4], 4)
    with counted(fast=4):
        np.testing.assert_array_equal(run(buf[:4], 4), np.arange(4) + 4000)
        np.testing.assert_array_equal(run(buf[:8], 8), np.arange(8) + 8000)          # same pointer, other shape
        np.testing.assert_array_equal(run(buf[::4], 4), np.arange(0, 16, 4) + 4000)  # same shape, other strides
        np.testing.assert_array_equal(run(buf[:4], 4), np.arange(4) + 4000)
    as_int = buf.view(np.int32)[:4]                                                   # same pointer, other dtype
    t, msg = compare_errors(lambda: run(as_int, 4))
    assert issubclass(t, TypeError) and "int32" in msg
    as_f64 = np.zeros(4, np.float64)
    t, msg = compare_errors(lambda: run(as_f64, 4))
    assert issubclass(t, TypeError)
    for rep in range(2):   # more layouts than a parameter remembers, in turn
        for n in (1, 2, 3, 5, 6, 7):
            np.testing.assert_array_equal(run(buf[:n], n), np.arange(n) + 1000 * n)


def test_numpy_read_only_written_is_the_python_paths_error():
    x = np.ones(3, np.float32)
    y = np.zeros(3, np.float32)
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y], device="cpu")
    with counted(fast=1):
        tg.launch(k_copy1, 3, inputs=[x], outputs=[y], device="cpu")
    y.flags.writeable = False        # the same layout, now read-only
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 3, inputs=[x], outputs=[y], device="cpu"))
    assert t is RuntimeError and "read-only" in msg
    np.testing.assert_array_equal(y, 3.0)


def test_numpy_component_dims_for_vector_parameters():
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    f, s = both(k_vec_arrays, 4, lambda: [x, np.zeros((4, 3), np.float32)], 1, device="cpu")
    same(f, s)
    np.testing.assert_array_equal(f[1], 2 * x)
    t, msg = compare_errors(lambda: tg.launch(k_vec_arrays, 4, inputs=[x[:, :2], np.zeros((4, 3), np.float32)],
                                               device="cpu"))
    assert issubclass(t, (TypeError, RuntimeError))


def test_threads_launch_concurrently(device):
    import threading
    n_threads, reps = 4, 200
    xs = [tg.full(64, float(t), device=device) for t in range(n_threads)]
    ys = [tg.zeros(64, device=device) for _ in range(n_threads)]
    tg.launch(k_copy1, 64, inputs=[xs[0]], outputs=[ys[0]])
    errors = []

    def work(t):
        try:
            with tg.ScopedDevice(device):
                for _ in range(reps):
                    tg.launch(k_copy1, 64, inputs=[xs[t]], outputs=[ys[t]])
        except Exception as e:  # noqa: BLE001  reported below
            errors.append(e)

    v0 = [y.version for y in ys]
    f0 = fastlaunch.stats()[0]
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    tg.synchronize_device(device)
    assert not errors
    assert fastlaunch.stats()[0] - f0 >= n_threads * reps - n_threads   # a new thread's first CUDA launch may not be
    for t in range(n_threads):
        np.testing.assert_array_equal(ys[t].numpy(), 2.0 * t + 1.0)
        assert ys[t].version == v0[t] + reps


def test_launched_kernels_are_freed():
    # the native plan is a capsule, which the garbage collector cannot see through: nothing it
    # holds (packers, modules, layouts) may lead back to the kernel
    import gc
    import weakref

    def make():
        @tg.kernel
        def k_local(x: tg.array(dtype=float), y: tg.array(dtype=float), s: float):
            i = tg.tid()
            y[i] = x[i] * s
        return k_local

    for args in ([tg.zeros(3), tg.zeros(3), 2.0], [np.zeros(3, np.float32), np.zeros(3, np.float32), 2.0]):
        k = make()
        for _ in range(3):
            tg.launch(k, 3, inputs=args, device="cpu")
        w = weakref.ref(k)
        del k
        gc.collect()
        assert w() is None


@torch_only
def test_torch_tensors_without_device_argument(device):
    torch = _torch()
    td = _tdev(device)
    x = torch.arange(5, dtype=torch.float32, device=td)
    y = torch.zeros(5, device=td)
    tg.launch(k_copy1, 5, inputs=[x], outputs=[y])       # the device comes from the tensors
    with counted(fast=2):
        tg.launch(k_copy1, 5, inputs=[x], outputs=[y])   # a miss of the layout cache: Python infers
        tg.launch(k_copy1, 5, inputs=[x], outputs=[y])   # a hit: the layout's device
    tg.synchronize_device(device)
    np.testing.assert_array_equal(host(y), np.arange(5) * 2 + 1)
    if td == "cpu":
        e = error_of(lambda: tg.launch(k_copy1, 5, inputs=[x], outputs=[y], device="cuda:0"))
        assert e is not None
