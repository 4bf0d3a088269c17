"""Control flow in kernels: if/elif/else, static and dynamic loops, while/break/continue,
early return — forward values and adjoints (vs finite differences)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang import TapeCompileWarning

from ._lang_util import check_grad, run

F64 = tg.array(dtype=tg.float64)
I32 = tg.array(dtype=tg.int32)


@tg.kernel
def k_if(x: F64, y: F64):
    i = tg.tid()
    v = x[i]
    if v > 0.5:
        y[i] = v * v
    elif v > -0.5:
        y[i] = tg.sin(v)
    else:
        y[i] = 1.0 - v


def test_if_elif_else(device):
    x = np.array([-1.0, -0.2, 0.3, 0.9, 2.0])
    (y,) = run(k_if, 5, [x], [np.zeros(5)], device)
    np.testing.assert_allclose(y, np.where(x > 0.5, x * x, np.where(x > -0.5, np.sin(x), 1 - x)))
    check_grad(k_if, 5, [x], [np.zeros(5)], device)


@tg.kernel
def k_static_loop(x: F64, y: F64):
    i = tg.tid()
    s = x[i]
    for k in range(4):
        s = s * x[i] + float(k)       # carried and multiplied: exact because unrolled
    y[i] = s


def test_static_loop_is_unrolled_and_exact(device):
    x = np.array([0.5, -1.2, 2.0])
    (y,) = run(k_static_loop, 3, [x], [np.zeros(3)], device)
    s = x.copy()
    for k in range(4):
        s = s * x + k
    np.testing.assert_allclose(y, s)
    check_grad(k_static_loop, 3, [x], [np.zeros(3)], device)


@tg.kernel
def k_dyn_sum(a: tg.array2d[tg.float64], w: F64, n: int, y: F64):
    i = tg.tid()
    s = tg.float64(0.0)
    for j in range(n):
        s += a[i, j] * w[j]
    y[i] = s


def test_dynamic_loop_accumulation(device):
    rng = np.random.default_rng(1)
    a, w = rng.normal(size=(3, 7)), rng.normal(size=7)
    ta = tg.array(a, dtype=tg.float64, device=device)
    tw = tg.array(w, dtype=tg.float64, device=device)
    y = tg.zeros(3, dtype=tg.float64, device=device)
    tg.launch(k_dyn_sum, dim=3, inputs=[ta, tw, 7], outputs=[y], device=device)
    np.testing.assert_allclose(y.numpy(), a @ w)
    ga, gw = tg.zeros((3, 7), dtype=tg.float64, device=device), tg.zeros(7, dtype=tg.float64, device=device)
    gy = tg.array(np.array([1.0, 2.0, 3.0]), dtype=tg.float64, device=device)
    tg.launch(k_dyn_sum, dim=3, inputs=[ta, tw, 7], outputs=[y], adjoint=True, device=device,
              adj_inputs=[ga, gw, 0], adj_outputs=[gy])
    np.testing.assert_allclose(ga.numpy(), np.outer([1, 2, 3], w))
    np.testing.assert_allclose(gw.numpy(), np.array([1, 2, 3]) @ a)


@tg.kernel
def k_dyn_product(x: F64, n: int, y: F64):
    i = tg.tid()
    p = tg.float64(1.0)
    for j in range(n):
        p = p * x[i] + 0.5
    y[i] = p


def test_loop_carried_product_warns_and_is_exact(device):
    k_dyn_product._ir = None
    with pytest.warns(TapeCompileWarning, match=r"'p'.*test_lang_control.py:\d+|test_lang_control.py:\d+.*'p'"):
        _ = k_dyn_product.ir
    x = np.array([0.7, -1.1, 1.3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TapeCompileWarning)
        check_grad(k_dyn_product, 3, [x, 5], [np.zeros(3)], device)


@tg.kernel
def k_while(x: F64, y: F64):
    i = tg.tid()
    v = x[i]
    k = int(0)
    acc = tg.float64(0.0)
    while k < 10:
        k += 1
        if k == 3:
            continue
        if k > 6:
            break
        acc += v * tg.float64(k)
    y[i] = acc


def test_while_break_continue(device):
    x = np.array([1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TapeCompileWarning)
        (y,) = run(k_while, 2, [x], [np.zeros(2)], device)
        np.testing.assert_allclose(y, x * (1 + 2 + 4 + 5 + 6))
        check_grad(k_while, 2, [x], [np.zeros(2)], device)


@tg.kernel
def k_early_return(x: F64, y: F64):
    i = tg.tid()
    if x[i] < 0.0:
        return
    y[i] = tg.sqrt(x[i])


def test_early_return(device):
    x = np.array([-1.0, 4.0, 9.0])
    (y,) = run(k_early_return, 3, [x], [np.full(3, 7.0)], device)
    np.testing.assert_allclose(y, [7.0, 2.0, 3.0])
    check_grad(k_early_return, 3, [x], [np.zeros(3)], device)


@tg.kernel
def k_static_break(x: F64, y: F64):
    i = tg.tid()
    s = tg.float64(0.0)
    for k in range(8):
        if float(k) > x[i]:
            break
        s += x[i] * x[i]
    y[i] = s


def test_static_loop_break(device):
    x = np.array([-1.0, 0.5, 2.5, 10.0])
    (y,) = run(k_static_break, 4, [x], [np.zeros(4)], device)
    cnt = np.array([0, 1, 3, 8])
    np.testing.assert_allclose(y, cnt * x * x)
    check_grad(k_static_break, 4, [x], [np.zeros(4)], device)


@tg.kernel
def k_ternary_bool(x: F64, y: F64):
    i = tg.tid()
    v = x[i]
    y[i] = v * 2.0 if (v > 0.0 and not v > 1.0) or v < -2.0 else -v


def test_ternary_and_boolops(device):
    x = np.array([-3.0, -1.0, 0.5, 1.5])
    (y,) = run(k_ternary_bool, 4, [x], [np.zeros(4)], device)
    np.testing.assert_allclose(y, [-6.0, 1.0, 1.0, -1.5])
    check_grad(k_ternary_bool, 4, [x], [np.zeros(4)], device)


@tg.kernel
def k_nested(x: F64, n: int, y: F64):
    i = tg.tid()
    s = tg.float64(0.0)
    for a in range(n):
        for b in range(a, n):
            s += x[i] * tg.float64(a + b)
    y[i] = s


def test_nested_dynamic_loops(device):
    x = np.array([1.0, -2.0])
    (y,) = run(k_nested, 2, [x, 4], [np.zeros(2)], device)
    tot = sum(a + b for a in range(4) for b in range(a, 4))
    np.testing.assert_allclose(y, x * tot)
    check_grad(k_nested, 2, [x, 4], [np.zeros(2)], device)
