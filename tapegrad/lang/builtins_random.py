"""Random numbers and noise (Warp's ``rand_init``, ``randi``, ``randu``, ``randf``, ``randn``,
``sample_*``, ``noise``, ``pnoise``, ``curlnoise``), registered into the builtin table.

The generator lives once in ``runtime/random.h`` (a PCG hash of a 32-bit state, the same on the
CPU and CUDA). A draw such as ``randf(state)`` advances ``state``: the builtin returns an
``RngOut`` (new state and value); the frontend writes the state back to the variable named as
first argument and uses the value (``DRAWS`` lists the drawing builtins and the type literals
take). The draws are not differentiable (Warp's are not either: a draw is a constant for the
adjoint); ``noise``, ``pnoise`` and ``curlnoise`` are Warp's noise functions with analytic
adjoints (``curlnoise``'s through the noise's Hessian).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..types import float32, float64, int32, uint32, vec2, vec2d, vec3, vec3d, vec4, vec4d
from .builtins import NO, REGISTRY, Builtin, Sample
from .typeutil import is_array, is_float, is_int

__all__ = ["RngOut", "DRAWS", "rng_out"]


@dataclass(frozen=True)
class RngOut:
    """The C++ ``tg::rng_out<V>``: a random draw's new state and value (an IR type, not a struct)."""

    value: Any

    @property
    def cname(self) -> str:
        return f"tg::rng_out<{self.value.cname}>"

    @property
    def name(self) -> str:
        return f"rng_out({self.value.name})"


_OUTS: dict = {}


def rng_out(t) -> RngOut:
    """The one ``RngOut`` of value type ``t``."""
    return _OUTS.setdefault(t, RngOut(t))


def _exact(*want):
    """A rule accepting exactly the types ``want``."""
    def rule(ts):
        return True if len(ts) == len(want) and all(a is b for a, b in zip(ts, want)) else NO
    return rule


def _call(name):
    return lambda ts, r: (lambda a: f"tg::{name}({', '.join(a)})")


# name -> (literal type of the extra arguments, [(extra argument types, value type)])
DRAWS = {
    "randi": (int32, [((), int32), ((int32, int32), int32)]),
    "randu": (uint32, [((), uint32), ((uint32, uint32), uint32)]),
    "randf": (float32, [((), float32), ((float32, float32), float32)]),
    "randn": (float32, [((), float32)]),
    "sample_triangle": (None, [((), vec2)]),
    "sample_unit_ring": (None, [((), vec2)]),
    "sample_unit_disk": (None, [((), vec2)]),
    "sample_unit_square": (None, [((), vec2)]),
    "sample_unit_cube": (None, [((), vec3)]),
    "sample_unit_hypercube": (None, [((), vec4)]),
    "sample_unit_sphere": (None, [((), vec3)]),
    "sample_unit_sphere_surface": (None, [((), vec3)]),
    "sample_unit_hemisphere": (None, [((), vec3)]),
    "sample_unit_hemisphere_surface": (None, [((), vec3)]),
    "poisson": (float32, [((float32,), uint32)]),
    "sample_cdf": (None, []),       # its overload (a CDF array) is added below
}
_DRAW_DOCS = {
    "randi": "randi(state[, lo, hi]): a random int32 (in [lo, hi)); advances state",
    "randu": "randu(state[, lo, hi]): a random uint32 (in [lo, hi)); advances state",
    "randf": "randf(state[, lo, hi]): a uniform float32 in [0, 1) (or [lo, hi)); advances state",
    "randn": "randn(state): a standard normal float32 (Box-Muller); advances state",
    "poisson": "poisson(state, lam): a Poisson(lam) count (uint32; lam <= 0: 0, drawing nothing); advances state",
    "sample_cdf": "sample_cdf(state, cdf): the first index whose CDF value (a non-decreasing 1-D float array ending "
                  "at 1) is >= a uniform draw (at most len(cdf) - 1); advances state",
}

for _name, (_lit, _sigs) in DRAWS.items():
    _b = Builtin(_name, None, _DRAW_DOCS.get(_name, f"{_name}(state): a uniform sample; advances state"))
    for _extra, _vt in _sigs:
        _out = rng_out(_vt)
        _b.add((lambda want, out: lambda ts: out if _exact(uint32, *want)(ts) is True else NO)(_extra, _out),
               _call(f"rng_{_name}"))

REGISTRY["sample_cdf"].add(
    lambda ts: rng_out(int32) if len(ts) == 2 and ts[0] is uint32 and is_array(ts[1]) and ts[1].ndim == 1
    and is_float(ts[1].dtype) else NO, _call("rng_sample_cdf"), reads=(1,))

