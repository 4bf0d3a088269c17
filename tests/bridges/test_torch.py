"""PyTorch bridge without kernels: conversions, dtypes, devices, strides, component dims,
gradients, ownership, descriptors, streams and errors (R10-R14, R18, R19, B3, B4, B8)."""
import gc
import sys
import warnings
import weakref

import numpy as np
import pytest

torch = pytest.importorskip("torch")   # a module that imports torch cannot be skipped by its marker

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import BridgeTypeError, GradLayoutError  # noqa: E402

from . import _bridge_checks as checks  # noqa: E402
from ._bridge_kernels import square  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")]

FW = checks.Framework(
    name="torch", float32=torch.float32, from_=tg.from_torch, to=tg.to_torch, tensor=torch.tensor,
    requiring_grad=lambda t: t.requires_grad_(), strides=lambda t: t.stride(), numpy=lambda t: t.detach().numpy(),
    fill=lambda t, v: t.fill_(v), transpose=lambda t: t.t(),
    grad_leaf_code="t = torch.ones(100, requires_grad=True)")


@pytest.fixture(autouse=True)
def _on_cpu():
    with tg.ScopedDevice("cpu"):
        yield


# ----------------------------------------------------------------------------- zero-copy

@pytest.mark.parametrize("check", checks.ALL, ids=lambda c: c.__name__)
def test_shared_bridge_behaviour(check):
    """Zero-copy round trips, ownership, descriptors, the layout cache, imports, clean exit."""
    check(FW)


@pytest.mark.parametrize("name", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                  "uint64", "float16", "float32", "float64"])
def test_every_scalar_dtype_round_trips(name):
    dt = getattr(tg, name if name != "bool" else "bool")
    exact = getattr(torch, name)
    a = tg.zeros(5, dtype=dt)
    t = tg.to_torch(a)                           # tensors keep the exact type, unsigned included
    assert t.dtype == exact and t.data_ptr() == a.ptr
    assert tg.dtype_from_torch(exact) is dt
    b = tg.from_torch(t)
    assert b.dtype is dt and b.ptr == a.ptr


@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64"])
def test_dtype_to_torch_of_wide_unsigned_is_the_signed_twin(name):
    """Warp's mapping (warp/_src/torch.py dtype_to_torch): code that allocates a torch tensor
    from dtype_to_torch(wp.uint32) gets a dtype torch's operators accept."""
    signed = getattr(torch, name[1:])
    assert tg.dtype_to_torch(getattr(tg, name)) == signed
    assert tg.dtype_to_torch(tg.vector(3, getattr(tg, name))) == signed
    assert tg.dtype_from_torch(signed) is getattr(tg, name[1:])   # one-way, as in Warp
    assert tg.dtype_to_torch(tg.uint8) == torch.uint8
    # the signed twin aliases the unsigned array zero-copy
    a = tg.array(np.array([2**int(name[4:]) - 1, 1], dtype=name))
    t = torch.zeros(2, dtype=tg.dtype_to_torch(a.dtype))
    u = tg.from_torch(t, dtype=a.dtype)
    u.assign(a)
    assert u.dtype is a.dtype and t.tolist() == [-1, 1]


def test_dtype_maps_vectors_structs_and_errors():
    assert tg.dtype_to_torch(tg.vec3) == torch.float32
    assert tg.dtype_to_torch(tg.mat22d) == torch.float64
    assert tg.dtype_to_torch(float) == torch.float32
    assert tg.dtype_from_torch(torch.bfloat16) is tg.bfloat16 and tg.dtype_to_torch(tg.bfloat16) is torch.bfloat16
    with pytest.raises(TypeError, match="complex64"):
        tg.dtype_from_torch(torch.complex64)
    with pytest.raises(TypeError):
        tg.dtype_from_torch("float32")

    @tg.struct
    class S:
        x: float

    with pytest.raises(TypeError):
        tg.dtype_to_torch(S)
    with pytest.raises(TypeError):
        tg.dtype_to_torch("not a dtype")


