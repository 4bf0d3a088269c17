"""The rules the native launch helper (``tapegrad/launch/fastlaunch.c``) still mirrors, checked
against their Python owners with hypothesis (issue 25 item 2): for random scalars, grids,
arrays and adjoint buffers, a launch on the native path and the same launch on the Python path
(the helper switched off) give the same bytes, the same version bumps, and the same error type
and message. The helper may pass any launch to the Python path, so each test also checks that
the native path did take the launches it should (its counters), or the property would hold
trivially.

Mirrored rules: the scalar conversions (``types.scalar_packer``; the integer ranges are the ABI
table's, ``abi.int_range``, which tg_abi.h carries too), the grid (``grid.make_bounds``),
``tid()`` unpacking and the unguarded-``tid()`` grid check (``grid.check_grid``,
``lang.facts``), the device choice (``devices.infer_device``), adjoint arguments
(``packers.adjoint_values``, ``grad_desc``, ``check_adjoint_shapes``) and version bumps.
"""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import abi, protocols
from tapegrad.launch import fastlaunch
from tests.core.test_fast_launch import python_path  # the native switch off for a block

L = sys.modules["tapegrad.launch.core"]   # launch() and its native switch (_fast)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------------------------- kernels

@tg.kernel
def k_i8(out: tg.array(dtype=tg.int8), v: tg.int8):
    out[0] = v


@tg.kernel
def k_i16(out: tg.array(dtype=tg.int16), v: tg.int16):
    out[0] = v


@tg.kernel
def k_i32(out: tg.array(dtype=tg.int32), v: tg.int32):
    out[0] = v


@tg.kernel
def k_i64(out: tg.array(dtype=tg.int64), v: tg.int64):
    out[0] = v


@tg.kernel
def k_u8(out: tg.array(dtype=tg.uint8), v: tg.uint8):
    out[0] = v


@tg.kernel
def k_u16(out: tg.array(dtype=tg.uint16), v: tg.uint16):
    out[0] = v


@tg.kernel
def k_u32(out: tg.array(dtype=tg.uint32), v: tg.uint32):
    out[0] = v


@tg.kernel
def k_u64(out: tg.array(dtype=tg.uint64), v: tg.uint64):
    out[0] = v


@tg.kernel
def k_f16(out: tg.array(dtype=tg.float16), v: tg.float16):
    out[0] = v


@tg.kernel
def k_bf16(out: tg.array(dtype=tg.bfloat16), v: tg.bfloat16):
    out[0] = v


@tg.kernel
def k_f32(out: tg.array(dtype=tg.float32), v: tg.float32):
    out[0] = v


@tg.kernel
def k_f64(out: tg.array(dtype=tg.float64), v: tg.float64):
    out[0] = v


@tg.kernel
def k_bool(out: tg.array(dtype=tg.int32), v: bool):
    if v:
        out[0] = 1
    else:
        out[0] = 2


INTS = {"int8": k_i8, "int16": k_i16, "int32": k_i32, "int64": k_i64, "uint8": k_u8, "uint16": k_u16,
        "uint32": k_u32, "uint64": k_u64}
FLOATS = {"float16": k_f16, "bfloat16": k_bf16, "float32": k_f32, "float64": k_f64}


@tg.kernel
def k_count(out: tg.array(dtype=tg.int32)):
    tg.atomic_add(out, 0, 1)


@tg.kernel
def k_count2(out: tg.array(dtype=tg.int32)):
    i, j = tg.tid()
    tg.atomic_add(out, 0, 1)


@tg.kernel
def k_copy(a: tg.array(dtype=float), b: tg.array(dtype=float)):
    i = tg.tid()
    b[i] = a[i]


@tg.kernel
def k_copy_2d(a: tg.array(dtype=float, ndim=2), b: tg.array(dtype=float, ndim=2)):
    i, j = tg.tid()
    b[i, j] = a[i, j]


