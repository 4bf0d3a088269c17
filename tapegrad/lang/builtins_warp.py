"""More of Warp's builtins (issue 28), registered into the builtin table: ``erf``, ``erfc``,
``erfinv``, ``erfcinv``, ``copysign``, ``frac``, ``rint``, ``nonzero``, ``skew``, ``argmin``, ``argmax``, and the
quaternion constructor from a vector part and a scalar part (``tg.quat(v, w)``), Warp's vector
norms (``norm_l1``, ``norm_l2``, ``norm_huber``, ``norm_pseudo_huber``, ``smooth_normalize``),
``transform_point`` / ``transform_vector`` of a 4x4 matrix. The C++ is
``runtime/warpx.h`` (inlined into units that use one of them). Each differentiable overload has
finite-difference samples (tests/lang/test_builtins_grad.py runs them); each is callable in
Python scope on numbers and host values too.
"""
from __future__ import annotations

import math

import numpy as np

from ..types import QuatType, dtype_from_numpy, float32, int32, matrix, quaternion, uint32, vector
from . import spatial  # noqa: F401  registers transform_point/transform_vector, which get overloads below
from .builtins import NO, REGISTRY, Builtin, Sample, TypeRef, same
from .builtins_atomic import Where
from .typeutil import is_array, is_bool, is_float, is_int, is_mat, is_scalar, is_vec

__all__ = []


def _scalar_map(f):
    """A numpy-scope implementation applying the float function ``f`` to a number or array."""
    def run(x):
        a = np.asarray(x, dtype=np.float64)
        out = np.vectorize(f, otypes=[np.float64])(a) if a.ndim else np.float64(f(float(a)))
        dt = np.asarray(x).dtype
        return out.astype(dt if dt.kind == "f" else np.float64)[()]
    return run


def _erfinv(x: float) -> float:
    """erf^-1 by Newton's method on math.erf from a logistic first guess (double precision)."""
    if x <= -1.0 or x >= 1.0:
        return math.copysign(math.inf, x) if abs(x) == 1.0 else math.nan
    y = math.copysign(math.sqrt(-math.log((1.0 - x) * (1.0 + x))), x) * 0.88
    for _ in range(60):
        step = (math.erf(y) - x) / (2.0 / math.sqrt(math.pi) * math.exp(-y * y))
        y -= step
        if abs(step) < 1e-16 * max(1.0, abs(y)):
            break
    return y


Builtin("erf", _scalar_map(math.erf), "erf(x): the error function").add(
    same(1, is_float), "tg::wx_erf", "tg::adj_wx_erf", samples=[Sample(("S:any",), "S")])
Builtin("erfc", _scalar_map(math.erfc), "erfc(x): the complementary error function 1 - erf(x)").add(
    same(1, is_float), "tg::wx_erfc", "tg::adj_wx_erfc", samples=[Sample(("S:any",), "S")])
Builtin("erfinv", _scalar_map(_erfinv), "erfinv(x): the inverse error function on (-1, 1)").add(
    same(1, is_float), "tg::wx_erfinv", "tg::adj_wx_erfinv", samples=[Sample(("S:unit",), "S")])
Builtin("erfcinv", _scalar_map(lambda x: _erfinv(1.0 - x)), "erfcinv(x): the inverse of erfc on (0, 2)").add(
    same(1, is_float), "tg::wx_erfcinv", "tg::adj_wx_erfcinv", samples=[Sample(("S:hi",), "S")])
Builtin("copysign", lambda x, y: np.copysign(x, y)[()],
        "copysign(x, y): the magnitude of x with the sign of y (gradient to x only)").add(
    same(2, is_float), "tg::wx_copysign", "tg::adj_wx_copysign", samples=[Sample(("S:away", "S:away"), "S")])
Builtin("frac", lambda x: (np.asarray(x) - np.trunc(x))[()], "frac(x): x - trunc(x), the fractional part").add(
    same(1, is_float), "tg::wx_frac", "tg::adj_wx_frac", linear=(0,), samples=[Sample(("S:unit",), "S")])
Builtin("nonzero", lambda x: (np.asarray(x) != 0).astype(np.asarray(x).dtype)[()],
        "nonzero(x): 1 where x != 0 else 0, of x's type; zero gradient").add(
    lambda ts: ts[0] if len(ts) == 1 and is_scalar(ts[0]) and not is_bool(ts[0]) else NO, "tg::wx_nonzero")
