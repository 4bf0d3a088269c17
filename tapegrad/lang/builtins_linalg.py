"""Warp's small matrix decompositions (issue 28), registered into the builtin table: ``svd3``,
``svd2``, ``qr3``, ``eig3``. The C++ is ``runtime/linalg.h`` (its dual overloads
``runtime/linalgd.h``).

Warp's calling convention writes the results into local variables declared before the call
(``U = mat33(); sigma = vec3(); V = mat33(); svd3(A, U, sigma, V)``); called with the matrix only,
each returns its results as a tuple (``U, sigma, V = svd3(A)``, kernels and Python scope). Kernels
lower the call (``expressions.OUT_PARAMS``) into one builtin per result (``svd3_U``...), each with
an analytic adjoint, so gradients reach the matrix through every result.

Conventions (Warp's where it has one): ``svd3``: ``A = U diag(sigma) V^T``, ``U`` and ``V``
rotations, ``|sigma|`` descending, the last singular value carrying the sign of ``det(A)``;
``svd2``: singular values ``>= 0`` descending, ``V`` a rotation; in both, each of ``U``'s first
columns has its component of largest magnitude positive (this fixes the signs, the same in
kernels and Python scope). ``qr3``: ``A = Q R``, ``Q`` a rotation, ``R`` upper triangular with
``R[0, 0], R[1, 1] >= 0``. ``eig3``: ``sym(A) = Q diag(d) Q^T`` for ``sym(A) = (A + A^T) / 2``
(Warp's takes a symmetric matrix), ``d`` ascending, ``Q`` a rotation.

Gradients where two singular values (or eigenvalues) coincide are not defined; the adjoints
regularize ``1 / (s_j - s_i)`` so they stay finite there (``runtime/linalg.h``).
"""
from __future__ import annotations

import numpy as np

from ..types import dtype_from_numpy, matrix, vector
from .builtins import NO, Builtin, Sample
from .typeutil import is_float, is_mat

__all__ = ["OUT_PARAMS"]

# name -> (inputs, the builtin of each result), merged into expressions.OUT_PARAMS
OUT_PARAMS = {"svd3": (1, ("svd3_U", "svd3_sigma", "svd3_V")), "svd2": (1, ("svd2_U", "svd2_sigma", "svd2_V")),
              "qr3": (1, ("qr3_Q", "qr3_R")), "eig3": (1, ("eig3_Q", "eig3_d"))}


def _square_rule(n, result):
    def rule(ts):
        if len(ts) == 1 and is_mat(ts[0]) and (ts[0].rows, ts[0].cols) == (n, n) and is_float(ts[0].scalar):
            return vector(n, ts[0].scalar) if result == "vec" else ts[0]
        return NO
    return rule


# --------------------------------------------------------------- Python scope (float64 NumPy)

def _canonical_columns(u, k):
    """Signs flipping each of u's first k columns so that its largest-magnitude component is positive."""
    flip = np.ones(u.shape[1])
    for j in range(k):
        col = u[:, j]
        if col[np.argmax(np.abs(col))] < 0:
            flip[j] = -1.0
    return flip


def _svd_np(a):
    n = a.shape[0]
    u, s, vt = np.linalg.svd(a)
    v = vt.T
    f = _canonical_columns(u, n - 1)
    u, v = u * f, v * f
    if n == 2:
        if np.linalg.det(v) < 0:
            u[:, 1], v[:, 1] = -u[:, 1], -v[:, 1]
    else:
        if np.linalg.det(u) < 0:
            u[:, -1], s[-1] = -u[:, -1], -s[-1]
        if np.linalg.det(v) < 0:
            v[:, -1], s[-1] = -v[:, -1], -s[-1]
    return u, s, v


def _qr_np(a):
    q, r = np.linalg.qr(a)
    d = np.where(np.diag(r) < 0, -1.0, 1.0)
    q, r = q * d, r * d[:, None]
    if np.linalg.det(q) < 0:
        q[:, -1], r[-1] = -q[:, -1], -r[-1]
    return q, r