@tg.kernel
def k_scale(x: tg.array(dtype=tg.float64), s: tg.float64, y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = s * x[i] * x[i]


# ---------------------------------------------------------------------------------- helpers

@pytest.fixture(autouse=True)
def native_helper(device):
    for _ in range(2):   # the kernel's first launch (the Python path) registers its module
        tg.launch(k_count, 1, inputs=[tg.zeros(1, dtype=tg.int32, device=device)])
    if L._fast is None:
        if "TAPEGRAD_FAST_LAUNCH" in (fastlaunch.error() or ""):
            pytest.skip("the native launch helper is switched off (TAPEGRAD_FAST_LAUNCH=0)")
        pytest.fail(f"the native launch helper did not load: {fastlaunch.error()}")


def outcome(fn):
    """What ``fn()`` gave: ``("ok", value)`` or ``("error", type, message)``."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001  the type and message are what is compared
        return ("error", type(e), str(e))


def both_paths(fn):
    """``fn()`` on the native path and on the Python path: both outcomes, and how many launches
    the helper made in the first."""
    f0 = fastlaunch.stats()[0]
    native = outcome(fn)
    taken = fastlaunch.stats()[0] - f0
    with python_path():
        python = outcome(fn)
    return native, python, taken


def warm(kernel, device, *args):
    """One launch that registers the kernel's module with the helper (later launches: native)."""
    tg.launch(kernel, 1, inputs=list(args), device=device)


def stored(kernel, device, dtype, v):
    """Launch ``kernel`` with scalar ``v``; the bytes it stored and the output's version bump."""
    def run():
        out = tg.zeros(1, dtype=dtype, device=device)
        v0 = out.version
        tg.launch(kernel, 1, inputs=[out, v])
        return out.numpy().tobytes(), out.version - v0
    return run


def int_values(lo, hi):
    edges = [lo - 1, lo, lo + 1, -1, 0, 1, hi - 1, hi, hi + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64, -2 ** 63,
             -2 ** 63 - 1]
    np_ints = [t for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)]
    return st.one_of(
        st.sampled_from(edges), st.integers(lo - 1000, hi + 1000), st.integers(-2 ** 70, 2 ** 70), st.booleans(),
        st.builds(lambda t, x: t(x % (np.iinfo(t).max + 1)) if np.iinfo(t).min == 0 else t(x % 100 - 50),
                  st.sampled_from(np_ints), st.integers(0, 2 ** 64)),
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([2.0, -3.0, 0.5, None, "1", b"1", [1]]))


def float_values():
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.floats(-70000, 70000), st.integers(-2 ** 1100, 2 ** 1100),
        st.integers(-100000, 100000), st.booleans(),
        st.builds(lambda t, x: t(x), st.sampled_from([np.float16, np.float32, np.float64]),
                  st.floats(-1e5, 1e5, allow_nan=False)),
        st.sampled_from([3.4e38, 3.5e38, 65504.0, 65520.0, 1e-8, -0.0, None, "1.0", np.longdouble(1.5),
                         np.int32(7), [1.0]]))


# ---------------------------------------------------------------------------------- scalars

@pytest.mark.parametrize("kind", sorted(INTS))
def test_integer_scalars_as_the_packers(device, kind):
    kernel = INTS[kind]
    dtype = getattr(tg, kind)
    lo, hi = abi.int_range(dtype.kind, dtype.bits)
    assert (lo, hi) == (int(np.iinfo(kind).min), int(np.iinfo(kind).max))
    warm(kernel, device, tg.zeros(1, dtype=dtype, device=device), 0)
    took = []

    @SETTINGS
    @given(v=int_values(lo, hi))
    def check(v):
        native, python, taken = both_paths(stored(kernel, device, dtype, v))
        assert native == python, (kind, v)
        if type(v) is int and lo <= v <= hi:
            took.append(taken)
    check()
    assert took and all(t == 1 for t in took), took   # the native path packed every in-range int


