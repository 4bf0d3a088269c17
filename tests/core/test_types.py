"""The dtype table and its mappings (R4)."""
import ctypes

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import types

SCALARS = list(types.SCALARS.values())


@pytest.mark.parametrize("s", SCALARS, ids=lambda s: s.name)
def test_scalar_row_is_consistent(s):
    assert np.dtype(tg.dtype_to_numpy(s)) == s.np_dtype
    assert tg.dtype_from_numpy(s.np_dtype) is s
    assert tg.dtype_from_numpy(s.np_dtype.type) is s
    assert ctypes.sizeof(s.ctype) == s.size == s.np_dtype.itemsize
    assert types.dtype_from_dlpack(*types.dtype_to_dlpack(s)[:2]) is s


def test_types_imports_no_framework():
    import subprocess
    import sys
    code = ("import sys; from tapegrad import types; assert types.bfloat16.torch_name == 'bfloat16'; "
            "bad = [m for m in ('torch', 'paddle', 'jax', 'ml_dtypes') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_bfloat16_row():
    b = tg.bfloat16
    assert (b.kind, b.bits, b.size, b.dl_code) == ("float", 16, 2, 4) and b.is_float
    assert types.dtype_from_dlpack(4, 16) is b and types.dtype_to_dlpack(b) == (4, 16, 1)
    assert (b.torch_name, b.paddle_name, b.jax_name) == ("bfloat16",) * 3
    assert b.np_dtype.itemsize == 2
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert b.np_dtype == np.dtype(ml_dtypes.bfloat16)
    assert tg.dtype_from_numpy(ml_dtypes.bfloat16) is b and types.resolve_dtype(np.dtype(ml_dtypes.bfloat16)) is b
    assert tg.dtype_from_numpy(np.uint16) is tg.uint16     # raw-bit storage never shadows uint16


def test_bfloat16_is_a_kernel_type():   # kernel arithmetic: tests/lang/test_lang_bfloat16.py
    assert types.type_of(tg.array(dtype=tg.bfloat16), arg="x").dtype is tg.bfloat16
    assert types.type_of(tg.vector(2, tg.bfloat16), arg="x").scalar is tg.bfloat16


def test_python_types_resolve_like_warp():
    assert types.resolve_dtype(float) is tg.float32
    assert types.resolve_dtype(int) is tg.int32
    assert types.resolve_dtype(bool) is tg.bool
    assert types.resolve_dtype(np.float64) is tg.float64


def test_unsupported_types_raise_type_error():
    with pytest.raises(TypeError, match="vec3"):
        tg.dtype_to_numpy(tg.vec3)
    with pytest.raises(TypeError, match="complex"):
        tg.dtype_from_numpy(np.complex64)
    with pytest.raises(TypeError, match="dtype"):
        types.resolve_dtype("not a type")
    with pytest.raises(TypeError):
        types.dtype_from_dlpack(10, 8)  # float8_e4m3fn has no tapegrad type


def test_vector_and_matrix_types_are_cached_and_named():
    assert tg.vector(3, tg.float32) is tg.vec3
    assert tg.vector(3, float) is tg.vec3
    assert tg.vector(2, tg.float64) is tg.vec2d
    assert tg.matrix((3, 3), tg.float32) is tg.mat33
    assert tg.vec3i.scalar is tg.int32 and tg.vec4h.scalar is tg.float16
    assert tg.mat22d.inner_shape == (2, 2) and tg.mat22d.size == 32
    assert tg.quat.length == 4
    v = tg.vector(7, tg.float64)
    assert v.inner_shape == (7,) and v.size == 56


def test_vector_constructor_in_python_scope():
    assert tg.vec3(1, 2, 3).tolist() == [1.0, 2.0, 3.0]
    assert tg.vec3(2.0).tolist() == [2.0, 2.0, 2.0]
    assert tg.mat22(1, 2, 3, 4).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(ValueError, match="expected 3 elements, got 2"):
        tg.vec3(1, 2)


def test_bad_vector_matrix_arguments():
    with pytest.raises(ValueError, match="non-negative"):
        tg.vector(-1, float)
    with pytest.raises(ValueError, match="non-negative"):
        tg.vector(True, float)
    with pytest.raises(ValueError, match="two non-negative"):
        tg.matrix((3,), float)
    with pytest.raises(ValueError, match="two non-negative"):
        tg.matrix((2, -1), float)


def test_empty_vector_and_matrix_types_as_warp():
    # Warp accepts length 0 / shape (0, 0): the type of an empty slice
    v0 = tg.types.vector(0, float)
    assert v0.length == 0 and v0.__name__ == "vec0f" and v0().shape == (0,)
    m0 = tg.types.matrix((0, 0), tg.float64)
    assert m0().shape == (0, 0)
    # two empty values are equal whatever their shapes (Warp: m[4:] == mat00() in Python scope)
    assert tg.types.matrix((0, 4), float)() == m0() and v0() == m0()
    assert not (tg.vec2(0.0) == tg.mat22(0.0)) and not (tg.vec2(0.0) == v0())
    with pytest.raises(TypeError):
        tg.vector(3, tg.vec3)


def test_struct_layout_matches_numpy_and_ctypes():
    @tg.struct
    class Body:
        pos: tg.vec3
        mass: float
        count: int
        data: tg.array(dtype=float)

    st = Body._tg_struct
    assert [f for f, _ in st.fields] == ["pos", "mass", "count", "data"]
    assert st.np_dtype.itemsize == ctypes.sizeof(st.ctype)
    b = Body(mass=2.0)
    assert b.mass == 2.0 and b.count == 0 and b.data is None
    c = st.to_ctype(b)
    assert c.mass == 2.0
    with pytest.raises(TypeError, match="no field"):
        Body(nope=1)


def test_struct_rejects_non_tapegrad_fields():
    with pytest.raises(TypeError, match="Bad.x"):
        @tg.struct
        class Bad:
            x: str


def test_abi_struct_sizes():
    assert ctypes.sizeof(types.ArrayDesc) == 88
    assert ctypes.sizeof(types.LaunchBounds) == 48
