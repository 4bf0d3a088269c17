"""Values found different from NVIDIA Warp 1.19 by the differential audit
(tests/lang/test_warp_differential.py) and fixed, checked here without Warp: against C's fmin/fmax
(NumPy's np.fmin/np.fmax), NumPy float32 arithmetic and float64 finite differences."""
import math

import numpy as np
import pytest

import tapegrad as tg
from tests.lang.warp_diff_harness import load

NAN = float("nan")
DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]


# the differential audit's kernel, loaded with wp bound to tapegrad (no Warp needed)
minmax_k = load("tapegrad").minmax_nan


@pytest.mark.parametrize("device", DEVICES)
def test_min_max_clamp_ignore_nan_as_fmin_fmax(device):
    # was: NaN propagated (min(NaN, 1) = NaN); Warp documents C fmin/fmax semantics
    a = np.array([NAN, 1.0, NAN, 2.0, -np.inf, 0.5, -0.5, 2.0], np.float32)
    b = np.array([1.0, NAN, NAN, 1.0, np.inf, NAN, 3.0, 1.0], np.float32)
    outs = [tg.zeros(len(a), dtype=float, device=device) for _ in range(4)]
    tg.launch(minmax_k, dim=len(a), inputs=[tg.array(a, device=device), tg.array(b, device=device), *outs],
              device=device)
    np.testing.assert_array_equal(outs[0].numpy(), np.fmin(a, b))
    np.testing.assert_array_equal(outs[1].numpy(), np.fmax(a, b))
    np.testing.assert_array_equal(outs[2].numpy(), np.fmin(np.fmax(np.float32(0), a), np.float32(1)))
    # clamp(x, lo, hi) = fmin(fmax(lo, x), hi): lo > hi gives hi, a NaN bound is ignored
    np.testing.assert_array_equal(outs[3].numpy(), np.fmin(np.fmax(a, np.float32(0.5)), b))
    assert outs[2].numpy()[0] == 0.0          # clamp(NaN, 0, 1) is the lower bound
    assert outs[3].numpy()[3] == 1.0          # clamp(0.5, 2, 1) is the upper bound


@tg.kernel
def minmax_grad_k(a: tg.array(dtype=tg.float64), b: tg.array(dtype=tg.float64), o: tg.array(dtype=tg.float64)):
    i = tg.tid()
    o[i] = 1.0 * tg.min(a[i], b[i]) + 10.0 * tg.max(a[i], b[i]) + 100.0 * tg.clamp(a[i], -1.0, b[i])