def test_bfloat16_zero_copy_both_ways_and_as_raw_bits():
    t = torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16, requires_grad=True)
    b = tg.from_torch(t)
    assert b.dtype is tg.bfloat16 and b.ptr == t.data_ptr() and b.grad.ptr == t.grad.data_ptr()
    back = tg.to_torch(b)
    assert back.dtype is torch.bfloat16 and back.data_ptr() == t.data_ptr() and back.grad.data_ptr() == b.grad.ptr
    assert torch.equal(back.detach(), t.detach())
    a = tg.from_torch(t.detach(), dtype=tg.uint16)
    assert a.dtype is tg.uint16 and a.ptr == t.data_ptr()
    assert np.array_equal(a.numpy(), t.view(torch.uint16).numpy())
    with pytest.raises(BridgeTypeError):
        tg.from_torch(t, dtype=tg.float16)


def test_devices():
    cpu = tg.get_device("cpu")
    assert tg.device_from_torch(torch.device("cpu")) is cpu
    assert tg.device_from_torch("cpu") is cpu
    assert tg.device_to_torch("cpu") == "cpu"
    assert tg.device_to_torch(cpu) == "cpu"
    assert tg.device_to_torch(torch.device("cpu")) == "cpu"
    assert torch.device(tg.device_to_torch("cpu")) == torch.device("cpu")
    with pytest.raises(TypeError):
        tg.device_from_torch(3.5)
    with pytest.raises(RuntimeError, match="meta"):
        tg.device_from_torch(torch.device("meta"))
    with pytest.raises(RuntimeError):
        tg.device_from_torch("not-a-device")
    with pytest.raises((ValueError, RuntimeError)):
        tg.device_to_torch("gpu:7")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_device_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="CUDA"):
        tg.device_from_torch(torch.device("cuda"))


# -------------------------------------------------------------------------- strides, dims

def test_scalar_dtypes_keep_strides_without_copy():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    cases = {
        "transposed": base.t(),
        "sliced": base[1:, ::2],
        "expanded": torch.arange(3, dtype=torch.float32).reshape(1, 3).expand(5, 3),
        "offset": base[2],
        "scalar": torch.tensor(4.0),
    }
    for label, t in cases.items():
        a = tg.from_torch(t)
        assert a.ptr == t.data_ptr(), label
        if t.dim():
            assert a.shape == tuple(t.shape), label
            assert a.strides == tuple(4 * s for s in t.stride()), label
            assert np.array_equal(a.numpy(), t.numpy()), label
        else:
            assert a.shape == (1,) and a.numpy()[0] == 4.0
    e = tg.from_torch(cases["expanded"])
    assert e.strides[0] == 0 and not e.is_contiguous


def test_vector_and_matrix_dtypes_consume_trailing_dims():
    v = torch.arange(20, dtype=torch.float32).reshape(10, 2)
    a = tg.from_torch(v, dtype=tg.vec2)
    assert a.shape == (10,) and a.dtype is tg.vec2 and a.strides == (8,)
    assert np.array_equal(a.numpy(), v.numpy())
    m = torch.zeros(5, 3, 3, dtype=torch.float64)
    b = tg.from_torch(m, dtype=tg.mat33d)
    assert b.shape == (5,) and b.strides == (72,)
    grid = torch.zeros(4, 6, 3)
    assert tg.from_torch(grid, dtype=tg.vec3).shape == (4, 6)
    # outer dims may be strided; component dims must not
    s = tg.from_torch(torch.zeros(10, 3)[::2], dtype=tg.vec3)
    assert s.shape == (5,) and s.strides == (24,)
    # exactly one vector
    one = tg.from_torch(torch.zeros(3), dtype=tg.vec3)
    assert one.shape == (1,)
    # and back: component dims reappear
    t = tg.to_torch(b)
    assert t.shape == (5, 3, 3) and t.dtype == torch.float64 and t.data_ptr() == m.data_ptr()


@pytest.mark.parametrize("t, dt", [
    (torch.zeros(2, 10).t(), tg.vec2),          # trailing dim not contiguous
    (torch.zeros(10, 3), tg.vec2),              # wrong inner size
    (torch.zeros(4, 3, 3).transpose(1, 2), tg.mat33),
    (torch.zeros(4, 2, 3), tg.mat33),
    (torch.zeros(2), tg.vec3),
])
def test_bad_component_dims_raise_runtime_error(t, dt):
    with pytest.raises(RuntimeError):
        tg.from_torch(t, dtype=dt)


