"""Arrays on the CPU: construction, ownership, views, protocols, errors (R2, R3, B4)."""
import gc
import subprocess
import sys
import weakref

import numpy as np
import pytest

import tapegrad as tg


@pytest.fixture(autouse=True)
def _on_cpu():
    """These tests are about CPU arrays; on a GPU machine the default device is cuda:0."""
    with tg.ScopedDevice("cpu"):
        yield


def test_array_from_list_copies_and_numpy_is_a_view():
    w = tg.array([1.0, 2.0, 3.0], dtype=float, device="cpu")
    assert w.shape == (3,) and w.dtype is tg.float32 and w.strides == (4,)
    v = w.numpy()
    v[1] = 9.0
    assert w.numpy()[1] == 9.0
    assert np.asarray(w).__array_interface__["data"][0] == w.ptr


def test_copy_flag_controls_aliasing():
    n = np.arange(6, dtype=np.float32)
    c = tg.array(n)
    a = tg.array(n, copy=False)
    n[0] = 42
    assert c.numpy()[0] == 0 and a.numpy()[0] == 42
    assert a.ptr == n.ctypes.data


def test_alias_keeps_owner_alive():
    n = np.arange(1000, dtype=np.float64)
    ref = weakref.ref(n)
    a = tg.array(n, copy=False)
    del n
    gc.collect()
    assert ref() is not None
    assert a.numpy()[999] == 999
    del a
    gc.collect()
    assert ref() is None


def test_views_keep_base_alive():
    a = tg.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = a[1:, ::2]
    del a
    gc.collect()
    assert v.numpy().tolist() == [[4, 6], [8, 10]]
    assert v.strides == (16, 8) and not v.is_contiguous


def test_wrap_any_array_interface_object():
    class Foreign:
        def __init__(self):
            self.buf = np.arange(4, dtype=np.int32)
            self.__array_interface__ = self.buf.__array_interface__

    f = Foreign()
    a = tg.array(f, copy=False)
    assert a.ptr == f.buf.ctypes.data and a.dtype is tg.int32
    assert a.owner is f


def test_masked_interface_is_rejected():
    class Masked:
        def __init__(self):
            self.buf = np.zeros(3, dtype=np.float32)
            self.__array_interface__ = dict(self.buf.__array_interface__, mask=np.ones(3, bool))

    from tapegrad.protocols import interface_layout
    with pytest.raises(ValueError, match="mask"):
        interface_layout(Masked().__array_interface__, "data")


def test_vector_dtype_folds_trailing_dims():
    pts = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    p = tg.from_numpy(pts, dtype=tg.vec3, requires_grad=True)
    assert p.shape == (10,) and p.dtype is tg.vec3 and p.grad.shape == (10,)
    assert np.allclose(p.numpy(), pts) and p.numpy().shape == (10, 3)
    m = tg.array(np.zeros((4, 2, 2)), dtype=tg.mat22d)
    assert m.shape == (4,) and m.strides == (32,)


def test_from_numpy_infers_vectors_like_warp():
    assert tg.from_numpy(np.zeros((5, 3), np.float32)).dtype is tg.vec3
    assert tg.from_numpy(np.zeros((5, 3, 3), np.float32)).dtype is tg.mat33
    assert tg.from_numpy(np.zeros((5, 30), np.float32)).dtype is tg.float32


def test_vector_dtype_errors():
    with pytest.raises(RuntimeError, match="trailing"):
        tg.array(np.zeros((10, 2), np.float32), dtype=tg.vec3)
    with pytest.raises(RuntimeError, match="contiguous"):
        tg.array(np.zeros((3, 10), np.float32).T, dtype=tg.vec3, copy=False)


def test_factories():
    assert tg.zeros(4).numpy().tolist() == [0] * 4
    assert tg.ones((2, 2), dtype=tg.int64).numpy().sum() == 4
    assert tg.full(3, 2.5).numpy().tolist() == [2.5] * 3
    assert tg.full(3, 7).dtype is tg.int32
    assert tg.ones(2, dtype=tg.vec2).numpy().tolist() == [[1, 1], [1, 1]]
    z = tg.zeros_like(tg.ones(3, requires_grad=True))
    assert z.requires_grad and z.numpy().sum() == 0
    assert tg.ones_like(z).numpy().sum() == 3
    assert tg.full_like(z, 4.0).numpy().tolist() == [4, 4, 4]
    assert tg.empty((2, 3)).shape == (2, 3)