@pytest.mark.parametrize("kind", sorted(FLOATS))
def test_float_scalars_as_the_packers(device, kind):
    kernel = FLOATS[kind]
    dtype = getattr(tg, kind)
    warm(kernel, device, tg.zeros(1, dtype=dtype, device=device), 0.0)
    took = []

    @SETTINGS
    @given(v=float_values())
    def check(v):
        native, python, taken = both_paths(stored(kernel, device, dtype, v))
        assert native == python, (kind, v)
        if type(v) is float and abs(v) < 60000:
            took.append(taken)
    check()
    assert took and all(t == 1 for t in took), took


def test_bool_scalars_as_the_packers(device):
    warm(k_bool, device, tg.zeros(1, dtype=tg.int32, device=device), True)

    @SETTINGS
    @given(v=st.one_of(st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(),
                       st.sampled_from([np.bool_(True), np.int8(0), None, "x", [True]])))
    def check(v):
        native, python, taken = both_paths(stored(k_bool, device, tg.int32, v))
        assert native == python, v
        if type(v) is bool:
            assert taken == 1
    check()


# ---------------------------------------------------------------------------------- grids

def _dims():
    extent = st.one_of(st.integers(-2, 12), st.sampled_from([2 ** 31 - 1, 2 ** 31, 2 ** 62, 2 ** 63 - 1, 2 ** 63,
                                                             2 ** 64]),
                       st.sampled_from([np.int64(3), np.int32(2), 2.0, "3", None]))
    return st.one_of(extent, st.lists(extent, max_size=5).map(tuple), st.lists(extent, max_size=5),
                     st.lists(st.integers(0, 12), min_size=1, max_size=4).map(tuple))


def _threads(dim):
    """The thread count of ``dim`` when launch would accept it, else None."""
    try:
        d = (int(dim),) if isinstance(dim, (int, np.integer)) else tuple(int(x) for x in dim)
    except (TypeError, ValueError):
        return None
    if isinstance(dim, (str, float)) or any(isinstance(x, (str, float)) for x in np.ravel(np.array(dim, object))):
        return None
    if not 1 <= len(d) <= 4 or any(x < 0 for x in d):
        return None
    return int(np.prod([float(x) for x in d]))


@pytest.mark.parametrize("kernel", [k_count, k_count2], ids=["tid", "i,j=tid"])
def test_grids_as_make_bounds(device, kernel):
    warm(kernel, device, tg.zeros(1, dtype=tg.int32, device=device)) if kernel is k_count else \
        tg.launch(kernel, (1, 1), inputs=[tg.zeros(1, dtype=tg.int32, device=device)])
    took = []

    @SETTINGS
    @given(dim=_dims())
    def check(dim):
        n = _threads(dim)
        assume(n is None or n <= 4096 or 0 in ((dim,) if np.ndim(dim) == 0 else tuple(dim)))

        def run():
            out = tg.zeros(1, dtype=tg.int32, device=device)
            tg.launch(kernel, dim, inputs=[out])
            return out.numpy().tolist()
        native, python, taken = both_paths(run)
        assert native == python, dim
        if native[0] == "ok" and type(dim) is tuple and all(type(x) is int and x < 2 ** 31 for x in dim):
            took.append(taken)   # numpy ints and extents past the default build's: the Python path
    check()
    assert took and all(t == 1 for t in took), took


@SETTINGS
@given(na=st.integers(0, 40), nb=st.integers(0, 40), dim=st.integers(0, 45))
def test_unguarded_tid_grid_check_as_lang_facts(device, na, nb, dim):
    """A grid past an array the kernel indexes by tid() unguarded: launch's ValueError on both
    paths (the helper checks the plan's TidAccesses)."""
    warm(k_copy, device, tg.zeros(1, device=device), tg.zeros(1, device=device))

    def run():
        a = tg.array(np.arange(na, dtype=np.float32), device=device)
        b = tg.zeros(nb, device=device)
        tg.launch(k_copy, dim, inputs=[a, b])
        return b.numpy().tolist()
    native, python, taken = both_paths(run)
    assert native == python
    assert taken == (1 if dim <= min(na, nb) else 0)