def _eig_np(a):
    d, q = np.linalg.eigh(0.5 * (a + a.T))
    q = q * _canonical_columns(q, q.shape[1] - 1)
    if np.linalg.det(q) < 0:
        q[:, -1] = -q[:, -1]
    return q, d


def _py(name, n, decompose, kinds):
    def run(a, *outputs):
        if outputs:
            raise TypeError(f"{name}(A, ...): output variables exist in kernels only; in Python scope call "
                            f"{name}(A), which returns the results as a tuple (got {len(outputs)} output argument(s))")
        m = np.asarray(a)
        if m.shape != (n, n):
            raise TypeError(f"{name}(A): expected a {n}x{n} matrix, got shape {m.shape}")
        dt = dtype_from_numpy(m.dtype) if m.dtype.kind == "f" else dtype_from_numpy(np.dtype(np.float32))
        parts = decompose(m.astype(np.float64))
        return tuple((vector(n, dt) if k == "vec" else matrix((n, n), dt))(np.asarray(p, dtype=dt.np_dtype))
                     for p, k in zip(parts, kinds))
    return run


# ----------------------------------------------------------------------------------- builtins

_DOCS = {
    "svd3": "svd3(A, U, sigma, V): A = U diag(sigma) V^T of a 3x3 matrix into the local variables U, sigma, V "
            "(U, V rotations, |sigma| descending, the last carrying det(A)'s sign); U, sigma, V = svd3(A)",
    "svd2": "svd2(A, U, sigma, V): A = U diag(sigma) V^T of a 2x2 matrix into the local variables U, sigma, V "
            "(sigma >= 0 descending, V a rotation); U, sigma, V = svd2(A)",
    "qr3": "qr3(A, Q, R): A = Q R of a 3x3 matrix into the local variables Q (a rotation) and R (upper "
           "triangular); Q, R = qr3(A)",
    "eig3": "eig3(A, Q, d): the eigen-decomposition (A + A^T) / 2 = Q diag(d) Q^T of a 3x3 matrix into the local "
            "variables Q (a rotation) and d (ascending); Q, d = eig3(A)",
}
_SPECS = {   # name: (n, numpy decomposition, [(result, kind, C++ function, sample output)])
    "svd3": (3, _svd_np, [("U", "mat", "la_svd_U", "M33"), ("sigma", "vec", "la_svd_s", "V3"),
                          ("V", "mat", "la_svd_V", "M33")]),
    "svd2": (2, _svd_np, [("U", "mat", "la_svd_U", "M22"), ("sigma", "vec", "la_svd_s", "V2"),
                          ("V", "mat", "la_svd_V", "M22")]),
    "qr3": (3, _qr_np, [("Q", "mat", "la_qr_Q", "M33"), ("R", "mat", "la_qr_R", "M33")]),
    "eig3": (3, _eig_np, [("Q", "mat", "la_eig_Q", "M33"), ("d", "vec", "la_eig_d", "V3")]),
}


def _decl(n, kind):
    return f"tg.mat{n}{n}{{d}}()" if kind == "mat" else f"tg.vec{n}{{d}}()"


for _name, (_n, _np_fn, _parts) in _SPECS.items():
    _decls = "; ".join(f"r{k} = {_decl(_n, kind)}" for k, (_, kind, _, _) in enumerate(_parts))
    _call = f"tg.{_name}({{0}}, {', '.join(f'r{k}' for k in range(len(_parts)))})"
    for _k, (_res, _kind, _fn, _out) in enumerate(_parts):
        Builtin(f"{_name}_{_res}", None, f"the {_res} result of {_name} (kernels lower {_name} to it)",
                export=False).add(
            _square_rule(_n, _kind), f"tg::{_fn}", f"tg::adj_{_fn}",
            samples=[Sample((f"M{_n}{_n}:any",), _out, f"{_decls}; {_call}; out[i] = r{_k}")])
    # the name kernels call; lowered by the compiler, so it has no overload of its own
    Builtin(_name, _py(_name, _n, _np_fn, [kind for _, kind, _, _ in _parts]), _DOCS[_name])
