"""Host vector/matrix values as Warp's tests pin them: repr, refused keys, from_ptr, the legacy
scalar switch, and wp.constant's refusal of tuples and lists."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg


def test_repr_names_non_default_component_types():
    assert repr(tg.vec2i(1, 2)) == "vec2i([1, 2])"
    assert repr(tg.vec3f(1.0, 2.0, 3.0)) == "vec3f([1.0, 2.0, 3.0])"
    assert repr(tg.vec4d(1.0, 2.0, 3.0, 4.0)) == "vec4d([float64(1.0), float64(2.0), float64(3.0), float64(4.0)])"
    assert repr(tg.types.vector(3, tg.int16)(1, 2, 3)) == "vec3s([int16(1), int16(2), int16(3)])"
    assert str(tg.vec4d(1.0, 2.0, 3.0, 4.0)) == "[1.0, 2.0, 3.0, 4.0]"


def test_none_key_is_a_key_error():
    with pytest.raises(KeyError, match="Invalid key None, expected int or slice"):
        tg.vec3(1, 2, 3)[None]
    with pytest.raises(KeyError, match="Invalid key None, expected int or pair of ints"):
        tg.mat22(1, 2, 3, 4)[None]
    m = tg.mat22(1, 2, 3, 4)
    with pytest.raises(KeyError, match="Invalid key None"):
        m[None] = 0
    # numpy's own functions (a None inside a tuple: a new axis) keep working
    assert np.atleast_2d(tg.vec3(1, 2, 3)).shape == (1, 3)
    np.testing.assert_array_equal(np.cross(tg.vec3(1, 0, 0), tg.vec3(0, 1, 0)), [0, 0, 1])


def test_from_ptr_copies_the_components():
    src = np.array([1.5, -2.0, 3.25, 4.0], dtype=np.float64)
    m = tg.mat22d.from_ptr(src.ctypes.data)
    assert isinstance(m, tg.mat22d) and m == tg.mat22d(1.5, -2.0, 3.25, 4.0)
    src[0] = 9.0
    assert m[0, 0] == 1.5   # a copy
    h = np.array([0.5, 1.0, 2.0], dtype=np.float16)
    assert tg.vec3h.from_ptr(h.ctypes.data) == tg.vec3h(0.5, 1.0, 2.0)
    with pytest.raises(RuntimeError, match="NULL pointer exception"):
        tg.vec3.from_ptr(0)


def test_legacy_scalar_return_types():
    assert tg.config.legacy_scalar_return_types is False
    assert isinstance(tg.vec3h(1, 2, 3)[0], np.float16)
    try:
        tg.config.legacy_scalar_return_types = True
        assert type(tg.vec3h(1.0, 2.0, 3.0)[0]) is float
        assert type(tg.types.vector(3, tg.int16)(1, 2, 3)[1]) is int
        assert type(tg.mat22d(1, 2, 3, 4)[0, 0]) is float
    finally:
        tg.config.legacy_scalar_return_types = False
    assert isinstance(tg.mat22d(1, 2, 3, 4)[0, 0], np.float64)


def test_constant_refuses_tuples_and_lists():
    with pytest.raises(TypeError, match=r"Invalid constant type: <class 'tuple'>$"):
        tg.constant((1, 2, 3))
    with pytest.raises(TypeError, match=r"Invalid constant type: <class 'list'>$"):
        tg.constant([1.0, 2.0])
    assert tg.constant(tg.vec3i(1, 2, 3)) == tg.vec3i(1, 2, 3)


def test_mixed_component_types_have_no_implicit_conversion():
    # as in kernels (and Warp's host values): f32 with f64 values has no overload
    m_f, m_d = tg.mat22f(1.0, 2.0, 3.0, 4.0), tg.mat22d(1.0, 2.0, 3.0, 4.0)
    with pytest.raises(RuntimeError, match=r"^Couldn't find a function 'mul' compatible with the arguments "
                                           r"'mat22f, mat22d'$"):
        m_f * m_d
    with pytest.raises(RuntimeError, match="'mul' compatible with the arguments 'mat22f, vec2d'"):
        m_f @ tg.vec2d(1.0, 2.0)
    v_f, v_d = tg.vec3f(1.0, 2.0, 3.0), tg.vec3d(0.5, 0.25, 0.125)
    with pytest.raises(RuntimeError, match="'add' compatible with the arguments 'vec3f, vec3d'"):
        v_f + v_d
    with pytest.raises(RuntimeError, match="'sub' compatible with the arguments 'vec3d, vec3f'"):
        v_d - v_f
    # one component type: the products and sums as before, exact in float64
    np.testing.assert_array_equal(m_d * m_d, np.array([[1.0, 2.0], [3.0, 4.0]]) @ np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert v_d + v_d == tg.vec3d(1.0, 0.5, 0.25) and isinstance(v_f - v_f, tg.vec3f)
    assert 2.0 - v_d == tg.vec3d(1.5, 1.75, 1.875)


def test_mixed_component_types_divide_and_update_in_place_with_no_conversion():
    """``/`` and the in-place ``+=``, ``-=``, ``/=`` follow the rule of ``+``: ``vec3f / vec3d``
    gave a vec3d, and ``v_f += v_d`` rounded the float64 sum into the float32 value silently
    (Warp: no 'div'/'add' overload; a Warp value has no in-place add, ``+=`` is ``+``)."""
    v_f, v_d = tg.vec3f(1.0, 2.0, 3.0), tg.vec3d(0.1, 0.2, 0.3)
    with pytest.raises(RuntimeError, match="'div' compatible with the arguments 'vec3f, vec3d'"):
        v_f / v_d
    with pytest.raises(RuntimeError, match="'div' compatible with the arguments 'vec3d, vec3f'"):
        v_d / v_f
    for op, name in (("__iadd__", "add"), ("__isub__", "sub"), ("__itruediv__", "div")):
        w = tg.vec3f(1.0, 2.0, 3.0)
        with pytest.raises(RuntimeError, match=f"'{name}' compatible with the arguments 'vec3f, vec3d'"):
            getattr(w, op)(v_d)
        assert w == tg.vec3f(1.0, 2.0, 3.0)     # left as it was
    w = tg.vec3d(1.0, 2.0, 3.0)
    w += v_d
    w /= tg.vec3d(2.0, 2.0, 2.0)
    w -= tg.vec3d(0.0, 0.0, 1.0)
    w /= 2.0
    np.testing.assert_array_equal(w, (np.array([1.1, 2.2, 3.3]) / 2.0 - np.array([0.0, 0.0, 1.0])) / 2.0)
    assert isinstance(w, tg.vec3d)


def test_numpy_scalars_of_another_type_do_not_promote_a_value():
    """``vec3f * np.float64(2)`` (or ``tg.float64(2)``) gave a vec3d: numpy promoted the value
    to the scalar's precision. Warp has no such overload ('mul' of 'vec3f, float64'); scalars
    of the value's own type and Python numbers (literals) combine as before."""
    v = tg.vec3f(1.0, 2.0, 3.0)
    for op, name in (("__mul__", "mul"), ("__add__", "add"), ("__sub__", "sub"), ("__truediv__", "div"),
                     ("__imul__", "mul")):
        for s in (np.float64(2.0), np.int64(2)):
            with pytest.raises(RuntimeError, match=f"'{name}' compatible with the arguments 'vec3f, {s.dtype.name}'"):
                getattr(tg.vec3f(1.0, 2.0, 3.0), op)(s)
    with pytest.raises(RuntimeError, match="'mul' compatible with the arguments 'mat22d, float32'"):
        tg.mat22d(1.0, 2.0, 3.0, 4.0) * np.float32(2.0)
    r = v * np.float32(0.5)
    assert isinstance(r, tg.vec3f) and r == tg.vec3f(0.5, 1.0, 1.5)
    r = v * 0.1
    assert isinstance(r, tg.vec3f)
    np.testing.assert_array_equal(r, np.array([1.0, 2.0, 3.0], np.float32) * np.float32(0.1))
    assert isinstance(tg.vec3d(1.0, 2.0, 3.0) / np.float64(4.0), tg.vec3d)