Builtin("rint", lambda x: np.rint(x)[()], "rint(x): the nearest integer, halfway cases to even; zero gradient").add(
    same(1, is_float), "tg::wx_rint")


def _skew_py(v):
    x, y, z = np.asarray(v).reshape(3)
    return matrix((3, 3), dtype_from_numpy(np.asarray(v).dtype))(0, -z, y, z, 0, -x, -y, x, 0)


Builtin("skew", _skew_py, "skew(v): the skew-symmetric matrix of a 3-vector (skew(a) b = cross(a, b))").add(
    lambda ts: matrix((3, 3), ts[0].scalar) if len(ts) == 1 and is_vec(ts[0]) and ts[0].length_ == 3
    and is_float(ts[0].scalar) else NO,
    "tg::wx_skew", "tg::adj_wx_skew", linear=(0,), samples=[Sample(("V3:any",), "M33")])


def _arg_rule(ts):
    if len(ts) == 1 and is_vec(ts[0]) and not is_bool(ts[0].scalar):
        return uint32
    return NO


def _arg(which):
    def run(a):
        v = np.asarray(a)
        if v.dtype.kind == "f" and np.all(np.isnan(v)):
            return np.uint32(0)
        return np.uint32((np.nanargmin if which == "min" else np.nanargmax)(v) if v.dtype.kind == "f"
                         else (np.argmin if which == "min" else np.argmax)(v))
    return run


Builtin("argmin", _arg("min"), "argmin(v): index (uint32) of the smallest element, NaNs skipped (all NaN: 0)").add(
    _arg_rule, "tg::wx_argmin")
Builtin("argmax", _arg("max"), "argmax(v): index (uint32) of the largest element, NaNs skipped (all NaN: 0)").add(
    _arg_rule, "tg::wx_argmax")


# Warp's quaternion from its vector part and scalar part: tg.quat(tg.vec3(x, y, z), w)
def _quat_parts_rule(ts):
    if len(ts) != 3 or not isinstance(ts[0], TypeRef) or not isinstance(ts[0].t, QuatType):
        return NO
    t, v, w = ts[0].t, ts[1], ts[2]
    if is_vec(v) and not isinstance(v, QuatType) and v.length_ == 3 and v.scalar is t.scalar and w is t.scalar:
        return t
    return NO


def _quat_parts_fwd(ts, r):
    s = ts[0].t.scalar.cname
    return lambda a: f"tg::make_vec<4, {s}>({a[1]}[0], {a[1]}[1], {a[1]}[2], {a[2]})"


def _quat_parts_adj(ts, r):
    if not is_float(ts[0].t.scalar):
        return None
    return lambda a, aa, g: " ".join([f"tg::accum(tg::flat({aa[1]})[{k}], tg::flat({g})[{k}]);" for k in range(3)]
                                     + [f"tg::accum({aa[2]}, tg::flat({g})[3]);"])


REGISTRY["construct"].add(_quat_parts_rule, _quat_parts_fwd, _quat_parts_adj, linear=(1, 2),
                          samples=[Sample(("V3:any", "S:any"), "Q", "out[i] = tg.quat{d}({0}, {1})")])


# ------------------------------------------ quat_to_axis_angle(q, axis, angle): out-parameters
# Warp's builtin writes its results into two local variables. Kernels lower the call (lang/
# expressions.py, OUT_PARAMS) into one builtin per result, assigned to those variables; each has
# an adjoint, so gradients flow through both. The axis sign follows w (the shortest arc), as Warp's.

def _axis_angle_py(q):
    a = np.asarray(q, dtype=np.float64).reshape(4)
    n = float(np.linalg.norm(a[:3]))
    axis = a[:3] / n if n > 0 else np.zeros(3)
    return (-axis if a[3] < 0 else axis), 2.0 * math.atan2(n, abs(a[3]))


def _quat_scalar_rule(result):
    def rule(ts):
        if len(ts) == 1 and isinstance(ts[0], QuatType) and is_float(ts[0].scalar):
            return vector(3, ts[0].scalar) if result == "axis" else ts[0].scalar
        return NO
    return rule


