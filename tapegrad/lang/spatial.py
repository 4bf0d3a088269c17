"""Transforms, spatial vectors and quaternion constructors: Warp's ``transform_*``,
``spatial_*`` and ``quat_rpy`` builtins, registered into the builtin table.

A transform is ``tg.transform`` (7 components: position, then quaternion x, y, z, w); a
spatial vector is a 6-vector (top: angular, bottom: linear), a spatial matrix 6x6. The C++
lives in ``runtime/spatial.h`` (inlined into units that use a ``tg::sp_`` function). Every
differentiable overload has finite-difference samples (``tests/lang/test_builtins_grad.py``:
``T`` is a transform token). Each builtin also runs in Python scope on numpy values.
"""
from __future__ import annotations

import numpy as np

from ..types import (
    TransformType,
    float16,
    float32,
    float64,
    quat,
    quatd,
    quath,
    transform,
    transformd,
    transformh,
)
from .builtins import NO, REGISTRY, Builtin, Sample, TypeRef
from .typeutil import is_float, is_int, is_mat, is_quat, is_scalar, is_vec, mat, vec

__all__ = ["QUATS", "TRANSFORMS"]

QUATS = {float32: quat, float64: quatd, float16: quath}
TRANSFORMS = {float32: transform, float64: transformd, float16: transformh}


def _xf(t):
    return isinstance(t, TransformType) and is_float(t.scalar)


def _v(t, n):
    return is_vec(t) and not is_quat(t) and not isinstance(t, TransformType) and t.length_ == n and is_float(t.scalar)


def _m33(t):
    return is_mat(t) and t.rows == 3 and t.cols == 3 and is_float(t.scalar)


def _rule(pred, result):
    def rule(ts):
        return result(ts) if pred(ts) else NO
    return rule


# ------------------------------------------------------------------------- numpy (host)

def _np_rotate(q, v):
    q = np.asarray(q, dtype=np.float64)
    u, w = q[:3], q[3]
    v = np.asarray(v, dtype=np.float64)
    return v * (2 * w * w - 1) + np.cross(u, v) * (2 * w) + u * (2 * np.dot(u, v))


def _np_qmul(a, b):
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([aw * bx + bw * ax + ay * bz - by * az, aw * by + bw * ay + az * bx - bz * ax,
                     aw * bz + bw * az + ax * by - bx * ay, aw * bw - ax * bx - ay * by - az * bz])


def _np_conj(q):
    return np.array([-q[0], -q[1], -q[2], q[3]])


def _f32(x):
    return np.asarray(x, dtype=np.float32)


def _host_transform_point(t, p):
    t = np.asarray(t, dtype=np.float64)
    return _f32(_np_rotate(t[3:], p) + t[:3])


def _host_transform_vector(t, v):
    return _f32(_np_rotate(np.asarray(t, dtype=np.float64)[3:], v))