def test_too_many_dims_and_bad_dtypes():
    with pytest.raises(RuntimeError, match="4 dimensions"):
        tg.from_torch(torch.zeros(1, 1, 1, 1, 2))
    assert tg.from_torch(torch.zeros(1, 1, 1, 1, 3), dtype=tg.vec3).shape == (1, 1, 1, 1)
    with pytest.raises(BridgeTypeError) as e:
        tg.from_torch(torch.zeros(3, dtype=torch.float64), dtype=tg.float32)
    assert isinstance(e.value, TypeError) and isinstance(e.value, RuntimeError)
    assert "float64" in str(e.value)
    with pytest.raises(TypeError):
        tg.from_torch(torch.zeros(3), dtype="nope")

    @tg.struct
    class S:
        x: float

    with pytest.raises(TypeError):
        tg.from_torch(torch.zeros(3), dtype=S)


def test_compatible_reinterpretations():
    i = torch.tensor([-1, 2], dtype=torch.int32)
    u = tg.from_torch(i, dtype=tg.uint32)
    assert u.dtype is tg.uint32 and u.numpy()[0] == 2**32 - 1
    b = tg.from_torch(torch.tensor([True, False]), dtype=tg.uint8)
    assert b.numpy().tolist() == [1, 0]
    assert tg.from_torch(torch.zeros(4, dtype=torch.int16), dtype=tg.uint16).dtype is tg.uint16


def test_wrong_argument_types():
    with pytest.raises(TypeError, match="torch tensor"):
        tg.from_torch(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="tapegrad array"):
        tg.to_torch(torch.zeros(3))

    @tg.struct
    class S:
        x: float

    with pytest.raises(BridgeTypeError, match="struct"):
        tg.to_torch(tg.zeros(2, dtype=S))
    with pytest.raises(ValueError, match="no memory"):
        tg.to_torch(tg.array(dtype=float, ndim=1))


def test_to_torch_of_a_read_only_array_is_refused(tmp_path):
    """torch tensors are always writable: to_torch of a read-only array (a read-only memory map
    here) gave a tensor whose first in-place write killed the process with SIGSEGV."""
    import subprocess
    path = tmp_path / "frozen.bin"
    path.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    code = f"""
import mmap, numpy as np, tapegrad as tg
f = open({str(path)!r}, "rb")
a = tg.array(np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.float32), copy=False)
assert a.readonly
try:
    t = tg.to_torch(a)
    t.add_(1.0)
except ValueError as e:
    assert "to_torch: the array is read-only" in str(e), e
    print("refused")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "refused", (r.returncode, r.stdout, r.stderr[-2000:])
    frozen = np.arange(4.0)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        tg.to_torch(tg.array(frozen, copy=False))
    assert tg.to_torch(tg.array(frozen)).tolist() == [0.0, 1.0, 2.0, 3.0]   # a copy is writable


def test_fake_tensors_are_refused_with_a_clear_error():
    """torch.compile's FakeTensor (data_ptr() 0) was wrapped as an array over address 0: from_torch
    read garbage and a launch of it killed the process (SIGSEGV); also after a real tensor of the
    same layout had been converted (layouts are cached per dtype/shape/strides/device)."""
    import subprocess
    code = """
import numpy as np, torch, tapegrad as tg
from torch._subclasses.fake_tensor import FakeTensorMode
from tests.bridges._bridge_kernels import square
tg.from_torch(torch.zeros(3))                    # a plain tensor's layout is cached first
with FakeTensorMode():
    ft = torch.zeros(3)
for what, fn in (("from_torch", lambda: tg.from_torch(ft)),
                 ("launch", lambda: tg.launch(square, dim=3, inputs=[ft], outputs=[tg.zeros(3)]))):
    try:
        fn()
    except TypeError as e:
        assert "FakeTensor" in str(e) and "no memory" in str(e), e
        print(what, "refused")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert r.returncode == 0 and r.stdout.split() == ["from_torch", "refused", "launch", "refused"], \
        (r.returncode, r.stdout, r.stderr[-2000:])


