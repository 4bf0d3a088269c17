"""CPU entries run a launch under ``TG_OMP_MIN`` threads through a serial copy of the grid loop
(no OpenMP region: libgomp allocated a team even for ``parallel if (false)``) and larger ones
through the region: both give the same values and gradients, scalar adjoints accumulated once
per element. Float64 references: closed forms."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang.emit import OMP_MIN


@tg.kernel
def _scale(x: tg.array(dtype=tg.float64), s: tg.float64, y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = s * x[i] * x[i]


@tg.kernel
def _sum_sq(x: tg.array(dtype=tg.float64), total: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(total, 0, x[i] * x[i])


@tg.kernel
def _scale_2d(x: tg.array(dtype=tg.float64, ndim=2), s: tg.float64, y: tg.array(dtype=tg.float64, ndim=2)):
    i, j = tg.tid()
    y[i, j] = s * x[i, j] * x[i, j]


@pytest.mark.parametrize("n", [1, 7, OMP_MIN - 1, OMP_MIN, 3 * OMP_MIN + 5])
def test_small_and_large_cpu_launches_agree_with_the_closed_form(n):
    x0 = np.linspace(-1.0, 2.0, n)
    x = tg.array(x0, dtype=tg.float64, requires_grad=True, device="cpu")
    y = tg.zeros(n, dtype=tg.float64, requires_grad=True, device="cpu")
    s = 1.25
    with tg.Tape() as tape:
        tg.launch(_scale, n, inputs=[x, s], outputs=[y], device="cpu")
    np.testing.assert_allclose(y.numpy(), s * x0 * x0, rtol=1e-15)
    tape.backward(grads={y: tg.full(n, 1.0, dtype=tg.float64, device="cpu")})
    np.testing.assert_allclose(x.grad.numpy(), 2 * s * x0, rtol=1e-15)
    # an atomic sum over every thread, and its adjoint (every thread's share read back)
    total = tg.zeros(1, dtype=tg.float64, requires_grad=True, device="cpu")
    with tg.Tape() as tape:
        tg.launch(_sum_sq, n, inputs=[x], outputs=[total], device="cpu")
    np.testing.assert_allclose(total.numpy()[0], np.sum(x0 * x0), rtol=1e-12)
    x.grad.zero_()
    tape.backward(loss=total)
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0, rtol=1e-15)


@pytest.mark.parametrize("shape", [(3, 5), (64, 65)])
def test_strided_views_take_the_generic_loop_small_or_large(shape):
    base = np.arange(shape[0] * shape[1] * 2, dtype=np.float64).reshape(shape[0], 2 * shape[1]) / 100.0
    xb = tg.array(base, dtype=tg.float64, device="cpu")
    x = xb[:, ::2]                                        # strided innermost: the generic loop
    y = tg.zeros(shape, dtype=tg.float64, device="cpu")
    tg.launch(_scale_2d, shape, inputs=[x, 2.0], outputs=[y], device="cpu")
    np.testing.assert_allclose(y.numpy(), 2.0 * base[:, ::2] ** 2, rtol=1e-15)