@SETTINGS
@given(shape=st.tuples(st.integers(0, 6), st.integers(0, 6)), dim=st.tuples(st.integers(0, 7), st.integers(0, 7)))
def test_unguarded_tid_grid_check_2d(device, shape, dim):
    tg.launch(k_copy_2d, (1, 1), inputs=[tg.zeros((1, 1), device=device), tg.zeros((1, 1), device=device)])

    def run():
        a = tg.array(np.arange(shape[0] * shape[1], dtype=np.float32).reshape(shape), device=device)
        b = tg.zeros(shape, device=device)
        tg.launch(k_copy_2d, dim, inputs=[a, b])
        return b.numpy().tolist()
    native, python, _ = both_paths(run)
    assert native == python


# ---------------------------------------------------------------------------------- devices

def test_device_choice_as_infer_device():
    """CPU launches with tapegrad arrays, numpy arrays and ``device=`` values: the same device
    (or the same error) on both paths. The CPU is the default device throughout (the arrays are
    made without ``device=``), also on a GPU machine, where a CUDA default would mix devices."""
    with tg.ScopedDevice("cpu"):
        _device_choice_cases()


def _device_choice_cases():
    warm(k_copy, "cpu", tg.zeros(1), tg.zeros(1))
    arg = st.sampled_from(["tg", "np", "np_ro", "ctype"])
    dev = st.sampled_from([None, "cpu", "cuda", "cuda:0", "cuda:7", "gpu", 3, tg.get_device("cpu")])

    @SETTINGS
    @given(a=arg, b=arg, device=dev)
    def check(a, b, device):
        def make(kind, n=4):
            x = np.arange(n, dtype=np.float32)
            if kind == "tg":
                return tg.array(x)
            if kind == "ctype":
                return tg.array(x).descriptor()
            if kind == "np_ro":
                x.flags.writeable = False
            return x

        def run():
            x, y = make(a), make(b)
            tg.launch(k_copy, 4, inputs=[x, y], device=device)
            return np.asarray(y.numpy() if isinstance(y, tg.array) else y if isinstance(y, np.ndarray) else 0).tolist()
        native, python, taken = both_paths(run)
        assert native == python, (a, b, device)
        if native[0] == "ok" and device in (None, "cpu") and "ctype" not in (a, b):
            assert taken == 1
    check()


# ---------------------------------------------------------------------------------- adjoints

@SETTINGS
@given(n=st.integers(1, 9), s=st.floats(-4, 4), seed=st.integers(0, 2 ** 31),
       give=st.sampled_from(["none", "x", "y", "both", "wrong_shape", "numpy"]))
def test_adjoint_arguments_as_adjoint_values(device, n, s, seed, give):
    """``launch(adjoint=True)``: .grad where no buffer is given, the buffers given, a shape
    mismatch refused, numpy buffers packed by their packer: identical gradients (or errors)."""
    warm(k_scale, device, tg.zeros(1, dtype=tg.float64, device=device), 1.0, tg.zeros(1, dtype=tg.float64,
                                                                                        device=device))
    rng = np.random.default_rng(seed)
    xv, gy = rng.standard_normal(n), rng.standard_normal(n)

    def run():
        x = tg.array(xv, dtype=tg.float64, device=device, requires_grad=True)
        y = tg.zeros(n, dtype=tg.float64, device=device, requires_grad=True)
        y.grad = tg.array(gy, dtype=tg.float64, device=device)
        adj_x = adj_y = None
        if give in ("x", "both"):
            adj_x = tg.zeros(n, dtype=tg.float64, device=device)
        if give in ("y", "both"):
            adj_y = tg.array(gy * 2, dtype=tg.float64, device=device)
        if give == "wrong_shape":
            adj_x = tg.zeros(n + 1, dtype=tg.float64, device=device)
        if give == "numpy" and device == "cpu":
            adj_x = np.zeros(n)
        tg.launch(k_scale, n, inputs=[x, s], outputs=[y], adjoint=True, adj_inputs=[adj_x, None],
                  adj_outputs=[adj_y], device=device)
        got = [x.grad.numpy().tobytes()]
        for b in (adj_x, adj_y):
            if b is not None:
                got.append((b.numpy() if isinstance(b, tg.array) else b).tobytes())
        return got
    f0 = fastlaunch.stats(adjoint=True)[0]
    native = outcome(run)
    taken = fastlaunch.stats(adjoint=True)[0] - f0
    with python_path():
        python = outcome(run)
    assert native == python
    # a buffer for the written y: the Python path copies it (packers.exact_adjoint_buffers)
    assert taken == (0 if give in ("wrong_shape", "y", "both") else 1)