def test_warp_ref_names_the_zero_copy_source():
    # Warp's private `_ref` is tapegrad's `owner`: the NumPy array a zero-copy array views
    n = np.ones(8, dtype=np.int32)
    a = tg.array(n, dtype=int, copy=False, device="cpu")
    assert a._ref is n and a.owner is n
    n.fill(2)
    assert (a.numpy() == 2).all()
    # a copy does not reference its source
    c = tg.array(n, copy=True)
    assert c._ref is c.owner and c._ref is not n
    with pytest.raises(AttributeError):
        a._ref = n   # read-only, as owner


def test_copy_false_converts_what_it_cannot_alias():
    # another scalar type cannot be aliased: copy=False converts it into a copy, as Warp does;
    # two such arrays get buffers of their own
    b = np.ones(8, dtype=np.int64)
    c = np.zeros(8, dtype=np.int64)
    bw = tg.array(b, dtype=int, copy=False, device="cpu")
    cw = tg.array(c, dtype=int, copy=False, device="cpu")
    assert bw.dtype is tg.int32 and bw.ptr != b.ctypes.data and bw.ptr != cw.ptr
    b.fill(5)
    np.testing.assert_array_equal(bw.numpy(), np.ones(8, np.int32))
    np.testing.assert_array_equal(cw.numpy(), np.zeros(8, np.int32))
    # the same type still aliases
    assert tg.array(b, dtype=tg.int64, copy=False).ptr == b.ctypes.data


def test_grad_ownership():
    a = tg.zeros(3, requires_grad=True)
    assert a.grad is not None and a.grad.shape == (3,)
    g = tg.ones(3)
    a.grad = g
    assert a.grad is g
    a.requires_grad = False
    assert a.grad is None
    with pytest.raises(ValueError, match="shape"):
        a.grad = tg.zeros(4)
    with pytest.raises(ValueError, match="dtype"):
        a.grad = tg.zeros(3, dtype=tg.float64)
    # integer arrays take Warp's flag but keep no gradient (issue 28)
    i = tg.zeros(3, dtype=tg.int32, requires_grad=True)
    assert i.requires_grad and i.grad is None


def test_clone_copy_assign_fill():
    a = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    a.grad.fill_(1.0)
    b = tg.clone(a)
    assert b.ptr != a.ptr and b.numpy().tolist() == [0, 1, 2, 3]
    assert b.grad.numpy().tolist() == [1] * 4 and b.grad.ptr != a.grad.ptr
    c = tg.zeros(4)
    tg.copy(c, a)
    assert c.numpy().tolist() == [0, 1, 2, 3]
    d = tg.zeros(8)
    tg.copy(d, a, dest_offset=2, src_offset=1, count=2)
    assert d.numpy().tolist() == [0, 0, 1, 2, 0, 0, 0, 0]
    c.assign([5, 6, 7, 8])
    assert c.numpy().tolist() == [5, 6, 7, 8]
    c.zero_()
    assert not c.numpy().any()
    with pytest.raises(ValueError, match="shape"):
        c.assign(tg.zeros(3))
    with pytest.raises(TypeError, match="dtypes"):
        tg.copy(c, tg.zeros(4, dtype=tg.int32))


def test_strided_copy_and_setitem():
    x = tg.zeros((3, 4), dtype=tg.float64)
    x[1] = 5.0
    x[2, 3] = 7.0
    assert x.numpy()[1].tolist() == [5] * 4 and x.numpy()[2, 3] == 7
    assert x[2, 3] == 7.0
    t = tg.clone(x.transpose())
    assert t.is_contiguous and np.array_equal(t.numpy(), x.numpy().T)


def test_reshape_flatten_view():
    a = tg.array(np.arange(6, dtype=np.float32))
    r = a.reshape((2, 3))
    assert r.ptr == a.ptr and r.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    assert r.reshape(-1).shape == (6,)
    assert a.view(tg.int32).dtype is tg.int32
    with pytest.raises(ValueError, match="reshape"):
        a.reshape((4,))
    with pytest.raises(ValueError, match="contiguous"):
        r.transpose().reshape((6,))


def test_ptr_wrapping_and_dead_owner():
    n = np.arange(4, dtype=np.float32)
    a = tg.array(ptr=n.ctypes.data, dtype=tg.float32, shape=(4,), owner=n)
    assert a.numpy().tolist() == [0, 1, 2, 3]

    class Owner:
        pass

    o = Owner()
    r = weakref.ref(o)
    del o
    with pytest.raises(RuntimeError, match="dead"):
        tg.array(ptr=n.ctypes.data, dtype=tg.float32, shape=(4,), owner=r)


