"""PaddlePaddle bridge without kernels: conversions, dtypes, devices, strides, component dims,
gradients (paddle-allocated, installed zero-copy), ownership, descriptors, streams and errors
(R5, R10-R14, R19, B3, B4, B8). Real paddle on the CPU."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import BridgeTypeError, GradLayoutError  # noqa: E402

from . import _bridge_checks as checks  # noqa: E402

pytestmark = pytest.mark.paddle

def _fill(t, v):
    t.set_value(paddle.full(t.shape, v, dtype=t.dtype))


def _requiring_grad(t):
    t.stop_gradient = False
    return t


def _no_paddle_import_noise(err: str) -> str:
    # paddle itself warns at import when no ccache is installed (docs/paddle.md); nothing else may appear
    return "\n".join(ln for ln in err.splitlines()
                     if "ccache" not in ln and ln.strip() != "warnings.warn(warning_message)")


FW = checks.Framework(
    name="paddle", float32=paddle.float32, from_=tg.from_paddle, to=tg.to_paddle, tensor=paddle.to_tensor,
    requiring_grad=_requiring_grad, strides=lambda t: t.strides, numpy=lambda t: t.numpy(), fill=_fill,
    transpose=lambda t: t.T, grad_leaf_code="t = paddle.ones([100])\nt.stop_gradient = False",
    stderr_ok=_no_paddle_import_noise)


def P(x, dtype="float32", stop_gradient=True):
    return paddle.to_tensor(np.asarray(x, dtype=dtype), stop_gradient=stop_gradient)


@pytest.fixture(autouse=True)
def _on_cpu():
    with tg.ScopedDevice("cpu"):
        yield


# ----------------------------------------------------------------------------- zero-copy

@pytest.mark.parametrize("check", checks.ALL, ids=lambda c: c.__name__)
def test_shared_bridge_behaviour(check):
    """Zero-copy round trips, ownership, descriptors, the layout cache, imports, clean exit."""
    check(FW)


PADDLE_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("name", PADDLE_DTYPES)
def test_every_scalar_dtype_round_trips(name):
    dt = getattr(tg, name)
    pdt = tg.dtype_to_paddle(dt)
    assert pdt == getattr(paddle, name)
    assert tg.dtype_from_paddle(pdt) is dt
    a = tg.zeros(5, dtype=dt)
    t = tg.to_paddle(a)
    assert t.dtype == pdt and t.data_ptr() == a.ptr
    b = tg.from_paddle(t)
    assert b.dtype is dt and b.ptr == a.ptr


def test_dtype_maps_vectors_structs_and_errors():
    assert tg.dtype_to_paddle(tg.vec3) == paddle.float32
    assert tg.dtype_to_paddle(tg.mat22d) == paddle.float64
    assert tg.dtype_to_paddle(float) == paddle.float32
    assert tg.dtype_from_paddle(paddle.bfloat16) is tg.bfloat16
    # paddle has no wide unsigned types (paddle.uint16 is a legacy bfloat16 alias): the signed twin, as Warp
    for dt, twin in ((tg.uint16, paddle.int16), (tg.uint32, paddle.int32), (tg.uint64, paddle.int64)):
        assert tg.dtype_to_paddle(dt) == twin
    assert tg.dtype_to_paddle(tg.vec3ui) == paddle.int32
    with pytest.raises(TypeError, match="complex64"):
        tg.dtype_from_paddle(paddle.complex64)
    with pytest.raises(TypeError, match="no tapegrad equivalent"):
        tg.dtype_from_paddle("float32")

    @tg.struct
    class S:
        x: float

    with pytest.raises(TypeError, match="struct"):
        tg.dtype_to_paddle(S)
    with pytest.raises(TypeError):
        tg.dtype_to_paddle("not a dtype")


def test_bfloat16_zero_copy_with_grads_and_as_raw_bits():
    t = P([1.0, -2.0, 0.5]).astype("bfloat16")
    t.stop_gradient = False
    a = tg.from_paddle(t)
    assert a.dtype is tg.bfloat16 and a.ptr == t.data_ptr() and a.grad.ptr == t.grad.data_ptr()
    assert a.numpy().astype(np.float32).tolist() == [1.0, -2.0, 0.5]
    back = tg.to_paddle(a)
    assert back.dtype == paddle.bfloat16 and back.data_ptr() == t.data_ptr() and back.grad.data_ptr() == a.grad.ptr
    raw = tg.from_paddle(t, dtype=tg.uint16, requires_grad=False)
    assert raw.dtype is tg.uint16 and raw.numpy().tolist() == t.numpy().tolist()   # paddle: bf16 numpy = raw bits
    with pytest.raises(BridgeTypeError):
        tg.from_paddle(t, dtype=tg.float16)


def test_devices():
    cpu = tg.get_device("cpu")
    assert tg.device_from_paddle(paddle.CPUPlace()) is cpu
    assert tg.device_from_paddle(P([1.0]).place) is cpu
    assert tg.device_from_paddle("cpu") is cpu
    assert tg.device_to_paddle("cpu") == "cpu" and tg.device_to_paddle(cpu) == "cpu"
    assert tg.device_to_paddle(paddle.CPUPlace()) == "cpu"
    assert tg.device_to_paddle() in ("cpu",) or tg.device_to_paddle().startswith("gpu:")
    with pytest.raises(TypeError, match="expected a paddle place"):
        tg.device_from_paddle(3.5)
    with pytest.raises(RuntimeError, match="unsupported paddle device 'xpu:0'"):
        tg.device_from_paddle("xpu:0")
    with pytest.raises(RuntimeError, match="unsupported paddle device"):
        tg.device_from_paddle("gpu:x")
    with pytest.raises((ValueError, RuntimeError)):
        tg.device_to_paddle("gpu:7")


@pytest.mark.skipif(paddle.is_compiled_with_cuda(), reason="checks the no-CUDA errors")
def test_cuda_names_without_cuda_are_clear_errors():
    with pytest.raises(RuntimeError, match="no CUDA"):
        tg.device_from_paddle("gpu")
    if not tg.is_cuda_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            tg.device_from_paddle("gpu:0")


# -------------------------------------------------------------------------- strides, dims

def test_scalar_dtypes_keep_strides_without_copy():
    base = P(np.arange(24).reshape(4, 6))
    cases = {
        "transposed": base.T,
        "sliced": base[1:, 2:5],
        "offset": base[2],
        "as_strided": paddle.as_strided(base, [3, 4], [0, 1]),    # a 0-stride view (paddle's expand copies)
        "scalar": paddle.to_tensor(4.0),
    }
    for label, t in cases.items():
        a = tg.from_paddle(t)
        assert a.ptr == t.data_ptr(), label
        if t.ndim:
            assert a.shape == tuple(t.shape), label
            assert a.strides == tuple(4 * s for s in t.strides), label
            assert np.array_equal(a.numpy(), t.numpy()), label
        else:
            assert a.shape == (1,) and a.numpy()[0] == 4.0
    assert tg.from_paddle(cases["as_strided"]).strides[0] == 0
    assert not tg.from_paddle(cases["transposed"]).is_contiguous


def test_vector_and_matrix_dtypes_consume_trailing_dims():
    v = P(np.arange(20).reshape(10, 2))
    a = tg.from_paddle(v, dtype=tg.vec2)
    assert a.shape == (10,) and a.dtype is tg.vec2 and a.strides == (8,)
    assert np.array_equal(a.numpy(), v.numpy())
    m = paddle.zeros([5, 3, 3], dtype="float64")
    b = tg.from_paddle(m, dtype=tg.mat33d)
    assert b.shape == (5,) and b.strides == (72,)
    assert tg.from_paddle(paddle.zeros([4, 6, 3]), dtype=tg.vec3).shape == (4, 6)
    s = tg.from_paddle(paddle.zeros([10, 3])[::2], dtype=tg.vec3)   # outer dims may be strided
    assert s.shape == (5,) and s.strides == (24,)
    assert tg.from_paddle(paddle.zeros([3]), dtype=tg.vec3).shape == (1,)
    t = tg.to_paddle(b)                                                 # and back: component dims reappear
    assert list(t.shape) == [5, 3, 3] and t.dtype == paddle.float64 and t.data_ptr() == m.data_ptr()


@pytest.mark.parametrize("make, dt", [
    (lambda: paddle.zeros([2, 10]).T, tg.vec2),                  # trailing dim not contiguous
    (lambda: paddle.zeros([10, 3]), tg.vec2),                    # wrong inner size
    (lambda: paddle.zeros([4, 3, 3]).transpose([0, 2, 1]), tg.mat33),
    (lambda: paddle.zeros([4, 2, 3]), tg.mat33),
    (lambda: paddle.zeros([2]), tg.vec3),
])
def test_bad_component_dims_raise_runtime_error(make, dt):
    with pytest.raises(RuntimeError, match="trailing|contiguous"):
        tg.from_paddle(make(), dtype=dt)


def test_non_contiguous_tensor_with_a_vector_dtype_names_the_problem():
    with pytest.raises(RuntimeError, match=r"from_paddle: tensor of shape \(10, 2\).*vec2.*must be contiguous"):
        tg.from_paddle(paddle.zeros([2, 10]).T, dtype=tg.vec2)


def test_too_many_dims_and_bad_dtypes():
    with pytest.raises(RuntimeError, match="4 dimensions"):
        tg.from_paddle(paddle.zeros([1, 1, 1, 1, 2]))
    assert tg.from_paddle(paddle.zeros([1, 1, 1, 1, 3]), dtype=tg.vec3).shape == (1, 1, 1, 1)
    with pytest.raises(BridgeTypeError) as e:
        tg.from_paddle(paddle.zeros([3], dtype="float64"), dtype=tg.float32)
    assert isinstance(e.value, TypeError) and isinstance(e.value, RuntimeError)
    assert "paddle.float64" in str(e.value) and "float32" in str(e.value)
    with pytest.raises(TypeError, match=r"from_paddle: paddle dtype paddle.complex64 has no tapegrad|complex64"):
        tg.from_paddle(paddle.zeros([3], dtype="complex64"))
    with pytest.raises(TypeError):
        tg.from_paddle(paddle.zeros([3]), dtype="nope")

    @tg.struct
    class S:
        x: float

    with pytest.raises(TypeError, match="struct"):
        tg.from_paddle(paddle.zeros([3]), dtype=S)


def test_compatible_reinterpretations():
    u = tg.from_paddle(P([-1, 2], "int32"), dtype=tg.uint32)
    assert u.dtype is tg.uint32 and u.numpy()[0] == 2**32 - 1
    b = tg.from_paddle(paddle.to_tensor([True, False]), dtype=tg.uint8)
    assert b.numpy().tolist() == [1, 0]
    assert tg.from_paddle(paddle.zeros([4], dtype="int16"), dtype=tg.uint16).dtype is tg.uint16


def test_wrong_argument_types():
    with pytest.raises(TypeError, match="from_paddle: expected a paddle tensor, got ndarray"):
        tg.from_paddle(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="to_paddle: expected a tapegrad array, got Tensor"):
        tg.to_paddle(paddle.zeros([3]))

    @tg.struct
    class S:
        x: float

    with pytest.raises(BridgeTypeError, match="struct"):
        tg.to_paddle(tg.zeros(2, dtype=S))
    with pytest.raises(ValueError, match="no memory"):
        tg.to_paddle(tg.array(dtype=float, ndim=1))
    ro = tg.zeros(3)
    ro.readonly = True
    with pytest.raises(ValueError, match="read-only"):
        tg.to_paddle(ro)


def test_empty_tensors():
    e = paddle.zeros([0])
    a = tg.from_paddle(e)
    assert a.shape == (0,) and a.size == 0
    t = tg.to_paddle(tg.zeros(0))
    assert list(t.shape) == [0]


# --------------------------------------------------------------------------------- grads

def test_from_paddle_shares_and_allocates_the_grad_with_paddle():
    x = paddle.zeros([4])
    x.stop_gradient = False
    assert x.grad is None
    a = tg.from_paddle(x)
    assert a.requires_grad and a.grad is not None
    assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()
    assert x.grad.dtype == paddle.float32 and list(x.grad.shape) == [4]
    assert tg.from_paddle(x).grad.ptr == x.grad.data_ptr()     # the same buffer: no second allocation
    a.grad.numpy()[:] = 3.0
    assert x.grad.numpy().tolist() == [3.0] * 4


def test_grad_allocation_uses_paddle_not_tapegrad(monkeypatch):
    import tapegrad.storage as storage

    def no_alloc(*args, **kwargs):
        raise AssertionError("from_paddle allocated the gradient with tapegrad's allocator")

    for name in ("alloc", "_alloc"):
        if hasattr(storage, name):
            monkeypatch.setattr(storage, name, no_alloc)
    x = paddle.ones([100])
    x.stop_gradient = False
    a = tg.from_paddle(x)
    assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()
    assert isinstance(a.grad.owner, paddle.Tensor)      # the gradient array wraps paddle's own tensor


def test_paddle_backward_accumulates_into_the_shared_grad():
    x = P([1.0, 2.0, 3.0], stop_gradient=False)
    a = tg.from_paddle(x)
    a.grad.numpy()[:] = 10.0                 # tapegrad writes first
    (x * x).sum().backward()                 # paddle adds 2x into the same buffer
    assert x.grad.data_ptr() == a.grad.ptr
    assert a.grad.numpy().tolist() == [12.0, 14.0, 16.0]


def test_allocated_grad_keeps_the_tensor_strides():
    t = P(np.zeros((4, 3))).T                # column-major view; paddle grads only on leaves,
    t = paddle.as_strided(paddle.zeros([12]), [3, 4], [1, 3])     # so build a strided leaf
    t.stop_gradient = False
    assert t.is_leaf and not t.is_contiguous()
    a = tg.from_paddle(t)
    assert list(t.grad.strides) == [1, 3] and a.grad.strides == a.strides == (4, 12)
    a.grad.numpy()[:] = np.arange(12).reshape(3, 4)
    assert np.array_equal(t.grad.numpy(), np.arange(12).reshape(3, 4))


def test_non_leaf_tensors_get_a_paddle_grad_the_array_keeps():
    x = P([1.0, 2.0], stop_gradient=False)
    y = x * 2
    a = tg.from_paddle(y)
    assert a.grad is not None and isinstance(a.grad.owner, paddle.Tensor) and y.grad is None


def test_existing_grad_and_explicit_grads():
    x = P([0.0, 0.0, 0.0], stop_gradient=False)
    x.grad_ = paddle.full([3], 2.0)
    assert tg.from_paddle(x).grad.ptr == x.grad.data_ptr()
    g = paddle.ones([3])
    a = tg.from_paddle(paddle.zeros([3]), grad=g)
    assert a.requires_grad and a.grad.ptr == g.data_ptr()
    ga = tg.zeros(3)
    b = tg.from_paddle(paddle.zeros([3]), grad=ga, requires_grad=False)   # a given grad wins
    assert b.grad is ga and b.requires_grad
    v = paddle.zeros([4, 3])
    v.stop_gradient = False
    av = tg.from_paddle(v, dtype=tg.vec3)
    assert av.grad.dtype is tg.vec3 and av.grad.shape == (4,) and av.grad.ptr == v.grad.data_ptr()


def test_requires_grad_false_and_stop_gradient_leave_the_tensor_alone():
    x = paddle.zeros([4])
    x.stop_gradient = False
    a = tg.from_paddle(x, requires_grad=False)
    assert not a.requires_grad and a.grad is None and x.grad is None
    b = tg.from_paddle(x.detach())
    assert b.grad is None and x.grad is None
    c = tg.from_paddle(paddle.zeros([4]))                   # stop_gradient=True (paddle's default)
    assert not c.requires_grad and c.grad is None


def test_requires_grad_true_on_a_stop_gradient_tensor_attaches_a_grad():
    x = paddle.zeros([3])
    a = tg.from_paddle(x, requires_grad=True)
    assert x.grad is not None and a.grad.ptr == x.grad.data_ptr()


def test_grad_errors():
    with pytest.raises(TypeError, match="floating-point"):
        tg.from_paddle(paddle.zeros([3], dtype="int32"), requires_grad=True)
    with pytest.raises(GradLayoutError, match="dtype, shape, byte strides and device") as e:
        tg.from_paddle(paddle.zeros([3]), grad=paddle.zeros([4]))                  # shape
    assert isinstance(e.value, ValueError) and isinstance(e.value, RuntimeError)
    with pytest.raises(GradLayoutError):
        tg.from_paddle(paddle.zeros([3, 4]), grad=paddle.zeros([4, 3]).T)          # strides
    with pytest.raises(GradLayoutError):
        tg.from_paddle(paddle.zeros([3]), grad=tg.zeros(3, dtype=tg.float64))     # dtype
    with pytest.raises(BridgeTypeError):
        tg.from_paddle(paddle.zeros([3]), grad=paddle.zeros([3], dtype="float64"))
    with pytest.raises(TypeError, match=r"from_paddle\(grad=...\): expected a tapegrad array or a paddle tensor"):
        tg.from_paddle(paddle.zeros([3]), grad=[0.0, 0.0, 0.0])
    with pytest.raises(GradLayoutError):
        tg.from_paddle(paddle.zeros([3, 4]), grad=paddle.zeros([4, 3]).T, return_ctype=True)
    x = paddle.zeros([3])
    x.stop_gradient = False
    x.grad_ = paddle.zeros([4])      # paddle accepts a grad of another shape; tapegrad does not
    with pytest.raises(GradLayoutError):
        tg.from_paddle(x)


@pytest.mark.skipif(not tg.is_cuda_available(), reason="needs a tapegrad CUDA device")
def test_grad_on_another_device_is_a_grad_layout_error():
    with pytest.raises(GradLayoutError, match="device"):
        tg.from_paddle(paddle.zeros([3]), grad=tg.zeros(3, device="cuda:0"))


def test_to_paddle_grads():
    p = tg.zeros(3, dtype=tg.float32, requires_grad=True)
    tp = tg.to_paddle(p)
    assert not tp.stop_gradient and tp.is_leaf and tp.grad is not None
    assert tp.grad.data_ptr() == p.grad.ptr
    p.grad.numpy()[:] = 5.0
    assert tp.grad.numpy().tolist() == [5.0, 5.0, 5.0]
    assert tg.to_paddle(p, requires_grad=False).grad is None
    assert tg.to_paddle(p, requires_grad=False).stop_gradient
    q = tg.zeros(2)
    tq = tg.to_paddle(q, requires_grad=True)
    assert not tq.stop_gradient and tq.grad is None
    v = tg.zeros(4, dtype=tg.vec3, requires_grad=True)
    assert list(tg.to_paddle(v).grad.shape) == [4, 3]
    with pytest.raises(TypeError, match="gradients"):
        tg.to_paddle(tg.zeros(3, dtype=tg.int32), requires_grad=True)


def test_paddle_backward_writes_the_tapegrad_grad():
    p = tg.array(np.array([1.0, 2.0], np.float32), requires_grad=True)
    tp = tg.to_paddle(p)
    (tp * tp).sum().backward()
    assert p.grad.numpy().tolist() == [2.0, 4.0] and tp.grad.data_ptr() == p.grad.ptr


def test_paddle_optimizer_steps_a_tapegrad_parameter_in_place():
    p = tg.array(np.array([1.0, -2.0], np.float32), requires_grad=True)
    tp = tg.to_paddle(p)
    opt = paddle.optimizer.SGD(learning_rate=0.5, parameters=[tp])
    p.grad.numpy()[:] = [1.0, 1.0]
    opt.step()
    assert p.numpy().tolist() == [0.5, -2.5]


# ----------------------------------------------------------------------------- ownership

def test_in_place_metadata_changes_are_seen():
    t = paddle.zeros([3, 4])
    assert tg.from_paddle(t).shape == (3, 4)
    t.reshape_([4, 3])
    assert tg.from_paddle(t).shape == (4, 3) and tg.from_paddle(t).strides == (12, 4)


# ------------------------------------------------------------------------------- streams

def test_streams_without_cuda_are_clear_errors():
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.stream_to_paddle("cpu")
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.stream_from_paddle("cpu")
    with pytest.raises(RuntimeError, match="not a CUDA device"):
        tg.stream_from_paddle(paddle.CPUPlace())
    if not paddle.is_compiled_with_cuda():
        with pytest.raises(RuntimeError, match="no CUDA"):
            tg.stream_from_paddle()
        with pytest.raises(RuntimeError, match="no CUDA"):
            tg.stream_to_paddle()


def test_from_paddle_retain_grad():
    t = paddle.zeros([3])
    t.stop_gradient = False
    a = tg.from_paddle(t, retain_grad=True)
    assert a.retain_grad is True and a.grad is not None
    with pytest.raises(ValueError, match=r"from_paddle\(retain_grad=True\).*no gradient"):
        tg.from_paddle(paddle.zeros([3]), retain_grad=True)