_AXIS_STMT = "ax = tg.vec3{d}(); an = tg.{F}(0.0); tg.quat_to_axis_angle({0}, ax, an); out[i] = ax"
_ANGLE_STMT = "ax = tg.vec3{d}(); an = tg.{F}(0.0); tg.quat_to_axis_angle({0}, ax, an); out[i] = an"
Builtin("quat_to_axis_angle_axis", lambda q: vector(3, _quat_of(q)[0].scalar)(_axis_angle_py(q)[0]),
        "the axis result of quat_to_axis_angle (kernels lower quat_to_axis_angle to it)", export=False).add(
    _quat_scalar_rule("axis"), "tg::sp_quat_axis", "tg::adj_sp_quat_axis",
    samples=[Sample(("Q:any",), "V3", _AXIS_STMT)])
Builtin("quat_to_axis_angle_angle", lambda q: _axis_angle_py(q)[1],
        "the angle result of quat_to_axis_angle (kernels lower quat_to_axis_angle to it)", export=False).add(
    _quat_scalar_rule("angle"), "tg::sp_quat_angle", "tg::adj_sp_quat_angle",
    samples=[Sample(("Q:any",), "S", _ANGLE_STMT)])
def _quat_to_axis_angle_py(q, *outputs):
    if outputs:
        raise TypeError("quat_to_axis_angle(q, axis, angle): output variables exist in kernels only; in Python "
                        f"scope call quat_to_axis_angle(q), which returns (axis, angle) (got {len(outputs)} "
                        "output argument(s))")
    t = _quat_of(q)[0]
    axis, angle = _axis_angle_py(q)
    return vector(3, t.scalar)(axis), np.dtype(t.scalar.np_dtype).type(angle)


# the name kernels call; lowered by the compiler, so it has no overload of its own
Builtin("quat_to_axis_angle", _quat_to_axis_angle_py,
        "quat_to_axis_angle(q, axis, angle): writes the rotation axis (unit, sign following w) and "
        "angle (in [0, pi]) of q into the local variables axis and angle; axis, angle = "
        "quat_to_axis_angle(q) returns them (kernels, @func and Python scope)")


# --------------------------------------------------- Python-scope forms of quaternion builtins
# (Warp's run in Python scope too: wp.quat_identity() on the host gives a quaternion value)

def _quat_of(q):
    a = np.asarray(q)
    return quaternion(dtype_from_numpy(a.dtype) if a.dtype.kind == "f" else float32), a.reshape(4)


def _quat_identity_py(dtype=float32):
    return quaternion(dtype)(0.0, 0.0, 0.0, 1.0)


def _quat_inverse_py(q):
    t, a = _quat_of(q)
    return t(-a[0], -a[1], -a[2], a[3])


def _quat_rotate_py(q, v):
    t, a = _quat_of(q)
    x = np.asarray(v, dtype=a.dtype).reshape(3)
    u, w = a[:3], a[3]
    r = x * (2.0 * w * w - 1.0) + np.cross(u, x) * w * 2.0 + u * np.dot(u, x) * 2.0
    return vector(3, t.scalar)(r)


for _name, _py in (("quat_identity", _quat_identity_py), ("quat_inverse", _quat_inverse_py),
                   ("quat_rotate", _quat_rotate_py)):
    if REGISTRY[_name].py is None:
        REGISTRY[_name].py = _py


# ------------------------------------------------------------------ Warp's vector norms

def _norm_rule(result):
    def rule(ts):
        if not ts or not is_vec(ts[0]) or isinstance(ts[0], QuatType) or not is_float(ts[0].scalar):
            return NO
        if len(ts) == 1 or (len(ts) == 2 and ts[1] is ts[0].scalar and result != "l"):
            return ts[0] if result == "v" else ts[0].scalar
        return NO
    return rule


def _np_norm(kind):
    def run(v, delta=1.0):
        x = np.asarray(v)
        a = float(np.dot(x.astype(np.float64), x.astype(np.float64)))
        if kind == "l1":
            r = float(np.abs(x).sum())
        elif kind == "l2":
            r = math.sqrt(a)
        elif kind == "huber":
            r = 0.5 * a if a <= delta * delta else delta * (math.sqrt(a) - 0.5 * delta)
        elif kind == "pseudo_huber":
            r = delta * math.sqrt(1.0 + a / (delta * delta))
        else:
            return vector(x.shape[0], dtype_from_numpy(x.dtype))(x / (delta * math.sqrt(1.0 + a / (delta * delta))))
        return x.dtype.type(r)
    return run