def test_a_negative_bit_view_is_refused():
    """z.conj().imag is a real tensor whose memory holds the negated values (torch's lazy negation):
    from_torch and launch read [2, 4] for [-2, -4]."""
    z = torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64)
    nv = z.conj().imag
    assert nv.is_neg() and nv.tolist() == [-2.0, -4.0]
    tg.from_torch(torch.zeros(2))                   # the plain layout is cached: the bit must still count
    for fn in (lambda: tg.from_torch(nv), lambda: tg.from_torch(nv, return_ctype=True),
               lambda: tg.launch(square, dim=2, inputs=[nv], outputs=[tg.zeros(2)])):
        with pytest.raises(TypeError, match="negative bit"):
            fn()
    np.testing.assert_array_equal(tg.from_torch(nv.resolve_neg()).numpy(), [-2.0, -4.0])


# --------------------------------------------------------------------------------- grads

def test_from_torch_shares_and_allocates_the_grad_with_torch():
    x = torch.zeros(4, requires_grad=True)
    a = tg.from_torch(x)
    assert a.requires_grad and a.grad is not None
    assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()
    assert x.grad.dtype == torch.float32 and x.grad.shape == x.shape
    # the same buffer next time: no second allocation
    assert tg.from_torch(x).grad.ptr == x.grad.data_ptr()
    a.grad.numpy()[:] = 3.0
    assert x.grad.tolist() == [3.0] * 4


def test_grad_allocation_uses_torch_not_tapegrad(monkeypatch):
    tga = sys.modules["tapegrad.array"]   # (tg.array is the class)

    def no_alloc(*args, **kwargs):
        raise AssertionError("from_torch allocated the gradient with tapegrad's allocator")

    if hasattr(tga, "alloc"):
        monkeypatch.setattr(tga, "alloc", no_alloc)
    x = torch.ones(100, requires_grad=True)
    a = tg.from_torch(x)
    assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()
    # the gradient array wraps torch's tensor, which is torch's own (not a view of tapegrad memory)
    assert a.grad.owner is x.grad and not hasattr(x.grad, "_tg_array") and x.grad._base is None


def test_allocated_grad_keeps_the_tensor_strides():
    t = torch.zeros(3, 4).t().contiguous().t().requires_grad_()   # column-major leaf
    a = tg.from_torch(t)
    assert t.grad.stride() == t.stride() and a.grad.strides == a.strides
    e = torch.zeros(1, 3).expand(4, 3).requires_grad_()           # an expanded leaf
    ae = tg.from_torch(e)
    assert e.grad.stride() == (0, 1) and ae.grad.strides == ae.strides


def test_existing_grad_and_explicit_grads():
    x = torch.zeros(3, requires_grad=True)
    x.grad = torch.full((3,), 2.0)
    assert tg.from_torch(x).grad.ptr == x.grad.data_ptr()
    g = torch.ones(3)
    a = tg.from_torch(torch.zeros(3), grad=g)
    assert a.requires_grad and a.grad.ptr == g.data_ptr()
    ga = tg.zeros(3)
    b = tg.from_torch(torch.zeros(3), grad=ga, requires_grad=False)  # a given grad wins
    assert b.grad is ga and b.requires_grad
    v = torch.zeros(4, 3, requires_grad=True)
    av = tg.from_torch(v, dtype=tg.vec3)
    assert av.grad.dtype is tg.vec3 and av.grad.shape == (4,) and av.grad.ptr == v.grad.data_ptr()


def test_requires_grad_false_leaves_the_tensor_alone():
    x = torch.zeros(4, requires_grad=True)
    a = tg.from_torch(x, requires_grad=False)
    assert not a.requires_grad and a.grad is None and x.grad is None
    b = tg.from_torch(x.detach())
    assert b.grad is None and x.grad is None


def test_requires_grad_true_on_a_plain_tensor_attaches_a_grad():
    x = torch.zeros(3)
    a = tg.from_torch(x, requires_grad=True)
    assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()


def test_non_leaf_tensor_does_not_warn():
    x = torch.ones(3, requires_grad=True)
    y = x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = tg.from_torch(y)
    assert a.grad is not None