def test_deleter_called_once():
    calls = []
    n = np.zeros(4, np.float32)
    a = tg.array(ptr=n.ctypes.data, dtype=float, shape=4, deleter=lambda p, s: calls.append((p, s)))
    del a
    gc.collect()
    assert calls == [(n.ctypes.data, 16)]


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(shape=(1, 2, 3, 4, 5)), ValueError, "at most 4"),
    (dict(shape=(-1,)), ValueError, ">= 0"),
    (dict(shape=3, dtype="float128"), TypeError, "dtype"),
    (dict(ptr=1024, shape=(4,), dtype=float, strides=(-4,)), ValueError, "negative"),
    (dict(ptr=1024, shape=(4,), dtype=float, strides=(2,)), ValueError, "multiple"),
    (dict(ptr=1024, shape=(4,)), TypeError, "dtype is required"),
    (dict(data=[1.0], ptr=1024), RuntimeError, "either"),
    (dict(shape=3, device="cuda:7" if not tg.is_cuda_available() else "cuda:99"), RuntimeError, "CUDA"),
    (dict(shape=3, device="gpu"), ValueError, "expected 'cpu'"),
])
def test_bad_input_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        tg.array(**kwargs)


def test_string_data_rejected():
    with pytest.raises(TypeError):
        tg.array(np.array(["a", "b"]))


def test_annotation_forms():
    assert tg.array[float] == tg.ArrayType(tg.float32, 1)
    assert tg.array2d[tg.vec3] == tg.ArrayType(tg.vec3, 2)
    ann = tg.array(dtype=float, ndim=3)
    assert ann._tg_annotation() == tg.ArrayType(tg.float32, 3)


def test_struct_arrays():
    @tg.struct
    class Pair:
        a: float
        b: int

    s = tg.zeros(3, dtype=Pair)
    assert s.numpy().dtype.names == ("a", "b")
    s.numpy()["b"][1] = 5
    assert s.numpy()["b"].tolist() == [0, 5, 0]


def test_cpu_array_has_no_cuda_interface():
    a = tg.zeros(3)
    assert not hasattr(a, "__cuda_array_interface__")
    assert a.__array_interface__["version"] == 3


def test_to_same_device_is_identity():
    a = tg.zeros(3)
    assert a.to("cpu") is a


def test_clean_exit_with_live_views():
    code = ("import numpy as np, tapegrad as tg\n"
            "a = tg.zeros(100, requires_grad=True)\n"
            "views = [a.numpy(), np.asarray(a), a[2:], a.grad.numpy()]\n"
            "b = tg.array(np.ones(10), copy=False)\n"
            "keep = (views, b)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == ""


def test_host_writes_out_of_range_raise_like_reads():
    """a[10] = 1 on a 3-element array used to write a[1] (the index was taken modulo the size)."""
    a = tg.zeros(3, device="cpu")
    for bad in (3, 10, -4, -10):
        with pytest.raises(IndexError, match=f"array index {bad} out of range for dimension 0 of size 3"):
            a[bad] = 1.0
    assert a.numpy().tolist() == [0.0, 0.0, 0.0]
    a[-1] = 5.0
    a[0] = 2.0
    assert a.numpy().tolist() == [2.0, 0.0, 5.0]
    b = tg.zeros((2, 3), device="cpu")
    b[1, -1] = 7.0
    b[0] = [1.0, 2.0, 3.0]
    assert b.numpy().tolist() == [[1.0, 2.0, 3.0], [0.0, 0.0, 7.0]]
    with pytest.raises(IndexError, match="out of range for dimension 1 of size 3"):
        b[0, 3] = 1.0
    with pytest.raises(IndexError, match="too many indices"):
        b[0, 0, 0] = 1.0


def test_fill_refuses_values_that_are_not_numbers_of_the_component_shape():
    a = tg.zeros(3, device="cpu")
    for bad in ("x", None, [1.0, 2.0], [[1.0]]):
        with pytest.raises(TypeError, match=r"fill_\(value\): expected a number"):
            a.fill_(bad)
    a.fill_(np.float32(3.0))
    assert a.numpy().tolist() == [3.0, 3.0, 3.0]
    v = tg.zeros(2, dtype=tg.vec3, device="cpu")
    v.fill_((1.0, 2.0, 3.0))
    assert v.numpy().tolist() == [[1.0, 2.0, 3.0]] * 2
    with pytest.raises(TypeError, match=r"shape \(3,\)"):
        v.fill_((1.0, 2.0))
