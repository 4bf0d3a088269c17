"""Warp's interpolation, classification and angle builtins (issue 16), registered into the
builtin table: ``lerp``, ``smoothstep``, ``step``, ``isnan``, ``isinf``, ``isfinite``,
``degrees``, ``radians``. The C++ is ``runtime/mathx.h``.
"""
from __future__ import annotations

import numpy as np

from ..types import bool_
from .builtins import NO, Builtin, Sample, same
from .typeutil import is_bool, is_composite, is_float, is_quat, is_scalar

__all__ = []


def _lerp_rule(ts):
    if len(ts) != 3:
        return NO
    a, b, t = ts
    if a is b and is_float(a) and t is a:
        return a
    if a is b and is_composite(a) and is_float(a.scalar) and t is a.scalar:
        return a
    return NO


Builtin("lerp", lambda a, b, t: a + (b - a) * t, "lerp(a, b, t): a + (b - a) t (scalars, vectors, matrices)").add(
    _lerp_rule, "tg::lerp", "tg::adj_lerp",
    samples=[Sample(("S:any", "S:any", "S:any"), "S"), Sample(("V3:any", "V3:any", "S:any"), "V3")])
def _smoothstep(a, b, x):
    t = np.clip((x - a) / (b - a), 0, 1)
    return t * t * (3 - 2 * t)


Builtin("smoothstep", _smoothstep, "smoothstep(a, b, x): Hermite step from 0 at a to 1 at b").add(
    same(3, is_float), "tg::smoothstep", "tg::adj_smoothstep", samples=[Sample(("S:lo", "S:hi", "S:unit"), "S")])
Builtin("step", lambda x: np.where(np.asarray(x) < 0, 1, 0).astype(np.asarray(x).dtype)[()],
        "step(x): 1 where x < 0 else 0, of x's type (floats and ints, as Warp's); zero gradient").add(
    same(1, lambda t: is_scalar(t) and not is_bool(t)), "tg::step")
for _name, _py in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)):
    Builtin(_name, lambda x, f=_py, every=_name == "isfinite": bool(np.all(f(x)) if every else np.any(f(x))),
            f"{_name}(x): of a float scalar, or of any component of a vector/matrix/quaternion").add(
        lambda ts: bool_ if len(ts) == 1 and (is_float(ts[0]) or ((is_composite(ts[0]) or is_quat(ts[0]))
                                                                  and is_float(ts[0].scalar))) else NO,
        f"tg::{_name}_")
Builtin("degrees", lambda x: np.degrees(x), "degrees(x): radians to degrees").add(
    same(1, is_float), "tg::degrees", "tg::adj_degrees", linear=(0,), samples=[Sample(("S:any",), "S")])
Builtin("radians", lambda x: np.radians(x), "radians(x): degrees to radians").add(
    same(1, is_float), "tg::radians", "tg::adj_radians", linear=(0,), samples=[Sample(("S:any",), "S")])