def test_grad_errors():
    with pytest.raises(TypeError, match="floating-point"):
        tg.from_torch(torch.zeros(3, dtype=torch.int32), requires_grad=True)
    with pytest.raises(GradLayoutError) as e:
        tg.from_torch(torch.zeros(3), grad=torch.zeros(4))
    assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)
    with pytest.raises(GradLayoutError):
        tg.from_torch(torch.zeros(3, 4), grad=torch.zeros(4, 3).t())      # other strides
    with pytest.raises(GradLayoutError):
        tg.from_torch(torch.zeros(3), grad=tg.zeros(3, dtype=tg.float64))
    with pytest.raises(TypeError):
        tg.from_torch(torch.zeros(3), grad=[0.0, 0.0, 0.0])
    with pytest.raises(GradLayoutError):
        tg.from_torch(torch.zeros(3, 4), grad=torch.zeros(4, 3).t(), return_ctype=True)
    # grad= on integer data: refused as requires_grad=True is (an integer array got a gradient)
    for kw in ({}, {"return_ctype": True}):
        with pytest.raises(TypeError, match=r"from_torch\(grad=\.\.\.\): arrays of tapegrad.int32 cannot carry"):
            tg.from_torch(torch.zeros(3, dtype=torch.int32), grad=torch.zeros(3, dtype=torch.int32), **kw)


def test_to_torch_grads():
    p = tg.zeros(3, dtype=tg.float32, requires_grad=True)
    tp = tg.to_torch(p)
    assert tp.requires_grad and tp.is_leaf and tp.grad is not None
    assert tp.grad.data_ptr() == p.grad.ptr
    p.grad.numpy()[:] = 5.0
    assert tp.grad.tolist() == [5.0, 5.0, 5.0]
    assert tg.to_torch(p, requires_grad=False).grad is None
    assert not tg.to_torch(p, requires_grad=False).requires_grad
    q = tg.zeros(2)
    tq = tg.to_torch(q, requires_grad=True)
    assert tq.requires_grad and tq.grad is None
    v = tg.zeros(4, dtype=tg.vec3, requires_grad=True)
    assert tg.to_torch(v).grad.shape == (4, 3)
    with pytest.raises(TypeError, match="gradients"):
        tg.to_torch(tg.zeros(3, dtype=tg.int32), requires_grad=True)


def test_torch_optimizer_steps_a_tapegrad_parameter_in_place():
    p = tg.array(np.array([1.0, -2.0], np.float32), requires_grad=True)
    tp = tg.to_torch(p)
    opt = torch.optim.SGD([tp], lr=0.5)
    p.grad.numpy()[:] = [1.0, 1.0]
    opt.step()
    assert p.numpy().tolist() == [0.5, -2.5]


# ----------------------------------------------------------------------------- ownership

def test_in_place_metadata_changes_are_seen():
    t = torch.zeros(3, 4)
    assert tg.from_torch(t).shape == (3, 4)
    t.t_()
    assert tg.from_torch(t).shape == (4, 3) and tg.from_torch(t).strides == (4, 16)
    t.resize_(10)
    a = tg.from_torch(t)
    assert a.shape == (10,) and a.ptr == t.data_ptr()


# ------------------------------------------------------------------------------- streams

def test_streams_on_the_cpu_are_clear_errors():
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.stream_to_torch("cpu")
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.stream_from_torch("cpu")
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.stream_from_torch(torch.device("cpu"))
    if not torch.cuda.is_available():   # torch's current stream without CUDA: torch said AssertionError
        with pytest.raises(RuntimeError, match="stream_from_torch: torch sees no CUDA device"):
            tg.stream_from_torch()


def test_release_after_without_a_stream_is_a_no_op():
    from tapegrad.bridges._base import pending_releases, release_after
    release_after(None, object())
    assert pending_releases() == 0


# ---------------------------------------------------------------------------------- CUDA

@pytest.mark.cuda
def test_cuda_round_trip_and_grads():
    with tg.ScopedDevice("cuda:0"):
        w = tg.zeros(16, dtype=tg.vec3, device="cuda:0", requires_grad=True)
        t = tg.to_torch(w)
        assert t.is_cuda and t.shape == (16, 3) and t.data_ptr() == w.ptr
        assert t.grad.data_ptr() == w.grad.ptr
        t.detach().add_(1.0)
        torch.cuda.synchronize()
        assert np.all(w.numpy() == 1.0)
        x = torch.zeros(8, 2, device="cuda:0", requires_grad=True)
        a = tg.from_torch(x, dtype=tg.vec2)
        assert a.device is tg.get_device("cuda:0") and a.ptr == x.data_ptr()
        assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()
        d = tg.from_torch(x, dtype=tg.vec2, return_ctype=True)
        assert d.tg_device is tg.get_device("cuda:0") and d.grad == x.grad.data_ptr()


