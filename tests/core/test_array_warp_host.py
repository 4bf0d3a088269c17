"""Issue 28: host-side array behaviour Warp's tests pin (test_array.py), checked against NumPy and
the values Warp 1.19 gives: arrays of structs built and filled on the host (``numpy_dtype``,
``full``/``fill_`` with a struct value, ``list()`` of struct instances, ``cptr()``), ``list()``
flat with Python values, ``view`` between scalar and vector/matrix dtypes, Warp's error texts
(negative shapes, reshape, view), and an array's truth value in kernels (``if arr:``)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ReshapeError, ViewDtypeError


@tg.struct
class Particle:
    id: int
    mass: float
    pos: tg.vec3


def _particle(i):
    return Particle(id=i, mass=0.5 * i, pos=tg.vec3(1.0 * i, 2.0, 3.0))


def test_struct_numpy_dtype_and_value():
    dt = Particle.numpy_dtype()
    assert dt.names == ("id", "mass", "pos")
    assert dt.itemsize == ctypes.sizeof(Particle._tg_struct.ctype)
    rec = _particle(3).numpy_value()
    assert rec["id"] == 3 and rec["mass"] == 1.5 and rec["pos"].tolist() == [3.0, 2.0, 3.0]


def test_full_fill_and_list_of_structs(device):
    a = tg.full(4, _particle(2), device=device)        # dtype from the value
    assert a.dtype is Particle._tg_struct
    na = a.numpy()
    assert na["id"].tolist() == [2] * 4 and na["pos"].tolist() == [[2.0, 2.0, 3.0]] * 4
    a.fill_(_particle(5))
    items = a.list()
    assert len(items) == 4 and all(isinstance(p, Particle) for p in items)
    assert items[0].id == 5 and items[0].mass == 2.5 and items[0].pos == tg.vec3(5.0, 2.0, 3.0)
    b = tg.zeros((2, 3), dtype=Particle, device=device)
    b.fill_(_particle(1))
    assert len(b.list()) == 6     # flat, as Warp's
    with pytest.raises(TypeError, match="instance of struct Particle"):
        a.fill_(3.0)


def test_structured_numpy_roundtrip():
    na = np.zeros(5, dtype=Particle.numpy_dtype())
    na["id"] = np.arange(5)
    na["pos"] = (1, 2, 3)
    a = tg.array(na, dtype=Particle)
    np.testing.assert_array_equal(a.numpy(), na)
    na["mass"] = 7.0
    b = tg.from_numpy(na, Particle)
    assert b.numpy()["mass"].tolist() == [7.0] * 5


def test_cptr_reads_elements():
    a = tg.array([_particle(i) for i in range(3)], dtype=Particle)
    p = a.cptr()
    assert [p[i].id for i in range(3)] == [0, 1, 2]
    assert p[2].pos == tg.vec3(2.0, 2.0, 3.0)
    fa = tg.array(np.array([1.5, 2.5], dtype=np.float32), dtype=float)   # cptr does not keep fa alive
    assert fa.cptr()[1] == 2.5


def test_list_is_flat_with_python_values():
    assert tg.full((3, 4), 99, dtype=tg.int64).list() == [99] * 12
    assert all(type(x) is int for x in tg.full((2, 2), 7, dtype=tg.int32).list())
    assert all(type(x) is float for x in tg.full(3, 1.5, dtype=tg.float32).list())
    assert all(type(x) is bool for x in tg.full(3, True, dtype=tg.bool).list())
    vs = tg.array(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=tg.vec3).list()
    assert vs == [tg.vec3(0.0, 1.0, 2.0), tg.vec3(3.0, 4.0, 5.0)]


def test_negative_shapes_name_warps_text():
    for shape in (-1, -(2 ** 32), (10, -1)):
        with pytest.raises(ValueError, match="Array shapes must be non-negative"):
            tg.zeros(shape=shape, dtype=int)


def test_reshape_infers_and_errors_as_warp():
    a = tg.array(np.arange(6, dtype=np.float32), dtype=float)
    assert a.reshape((-1, 3)).shape == (2, 3)
    with pytest.raises(ReshapeError, match=r"cannot reshape array of shape \(6,\) \(size 6\) into shape \(4, 2\) "
                                           r"\(size 8\)") as info:
        a.reshape((4, 2))
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, ValueError)


def test_view_between_scalars_vectors_and_matrices(device):
    v = tg.array(np.arange(16, dtype=np.float32).reshape(4, 4), dtype=tg.vec4, device=device)
    s = v.view(dtype=float)
    assert s.shape == (4, 4)
    np.testing.assert_array_equal(s.numpy(), np.arange(16).reshape(4, 4))
    m = tg.array(np.arange(16, dtype=np.float32).reshape(4, 2, 2), dtype=float, device=device).view(dtype=tg.mat22)
    assert m.shape == (4,)
    np.testing.assert_array_equal(m.numpy(), np.arange(16).reshape(4, 2, 2))
    assert tg.array([1, 2, 3, 4], dtype=float, device=device).view(dtype=tg.vec4).shape == (1,)
    np.testing.assert_array_equal(v.view(dtype=tg.quat).numpy(), v.numpy())
    np.testing.assert_array_equal(v.view(dtype=tg.uint32).numpy(),
                                  np.arange(16, dtype=np.float32).reshape(4, 4).view(np.uint32))
    # the gradient follows a view of the same scalar type
    g = tg.zeros(2, dtype=tg.vec4, device=device, requires_grad=True)
    assert g.view(dtype=float).grad.shape == (2, 4)


@pytest.mark.parametrize("src,dtype,text", [
    (lambda: tg.zeros(9, dtype=tg.float32), tg.uint16,
     "dtype uint16 from source dtype float32: source dtype has size 4 bytes, but target dtype has size 2 bytes"),
    (lambda: tg.zeros(4, dtype=tg.vec4), tg.float64,
     "dtype float64 from source dtype vec4f: source scalar dtype float32 has size 4 bytes, but target dtype has "
     "size 8 bytes"),
    (lambda: tg.zeros((4, 4), dtype=tg.float32), tg.vec4d,
     "dtype vec4d from source dtype float32: source dtype has size 4 bytes, but target scalar dtype float64 has "
     "size 8 bytes"),
    (lambda: tg.zeros((4, 3), dtype=tg.float32), tg.vec4, r"trailing dims of shape \(4, 3\)"),
])
def test_view_errors_as_warp(src, dtype, text):
    with pytest.raises(ViewDtypeError, match=text) as info:
        src().view(dtype=dtype)
    assert isinstance(info.value, TypeError)


@tg.kernel
def truth(a: tg.array(dtype=float), b: tg.array(dtype=float), out: tg.array(dtype=int)):
    r = 0
    if not a:
        r += 1
    if b:
        r += 10
    if a:
        r += 100
    if not b:
        r += 1000
    out[0] = r


def test_array_truth_value_in_kernels(device):
    # Warp's empty arrays have no memory, so `if arr:` is false for them
    out = tg.zeros(1, dtype=int, device=device)
    tg.launch(truth, dim=1, inputs=[tg.zeros(0, dtype=float, device=device), tg.zeros(8, dtype=float, device=device)],
              outputs=[out], device=device)
    assert out.numpy()[0] == 11


@tg.struct
class Holder:
    n: int
    half: tg.float16
    grid: tg.array2d(dtype=float)


def test_struct_array_dtype_and_array_fields_in_list(device):
    grid = tg.zeros((2, 3), dtype=float, device=device)
    h = Holder(n=4, half=-1.25, grid=grid)
    a = tg.full((2, 2), h, dtype=Holder, device=device)
    assert a.dtype == Holder and a.dtype != Particle     # Warp's: the struct class
    items = a.list()
    assert len(items) == 4 and items[3].n == 4 and items[3].half == -1.25
    g = items[3].grid          # an array around the field's memory (not owning it, as Warp's)
    assert g.ptr == grid.ptr and g.shape == (2, 3) and g.dtype is grid.dtype


def test_array_from_data_with_dtype_any():
    import typing
    src = tg.array(np.arange(12, dtype=np.float32).reshape(3, 4), dtype=float)
    dst = tg.array(src, dtype=typing.Any, shape=(3, 2, 2))     # Warp's: Any takes the data's dtype
    assert dst.dtype is src.dtype and dst.shape == (3, 2, 2)
    np.testing.assert_array_equal(dst.numpy(), np.arange(12).reshape(3, 2, 2))
