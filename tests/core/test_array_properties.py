"""Property-based round trips: numpy <-> array <-> __array_interface__ over dtypes x shapes x
strides (hypothesis); on the GPU, CuPy/torch <-> __cuda_array_interface__."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg
from tapegrad import types

SCALARS = [s for s in types.SCALARS.values() if s is not types.bfloat16]   # hypothesis cannot draw ml_dtypes' bf16


@st.composite
def strided_arrays(draw):
    """A numpy array of a random scalar dtype, 1-4 dims, viewed with random positive steps."""
    s = draw(st.sampled_from(SCALARS))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5))
    steps = tuple(draw(st.integers(1, 3)) for _ in shape)
    base_shape = tuple(n * k for n, k in zip(shape, steps))
    base = draw(hnp.arrays(s.np_dtype, base_shape, elements=hnp.from_dtype(s.np_dtype, allow_nan=False)))
    view = base[tuple(slice(None, None, k) for k in steps)]
    return s, view


@settings(max_examples=150, deadline=None)
@given(strided_arrays())
def test_alias_round_trip_keeps_strides_and_values(case):
    s, view = case
    a = tg.array(view, copy=False, device="cpu")
    assert a.dtype is s and a.shape == view.shape and a.strides == view.strides
    assert a.ptr == view.ctypes.data
    back = a.numpy()
    assert back.dtype == view.dtype and back.strides == view.strides
    np.testing.assert_array_equal(back, view)
    iface = a.__array_interface__
    assert iface["version"] == 3 and iface["data"][0] == a.ptr and iface["shape"] == view.shape
    np.testing.assert_array_equal(np.asarray(a), view)


@settings(max_examples=150, deadline=None)
@given(strided_arrays())
def test_copy_round_trip_is_contiguous_and_independent(case):
    s, view = case
    a = tg.array(view, device="cpu")
    assert a.is_contiguous and a.ptr != view.ctypes.data
    np.testing.assert_array_equal(a.numpy(), view)
    c = tg.clone(a)
    np.testing.assert_array_equal(c.numpy(), view)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([tg.vec2, tg.vec3, tg.vec4, tg.vec3d, tg.mat22, tg.mat33d, tg.vec2i]),
       st.integers(1, 6), st.integers(1, 3))
def test_vector_matrix_component_dims(dt, n, step):
    host = np.arange(n * step * dt.length, dtype=dt.scalar.np_dtype).reshape((n * step,) + dt.inner_shape)[::step]
    a = tg.array(host, dtype=dt, copy=False, device="cpu")
    assert a.shape == (n,) and a.strides == (host.strides[0],)
    assert a.__array_interface__["shape"] == (n,) + dt.inner_shape
    np.testing.assert_array_equal(a.numpy(), host)


@settings(max_examples=60, deadline=None)
@given(strided_arrays())
def test_launch_accepts_any_interface_object(case):
    s, view = case
    if s.kind != "float" or s is tg.float16 or view.ndim != 1:
        return
    out = np.zeros(view.shape[0], dtype=view.dtype)
    k = _copy_kernels[s]
    tg.launch(k, dim=view.shape[0], inputs=[view], outputs=[out], device="cpu")
    np.testing.assert_array_equal(out, view)


@tg.kernel
def _copy32(x: tg.array[tg.float32], y: tg.array[tg.float32]):
    i = tg.tid()
    y[i] = x[i]


@tg.kernel
def _copy64(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i]


_copy_kernels = {tg.float32: _copy32, tg.float64: _copy64}


@pytest.mark.cuda
@settings(max_examples=40, deadline=None)
@given(strided_arrays())
def test_cuda_array_interface_round_trips(case):
    import cupy as cp
    s, view = case
    if s is tg.bool:
        return
    c = cp.asarray(view)
    a = tg.array(c)                                   # CAI v3 in: zero-copy
    assert a.ptr == c.data.ptr and a.strides == c.strides and a.dtype is s
    back = cp.asarray(a)                              # CAI v3 out
    assert back.data.ptr == a.ptr
    np.testing.assert_array_equal(cp.asnumpy(back), view)
    np.testing.assert_array_equal(a.numpy(), view)


@pytest.mark.cuda
@pytest.mark.torch
@settings(max_examples=20, deadline=None)
@given(st.sampled_from([np.float32, np.float64, np.int32, np.int64, np.uint8]),
       hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=6))
def test_torch_cuda_array_interface(npdt, shape):
    import torch
    t = torch.from_numpy(np.arange(int(np.prod(shape))).astype(npdt).reshape(shape)).cuda()
    a = tg.array(t)
    assert a.ptr == t.data_ptr() and a.shape == tuple(t.shape)
    np.testing.assert_array_equal(a.numpy(), t.cpu().numpy())
    t2 = torch.as_tensor(a, device="cuda")
    assert t2.data_ptr() == a.ptr
