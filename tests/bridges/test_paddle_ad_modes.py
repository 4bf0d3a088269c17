"""Paddle's higher-order autodiff on a ``tg.paddle_op`` (B17, issue 27): paddle.grad(create_graph=True)
twice, paddle.autograd.hessian / jacobian, paddle.incubate.autograd.jvp, with stop_gradient=True
inputs next to trainable ones — against the same functions written in paddle ops (float64). What a
kernel op cannot do raises, naming the op and the transform."""
import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import tapegrad as tg  # noqa: E402

pytestmark = pytest.mark.paddle


@tg.kernel
def springs_pd(x: tg.array[tg.float64], k: tg.array[tg.float64], e: tg.array[tg.float64]):
    i = tg.tid()
    d = x[i + 1] - x[i] - 1.0
    tg.atomic_add(e, 0, 0.5 * k[i] * d * d + 0.1 * tg.cos(x[i]) * x[i + 1])


@tg.kernel
def wave_pd(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * x[i] * x[i] + tg.exp(0.3 * x[i])


@tg.kernel
def mix_pd(x: tg.array[tg.float64], w: tg.array[tg.float64], s: tg.float64, idx: tg.array[tg.int32],
           y: tg.array[tg.float64], z: tg.array[tg.float64]):
    i = tg.tid()
    j = idx[i]
    y[i] = s * x[i] * w[j] * w[j]
    z[i] = tg.tanh(x[i] + w[i])


@tg.kernel(enable_backward=False)
def wave_pd_nobwd(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i]


N = 7


def energy_ref(x, k):
    d = x[1:] - x[:-1] - 1.0
    return (0.5 * k * d * d + 0.1 * paddle.cos(x[:-1]) * x[1:]).sum()


def wave_ref(x):
    return paddle.sin(x) * x * x + paddle.exp(0.3 * x)


def mix_ref(x, w, s, idx):
    return s * x * paddle.gather(w, idx.astype("int64")) ** 2, paddle.tanh(x + w)


def numbers(seed=0):
    rng = np.random.default_rng(seed)
    return (np.cumsum(rng.uniform(0.5, 1.5, N)), rng.uniform(1.0, 3.0, N - 1), rng.normal(size=N),
            rng.normal(size=N), rng.integers(0, N, N).astype(np.int32))


def t(a, trainable=True, place=None):
    return paddle.to_tensor(a, dtype=a.dtype if a.dtype == np.int32 else "float64", stop_gradient=not trainable,
                            place=place)


def close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)


def energy_op():
    return tg.paddle_op(springs_pd, launch_dims=lambda x, k: x.shape[0] - 1, output_dims=1)


def energy(x, k):
    return energy_op()(x, k).sum()


def hvp(f, xn, kn, vn, k_trainable, place=None):
    x, k = t(xn, place=place), t(kn, k_trainable, place)
    (g,) = paddle.grad(f(x, k), [x], create_graph=True)
    (hv,) = paddle.grad((g * t(vn, False, place)).sum(), [x])
    return hv.numpy()


@pytest.mark.parametrize("k_trainable", [True, False])
def test_double_backward_hvp_with_trainable_and_stop_gradient_inputs(k_trainable):
    xn, kn, vn, _, _ = numbers()
    close(hvp(energy, xn, kn, vn, k_trainable), hvp(energy_ref, xn, kn, vn, k_trainable))


def test_mixed_partials_and_grad_of_the_incoming_gradient():
    xn, kn, vn, _, _ = numbers()
    res = []
    for f in (energy, energy_ref):
        x, k = t(xn), t(kn)
        (g,) = paddle.grad(f(x, k), [x], create_graph=True)
        res.append([r.numpy() for r in paddle.grad((g * t(vn, False)).sum(), [x, k])])
    close(res[0][0], res[1][0])
    close(res[0][1], res[1][1])   # d/dk (dE/dx . v)
    # the backward differentiated w.r.t. its incoming gradient (J v: the double-vjp jvp trick)
    out = []
    for f in (wave_pd_op := tg.paddle_op(wave_pd), wave_ref):
        x = t(xn)
        u = paddle.zeros([N], dtype="float64")
        u.stop_gradient = False
        (g,) = paddle.grad(f(x), [x], grad_outputs=[u], create_graph=True)
        (jv,) = paddle.grad(g, [u], grad_outputs=[t(vn, False)])
        out.append(jv.numpy())
    close(*out)
    assert wave_pd_op is tg.paddle_op(wave_pd)


def test_hessian_and_jacobian():
    xn, kn, _, wn, idxn = numbers()
    hs = []
    for f in (energy, energy_ref):
        x = t(xn)
        hs.append(paddle.autograd.hessian(f(x, t(kn, False)), x)[:].numpy())
    close(*hs)
    js = []
    for f in (tg.paddle_op(wave_pd), wave_ref):
        x = t(xn)
        js.append(paddle.autograd.jacobian(f(x), x)[:].numpy())
    close(*js)
    mix = tg.paddle_op(mix_pd, 2)
    js = []
    for f in (mix, mix_ref):
        x, w = t(xn), t(wn)
        y, z = f(x, w, 0.7, t(idxn, False))
        js.append([paddle.autograd.jacobian(y, w)[:].numpy(), paddle.autograd.jacobian(z, x)[:].numpy()])
    close(js[0][0], js[1][0])
    close(js[0][1], js[1][1])


def test_incubate_jvp():
    from paddle.incubate.autograd import jvp
    xn, kn, vn, _, _ = numbers()
    res = []
    for f in (tg.paddle_op(wave_pd), wave_ref):
        _, tv = jvp(f, t(xn), t(vn, False))
        res.append(tv.numpy())
    close(*res)
    res = []
    for f in (lambda x: energy(x, t(kn, False)), lambda x: energy_ref(x, t(kn, False))):
        _, tv = jvp(f, t(xn), t(vn, False))
        res.append(tv.numpy())
    close(*res)


def test_third_order_raises_naming_the_op():
    xn, kn, vn, _, _ = numbers()
    x = t(xn)
    (g,) = paddle.grad(tg.paddle_op(wave_pd)(x).sum(), [x], create_graph=True)
    (h,) = paddle.grad((g * t(vn, False)).sum(), [x], create_graph=True)
    with pytest.raises(Exception, match=r"paddle_op '.*wave_pd'.*third-order"):
        paddle.grad(h.sum(), [x])


def test_enable_backward_false_raises_naming_the_kernel():
    op = tg.paddle_op(wave_pd_nobwd)
    xn = numbers()[0]
    close(op(t(xn, False)).numpy(), xn * xn)
    x = t(xn)
    with pytest.raises(Exception, match=r"wave_pd_nobwd.*enable_backward=False"):
        paddle.grad(op(x).sum(), [x])


@pytest.mark.cuda
def test_cuda_hvp_hessian_jvp():
    place = paddle.CUDAPlace(0)
    xn, kn, vn, _, _ = numbers()
    close(hvp(energy, xn, kn, vn, True, place), hvp(energy_ref, xn, kn, vn, True))
    x = t(xn, place=place)
    xr = t(xn)
    close(paddle.autograd.hessian(energy(x, t(kn, False, place)), x)[:].numpy(),
          paddle.autograd.hessian(energy_ref(xr, t(kn, False)), xr)[:].numpy())