def test_adjoint_of_a_view_made_before_its_base_had_a_gradient(device):
    """The gradient an adjoint launch accumulates into is the array's ``.grad`` (the Python
    owner's rule), on the native path too: a view made before its base had a gradient takes the
    base's gradient late (``array._late_grad``). The helper read the cached field instead and
    accumulated into nothing: a silent zero gradient."""
    warm(k_scale, device, tg.zeros(1, dtype=tg.float64, device=device), 1.0, tg.zeros(1, dtype=tg.float64,
                                                                                        device=device))
    tg.launch(k_scale, 1, inputs=[tg.zeros(1, dtype=tg.float64, device=device), 1.0],
              outputs=[tg.zeros(1, dtype=tg.float64, device=device)], adjoint=True)

    def run():
        base = tg.array(np.arange(8.0), dtype=tg.float64, device=device)
        v = base[2:6]
        base.requires_grad = True
        y = tg.zeros(4, dtype=tg.float64, device=device, requires_grad=True)
        y.grad.fill_(1.0)
        tg.launch(k_scale, 4, inputs=[v, 1.5], outputs=[y], adjoint=True)
        return base.grad.numpy().tolist()
    f0 = fastlaunch.stats(adjoint=True)[0]
    native = run()
    assert fastlaunch.stats(adjoint=True)[0] - f0 == 1
    with python_path():
        python = run()
    expected = [0.0, 0.0] + [2 * 1.5 * x for x in (2.0, 3.0, 4.0, 5.0)] + [0.0, 0.0]   # d(s x^2)/dx = 2 s x
    assert native == python == expected


def test_tape_backward_into_a_view_made_before_its_base_had_a_gradient(device):
    """The same through ``Tape.backward`` (its replays take the native path)."""
    base = tg.array(np.arange(8.0), dtype=tg.float64, device=device)
    v = base[2:6]
    base.requires_grad = True
    y = tg.zeros(4, dtype=tg.float64, device=device, requires_grad=True)
    for _ in range(2):   # registers the kernel's module with the helper
        tg.launch(k_scale, 4, inputs=[v, 1.0], outputs=[y], record_tape=False)
    with tg.Tape() as tape:
        tg.launch(k_scale, 4, inputs=[v, 2.0], outputs=[y])
    b0 = fastlaunch.stats(adjoint=True)[0]
    tape.backward(grads={y: tg.array(np.ones(4), dtype=tg.float64, device=device)})
    assert fastlaunch.stats(adjoint=True)[0] - b0 == 1
    np.testing.assert_array_equal(base.grad.numpy(), [0, 0, 8, 12, 16, 20, 0, 0])   # 2 * 2.0 * x


# ------------------------------------------------------------------ the CAI v3 stream rule

def _python_stream_action(iface, cur, blocking):
    """What the Python path (``protocols.parse_cuda_array_interface``) does about ``iface``'s
    stream, on a launch whose device's current tapegrad stream is ``cur``."""
    try:
        h = protocols.cai_stream(iface)
    except (TypeError, ValueError):
        return "raises"
    if h is None or protocols.foreign_stream_ordered(h, types.SimpleNamespace(cuda_stream=cur,
                                                                               is_blocking=blocking)):
        return "nothing"
    return "wait"


