"""``__cuda_array_interface__`` objects (CuPy, Numba, any CAI v3 producer) on the native launch
path (tapegrad.launch.fastlaunch): the helper caches the Python packer's descriptor per parameter
under (exact type, typestr, shape, strides, read-only flag, launch device) and reads only the
pointer per launch; a producer stream the Python path would wait for (or refuse) sends the
launch to the Python path.

Which path ran is read from the helper's counters (``fastlaunch.stats()``); whether a launch
used a cached layout, from calls of the Python packer's protocol reader (``tapegrad.launch.packers.foreign_desc``)
and of the Python stream wait (``protocols.wait_foreign_stream``). The CPU tests check the C
rule for CAI dicts against ``protocols``' own and the pure-Python pieces; the CUDA ones (marker
``cuda``) compare results with the Python path (``tapegrad.launch.core.native_launches(False)``).
"""
from __future__ import annotations

import re
import sys
import types as pytypes

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import protocols
from tapegrad.launch import ArrayCtype, fastlaunch
from tapegrad.tensortypes import TensorLayout, TensorType, register_tensor_type
from tests.core.test_fast_launch import (  # noqa: F401
    both,
    compare_errors,
    counted,
    error_of,
    k_copy1,
    k_copy2,
    k_shape,
    k_vec_arrays,
    native_helper,
    python_path,
)

L = sys.modules["tapegrad.launch.core"]   # launch() and its native switch (native_launches)
P = sys.modules["tapegrad.launch.packers"]
D = sys.modules["tapegrad.launch.devices"]
CUDA = "cuda:0"


@tg.kernel
def k_half(x: tg.array(dtype=tg.float16), y: tg.array(dtype=tg.float16)):
    i = tg.tid()
    y[i] = x[i] * 2.0 + x[i]