for _kind, _doc in (("l1", "norm_l1(v): the sum of |v_i|"), ("l2", "norm_l2(v): the Euclidean length"),
                    ("huber", "norm_huber(v, delta=1): 0.5 |v|^2 within delta, else delta (|v| - delta / 2)"),
                    ("pseudo_huber", "norm_pseudo_huber(v, delta=1): delta sqrt(1 + |v|^2 / delta^2)")):
    _samples = [Sample(("V3:away",), "S")] + ([Sample(("V3:any", "S:pos"), "S")] if _kind in ("huber", "pseudo_huber")
                                              else [])
    Builtin(f"norm_{_kind}", _np_norm(_kind), _doc).add(
        _norm_rule("l" if _kind in ("l1", "l2") else "s"), f"tg::wx_norm_{_kind}", f"tg::adj_wx_norm_{_kind}",
        samples=_samples)
Builtin("smooth_normalize", _np_norm("smooth"), "smooth_normalize(v, delta=1): v / norm_pseudo_huber(v, delta)").add(
    _norm_rule("v"), "tg::wx_smooth_normalize", "tg::adj_wx_smooth_normalize",
    samples=[Sample(("V3:any",), "V3"), Sample(("V3:any", "S:pos"), "V3")])


# ------------------------------------- transform_point / transform_vector of a 4x4 matrix (Warp's)

def _mat44_vec3_rule(ts):
    if len(ts) == 2 and is_mat(ts[0]) and (ts[0].rows, ts[0].cols) == (4, 4) and is_float(ts[0].scalar) \
            and is_vec(ts[1]) and ts[1].length_ == 3 and ts[1].scalar is ts[0].scalar:
        return vector(3, ts[0].scalar)
    return NO


for _name, _fn in (("transform_point", "tg::wx_transform_point_m"), ("transform_vector", "tg::wx_transform_vector_m")):
    REGISTRY[_name].add(_mat44_vec3_rule, _fn, _fn.replace("tg::", "tg::adj_"),
                        samples=[Sample(("M44:any", "V3:any"), "V3")])


# ----------------------------------------------- matrix_from_rows / matrix_from_cols (Warp's)

def _from_vectors_rule(cols):
    def rule(ts):
        if not 1 <= len(ts) <= 4 or not all(t is ts[0] for t in ts) or not is_vec(ts[0]) \
                or isinstance(ts[0], QuatType) or is_bool(ts[0].scalar):
            return NO
        n, m = len(ts), ts[0].length_
        return matrix((m, n) if cols else (n, m), ts[0].scalar)
    return rule


def _from_vectors_fwd(cols):
    def spec(ts, r):
        def render(a):
            comps = [f"{a[j]}[{i}]" if cols else f"{a[i]}[{j}]" for i in range(r.rows) for j in range(r.cols)]
            return f"tg::make_mat<{r.rows}, {r.cols}, {r.scalar.cname}>({', '.join(comps)})"
        return render
    return spec


def _from_vectors_adj(cols):
    def spec(ts, r):
        if not is_float(r.scalar):
            return None

        def render(a, aa, g):
            parts = []
            for i in range(r.rows):
                for j in range(r.cols):
                    k, c = (j, i) if cols else (i, j)
                    parts.append(f"tg::accum(tg::flat({aa[k]})[{c}], {g}.data[{i}][{j}]);")
            return " ".join(parts)
        return render
    return spec


def _stack_py(cols):
    def run(*vs):
        a = np.stack([np.asarray(v) for v in vs], axis=1 if cols else 0)
        return matrix(a.shape, dtype_from_numpy(a.dtype))(a)
    return run


Builtin("matrix_from_rows", _stack_py(False), "matrix_from_rows(*vectors): a matrix whose rows are the vectors").add(
    _from_vectors_rule(False), _from_vectors_fwd(False), _from_vectors_adj(False),
    samples=[Sample(("V3:any", "V3:any"), "M23"), Sample(("V2:any", "V2:any"), "M22")])
