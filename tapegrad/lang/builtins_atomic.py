"""Builtins registered into the table by issue 16: the remaining atomics and ``expect_eq``.

``atomic_exch(a, i.., value)``, ``atomic_cas(a, i.., compare, value)`` (every scalar type:
one compare-and-swap loop per width in ``runtime/atomic.h``) and ``atomic_and/or/xor(a, i..,
value)`` (integer types) return the previous value, as Warp's do. None is differentiable (Warp
gives them no adjoint either); in an adjoint's replay they are skipped and their result reads
the array as the forward left it. ``expect_eq(a, b)`` / ``expect_neq`` print both values with
the kernel's file:line when the check fails (they never abort, as in Warp).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .builtins import NO, Builtin, TypeRef
from .typeutil import is_array, is_composite, is_int, is_scalar

__all__ = ["ATOMIC_VALUES", "Where"]

# how many value operands (after the indices) each array atomic takes; the frontend reads it
ATOMIC_VALUES = {"atomic_add": 1, "atomic_sub": 1, "atomic_min": 1, "atomic_max": 1, "atomic_exch": 1,
                 "atomic_cas": 2, "atomic_and": 1, "atomic_or": 1, "atomic_xor": 1}


@dataclass(frozen=True)
class Where:
    """The ``file:line`` an ``expect_eq`` prints when it fails (a type argument: no C++ operand)."""

    text: str


def _addr(a, idx) -> str:
    return f"tg::addr({a}.data, {a}, {', '.join(idx)})"


def _rule(nvalues, pred):
    def rule(ts):
        if not ts or not is_array(ts[0]):
            return NO
        arr = ts[0]
        idx, vals = ts[1:len(ts) - nvalues], ts[len(ts) - nvalues:]
        if len(idx) != arr.ndim or not all(is_int(t) for t in idx) or len(vals) != nvalues:
            return NO
        if not all(v is arr.dtype for v in vals) or not pred(arr.dtype):
            return NO
        return arr.dtype
    return rule


def _fwd(name, nvalues):
    def spec(ts, r):
        return lambda a: f"tg::{name}_({_addr(a[0], a[1:len(a) - nvalues])}, {', '.join(a[len(a) - nvalues:])})"
    return spec


def _replay(nvalues):
    def spec(ts, r):
        return lambda a: f"(*{_addr(a[0], a[1:len(a) - nvalues])})"
    return spec


for _name, _n, _pred, _doc in (
        ("atomic_exch", 1, is_scalar, "atomic_exch(a, i[, j...], value): store value; returns the old value"),
        ("atomic_cas", 2, is_scalar, "atomic_cas(a, i[, j...], compare, value): store value where the element "
                                     "equals compare (bitwise); returns the old value"),
        ("atomic_and", 1, is_int, "atomic_and(a, i[, j...], value): atomic bitwise and; returns the old value"),
        ("atomic_or", 1, is_int, "atomic_or(a, i[, j...], value): atomic bitwise or; returns the old value"),
        ("atomic_xor", 1, is_int, "atomic_xor(a, i[, j...], value): atomic bitwise xor; returns the old value")):
    Builtin(_name, None, _doc).add(_rule(_n, _pred), _fwd(_name, _n), side_effect=True, replay=_replay(_n),
                                   writes=(0,))


def _expect_rule(ts):
    if len(ts) == 3 and isinstance(ts[2], TypeRef) and isinstance(ts[2].t, Where) and ts[0] is ts[1] \
            and (is_scalar(ts[0]) or is_composite(ts[0])):
        return None
    return NO


def _expect_fwd(name):
    def spec(ts, r):
        text = ts[2].t.text.replace("\\", "/").replace('"', "'")
        return lambda a: f'tg::{name}({a[0]}, {a[1]}, "{text}");'
    return spec


def _expect_py(name):
    """``expect_eq``/``expect_neq`` in Python scope (as Warp's): print when the check fails."""
    def run(a, b):
        equal = np.shape(a) == np.shape(b) and bool(np.all(np.asarray(a) == np.asarray(b)))
        if name == "expect_eq" and not equal:
            print(f"Error, expect_eq() failed:\n\t Expected: {b}\n\t Actual: {a}")
        elif name == "expect_neq" and equal:
            print(f"Error, expect_neq() failed:\n\t Expected: not {b}\n\t Actual: {a}")
    run.__name__ = name
    return run


Builtin("expect_eq", _expect_py("expect_eq"), "expect_eq(a, b): print both values (and the line) when a != b").add(
    _expect_rule, _expect_fwd("expect_eq"), side_effect=True, replay="skip")
Builtin("expect_neq", _expect_py("expect_neq"), "expect_neq(a, b): print the value (and the line) when a == b").add(
    _expect_rule, _expect_fwd("expect_neq"), side_effect=True, replay="skip")