@tg.kernel
def k_double(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * 2.0 + 1.0


@tg.kernel
def k_mix(a: tg.array(dtype=float), b: tg.array(dtype=float), c: tg.array(dtype=float),
          out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = a[i] + 2.0 * b[i] + 3.0 * c[i]


class CaiObject:
    """Exposes a given ``__cuda_array_interface__`` dict (a fresh copy per read, as CuPy)."""

    def __init__(self, iface):
        self.iface = iface

    @property
    def __cuda_array_interface__(self):
        return dict(self.iface)


class Wrapped:
    """Re-exposes a CUDA array's interface with its read-only flag set and extra keys."""

    def __init__(self, a, readonly=False, **extra):
        self.a, self.readonly, self.extra = a, readonly, extra

    @property
    def __cuda_array_interface__(self):
        d = dict(self.a.__cuda_array_interface__)
        d["data"] = (d["data"][0], self.readonly)
        d.update(self.extra)
        return d


class RaisingCai:
    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("no interface today")


def host(a):
    if isinstance(a, tg.array):
        return a.numpy()
    if type(a).__module__.startswith("torch"):
        return a.detach().cpu().numpy()
    if hasattr(a, "copy_to_host"):      # numba
        return a.copy_to_host()
    if hasattr(a, "get"):               # cupy
        return a.get()
    if isinstance(a, Wrapped):          # the tests' own CAI objects: the memory they expose
        return host(a.a)
    if isinstance(a, CaiObject):
        import cupy
        return cupy.asarray(CaiObject({k: v for k, v in a.iface.items() if k != "stream"})).get()
    return np.asarray(a)


def same(f, s):
    tg.synchronize_device(CUDA)
    for a, b in zip(f, s):
        np.testing.assert_array_equal(host(a), host(b))


@pytest.fixture
def count_protocol_reads(monkeypatch):
    """Calls of the Python packer's protocol reader (a cached layout makes none)."""
    calls = []
    real = P.foreign_desc

    def reader(*a):
        calls.append(a[1])   # the parameter index
        return real(*a)
    monkeypatch.setattr(P, "foreign_desc", reader)
    return calls


@pytest.fixture
def count_waits(monkeypatch):
    """Handles the Python path ordered tapegrad's stream after (``protocols.wait_foreign_stream``,
    counted only where it enqueues an event)."""
    handles = []
    real = protocols.wait_foreign_stream

    def wait(dev, handle):
        if not protocols.foreign_stream_ordered(handle, dev.stream):
            handles.append(handle)
        return real(dev, handle)
    monkeypatch.setattr(protocols, "wait_foreign_stream", wait)
    return handles


# ------------------------------------------------------------------- CPU: the C rule itself

BASE = {"shape": (4,), "typestr": "<f4", "data": (4096, False), "version": 3, "strides": None}

# dicts the helper reads itself (then the stream rule decides)
READ = [{}, {"stream": None}, {"stream": 1}, {"stream": 2}, {"stream": 7}, {"stream": 9}, {"stream": 0},
        {"stream": -3}, {"stream": 7, "version": 2}, {"stream": 0, "version": 2}, {"stream": 7, "version": 4},
        {"mask": None}, {"offset": 0}, {"offset": None}, {"data": None}, {"data": (0, False)},
        {"data": (4096, True)}, {"strides": (4,)}, {"shape": (2, 2), "strides": (8, 4)}, {"shape": ()},
        {"stream": 2 ** 40}]
# dicts it leaves to the Python packer (which parses, waits and raises as before)
PACKER = [{"mask": object()}, {"offset": 8}, {"shape": [4]}, {"strides": [4]}, {"data": [4096, False]},
          {"data": (4096, 1)}, {"data": (np.int64(4096), False)}, {"data": (4096, False, 0)},
          {"typestr": b"<f4"}, {"version": "3"}, {"version": None}, {"offset": 8.0}]
# streams the Python path refuses or waits for, whatever the helper reads
ODD = [{"stream": 1.0}, {"stream": "7"}, {"stream": True}, {"stream": np.int64(7)}]
CURRENT = [(7, True), (9, True), (9, False), (1, False), (1, True), (0, True), (2, True)]


def python_stream_action(iface, cur, blocking):
    """What protocols.parse_cuda_array_interface does about ``iface``'s stream."""
    try:
        h = protocols.cai_stream(iface)
    except (TypeError, ValueError):
        return "raises"
    if h is None or protocols.foreign_stream_ordered(h, pytypes.SimpleNamespace(cuda_stream=cur,
                                                                                 is_blocking=blocking)):
        return "nothing"
    return "wait"


def _case_id(case):
    """A test id the same in every process (pytest-xdist workers compare their collections): an
    object() value is named by its type, not its address."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(case))


@pytest.mark.parametrize("group, extra", [("read", e) for e in READ] + [("packer", e) for e in PACKER] +
                         [("odd", e) for e in ODD], ids=_case_id)
def test_the_c_rule_matches_the_python_paths(group, extra):
    iface = dict(BASE, **extra)
    for cur, blocking in CURRENT:
        c = fastlaunch.cai_decision(iface, cur, blocking)
        py = python_stream_action(iface, cur, blocking)
        label = f"{extra} with current stream {cur} (blocking {blocking}): C {c}, Python {py}"
        if group == "packer":
            assert c == "packer", label
        elif group == "read":
            # exactly the Python path's rule: native where it neither waits nor raises
            assert c == ("native" if py == "nothing" else "fallback"), label
        else:
            assert c != "native" or py == "nothing", label
        if c == "native":
            protocols.interface_layout(iface, "x")   # a layout the Python packer takes


def test_the_c_rule_leaves_anything_but_a_dict_to_the_packer():
    assert fastlaunch.cai_decision([("shape", (4,))], 7, True) == "packer"
    assert fastlaunch.cai_decision(pytypes.MappingProxyType(dict(BASE)), 7, True) == "packer"
    assert fastlaunch.cai_decision(dict(BASE), 7, True) == "native"


def test_cai_stream():
    assert protocols.cai_stream({"version": 3}) is None
    assert protocols.cai_stream({"version": 3, "stream": None}) is None
    assert protocols.cai_stream({"version": 2, "stream": 5}) is None
    assert protocols.cai_stream({"stream": 5}) is None                  # no version: before v3
    assert protocols.cai_stream({"version": 3, "stream": 5}) == 5
    for bad in (0, 1.5, "1"):
        with pytest.raises(ValueError, match="x: CAI 'stream' must be None or a non-zero int"):
            protocols.cai_stream({"version": 3, "stream": bad}, "x")


def test_foreign_stream_ordered():
    blocking = pytypes.SimpleNamespace(cuda_stream=77, is_blocking=True)
    nonblocking = pytypes.SimpleNamespace(cuda_stream=78, is_blocking=False)
    assert protocols.foreign_stream_ordered(77, blocking)
    assert protocols.foreign_stream_ordered(78, nonblocking)
    for legacy in (0, 1):   # the legacy default stream orders with blocking streams only
        assert protocols.foreign_stream_ordered(legacy, blocking)
        assert not protocols.foreign_stream_ordered(legacy, nonblocking)
    assert not protocols.foreign_stream_ordered(2, blocking)     # per-thread default stream
    assert not protocols.foreign_stream_ordered(5, blocking)

    class Unreadable:
        cuda_stream = 9

        @property
        def is_blocking(self):
            raise RuntimeError("cudaStreamGetFlags refused during a capture")
    assert not protocols.foreign_stream_ordered(1, Unreadable())
    assert protocols.foreign_stream_ordered(9, Unreadable())


class DeviceNamed(CaiObject):
    device = "cpu"          # names its device itself: never the pointer's


class DeviceLike(CaiObject):
    device = pytypes.SimpleNamespace(type="cuda", index=0)


class Accessed(CaiObject):
    pass


def _row_of(cls, data_ptr, layout):
    """A TensorType row for ``cls`` whose tensors read as ``layout`` (one layout for all)."""
    return register_tensor_type(TensorType(framework="test", classes=(cls,), layout=lambda o: layout,
                                           layout_key=lambda o: 0, data_ptr=data_ptr))


def test_cai_kind():
    obj = CaiObject(BASE)
    assert D.cai_kind(obj) == 1
    assert D.cai_kind(Wrapped(obj)) == 1
    assert D.cai_kind(DeviceNamed(BASE)) == 2
    assert D.cai_kind(DeviceLike(BASE)) == 2     # on a CPU-only machine get_device raises: still 2
    assert D.cai_kind(Accessed(BASE)) == 1
    _row_of(Accessed, lambda o: 0, None)
    assert D.cai_kind(Accessed(BASE)) == 0       # a registered row packs it (its own device accessor)
    for other in (np.zeros(3, np.float32), tg.zeros(3), ArrayCtype(), object(), None, 1.5, RaisingCai()):
        assert D.cai_kind(other) == 0, other


@pytest.mark.torch
def test_cai_kind_of_types_with_a_tensor_type_row():
    import torch
    assert D.cai_kind(torch.zeros(3)) == 0        # the torch bridge's row packs it

    class Adapted(CaiObject):
        pass
    assert D.cai_kind(Adapted(BASE)) == 1
    _row_of(Adapted, lambda o: 0, None)
    assert D.cai_kind(Adapted(BASE)) == 0


def test_a_cai_object_on_a_cpu_launch_is_the_python_paths_error():
    x, y = tg.zeros(3), tg.zeros(3)
    tg.launch(k_copy1, 3, inputs=[x], outputs=[y])
    obj = CaiObject(dict(BASE, shape=(3,)))
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 3, inputs=[obj], outputs=[y], device="cpu"))
    assert t is RuntimeError and "argument 0 ('x')" in msg and "__cuda_array_interface__" in msg
    fastlaunch.forget_types()       # nothing cached is needed for the next native launch
    with counted(fast=1):
        tg.launch(k_copy1, 3, inputs=[x], outputs=[y])


# --------------------------------------------------------------------------------- CUDA

def _cupy():
    import cupy
    return cupy


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_cupy_arrays_native_and_equal_to_the_python_path(dtype):
    cp = _cupy()
    kernel = {"float32": k_copy1, "float16": k_half, "float64": k_double}[dtype]
    f, s = both(kernel, 8, lambda: [cp.arange(8, dtype=dtype), cp.zeros(8, dtype)], 1, device=CUDA)
    same(f, s)
    want = {"float32": np.arange(8) * 2 + 1, "float16": np.arange(8) * 3, "float64": np.arange(8) * 2 + 1}[dtype]
    np.testing.assert_array_equal(host(f[1]), want.astype(dtype))


@pytest.mark.cuda
def test_cupy_strided_views_offsets_and_vectors():
    cp = _cupy()
    base = cp.arange(40, dtype=cp.float32).reshape(5, 8)
    for view, out_shape in ((lambda: base[1:, ::3], (4, 3)), (lambda: base.T, (8, 5)), (lambda: base[2:, 1:], (3, 7))):
        f, s = both(k_copy2, out_shape, lambda: [view(), cp.zeros(out_shape, cp.float32)], 1, device=CUDA)
        same(f, s)
        np.testing.assert_array_equal(host(f[1]), host(view()) + np.add.outer(np.arange(out_shape[0]) * 10,
                                                                                np.arange(out_shape[1])))
    # a strided output written through its view
    f, s = both(k_copy2, (5, 3), lambda: [base[:, :3], cp.zeros((5, 6), cp.float32)[:, ::2]], 1, device=CUDA)
    same(f, s)
    # 1-D offsets and strides
    flat = cp.arange(32, dtype=cp.float32)
    for view in (lambda: flat[3:11], lambda: flat[::4], lambda: flat[1::3][2:10]):
        f, s = both(k_copy1, 8, lambda: [view(), cp.zeros(8, cp.float32)], 1, device=CUDA)
        same(f, s)
        np.testing.assert_array_equal(host(f[1]), host(view()) * 2 + 1)
    # vec3 elements from a trailing dimension of 3
    f, s = both(k_vec_arrays, 8, lambda: [cp.arange(24, dtype=cp.float32).reshape(8, 3),
                                          cp.zeros((8, 3), cp.float32)], 1, device=CUDA)
    same(f, s)
    np.testing.assert_array_equal(host(f[1]), np.arange(24).reshape(8, 3) * 2)


@pytest.mark.cuda
def test_cupy_layout_cache_survives_new_arrays_and_refreshes(count_protocol_reads):
    cp = _cupy()
    t = cp.arange(16, dtype=cp.float32)
    out = cp.zeros(16, cp.float32)

    def run(x, n, reads=None):
        del count_protocol_reads[:]
        with counted(fast=1):
            tg.launch(k_shape, n, inputs=[x], outputs=[out], device=CUDA)
        if reads is not None:
            assert count_protocol_reads == reads
        tg.synchronize_device(CUDA)
        return host(out)[:n].copy()

    tg.launch(k_shape, 4, inputs=[t[:4]], outputs=[out], device=CUDA)   # the module's first launch
    run(t[:4], 4)
    np.testing.assert_array_equal(run(t[:4], 4, reads=[]), np.arange(4) + 4000)
    # new arrays of the same layouts: no protocol read, only the pointers change
    x2 = cp.arange(4, dtype=cp.float32) + 50
    np.testing.assert_array_equal(run(x2, 4, reads=[]), np.arange(4) + 50 + 4000)
    np.testing.assert_array_equal(run(t[5:9], 4, reads=[]), np.arange(5, 9) + 4000)   # an offset view
    # same pointer, another shape: the packer again (for that parameter only), then cached
    np.testing.assert_array_equal(run(t[:8], 8, reads=[0]), np.arange(8) + 8000)
    np.testing.assert_array_equal(run(t[:8], 8, reads=[]), np.arange(8) + 8000)
    # same pointer and shape, other strides
    np.testing.assert_array_equal(run(t[::4], 4, reads=[0]), np.arange(0, 16, 4) + 4000)
    # same pointer and shape, another dtype: the Python path's error, not the cached layout
    ti = t.view(cp.int32)[:4]
    assert ti.data.ptr == t.data.ptr
    e = compare_errors(lambda: tg.launch(k_shape, 4, inputs=[ti], outputs=[out], device=CUDA))
    assert e[0] is TypeError and "int32" in e[1] and "argument 0 ('x')" in e[1]
    # more layouts than the cache holds per parameter, in turn
    for _ in range(2):
        for n in (1, 2, 3, 5, 6, 7):
            np.testing.assert_array_equal(run(t[:n], n), np.arange(n) + 1000 * n)


@pytest.mark.cuda
def test_read_only_cai_object_to_a_written_parameter_is_the_python_paths_error():
    cp = _cupy()
    x, y = cp.arange(4, dtype=cp.float32), cp.zeros(4, cp.float32)
    tg.launch(k_copy1, 4, inputs=[x], outputs=[y], device=CUDA)
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 4, inputs=[x], outputs=[Wrapped(y, readonly=True)],
                                              device=CUDA))
    assert t is RuntimeError and "argument 1 ('y')" in msg and "read-only" in msg
    # read-only where the kernel only reads: native
    f, s = both(k_copy1, 4, lambda: [Wrapped(cp.arange(4, dtype=cp.float32), readonly=True),
                                     cp.zeros(4, cp.float32)], 1, device=CUDA)
    same(f, s)
    # the read-only layout is cached for the written parameter now: still the Python path's error
    t2, msg2 = compare_errors(lambda: tg.launch(k_copy1, 4, inputs=[x], outputs=[Wrapped(y, readonly=True)],
                                                device=CUDA))
    assert (t2, msg2) == (t, msg)


@pytest.mark.cuda
def test_masks_and_refused_streams_are_the_python_paths_errors():
    cp = _cupy()
    x, y = cp.arange(4, dtype=cp.float32), cp.zeros(4, cp.float32)
    tg.launch(k_copy1, 4, inputs=[x], outputs=[y], device=CUDA)
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 4, inputs=[Wrapped(x, mask=object())], outputs=[y],
                                              device=CUDA))
    assert t is ValueError and "mask" in msg
    t, msg = compare_errors(lambda: tg.launch(k_copy1, 4, inputs=[Wrapped(x, stream=0)], outputs=[y], device=CUDA))
    assert t is ValueError and "stream" in msg
    # a stream key before version 3 means nothing: native
    f, s = both(k_copy1, 4, lambda: [Wrapped(cp.arange(4, dtype=cp.float32), version=2, stream=12345),
                                     cp.zeros(4, cp.float32)], 1, device=CUDA)
    same(f, s)


SPIN = r"""
extern "C" __global__ void spin_fill(float* x, int n, long long cycles, float v) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
"""


@pytest.mark.cuda
def test_cupy_array_on_another_cupy_stream_takes_the_python_path_ordered(count_waits):
    cp = _cupy()
    n = 1 << 16
    x, y = cp.zeros(n, cp.float32), cp.zeros(n, cp.float32)
    for _ in range(2):
        tg.launch(k_copy1, n, inputs=[x], outputs=[y], device=CUDA)   # module registered, layouts cached
    tg.synchronize_device(CUDA)
    with counted(fast=1):        # CuPy's default (legacy) stream orders with tapegrad's blocking stream
        tg.launch(k_copy1, n, inputs=[x], outputs=[y], device=CUDA)
    assert count_waits == []
    tg.synchronize_device(CUDA)
    spin = cp.RawKernel(SPIN, "spin_fill")
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        # x is written on s after a long spin; the launch reads x: it must wait for s
        spin((n // 256,), (256,), (x, cp.int32(n), cp.int64(200_000_000), cp.float32(3.0)))
        with counted(fallback=1):
            tg.launch(k_copy1, n, inputs=[x], outputs=[y], device=CUDA)
    assert count_waits and all(h == s.ptr for h in count_waits)
    tg.synchronize_device(CUDA)
    s.synchronize()
    np.testing.assert_array_equal(host(y), np.full(n, 7.0, np.float32))


@pytest.mark.cuda
def test_cupy_only_launch_finds_its_device_without_python(monkeypatch):
    cp = _cupy()
    x, y = cp.arange(8, dtype=cp.float32), cp.zeros(8, cp.float32)
    for _ in range(3):
        tg.launch(k_copy1, 8, inputs=[x], outputs=[y])     # no device=: CuPy's pointer decides
    calls = []
    devices = sys.modules["tapegrad.launch.devices"]     # the Python device rule's pointer lookup
    real = devices.pointer_device
    monkeypatch.setattr(devices, "pointer_device", lambda ptr: (calls.append(ptr), real(ptr))[1])
    x2 = cp.arange(8, dtype=cp.float32) * 3
    with counted(fast=1):
        tg.launch(k_copy1, 8, inputs=[x2], outputs=[y])
    assert calls == [], "the device of a CuPy-only launch came from Python, not from the cached layout"
    tg.synchronize_device(CUDA)
    np.testing.assert_array_equal(host(y), np.arange(8) * 6 + 1)
    # a type that names its device (DeviceLike): its launches still run natively
    d = dict(x.__cuda_array_interface__)
    f, s = both(k_copy1, 8, lambda: [DeviceLike(d), cp.zeros(8, cp.float32)], 1)
    same(f, s)


@pytest.mark.cuda
def test_adjoint_launch_with_cupy_forward_arguments():
    cp = _cupy()
    x, y = cp.arange(8, dtype=cp.float32), cp.zeros(8, cp.float32)
    for _ in range(2):
        tg.launch(k_copy1, 8, inputs=[x], outputs=[y], device=CUDA)

    def adjoint():
        gx, gy = tg.zeros(8, device=CUDA), tg.full(8, 1.5, device=CUDA)
        tg.launch(k_copy1, 8, inputs=[x], outputs=[y], adjoint=True, adj_inputs=[gx], adj_outputs=[gy])
        return gx
    adjoint()
    # gy is a buffer given for the written y (not its .grad): the launch copies it to a scratch
    # the kernel consumes (exact adjoints), which the Python path does
    with counted(adjoint=True):
        g_fast = adjoint()
    with python_path():
        g_slow = adjoint()
    same([g_fast], [g_slow])
    np.testing.assert_array_equal(g_fast.numpy(), np.full(8, 3.0, np.float32))


@pytest.mark.cuda
def test_cupy_launches_under_a_tape_are_native_and_recorded():
    cp = _cupy()
    x, y = cp.arange(8, dtype=cp.float32), cp.zeros(8, cp.float32)
    for _ in range(2):
        tg.launch(k_copy1, 8, inputs=[x], outputs=[y], device=CUDA)
    with tg.Tape() as tape:
        with counted(fast=1):
            tg.launch(k_copy1, 8, inputs=[x], outputs=[y], device=CUDA)
    assert len(tape.records) == 1 and tape.records[0].inputs[0] is x


@pytest.mark.cuda
def test_a_tensor_type_registered_later_takes_over_from_the_cai_cache():
    cp = _cupy()

    class Later(Wrapped):
        pass
    x, alt, y = cp.arange(4, dtype=cp.float32), tg.full(4, 10.0, device=CUDA), cp.zeros(4, cp.float32)
    for _ in range(3):
        tg.launch(k_copy1, 4, inputs=[Later(x)], outputs=[y], device=CUDA)
    tg.synchronize_device(CUDA)
    np.testing.assert_array_equal(host(y), np.arange(4) * 2 + 1)

    # a row that reads another buffer than the interface's
    _row_of(Later, lambda o: alt.ptr, TensorLayout(tg.float32, (4,), (1,), alt.device, "float32"))
    tg.launch(k_copy1, 4, inputs=[Later(x)], outputs=[y], device=CUDA)
    tg.synchronize_device(CUDA)
    np.testing.assert_array_equal(host(y), np.full(4, 21.0, np.float32))


@pytest.fixture
def nb_cuda():
    try:
        from numba import cuda
    except ImportError:
        pytest.skip("needs numba")
    try:
        if not cuda.is_available():
            pytest.skip("numba sees no CUDA device")
        cuda.to_device(np.zeros(1, np.float32))
    except Exception as e:  # noqa: BLE001  a numba whose CUDA target does not work with this driver
        pytest.skip(f"numba's CUDA target does not work here: {type(e).__name__}: {e}")
    return cuda


@pytest.mark.cuda
def test_numba_device_arrays(nb_cuda):
    cuda = nb_cuda
    src = np.arange(16, dtype=np.float32)
    f, s = both(k_copy1, 16, lambda: [cuda.to_device(src), cuda.device_array(16, np.float32)], 1, device=CUDA)
    same(f, s)
    np.testing.assert_array_equal(host(f[1]), src * 2 + 1)
    # a strided view, and no device given (the pointer decides)
    f, s = both(k_copy1, 8, lambda: [cuda.to_device(src)[::2], cuda.device_array(8, np.float32)], 1)
    same(f, s)
    np.testing.assert_array_equal(host(f[1]), src[::2] * 2 + 1)
    f, s = both(k_copy2, (3, 2), lambda: [cuda.to_device(src.reshape(4, 4))[1:, ::2],
                                          cuda.device_array((3, 2), np.float32)], 1, device=CUDA)
    same(f, s)
    np.testing.assert_array_equal(host(f[1]), src.reshape(4, 4)[1:, ::2] + np.add.outer(np.arange(3) * 10,
                                                                                          np.arange(2)))


@pytest.mark.cuda
@pytest.mark.torch
def test_mixed_torch_cupy_and_tapegrad_arguments():
    cp = _cupy()
    import torch

    import tapegrad.bridges.torch  # noqa: F401  the torch layout source
    n = 8
    ref = np.arange(n, dtype=np.float32)

    def tg_first():
        return [tg.array(ref, device=CUDA), torch.arange(n, dtype=torch.float32, device=CUDA) + 1,
                cp.arange(n, dtype=cp.float32) + 2, cp.zeros(n, cp.float32)]

    def cupy_first():    # no tapegrad array: CuPy's pointer decides the device
        return [cp.arange(n, dtype=cp.float32), torch.arange(n, dtype=torch.float32, device=CUDA) + 1,
                cp.arange(n, dtype=cp.float32) + 2, torch.zeros(n, device=CUDA)]
    for make in (tg_first, cupy_first):
        f, s = both(k_mix, n, make, 3)
        same(f, s)
        np.testing.assert_array_equal(host(f[3]), ref + 2 * (ref + 1) + 3 * (ref + 2))
    f, s = both(k_mix, n, lambda: [cp.arange(n, dtype=cp.float32), torch.ones(n, device=CUDA),
                                   cp.ones(n, cp.float32), cp.zeros(n, cp.float32)], 3)
    same(f, s)