def test_min_max_clamp_gradient_follows_the_picked_operand():
    a = np.array([NAN, 0.2, 0.3, 0.7, 1.0], np.float64)
    b = np.array([0.5, NAN, 0.3, 0.5, 1.0], np.float64)
    ta, tb = tg.array(a, requires_grad=True), tg.array(b, requires_grad=True)
    o = tg.zeros(5, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(minmax_grad_k, dim=5, inputs=[ta, tb, o])
    tape.backward(grads={o: tg.array(np.ones(5))})
    # NaN operands get nothing (row 0: clamp(NaN, -1, b) is the constant -1); finite ones as by
    # finite differences where smooth (row 3)
    # and, at a tie (rows 2, 4), the second operand (Warp's routing, a subgradient)
    np.testing.assert_array_equal(ta.grad.numpy(), [0.0, 111.0, 0.0, 10.0, 0.0])
    np.testing.assert_array_equal(tb.grad.numpy(), [11.0, 0.0, 111.0, 101.0, 111.0])
    h = 1e-6
    for k in (3,):          # a smooth point: central differences in float64
        def f(x, y):
            return min(x, y) + 10 * max(x, y) + 100 * min(max(-1.0, x), y)
        assert abs((f(a[k] + h, b[k]) - f(a[k] - h, b[k])) / (2 * h) - ta.grad.numpy()[k]) < 1e-5
        assert abs((f(a[k], b[k] + h) - f(a[k], b[k] - h)) / (2 * h) - tb.grad.numpy()[k]) < 1e-5


@tg.kernel
def abs_k(x: tg.array(dtype=float), o: tg.array(dtype=float), x64: tg.array(dtype=tg.float64),
          o64: tg.array(dtype=tg.float64)):
    i = tg.tid()
    o[i] = tg.abs(x[i])
    o64[i] = tg.abs(x64[i])


@pytest.mark.parametrize("device", DEVICES)
def test_abs_of_negative_zero_is_positive_zero(device):
    x = np.array([-0.0, 0.0, -2.0, NAN], np.float32)
    o, o64 = tg.zeros(4, dtype=float, device=device), tg.zeros(4, dtype=tg.float64, device=device)
    tg.launch(abs_k, dim=4, inputs=[tg.array(x, device=device), o, tg.array(x.astype(np.float64), device=device), o64],
              device=device)
    for r in (o.numpy(), o64.numpy()):
        assert not np.signbit(r[0])          # was -0.0
        np.testing.assert_array_equal(r, np.abs(x))


@tg.kernel
def arc_k(x: tg.array(dtype=tg.float64), ac: tg.array(dtype=tg.float64), asn: tg.array(dtype=tg.float64)):
    i = tg.tid()
    ac[i] = tg.acos(x[i])
    asn[i] = tg.asin(x[i])


@tg.kernel
def arc32_k(x: tg.array(dtype=float), ac: tg.array(dtype=float)):
    i = tg.tid()
    ac[i] = tg.acos(x[i]) + tg.asin(x[i])


def test_acos_asin_clamp_their_input():
    # Warp documents "inputs are automatically clamped to [-1.0, 1.0]"; was NaN outside
    x = np.array([1.0000001, 2.0, -3.0, np.inf, NAN, 0.25, -1.0, 1.0])
    tx = tg.array(x, requires_grad=True)
    ac = tg.zeros(len(x), dtype=tg.float64, requires_grad=True)
    asn = tg.zeros(len(x), dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(arc_k, dim=len(x), inputs=[tx, ac, asn])
    xc = np.fmin(np.fmax(x, -1.0), 1.0)      # a NaN clamps to -1 (fmax ignores it), as Warp
    np.testing.assert_array_equal(ac.numpy(), np.arccos(xc))
    np.testing.assert_array_equal(asn.numpy(), np.arcsin(xc))
    tape.backward(grads={ac: tg.array(np.ones(len(x))), asn: tg.array(2 * np.ones(len(x)))})
    g = tx.grad.numpy()
    # flat (clamped) outside [-1, 1] and no inf at the endpoints; inside: finite differences
    np.testing.assert_array_equal(g[[0, 1, 2, 3, 4, 6, 7]], 0.0)
    h = 1e-7
    fd = ((np.arccos(0.25 + h) + 2 * np.arcsin(0.25 + h)) - (np.arccos(0.25 - h) + 2 * np.arcsin(0.25 - h))) / (2 * h)
    assert abs(g[5] - fd) < 1e-6
    x32 = np.array([1.0000001, -1.5], np.float32)
    o = tg.zeros(2, dtype=float)
    tg.launch(arc32_k, dim=2, inputs=[tg.array(x32), o])
    np.testing.assert_allclose(o.numpy(), [0.0 + math.pi / 2, math.pi - math.pi / 2], rtol=1e-6)


@tg.kernel
def atan2_grad_k(y: tg.array(dtype=tg.float64), x: tg.array(dtype=tg.float64), o: tg.array(dtype=tg.float64)):
    i = tg.tid()
    o[i] = tg.atan2(y[i], x[i])


def test_atan2_gradient_at_the_origin_is_zero():
    y = tg.array(np.array([0.0, 0.3]), requires_grad=True)
    x = tg.array(np.array([0.0, -0.4]), requires_grad=True)
    o = tg.zeros(2, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(atan2_grad_k, dim=2, inputs=[y, x, o])
    tape.backward(grads={o: tg.array(np.ones(2))})
    assert y.grad.numpy()[0] == 0.0 and x.grad.numpy()[0] == 0.0     # was NaN (0/0)
    h = 1e-7
    fy = (math.atan2(0.3 + h, -0.4) - math.atan2(0.3 - h, -0.4)) / (2 * h)
    fx = (math.atan2(0.3, -0.4 + h) - math.atan2(0.3, -0.4 - h)) / (2 * h)
    assert abs(y.grad.numpy()[1] - fy) < 1e-6 and abs(x.grad.numpy()[1] - fx) < 1e-6


@tg.kernel
def normalize_k(v: tg.array(dtype=tg.vec3), q: tg.array(dtype=tg.quat), nv: tg.array(dtype=tg.vec3),
                nq: tg.array(dtype=tg.quat), n4: tg.array(dtype=tg.vec4)):
    i = tg.tid()
    nv[i] = tg.normalize(v[i])
    nq[i] = tg.normalize(q[i])
    n4[i] = tg.normalize(tg.vec4(q[i][0], q[i][1], q[i][2], q[i][3]))


def test_normalize_zero_quaternion_is_identity_and_vectors_divide():
    rng = np.random.default_rng(3)
    v = np.concatenate([rng.standard_normal((50, 3)), np.zeros((1, 3))]).astype(np.float32)
    q = np.concatenate([rng.standard_normal((50, 4)), np.zeros((1, 4))]).astype(np.float32)
    nv, nq, n4 = tg.zeros(51, dtype=tg.vec3), tg.zeros(51, dtype=tg.quat), tg.zeros(51, dtype=tg.vec4)
    tg.launch(normalize_k, dim=51, inputs=[tg.array(v, dtype=tg.vec3), tg.array(q, dtype=tg.quat), nv, nq, n4])
    # a zero quaternion normalizes to the identity rotation (was zero); a zero vec4 stays zero
    np.testing.assert_array_equal(nq.numpy()[50], [0, 0, 0, 1])
    np.testing.assert_array_equal(n4.numpy()[50], [0, 0, 0, 0])
    np.testing.assert_array_equal(nv.numpy()[50], [0, 0, 0])
    # vectors: each component divided by the float32 length (Warp's rounding, bit for bit)
    lv = np.sqrt((v[:50].astype(np.float32) ** 2).sum(axis=1, dtype=np.float32)).astype(np.float32)
    np.testing.assert_allclose(nv.numpy()[:50], v[:50] / lv[:, None], rtol=2e-7)
    assert tg.normalize(tg.quat(0.0, 0.0, 0.0, 0.0))[3] == 1.0
    np.testing.assert_array_equal(tg.normalize(tg.vec3(0.0, 0.0, 0.0)), [0, 0, 0])      # was NaN


@tg.kernel
def intdiv_k(a: tg.array(dtype=tg.int32), b: tg.array(dtype=tg.int32), q: tg.array(dtype=tg.int32),
             r: tg.array(dtype=tg.int32), d: tg.array(dtype=tg.int32), a64: tg.array(dtype=tg.int64),
             q64: tg.array(dtype=tg.int64)):
    i = tg.tid()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]
    d[i] = a[i] / b[i]
    q64[i] = a64[i] // tg.int64(b[i])


@pytest.mark.parametrize("device", DEVICES)
def test_int_min_divided_by_minus_one_wraps_instead_of_trapping(device):
    # was SIGFPE: the whole process died (as it does in Warp's CPU build)
    a = np.array([-2**31, -2**31, -7, 7], np.int32)
    b = np.array([-1, 1, -1, -2], np.int32)
    a64 = np.array([-2**63, 5, -7, 7], np.int64)
    q, r, d = (tg.zeros(4, dtype=tg.int32, device=device) for _ in range(3))
    q64 = tg.zeros(4, dtype=tg.int64, device=device)
    tg.launch(intdiv_k, dim=4, inputs=[tg.array(a, device=device), tg.array(b, device=device), q, r, d,
                                       tg.array(a64, device=device), q64], device=device)
    np.testing.assert_array_equal(q.numpy(), [-2**31, -2**31, 7, -4])     # floor division, INT_MIN wraps
    np.testing.assert_array_equal(r.numpy(), [0, 0, 0, 1])               # C remainder, as Warp
    np.testing.assert_array_equal(d.numpy(), [-2**31, -2**31, 7, -3])
    np.testing.assert_array_equal(q64.numpy(), [-2**63, 5, 7, -4])


def test_python_scope_builtins_match_kernels():
    assert tg.min(NAN, 1.0) == 1.0 and tg.max(2.0, NAN) == 2.0 and tg.clamp(NAN, 0.0, 1.0) == 0.0
    assert tg.acos(1.5) == 0.0 and tg.asin(-3.0) == -math.pi / 2
    # round: halves away from zero, as C's round in kernels (np.round rounds them to even)
    assert [float(tg.round(v)) for v in (-2.5, -1.5, 0.5, 2.5, 2.4999)] == [-3.0, -2.0, 1.0, 3.0, 2.0]
    assert np.signbit(tg.round(-0.4))


def test_fill_of_an_int_array_refuses_a_fractional_float():
    a = tg.zeros(3, dtype=tg.int32)
    with pytest.raises(TypeError, match="fill_.*integer"):
        a.fill_(2.7)                    # was: silently 2
    a.fill_(3.0)
    np.testing.assert_array_equal(a.numpy(), 3)
    v = tg.zeros(2, dtype=tg.vec3i)
    with pytest.raises(TypeError, match="fill_"):
        v.fill_((1.5, 2, 3))