@pytest.mark.cuda
def test_cuda_devices():
    assert tg.device_from_torch(torch.device("cuda:0")) is tg.get_device("cuda:0")
    assert tg.device_from_torch("cuda:0") is tg.get_device("cuda:0")
    cur = torch.cuda.current_device()
    assert tg.device_from_torch(torch.device("cuda")) is tg.get_device(f"cuda:{cur}")
    assert tg.device_from_torch("cuda") is tg.get_device(f"cuda:{cur}")
    assert tg.device_to_torch("cuda:0") == "cuda:0"


@pytest.mark.cuda
def test_cuda_streams_preserve_blocking_semantics():
    ts = torch.cuda.Stream(device="cuda:0")
    s = tg.stream_from_torch(ts)
    assert s.cuda_stream == ts.cuda_stream and s.is_blocking is False and s.device is tg.get_device("cuda:0")
    d = tg.stream_from_torch("cuda:0")
    assert d.cuda_stream == torch.cuda.current_stream(0).cuda_stream and d.is_blocking is True
    assert tg.stream_from_torch().cuda_stream == torch.cuda.current_stream().cuda_stream
    own = tg.Stream("cuda:0")
    t2 = tg.stream_to_torch(own)
    assert t2.cuda_stream == own.cuda_stream and t2._tg_stream is own
    assert tg.Stream("cuda:0").is_blocking is True
    cur = tg.stream_to_torch("cuda:0")
    assert cur.cuda_stream == tg.get_device("cuda:0").stream.cuda_stream
    assert s._owner is ts, "the tapegrad stream keeps the torch stream alive"


@pytest.mark.cuda
def test_cuda_grad_allocation_orders_tapegrad_after_torch():
    ts = torch.cuda.Stream(device="cuda:0")
    with torch.cuda.stream(ts), tg.ScopedDevice("cuda:0"):
        x = torch.empty(1 << 20, device="cuda:0").requires_grad_()
        a = tg.from_torch(x)
        assert a.grad.ptr == x.grad.data_ptr()
        # tapegrad's stream now waits for torch's zero fill: reading on tapegrad's stream sees zeros
        assert float(np.abs(a.grad.numpy()).max()) == 0.0


@pytest.mark.cuda
def test_cuda_release_after_keeps_objects_until_the_stream_passes():
    from tapegrad.bridges._base import pending_releases, release_after
    s = tg.Stream("cuda:0", blocking=False)
    obj = tg.zeros(1 << 20, device="cuda:0")
    ref = weakref.ref(obj)
    release_after(s, obj)
    del obj
    s.synchronize()
    tg.synchronize()
    assert pending_releases() == 0
    gc.collect()
    assert ref() is None


@pytest.mark.cuda
def test_cuda_to_torch_on_a_non_blocking_stream_defers_release():
    from tapegrad.bridges._base import pending_releases
    ts = torch.cuda.Stream(device="cuda:0")
    with torch.cuda.stream(ts):
        w = tg.zeros(1 << 20, device="cuda:0")
        ref = weakref.ref(w)
        t = tg.to_torch(w)
        t.add_(1.0)
        del w, t
        gc.collect()
        assert ref() is not None or pending_releases() == 0
    ts.synchronize()
    tg.synchronize()
    assert pending_releases() == 0
    gc.collect()
    assert ref() is None


def test_from_torch_retain_grad():
    """retain_grad= as in Warp: the write adjoint leaves the shared gradient in place."""
    from ._bridge_kernels import square
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = torch.zeros(2, requires_grad=True)
    xw = tg.from_torch(x)
    for retain, want in ((True, [1.0, 1.0]), (False, [0.0, 0.0])):
        yw = tg.from_torch(y, retain_grad=retain)
        assert yw.retain_grad is retain
        tape = tg.Tape()
        with tape:
            tg.launch(square, dim=2, inputs=[xw], outputs=[yw])
        y.grad.fill_(1.0)
        tape.backward()
        assert y.grad.tolist() == want and x.grad.tolist()[1] > 0
    c = tg.from_torch(y, return_ctype=True, retain_grad=True)
    assert c.flags & tg.types.ARRAY_FLAG_RETAIN_GRAD
    with pytest.raises(ValueError, match=r"from_torch\(retain_grad=True\).*no gradient"):
        tg.from_torch(torch.zeros(2), retain_grad=True)