Builtin("matrix_from_cols", _stack_py(True), "matrix_from_cols(*vectors): a matrix whose columns are the vectors").add(
    _from_vectors_rule(True), _from_vectors_fwd(True), _from_vectors_adj(True),
    samples=[Sample(("V3:any", "V3:any"), "M32"), Sample(("V2:any", "V2:any"), "M22")])


# ------------------------------------------------------------------------- expect_near (Warp's)

def _expect_near_rule(ts):
    if len(ts) != 4 or not isinstance(ts[3], TypeRef) or not isinstance(ts[3].t, Where) or ts[0] is not ts[1]:
        return NO
    t = ts[0]
    s = t.scalar if is_vec(t) or is_mat(t) else t
    if not is_float(s) or ts[2] is not s:
        return NO
    return None


def _expect_near_fwd(ts, r):
    text = ts[3].t.text.replace("\\", "/").replace('"', "'")
    return lambda a: f'tg::wx_expect_near({a[0]}, {a[1]}, {a[2]}, "{text}");'


def _expect_near_py(a, b, tolerance=1.0e-6):
    """``expect_near`` in Python scope: print when a component differs by more than ``tolerance``."""
    if np.shape(a) != np.shape(b) or bool(np.any(np.abs(np.asarray(a, float) - np.asarray(b, float)) > tolerance)):
        print(f"Error, expect_near() failed with tolerance {tolerance}:\n\t Expected: {b}\n\t Actual: {a}")


Builtin("expect_near", _expect_near_py, "expect_near(a, b, tolerance=1e-6): print both values (and the line) when a "
                             "component differs by more than tolerance").add(
    _expect_near_rule, _expect_near_fwd, side_effect=True, replay="skip")


# --------------------------------------------------------------------------- lower_bound (Warp's)

def _lower_bound_rule(ts):
    if not ts or not is_array(ts[0]) or ts[0].ndim != 1 or not is_scalar(ts[0].dtype) or is_bool(ts[0].dtype):
        return NO
    if len(ts) == 2 and ts[1] is ts[0].dtype:
        return int32
    if len(ts) == 4 and is_int(ts[1]) and is_int(ts[2]) and ts[3] is ts[0].dtype:
        return int32
    return NO


def _lower_bound_py(arr, *args):
    a = np.asarray(arr.numpy() if hasattr(arr, "numpy") else arr)
    if a.ndim != 1 or len(args) not in (1, 3):
        raise TypeError(f"lower_bound(arr[, begin, end], value): expected a 1-D array and 1 or 3 more arguments, "
                        f"got a {a.ndim}-D array and {len(args)}")
    lo, hi = (0, a.shape[0]) if len(args) == 1 else (int(args[0]), int(args[1]))
    return int(max(lo, min(lo + np.searchsorted(a[lo:hi], args[-1], side="left"), hi - 1)))


Builtin("lower_bound", _lower_bound_py,
        "lower_bound(arr[, begin, end], value): the first index (in [begin, end)) of a sorted 1-D array whose "
        "element is >= value (end - 1 if none, as Warp's)").add(
    _lower_bound_rule, "tg::wx_lower_bound", reads=(0,))


def _identity_py(n, dtype=float32):
    """Warp's ``identity(n, dtype)`` in Python scope: the ``n`` x ``n`` identity matrix value."""
    return matrix((n, n), dtype)(np.eye(n))


# inside kernels the frontend makes the constant (expressions.identity_value): n and dtype are
# compile-time values, so there is no run-time overload
Builtin("identity", _identity_py, "identity(n, dtype=float32): the n x n identity matrix of dtype (n and dtype "
                                  "are compile-time constants)")


Builtin("block_dim", None, "block_dim(): the number of threads per block of the running launch (1 on the CPU; "
                           "on CUDA the block size the launch used)").add(
    lambda ts: int32 if not ts else NO, lambda ts, r: (lambda a: "tg::wx_block_dim()"))


def cast(a, dtype):
    """Warp's ``wp.cast(a, dtype)`` inside kernels: ``a``'s bits reinterpreted as a ``dtype`` of
    the same size (a scalar, vector, matrix or struct; not differentiable). In Python scope,
    ``numpy``'s ``.view`` does the same.

    Raises:
        RuntimeError: called in Python scope.
    """
    raise RuntimeError("tapegrad.cast() can only be called inside a kernel or @func (in Python scope use numpy's "
                       ".view(dtype))")