def _host_transform_multiply(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return _f32(np.concatenate([_np_rotate(a[3:], b[:3]) + a[:3], _np_qmul(a[3:], b[3:])]))


def _host_transform_inverse(t):
    t = np.asarray(t, dtype=np.float64)
    qi = _np_conj(t[3:])
    return _f32(np.concatenate([-_np_rotate(qi, t[:3]), qi]))


def _host_quat_rpy(roll, pitch, yaw):
    cr, sr = np.cos(roll / 2), np.sin(roll / 2)
    cp, sp = np.cos(pitch / 2), np.sin(pitch / 2)
    cy, sy = np.cos(yaw / 2), np.sin(yaw / 2)
    return _f32([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                 cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])


def _host_quat_from_axis_angle(axis, angle):
    a = np.asarray(axis, dtype=np.float64)
    return _f32(np.concatenate([a * np.sin(angle / 2), [np.cos(angle / 2)]]))


def _host_spatial_cross(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return _f32(np.concatenate([np.cross(a[:3], b[:3]), np.cross(a[:3], b[3:]) + np.cross(a[3:], b[:3])]))


def _host_spatial_cross_dual(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return _f32(np.concatenate([np.cross(a[:3], b[:3]) + np.cross(a[3:], b[3:]), np.cross(a[:3], b[3:])]))


def _host_spatial_adjoint(r, s):
    m = np.zeros((6, 6), dtype=np.float32)
    m[:3, :3] = r
    m[3:, 3:] = r
    m[3:, :3] = s
    return m


# ----------------------------------------------------------------------------- builtins

V3, Q, T6 = "V3:any", "Q", "T"

Builtin("transform_identity", lambda: transform(), "the identity transform (float32)").add(
    lambda ts: transform if not ts else NO, lambda ts, r: (lambda a: "tg::sp_transform_identity<float>()"))
Builtin("transform_get_translation", lambda t: _f32(np.asarray(t)[:3]), "the position part of a transform").add(
    _rule(lambda ts: len(ts) == 1 and _xf(ts[0]), lambda ts: vec(3, ts[0].scalar)),
    "tg::sp_get_translation", "tg::adj_sp_get_translation", linear=(0,), samples=[Sample((T6,), "V3")])
Builtin("transform_get_rotation", lambda t: _f32(np.asarray(t)[3:]), "the rotation quaternion of a transform").add(
    _rule(lambda ts: len(ts) == 1 and _xf(ts[0]), lambda ts: QUATS[ts[0].scalar]),
    "tg::sp_get_rotation", "tg::adj_sp_get_rotation", linear=(0,), samples=[Sample((T6,), "Q")])
Builtin("transform_point", _host_transform_point, "apply a transform to a point: rotate, then translate").add(
    _rule(lambda ts: len(ts) == 2 and _xf(ts[0]) and _v(ts[1], 3) and ts[1].scalar is ts[0].scalar,
          lambda ts: ts[1]),
    "tg::sp_transform_point", "tg::adj_sp_transform_point", samples=[Sample((T6, V3), "V3")])
Builtin("transform_vector", _host_transform_vector, "apply a transform's rotation to a direction").add(
    _rule(lambda ts: len(ts) == 2 and _xf(ts[0]) and _v(ts[1], 3) and ts[1].scalar is ts[0].scalar,
          lambda ts: ts[1]),
    "tg::sp_transform_vector", "tg::adj_sp_transform_vector", samples=[Sample((T6, V3), "V3")])
Builtin("transform_multiply", _host_transform_multiply, "compose two transforms: a * b applies b first").add(
    _rule(lambda ts: len(ts) == 2 and _xf(ts[0]) and ts[1] is ts[0], lambda ts: ts[0]),
    "tg::sp_transform_multiply", "tg::adj_sp_transform_multiply", samples=[Sample((T6, T6), "T")])
# a * b of two transforms is their composition, as Warp's mul(transform, transform)
REGISTRY["mul"].add(_rule(lambda ts: len(ts) == 2 and _xf(ts[0]) and ts[1] is ts[0], lambda ts: ts[0]),
                    "tg::sp_transform_multiply", "tg::adj_sp_transform_multiply",
                    samples=[Sample((T6, T6), "T", "out[i] = {0} * {1}")])
Builtin("transform_inverse", _host_transform_inverse, "the inverse of a rigid transform").add(
    _rule(lambda ts: len(ts) == 1 and _xf(ts[0]), lambda ts: ts[0]),
    "tg::sp_transform_inverse", "tg::adj_sp_transform_inverse", samples=[Sample((T6,), "T")])

Builtin("spatial_top", lambda a: _f32(np.asarray(a)[:3]), "the first 3 components (angular) of a spatial vector").add(
    _rule(lambda ts: len(ts) == 1 and _v(ts[0], 6), lambda ts: vec(3, ts[0].scalar)),
    "tg::sp_top", "tg::adj_sp_top", linear=(0,), samples=[Sample(("V6:any",), "V3")])
Builtin("spatial_bottom", lambda a: _f32(np.asarray(a)[3:]), "the last 3 components (linear) of a spatial vector").add(
    _rule(lambda ts: len(ts) == 1 and _v(ts[0], 6), lambda ts: vec(3, ts[0].scalar)),
    "tg::sp_bottom", "tg::adj_sp_bottom", linear=(0,), samples=[Sample(("V6:any",), "V3")])
Builtin("spatial_dot", lambda a, b: np.float32(np.dot(a, b)), "dot product of two spatial vectors").add(
    _rule(lambda ts: len(ts) == 2 and _v(ts[0], 6) and ts[1] is ts[0], lambda ts: ts[0].scalar),
    "tg::sp_dot", "tg::adj_sp_dot", bilinear=True, samples=[Sample(("V6:any", "V6:any"), "S")])
Builtin("spatial_cross", _host_spatial_cross, "motion cross product (w_a x w_b, w_a x v_b + v_a x w_b)").add(
    _rule(lambda ts: len(ts) == 2 and _v(ts[0], 6) and ts[1] is ts[0], lambda ts: ts[0]),
    "tg::sp_cross", "tg::adj_sp_cross", bilinear=True, samples=[Sample(("V6:any", "V6:any"), "V6")])
Builtin("spatial_cross_dual", _host_spatial_cross_dual,
        "force cross product (w_a x w_b + v_a x v_b, w_a x v_b)").add(
    _rule(lambda ts: len(ts) == 2 and _v(ts[0], 6) and ts[1] is ts[0], lambda ts: ts[0]),
    "tg::sp_cross_dual", "tg::adj_sp_cross_dual", bilinear=True, samples=[Sample(("V6:any", "V6:any"), "V6")])
Builtin("spatial_adjoint", _host_spatial_adjoint, "the 6x6 matrix [[R, 0], [S, R]] of two 3x3 blocks").add(
    _rule(lambda ts: len(ts) == 2 and _m33(ts[0]) and ts[1] is ts[0], lambda ts: mat(6, 6, ts[0].scalar)),
    "tg::sp_adjoint", "tg::adj_sp_adjoint", linear=(0, 1), samples=[Sample(("M33:any", "M33:any"), "M66")])
Builtin("quat_rpy", _host_quat_rpy, "unit quaternion from roll (x), pitch (y) and yaw (z) angles").add(
    _rule(lambda ts: len(ts) == 3 and is_scalar(ts[0]) and is_float(ts[0]) and ts[1] is ts[0] and ts[2] is ts[0],
          lambda ts: QUATS.get(ts[0], NO)),
    "tg::sp_quat_rpy", "tg::adj_sp_quat_rpy", samples=[Sample(("S:any", "S:any", "S:any"), "Q")])

def _host_quat_to_matrix(q):
    return _f32(np.stack([_np_rotate(q, e) for e in np.eye(3)], axis=1))


def _host_transform_to_matrix(t):
    t = np.asarray(t, dtype=np.float64)
    m = np.eye(4, dtype=np.float32)
    m[:3, :3] = _host_quat_to_matrix(t[3:])
    m[:3, 3] = t[:3]
    return m


Builtin("quat_to_matrix", _host_quat_to_matrix, "the 3x3 rotation matrix of a quaternion").add(
    _rule(lambda ts: len(ts) == 1 and is_quat(ts[0]) and is_float(ts[0].scalar), lambda ts: mat(3, 3, ts[0].scalar)),
    "tg::sp_quat_to_matrix", "tg::adj_sp_quat_to_matrix", samples=[Sample((Q,), "M33")])
Builtin("transform_to_matrix", _host_transform_to_matrix, "the 4x4 homogeneous matrix [[R, p], [0, 1]]").add(
    _rule(lambda ts: len(ts) == 1 and _xf(ts[0]), lambda ts: mat(4, 4, ts[0].scalar)),
    "tg::sp_transform_to_matrix", "tg::adj_sp_transform_to_matrix", samples=[Sample((T6,), "M44")])

_QM_BRANCHES = {   # main component, diagonal signs, (component, a, b, sign): Warp's quat_from_matrix
    3: (3, (1, 1, 1), ((0, 2, 1, -1), (1, 0, 2, -1), (2, 1, 0, -1))),
    0: (0, (1, -1, -1), ((1, 0, 1, 1), (2, 2, 0, 1), (3, 2, 1, -1))),
    1: (1, (-1, 1, -1), ((2, 1, 2, 1), (0, 0, 1, 1), (3, 0, 2, -1))),
    2: (2, (-1, -1, 1), ((0, 2, 0, 1), (1, 1, 2, 1), (3, 1, 0, -1))),
}


def _host_quat_from_matrix(m):
    m = np.asarray(m, dtype=np.float64)
    d = np.diag(m)[:3]
    k = 3 if d.sum() >= 0 else (2 if d[2] > max(d[0], d[1]) else int(d[1] > d[0]))
    main, sgn, others = _QM_BRANCHES[k]
    s = 2 * np.sqrt(1 + np.dot(sgn, d))
    q = np.zeros(4)
    q[main] = s / 4
    for c, a, b, pm in others:
        q[c] = (m[a, b] + pm * m[b, a]) / s
    return _f32(q / np.linalg.norm(q))


def _host_transform_from_matrix(m):
    m = np.asarray(m, dtype=np.float64)
    return _f32(np.concatenate([m[:3, 3], _host_quat_from_matrix(m)]))


def _square(t, n):
    return is_mat(t) and t.rows == n and t.cols == n and is_float(t.scalar)


Builtin("quat_from_matrix", _host_quat_from_matrix,
        "the unit quaternion of a rotation matrix (3x3, or the top-left block of a 4x4)").add(
    _rule(lambda ts: len(ts) == 1 and (_square(ts[0], 3) or _square(ts[0], 4)), lambda ts: QUATS[ts[0].scalar]),
    "tg::sp_quat_from_matrix", "tg::adj_sp_quat_from_matrix",
    samples=[Sample(("M33:any",), "Q"), Sample(("M44:any",), "Q")])
Builtin("transform_from_matrix", _host_transform_from_matrix,
        "the transform of a 4x4 homogeneous matrix (translation column, rotation block)").add(
    _rule(lambda ts: len(ts) == 1 and _square(ts[0], 4), lambda ts: TRANSFORMS[ts[0].scalar]),
    "tg::sp_transform_from_matrix", "tg::adj_sp_transform_from_matrix", samples=[Sample(("M44:any",), "T")])

def _np_normalize(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def _host_quat_between_vectors(a, b):
    a, b = _np_normalize(a), _np_normalize(b)
    return _f32(_np_normalize(np.concatenate([np.cross(a, b), [1 + np.dot(a, b)]])))


def _host_quat_to_rpy(q):
    x, y, z, w = np.asarray(q, dtype=np.float64)
    return _f32([np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
                 np.arcsin(np.clip(2 * (w * y - z * x), -1, 1)),
                 np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))])


def _host_quat_slerp(a, b, t):
    a = np.asarray(a, dtype=np.float64)
    inc = _np_qmul(_np_conj(a), np.asarray(b, dtype=np.float64))
    axis = _np_normalize(inc[:3]) * (-1 if inc[3] < 0 else 1)
    angle = 2 * np.arctan2(np.linalg.norm(inc[:3]), abs(inc[3]))
    return _f32(_np_qmul(a, _host_quat_from_axis_angle(axis, t * angle).astype(np.float64)))


Builtin("quat_between_vectors", _host_quat_between_vectors,
        "the shortest-arc unit rotation of direction a onto direction b (not opposite directions)").add(
    _rule(lambda ts: len(ts) == 2 and _v(ts[0], 3) and ts[1] is ts[0], lambda ts: QUATS[ts[0].scalar]),
    "tg::sp_quat_between_vectors", "tg::adj_sp_quat_between_vectors", samples=[Sample((V3, V3), "Q")])
Builtin("quat_to_rpy", _host_quat_to_rpy, "(roll, pitch, yaw) of a unit quaternion, the inverse of quat_rpy").add(
    _rule(lambda ts: len(ts) == 1 and is_quat(ts[0]) and is_float(ts[0].scalar), lambda ts: vec(3, ts[0].scalar)),
    "tg::sp_quat_to_rpy", "tg::adj_sp_quat_to_rpy", samples=[Sample((Q,), "V3")])
Builtin("quat_slerp", _host_quat_slerp, "spherical linear interpolation of rotations a (t = 0) and b (t = 1)").add(
    _rule(lambda ts: len(ts) == 3 and is_quat(ts[0]) and is_float(ts[0].scalar) and ts[1] is ts[0]
          and ts[2] is ts[0].scalar, lambda ts: ts[0]),
    "tg::sp_quat_slerp", "tg::adj_sp_quat_slerp", samples=[Sample((Q, Q, "S:unit"), "Q")])

def _host_quat_rotate_inv(q, v):
    return _f32(_np_rotate(_np_conj(np.asarray(q, dtype=np.float64)), v))


def _host_quat_from_euler(e, i, j, k):
    for name, axis in (("i", i), ("j", j), ("k", k)):
        if int(axis) not in (0, 1, 2):
            raise ValueError(f"quat_from_euler: {name} must be an axis index 0, 1 or 2, got {axis!r}")
    e = np.asarray(e, dtype=np.float64)
    qi, qj, qk = (_host_quat_from_axis_angle(np.eye(3)[a], e[a]).astype(np.float64) for a in (i, j, k))
    return _f32(_np_qmul(qk, _np_qmul(qj, qi)))


Builtin("quat_rotate_inv", _host_quat_rotate_inv, "rotate a 3-vector by the inverse of a unit quaternion").add(
    _rule(lambda ts: len(ts) == 2 and is_quat(ts[0]) and is_float(ts[0].scalar) and _v(ts[1], 3)
          and ts[1].scalar is ts[0].scalar, lambda ts: ts[1]),
    "tg::sp_quat_rotate_inv", "tg::adj_sp_quat_rotate_inv", samples=[Sample((Q, V3), "V3")])
Builtin("quat_from_euler", _host_quat_from_euler,
        "quat_from_euler(e, i, j, k): rotations e[i], e[j], e[k] about fixed axes i, then j, then k").add(
    # i, j, k: integers; a literal index arrives adapted to the angles' float type (C++ takes int())
    _rule(lambda ts: len(ts) == 4 and _v(ts[0], 3) and all(is_int(t) or is_float(t) for t in ts[1:]),
          lambda ts: QUATS[ts[0].scalar]),
    "tg::sp_quat_from_euler", "tg::adj_sp_quat_from_euler",
    samples=[Sample((V3,), "Q", "out[i] = tg.quat_from_euler({0}, 0, 1, 2)"),
             Sample((V3,), "Q", "out[i] = tg.quat_from_euler({0}, 2, 0, 2)")])

def _host_transform_compose(p, q, scale):
    m = np.eye(4, dtype=np.float64)
    m[:3, :3] = _host_quat_to_matrix(q).astype(np.float64) * np.asarray(scale, dtype=np.float64)[None, :]
    m[:3, 3] = p
    return _f32(m)


Builtin("transform_compose", _host_transform_compose,
        "the 4x4 matrix [[R(q) diag(scale), p], [0, 1]] of a position, rotation and scale").add(
    _rule(lambda ts: len(ts) == 3 and _v(ts[0], 3) and is_quat(ts[1]) and ts[1].scalar is ts[0].scalar
          and ts[2] is ts[0], lambda ts: mat(4, 4, ts[0].scalar)),
    "tg::sp_transform_compose", "tg::adj_sp_transform_compose", samples=[Sample((V3, Q, V3), "M44")])

def _host_transform_decompose(m):
    m = np.asarray(m, dtype=np.float64).reshape(4, 4)
    scale = np.linalg.norm(m[:3, :3], axis=0)
    block = m[:3, :3] / np.where(scale != 0, scale, 1.0)[None, :]
    return _f32(m[:3, 3]), _host_quat_from_matrix(block), _f32(scale)


def _decompose_rule(result):
    def rule(ts):
        if len(ts) == 1 and _square(ts[0], 4):
            return QUATS[ts[0].scalar] if result == "rotation" else vec(3, ts[0].scalar)
        return NO
    return rule


# kernels lower transform_decompose(m) to a tuple of these three (lang/expressions.py, TUPLE_RESULTS)
for _k, _part in enumerate(("position", "rotation", "scale")):
    Builtin(f"transform_decompose_{_part}", lambda m, _k=_k: _host_transform_decompose(m)[_k],
            f"the {_part} result of transform_decompose (kernels lower transform_decompose to it)", export=False).add(
        _decompose_rule(_part), f"tg::sp_decompose_{_part}", f"tg::adj_sp_decompose_{_part}",
        samples=[Sample(("M44:any",), "Q" if _part == "rotation" else "V3",
                        f"p, q, s = tg.transform_decompose({{0}}); out[i] = {'pqs'[_k]}")])
Builtin("transform_decompose", _host_transform_decompose,
        "transform_decompose(m): (position, rotation, scale) of a 4x4 matrix [[R diag(scale), p], [0, 1]]; "
        "the inverse of transform_compose (differentiable through all three)")


def _host_set_part(lo, hi, what):
    def run(t, value):
        if not isinstance(t, np.ndarray) or t.shape != (7,):
            raise TypeError(f"transform_set_{what}(t, ...): expected a transform value to update in place, got "
                            f"{type(t).__name__}")
        t[lo:hi] = np.asarray(value, dtype=t.dtype).reshape(hi - lo)
    return run


def _with_part_rule(n):
    def rule(ts):
        if len(ts) == 2 and _xf(ts[0]) and (_v(ts[1], 3) if n == 3 else is_quat(ts[1])) \
                and ts[1].scalar is ts[0].scalar:
            return ts[0]
        return NO
    return rule


# kernels lower transform_set_translation(t, p) to t = transform_with_translation(t, p)
# (lang/expressions.py, MUTATING); the first argument must be a local variable there
for _what, _n, _lo in (("translation", 3, 0), ("rotation", 4, 3)):
    Builtin(f"transform_with_{_what}", None, f"t with its {_what} replaced (kernels lower "
            f"transform_set_{_what} to it)", export=False).add(
        _with_part_rule(_n), f"tg::sp_with_{_what}", f"tg::adj_sp_with_{_what}", linear=(0, 1),
        samples=[Sample((T6, V3 if _n == 3 else Q), "T",
                        f"t = {{0}}; tg.transform_set_{_what}(t, {{1}}); out[i] = t")])
    Builtin(f"transform_set_{_what}", _host_set_part(_lo, _lo + _n, _what),
            f"transform_set_{_what}(t, value): replace the {_what} of the transform t in place (t: a local "
            "variable in kernels; a transform value in Python scope)")


def _host_quat_to_euler(q, i, j, k):
    for name, axis in (("i", i), ("j", j), ("k", k)):
        if int(axis) not in (0, 1, 2):
            raise ValueError(f"quat_to_euler: {name} must be an axis index 0, 1 or 2, got {axis!r}")
    i, j, k = int(i) + 1, int(j) + 1, int(k) + 1
    proper = i == k
    if proper:
        k = 6 - i - j
    e = (i - j) * (j - k) * (k - i) / 2
    x, y, z, w = np.asarray(q, dtype=np.float64)
    qs = [w, x, y, z]
    np_ = 0.0 if proper else 1.0
    a, b = qs[0] - np_ * qs[j], qs[i] + np_ * e * qs[k]
    c, d = qs[j] + np_ * qs[0], e * qs[k] - np_ * qs[i]
    t2 = np.arccos(2 * (a * a + b * b) / (a * a + b * b + c * c + d * d) - 1)
    tp, tm = np.arctan2(b, a), np.arctan2(d, c)
    t1 = 0.0
    if abs(t2) < 1e-6:
        t3 = 2 * tp
    elif abs(t2 - np.pi) < 1e-6:
        t3 = 2 * tm
    else:
        t1, t3 = tp - tm, tp + tm
    if not proper:
        t2, t3 = t2 - np.pi / 2, t3 * e
    out = np.zeros(3)
    out[i - 1], out[j - 1], out[k - 1] = t1, t2, t3
    return _f32(out)


Builtin("quat_to_euler", _host_quat_to_euler,
        "quat_to_euler(q, i, j, k): Euler angles (indexed by axis) of q for fixed axes i, j, k").add(
    _rule(lambda ts: len(ts) == 4 and is_quat(ts[0]) and is_float(ts[0].scalar)
          and all(is_int(t) or is_float(t) for t in ts[1:]), lambda ts: vec(3, ts[0].scalar)),
    "tg::sp_quat_to_euler", "tg::adj_sp_quat_to_euler",
    samples=[Sample((Q,), "V3", "out[i] = tg.quat_to_euler({0}, 0, 1, 2)"),
             Sample((Q,), "V3", "out[i] = tg.quat_to_euler({0}, 2, 0, 2)")])

if REGISTRY["quat_from_axis_angle"].py is None:     # host side of the existing kernel builtin
    REGISTRY["quat_from_axis_angle"].py = _host_quat_from_axis_angle


# -------------------------------------------------- constructors: tg.transform(p, q), tg.spatial_vector(w, v)

def _construct_rule(ts):
    if not ts or not isinstance(ts[0], TypeRef):
        return NO
    t, args = ts[0].t, ts[1:]
    if isinstance(t, TransformType):
        if not args:
            return t
        if len(args) == 2 and _v(args[0], 3) and is_quat(args[1]) and args[0].scalar is t.scalar \
                and args[1].scalar is t.scalar:
            return t
    elif _v(t, 6) and len(args) == 2 and _v(args[0], 3) and args[1] is args[0] and args[0].scalar is t.scalar:
        return t
    return NO


def _construct_fwd(ts, r):
    t = ts[0].t
    if len(ts) == 1:   # inside kernels Warp's transform() is all zeros (Python scope: the identity)
        return lambda a: f"tg::make_vec<7, {t.scalar.cname}>(0, 0, 0, 0, 0, 0, 0)"
    fn = "tg::sp_transform" if isinstance(t, TransformType) else "tg::sp_vector"
    return lambda a: f"{fn}({a[1]}, {a[2]})"


def _construct_adj(ts, r):
    if len(ts) == 1:
        return None
    fn = "tg::adj_sp_transform" if isinstance(ts[0].t, TransformType) else "tg::adj_sp_vector"
    return lambda a, aa, g: f"{fn}({a[1]}, {a[2]}, {aa[1]}, {aa[2]}, {g});"


# first: the generic constructor would build a zero transform from no arguments
_construct = REGISTRY["construct"]
_construct.add(_construct_rule, _construct_fwd, _construct_adj, linear=(1, 2),
               samples=[Sample(("V3:any", "Q"), "T", "out[i] = tg.transform{d}({0}, {1})"),
                        Sample(("V3:any", "V3:any"), "V6", "out[i] = tg.spatial_vector{d}({0}, {1})")])
_construct.overloads.insert(0, _construct.overloads.pop())


# ------------------------------------ Warp's twist/wrench frame maps, point velocity, quaternion twist

def _host_velocity_at_point(qd, r):
    qd = np.asarray(qd, dtype=np.float64)
    return _f32(qd[3:] + np.cross(qd[:3], np.asarray(r, dtype=np.float64)))


def _host_frame_map(twist):
    def run(t, x):
        t, x = np.asarray(t, dtype=np.float64), np.asarray(x, dtype=np.float64)
        moving, other = (x[:3], x[3:]) if twist else (x[3:], x[:3])
        m = _np_rotate(t[3:], moving)
        o = _np_rotate(t[3:], other) + np.cross(t[:3], m)
        return _f32(np.concatenate([m, o] if twist else [o, m]))
    return run


def _host_quat_twist(axis, q):
    a, q = np.asarray(axis, dtype=np.float64), np.asarray(q, dtype=np.float64)
    y = np.concatenate([np.dot(q[:3], a) * a, q[3:]])
    n = np.linalg.norm(y)
    return _f32(y / n if n > 0 else [0.0, 0.0, 0.0, 1.0])


def _host_twist_angle(signed):
    def run(axis, q):
        a, q = np.asarray(axis, dtype=np.float64), np.asarray(q, dtype=np.float64)
        s = float(np.dot(q[:3], a))
        return np.float32(2.0 * np.arctan2(s if signed else abs(s), q[3]))
    return run


def _axis_quat(ts):
    return len(ts) == 2 and _v(ts[0], 3) and is_quat(ts[1]) and ts[1].scalar is ts[0].scalar


def _xf_spatial(ts):
    return len(ts) == 2 and _xf(ts[0]) and _v(ts[1], 6) and ts[1].scalar is ts[0].scalar


Builtin("velocity_at_point", _host_velocity_at_point,
        "velocity_at_point(qd, r): the linear velocity v + w x r of the point at offset r on a body with twist "
        "qd = (w, v)").add(
    _rule(lambda ts: len(ts) == 2 and _v(ts[0], 6) and _v(ts[1], 3) and ts[1].scalar is ts[0].scalar,
          lambda ts: ts[1]),
    "tg::sp_velocity_at_point", "tg::adj_sp_velocity_at_point", samples=[Sample(("V6:any", V3), "V3")])
Builtin("transform_twist", _host_frame_map(True),
        "transform_twist(t, x): the twist x = (w, v) in the frame of t = (p, R): (R w, R v + p x R w)").add(
    _rule(_xf_spatial, lambda ts: ts[1]), "tg::sp_transform_twist", "tg::adj_sp_transform_twist",
    samples=[Sample((T6, "V6:any"), "V6")])
Builtin("transform_wrench", _host_frame_map(False),
        "transform_wrench(t, x): the wrench x = (tau, f) in the frame of t = (p, R): (R tau + p x R f, R f)").add(
    _rule(_xf_spatial, lambda ts: ts[1]), "tg::sp_transform_wrench", "tg::adj_sp_transform_wrench",
    samples=[Sample((T6, "V6:any"), "V6")])
Builtin("quat_twist", _host_quat_twist,
        "quat_twist(axis, q): the twist of q about axis (q's vector part projected on axis, normalized with w; "
        "the identity when zero)").add(
    _rule(_axis_quat, lambda ts: ts[1]), "tg::sp_quat_twist", "tg::adj_sp_quat_twist",
    samples=[Sample((V3, Q), "Q")])
Builtin("quat_twist_angle", _host_twist_angle(False),
        "quat_twist_angle(axis, q): the unsigned twist angle 2 atan2(|v . axis|, w) of q about axis").add(
    _rule(_axis_quat, lambda ts: ts[0].scalar), "tg::sp_quat_twist_angle", "tg::adj_sp_quat_twist_angle",
    samples=[Sample((V3, Q), "S")])
Builtin("quat_twist_angle_signed", _host_twist_angle(True),
        "quat_twist_angle_signed(axis, q): the signed twist angle 2 atan2(v . axis, w) of q about axis").add(
    _rule(_axis_quat, lambda ts: ts[0].scalar), "tg::sp_quat_twist_angle_signed",
    "tg::adj_sp_quat_twist_angle_signed", samples=[Sample((V3, Q), "S")])
