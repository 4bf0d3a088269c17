"""Issue 28, item 3: Warp's ``lower_bound``, ``poisson``, ``sample_cdf``, ``quat_twist``,
``quat_twist_angle(_signed)``, ``transform_twist``, ``transform_wrench``, ``velocity_at_point``:
values against float64 NumPy and the values Warp 1.19 gives (recorded from it), the
distributions of the draws, Python scope, and tangent code (forward mode) over kernels that
search arrays. The builtin table's finite-difference samples (test_builtins_grad.py,
test_builtins_tangent.py) check the twist/wrench adjoints, tangents and second derivatives."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg

# ------------------------------------------------------------------------------- lower_bound

@tg.kernel
def search(values: tg.array(dtype=float), arr: tg.array(dtype=float), full: tg.array(dtype=int),
           ranged: tg.array(dtype=int), lit: tg.array(dtype=int)):
    i = tg.tid()
    full[i] = tg.lower_bound(arr, values[i])
    ranged[i] = tg.lower_bound(arr, 1, 4, values[i])
    lit[i] = tg.lower_bound(arr, 2.5)


def test_lower_bound_as_warp(device):
    arr = tg.array(np.arange(6.0), dtype=float, device=device)
    vals = np.array([-0.1, 0.0, 2.5, 4.0, 5.0, 5.5, 100.0])
    outs = [tg.zeros(len(vals), dtype=int, device=device) for _ in range(3)]
    tg.launch(search, dim=len(vals), inputs=[tg.array(vals, dtype=float, device=device), arr], outputs=outs,
              device=device)
    # Warp 1.19: past the last element the index stays the range's last one
    np.testing.assert_array_equal(outs[0].numpy(), [0, 0, 3, 4, 5, 5, 5])
    np.testing.assert_array_equal(outs[1].numpy(), [1, 1, 3, 3, 3, 3, 3])
    np.testing.assert_array_equal(outs[2].numpy(), [3] * len(vals))
    host = tg.array(np.arange(6.0), dtype=float)
    assert [tg.lower_bound(host, v) for v in vals] == [0, 0, 3, 4, 5, 5, 5]
    assert [tg.lower_bound(host, 1, 4, v) for v in vals] == [1, 1, 3, 3, 3, 3, 3]


@tg.kernel
def scale_by_bin(x: tg.array(dtype=float), edges: tg.array(dtype=float), cdf: tg.array(dtype=float),
                 out: tg.array(dtype=float)):
    i = tg.tid()
    state = tg.rand_init(3, i)
    k = tg.sample_cdf(state, cdf)
    out[i] = x[i] * float(tg.lower_bound(edges, x[i]) + k * 0)


def test_search_in_tangent_code():
    # forward mode runs the kernel on dual arrays: the searches read the values
    x = np.array([0.5, 1.5, 2.5, 3.5])
    edges = tg.array(np.arange(5.0), dtype=float)
    cdf = tg.array(np.array([0.5, 1.0]), dtype=float)
    xs = tg.array(x, dtype=float)
    out, tout = tg.zeros(4, dtype=float), tg.zeros(4, dtype=float)
    u = tg.array(np.ones(4), dtype=float)
    tg.launch(scale_by_bin, dim=4, inputs=[xs, edges, cdf], outputs=[out], tangent=True,
              tan_inputs=[u, None, None], tan_outputs=[tout])
    np.testing.assert_allclose(out.numpy(), x * [1, 2, 3, 4])
    np.testing.assert_allclose(tout.numpy(), [1, 2, 3, 4])


# --------------------------------------------------------------------------- poisson, sample_cdf

@tg.kernel
def draws(seed: int, cdf: tg.array(dtype=float), lo: tg.array(dtype=tg.uint32), hi: tg.array(dtype=tg.uint32),
          big: tg.array(dtype=tg.uint32), zero_then: tg.array(dtype=tg.uint32), bins: tg.array(dtype=int)):
    i = tg.tid()
    state = tg.rand_init(seed, i)
    lo[i] = tg.poisson(state, 3.0)
    hi[i] = tg.poisson(state, 42.0)
    big[i] = tg.poisson(state, 1.0e5)
    bins[i] = tg.sample_cdf(state, cdf)
    s2 = tg.rand_init(seed, i)
    z = tg.poisson(s2, 0.0)         # draws nothing: s2 stays the state rand_init gave
    zero_then[i] = z + tg.randu(s2) - tg.randu(tg.rand_init(seed, i))


def test_poisson_and_sample_cdf_distributions(device):
    n = 20000
    w = np.array([0.1, 0.4, 0.2, 0.3])
    cdf = tg.array(np.cumsum(w), dtype=float, device=device)
    outs = [tg.zeros(n, dtype=tg.uint32, device=device) for _ in range(4)] + [tg.zeros(n, dtype=int, device=device)]
    tg.launch(draws, dim=n, inputs=[13, cdf], outputs=outs, device=device)
    lo, hi, big, zero_then, bins = (o.numpy().astype(np.float64) for o in outs)
    for x, lam in ((lo, 3.0), (hi, 42.0), (big, 1.0e5)):
        se = np.sqrt(lam / n)
        assert abs(x.mean() - lam) < 5 * se, (lam, x.mean())
        assert abs(x.var() / lam - 1.0) < 0.05, (lam, x.var())
    np.testing.assert_array_equal(zero_then, 0.0)
    np.testing.assert_allclose(np.bincount(bins.astype(int), minlength=4) / n, w, atol=0.015)
    # small counts follow the Poisson probabilities
    k = np.arange(8)
    pmf = np.exp(-3.0) * 3.0 ** k / np.array([float(np.prod(np.arange(1, j + 1))) for j in k])
    np.testing.assert_allclose(np.bincount(lo.astype(int), minlength=8)[:8] / n, pmf, atol=0.01)


# -------------------------------------------------------------------- twist, wrench, velocity

@tg.kernel
def frame_maps(out: tg.array(dtype=tg.float32)):
    q = tg.quat_from_axis_angle(tg.vec3(0.0, 0.0, 1.0), tg.pi * 0.5)
    t = tg.transform(tg.vec3(1.0, 2.0, 3.0), q)
    x = tg.spatial_vector(1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    a = tg.transform_twist(t, x)
    b = tg.transform_wrench(t, x)
    v = tg.velocity_at_point(x, tg.vec3(0.5, -1.0, 2.0))
    for i in range(6):
        out[i] = a[i]
        out[6 + i] = b[i]
    for i in range(3):
        out[12 + i] = v[i]
    axis = tg.vec3(0.0, 0.6, 0.8)
    qq = tg.quat(0.3, -0.2, 0.5, 0.7)
    tq = tg.quat_twist(axis, qq)
    for i in range(4):
        out[15 + i] = tq[i]
    out[19] = tg.quat_twist_angle(axis, qq)
    out[20] = tg.quat_twist_angle_signed(axis, qq)
    qn = tg.quat(0.3, -0.2, 0.5, -0.7)
    out[21] = tg.quat_twist_angle(axis, qn)
    out[22] = tg.quat_twist_angle_signed(axis, -qn)
    ident = tg.quat_twist(axis, tg.quat(1.0, 0.0, 0.0, 0.0))
    out[23] = ident[3]
    out[24] = tg.quat_twist(tg.vec3(0.0, 1.2, 1.6), qq)[1]


# recorded from Warp 1.19 (the same expressions)
WARP_VALUES = [-2.0, 1.0, 3.0, -2.0, -5.0, 11.0, -2.0, -20.0, 17.0, -5.0, 4.0, 6.0, 11.0, 4.5, 4.0,
               0.0, 0.22283442, 0.29711255, 0.92847669, 0.76101279, 0.76101279, 5.52217245, -0.76101279, 1.0,
               0.50879902]


def test_values_as_warp(device):
    out = tg.zeros(25, dtype=tg.float32, device=device)
    tg.launch(frame_maps, dim=1, outputs=[out], device=device)
    np.testing.assert_allclose(out.numpy(), WARP_VALUES, atol=2e-6)


def test_python_scope_matches_numpy():
    q = np.array([0.3, -0.2, 0.5, 0.7])
    axis = np.array([0.0, 0.6, 0.8])
    np.testing.assert_allclose(tg.quat_twist(axis, q), WARP_VALUES[15:19], atol=1e-6)
    assert tg.quat_twist_angle(axis, q) == pytest.approx(WARP_VALUES[19], abs=1e-6)
    assert tg.quat_twist_angle_signed(axis, [-0.3, 0.2, -0.5, 0.7]) == pytest.approx(WARP_VALUES[22], abs=1e-6)
    assert tg.quat_twist_angle_signed(axis, -q) == pytest.approx(WARP_VALUES[19] - 2 * np.pi, abs=1e-5)
    t = np.array([1.0, 2.0, 3.0, 0.0, 0.0, np.sin(np.pi / 4), np.cos(np.pi / 4)])
    x = np.arange(1.0, 7.0)
    np.testing.assert_allclose(tg.transform_twist(t, x), WARP_VALUES[0:6], atol=1e-5)
    np.testing.assert_allclose(tg.transform_wrench(t, x), WARP_VALUES[6:12], atol=1e-5)
    np.testing.assert_allclose(tg.velocity_at_point(x, [0.5, -1.0, 2.0]), WARP_VALUES[12:15], atol=1e-6)


@tg.kernel
def twist_roundtrip(t: tg.array(dtype=tg.transformd), x: tg.array(dtype=tg.spatial_vectord),
                    tw: tg.array(dtype=tg.spatial_vectord), wr: tg.array(dtype=tg.spatial_vectord),
                    power: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tw[i] = tg.transform_twist(tg.transform_inverse(t[i]), tg.transform_twist(t[i], x[i]))
    wr[i] = tg.transform_wrench(tg.transform_inverse(t[i]), tg.transform_wrench(t[i], x[i]))
    # a twist and a wrench mapped to the same frame keep their power (tau . w + f . v)
    y = tg.spatial_vectord(x[i][3], x[i][1], x[i][5], x[i][0], x[i][4], x[i][2])
    power[i] = tg.spatial_dot(tg.transform_twist(t[i], x[i]), tg.transform_wrench(t[i], y)) - tg.spatial_dot(x[i], y)


def test_frame_maps_invert_and_keep_power(device):
    rng = np.random.default_rng(0)
    q = rng.normal(size=(8, 4))
    t = np.concatenate([rng.normal(size=(8, 3)), q / np.linalg.norm(q, axis=1, keepdims=True)], axis=1)
    x = rng.normal(size=(8, 6))
    tw, wr = (tg.zeros(8, dtype=tg.spatial_vectord, device=device) for _ in range(2))
    power = tg.zeros(8, dtype=tg.float64, device=device)
    tg.launch(twist_roundtrip, dim=8, inputs=[tg.array(t, dtype=tg.transformd, device=device),
                                              tg.array(x, dtype=tg.spatial_vectord, device=device)],
              outputs=[tw, wr, power], device=device)
    np.testing.assert_allclose(tw.numpy(), x, atol=1e-12)
    np.testing.assert_allclose(wr.numpy(), x, atol=1e-12)
    # the power tau . w + f . v of a wrench on a twist does not depend on the frame
    np.testing.assert_allclose(power.numpy(), 0.0, atol=1e-11)


@tg.kernel
def int_steps(a: tg.array(dtype=tg.int16), b: tg.array(dtype=tg.int64), c: tg.array(dtype=tg.uint8),
              out: tg.array(dtype=tg.int64)):
    i = tg.tid()
    out[i] = tg.int64(tg.step(a[i])) + tg.int64(10) * tg.step(b[i]) + tg.int64(100) * tg.int64(tg.step(c[i]))


def test_step_of_integers(device):
    # Warp's step takes every scalar type: 1 where x < 0 else 0, of x's type
    a = np.array([-2, 0, 3], dtype=np.int16)
    b = np.array([5, -1, 0], dtype=np.int64)
    c = np.array([0, 7, 255], dtype=np.uint8)
    out = tg.zeros(3, dtype=tg.int64, device=device)
    tg.launch(int_steps, dim=3, inputs=[tg.array(a, dtype=tg.int16, device=device),
                                        tg.array(b, dtype=tg.int64, device=device),
                                        tg.array(c, dtype=tg.uint8, device=device)], outputs=[out], device=device)
    assert out.numpy().tolist() == [1, 10, 0]
    assert tg.step(np.int32(-3)) == 1 and tg.step(np.int32(4)) == 0