_STREAMS = st.one_of(st.none(), st.integers(-3, 12), st.integers(2 ** 31, 2 ** 70), st.booleans(),
                     st.sampled_from([1.0, "7", np.int64(7), b"1"]))


@SETTINGS
@given(stream=_STREAMS, has_stream=st.booleans(), version=st.one_of(st.sampled_from([None, 2, 3, 4, "3"]),
                                                                     st.integers(-1, 5)),
       cur=st.integers(0, 12), blocking=st.booleans(), ro=st.sampled_from([False, True, 1]),
       offset=st.sampled_from([None, 0, 8, 0.0]), mask=st.sampled_from([None, "absent", object()]))
def test_cai_stream_rule_as_protocols(stream, has_stream, version, cur, blocking, ro, offset, mask):
    """The helper's CAI v3 stream rule (``fastlaunch.c``'s ``cai_stream_rule``, asked through
    ``fastlaunch.cai_decision``) against its Python owner (``protocols.cai_stream`` and
    ``foreign_stream_ordered``): the helper reads a dict natively only where the Python path
    neither waits for the producer's stream nor raises, and always so for a plain dict with an
    int or None stream; a dict it does not read goes to the packer."""
    iface = {"shape": (4,), "typestr": "<f4", "data": (4096, ro), "strides": None}
    if version is not None:
        iface["version"] = version
    if has_stream:
        iface["stream"] = stream
    if offset is not None:
        iface["offset"] = offset
    if mask != "absent":
        iface["mask"] = mask
    c = fastlaunch.cai_decision(iface, cur, blocking)
    py = _python_stream_action(iface, cur, blocking)
    if c == "native":
        assert py == "nothing"
        protocols.interface_layout(iface, "x")   # a layout the Python packer takes
    plain = (type(stream) is int or stream is None or not has_stream) and type(ro) is bool and \
        (version is None or type(version) is int) and (offset is None or (type(offset) is int and offset == 0)) \
        and mask in (None, "absent")
    if plain:
        assert c == ("native" if py == "nothing" else "fallback"), (iface, cur, blocking, c, py)


@pytest.mark.torch
@pytest.mark.parametrize("reset", ["none", "set_to_none", "replaced"])
def test_adjoint_of_a_torch_linked_array_as_its_grad(reset):
    """An array viewing a torch tensor with a shared gradient (a framework link): the helper
    asks ``.grad`` (which follows the tensor's current gradient) instead of reading the field:
    the same gradients as the Python path after torch dropped or replaced the gradient."""
    with tg.ScopedDevice("cpu"):   # tensors and arrays on the CPU, also on a GPU machine
        import torch
        warm(k_scale, "cpu", tg.zeros(1, dtype=tg.float64), 1.0, tg.zeros(1, dtype=tg.float64))
        tg.launch(k_scale, 1, inputs=[tg.zeros(1, dtype=tg.float64), 1.0], outputs=[tg.zeros(1, dtype=tg.float64)],
                  adjoint=True)

        def run():
            t = torch.arange(4.0, dtype=torch.float64, requires_grad=True)
            x = tg.from_torch(t)
            y = tg.zeros(4, dtype=tg.float64, requires_grad=True)
            y.grad.fill_(1.0)
            tg.launch(k_scale, 4, inputs=[x, 1.0], outputs=[y], adjoint=True)
            if reset != "none":
                t.grad = None
            if reset == "replaced":
                (t * 3.0).sum().backward()
            tg.launch(k_scale, 4, inputs=[x, 2.0], outputs=[y], adjoint=True)
            return [None if t.grad is None else t.grad.tolist(), x.grad.numpy().tolist()]
        b0 = fastlaunch.stats(adjoint=True)[0]
        native = run()
        assert fastlaunch.stats(adjoint=True)[0] - b0 == 2
        with python_path():
            python = run()
        assert native == python