Builtin("rand_state", None, "the state after a draw", export=False).add(
    lambda ts: uint32 if len(ts) == 1 and isinstance(ts[0], RngOut) else NO, lambda ts, r: (lambda a: f"{a[0]}.state"))
Builtin("rand_value", None, "the value of a draw", export=False).add(
    lambda ts: ts[0].value if len(ts) == 1 and isinstance(ts[0], RngOut) else NO,
    lambda ts, r: (lambda a: f"{a[0]}.value"))

Builtin("rand_init", None, "rand_init(seed[, offset]): a random state (uint32) for seed and offset").add(
    lambda ts: uint32 if len(ts) in (1, 2) and all(is_int(t) for t in ts) else NO,
    lambda ts, r: (lambda a: f"tg::rng_init({', '.join(f'uint32_t({x})' for x in a)})"))

# noise points: Warp's float32 ones, and float64 ones (the same lattice gradients, float64 math)
_POINTS = {float32: 1, vec2: 2, vec3: 3, vec4: 4, float64: 1, vec2d: 2, vec3d: 3, vec4d: 4}


def _scalar(t):
    return t if t in (float32, float64) else t.scalar


def _adjoint(name):
    """The adjoint renderer of a noise builtin: ``adj_<fn>(args..., adjs..., adj_ret)``; the state,
    periods and octaves take no gradient (the C++ ignores their adjoint slots)."""
    return lambda ts, r: (lambda a, aa, g: f"tg::adj_{name}({', '.join(list(a) + list(aa) + [g])});")


Builtin("noise", None, "noise(state, x): Warp's gradient (Perlin) noise at x (float32, vec2, vec3 or vec4; "
        "float64 points too); differentiable in x").add(
    lambda ts: _scalar(ts[1]) if len(ts) == 2 and ts[0] is uint32 and ts[1] in _POINTS else NO,
    _call("rng_noise"), _adjoint("rng_noise"),
    samples=[Sample(("S:any",), "S", "out[i] = tg.noise(tg.rand_init(7), {0} * 3.0)"),
             Sample(("V2:any",), "S", "out[i] = tg.noise(tg.rand_init(8), {0} * 3.0)"),
             Sample(("V3:any",), "S", "out[i] = tg.noise(tg.rand_init(9), {0} * 3.0)"),
             Sample(("V4:any",), "S", "out[i] = tg.noise(tg.rand_init(10), {0} * 3.0)")])
Builtin("pnoise", None, "pnoise(state, x, px[, py, pz, pt]): noise periodic with integer periods (positive); "
        "differentiable in x").add(
    lambda ts: _scalar(ts[1]) if len(ts) >= 3 and ts[0] is uint32 and ts[1] in _POINTS
    and len(ts) == 2 + _POINTS[ts[1]] and all(t is int32 for t in ts[2:]) else NO, _call("rng_pnoise"),
    _adjoint("rng_pnoise"),
    samples=[Sample(("S:any",), "S", "out[i] = tg.pnoise(tg.rand_init(7), {0} * 3.0, 2)"),
             Sample(("V2:any",), "S", "out[i] = tg.pnoise(tg.rand_init(8), {0} * 3.0, 2, 3)"),
             Sample(("V3:any",), "S", "out[i] = tg.pnoise(tg.rand_init(9), {0} * 3.0, 2, 3, 4)"),
             Sample(("V4:any",), "S", "out[i] = tg.pnoise(tg.rand_init(10), {0} * 3.0, 2, 3, 4, 5)")])
Builtin("curlnoise", None, "curlnoise(state, x[, octaves, lacunarity, gain]): Warp's divergence-free noise "
        "(vec2 -> vec2; vec3, vec4 (x, y, z, t) -> vec3); differentiable in x, lacunarity and gain").add(
    lambda ts: (ts[1] if _POINTS.get(ts[1]) == 2 else (vec3 if _scalar(ts[1]) is float32 else vec3d))
    if len(ts) == 5 and ts[0] is uint32 and _POINTS.get(ts[1], 1) > 1 and ts[2] is uint32
    and ts[3] is _scalar(ts[1]) and ts[4] is _scalar(ts[1]) else NO, _call("rng_curlnoise"),
    _adjoint("rng_curlnoise"),
    samples=[Sample(("V2:any",), "V2", "out[i] = tg.curlnoise(tg.rand_init(8), {0} * 3.0)"),
             Sample(("V3:any",), "V3", "out[i] = tg.curlnoise(tg.rand_init(9), {0} * 3.0)"),
             Sample(("V4:any",), "V3", "out[i] = tg.curlnoise(tg.rand_init(10), {0} * 3.0)"),
             Sample(("V3:any", "S:pos", "S:unit"), "V3",
                    "out[i] = tg.curlnoise(tg.rand_init(11), {0} * 2.0, tg.uint32(3), 1.5 + {1}, {2})")])
