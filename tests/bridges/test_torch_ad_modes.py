"""Every PyTorch autodiff transform on a ``tg.torch_op`` (B17, issue 27): double backward, forward
mode, torch.func, vmap of each — against the same functions written in torch ops (float64), and
torch's own checkers (gradcheck with forward AD and batched grads, gradgradcheck, opcheck). What a
kernel op cannot do raises, naming the op and the transform."""
import re

import pytest

torch = pytest.importorskip("torch")   # a module that imports torch cannot be skipped by its marker

import torch.autograd.forward_ad as fwAD  # noqa: E402
from torch.func import grad, hessian, jacfwd, jacrev, jvp, vjp, vmap  # noqa: E402

import tapegrad as tg  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")]


@tg.kernel
def springs_ad(x: tg.array[tg.float64], k: tg.array[tg.float64], e: tg.array[tg.float64]):
    i = tg.tid()
    d = x[i + 1] - x[i] - 1.0
    tg.atomic_add(e, 0, 0.5 * k[i] * d * d + 0.1 * tg.cos(x[i]) * x[i + 1])


@tg.kernel
def wave_ad(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * x[i] * x[i] + tg.exp(0.3 * x[i])


@tg.kernel
def mix_ad(x: tg.array[tg.float64], w: tg.array[tg.float64], s: tg.float64, idx: tg.array[tg.int32],
           y: tg.array[tg.float64], z: tg.array[tg.float64]):
    # two float inputs, a scalar, an int array and two outputs
    i = tg.tid()
    j = idx[i]
    y[i] = s * x[i] * w[j] * w[j]
    z[i] = tg.tanh(x[i] + w[i])


@tg.kernel
def scaled_ad(s: tg.float64, x: tg.array[tg.float64], w: tg.array[tg.float64], y: tg.array[tg.float64]):
    # a scalar before the tensors: autograd edges are numbered over tensor inputs only
    i = tg.tid()
    y[i] = s * tg.sin(x[i]) * w[i] * w[i]


@tg.kernel(enable_backward=False)
def wave_nobwd(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i]


def wave_ref(x):
    return torch.sin(x) * x * x + torch.exp(0.3 * x)


def energy_ref(x, k):
    d = x[1:] - x[:-1] - 1.0
    return (0.5 * k * d * d + 0.1 * torch.cos(x[:-1]) * x[1:]).sum().reshape(1)


def mix_ref(x, w, s, idx):
    return s * x * w[idx.long()] ** 2, torch.tanh(x + w)


N = 7


def ops():
    energy = tg.torch_op(springs_ad, launch_dims=lambda x, k: x.shape[0] - 1, output_dims=1)
    return energy, tg.torch_op(wave_ad), tg.torch_op(mix_ad, 2)


def data(seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.cumsum(torch.rand(N, dtype=torch.float64, generator=g) + 0.5, 0)
    k = torch.rand(N - 1, dtype=torch.float64, generator=g) * 2 + 1
    v = torch.randn(N, dtype=torch.float64, generator=g)
    w = torch.randn(N, dtype=torch.float64, generator=g)
    idx = torch.randint(0, N, (N,), generator=g, dtype=torch.int32)
    return [t.to(device) for t in (x, k, v, w, idx)]


def close(a, b):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            close(x, y)
        return
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


# -------------------------------------------------------------------- torch's own checkers

def test_gradcheck_forward_ad_batched_and_gradgradcheck():
    energy, wave, mix = ops()
    x, k, _, w, idx = data()
    x, k, w = (t.requires_grad_() for t in (x, k, w))
    for f, args in ((energy, (x, k)), (wave, (x,)), (mix, (x, w, 0.7, idx))):
        assert torch.autograd.gradcheck(f, args, check_forward_ad=True, check_batched_grad=True,
                                        check_batched_forward_grad=True)
        assert torch.autograd.gradgradcheck(f, args, check_fwd_over_rev=True, check_batched_grad=True)


def test_opcheck_on_every_custom_op():
    energy, wave, mix = ops()
    x, k, v, w, idx = data()
    o = energy
    for op, args in ((o, (x, k)), (o.backward_op, (x, k, energy(x, k), torch.ones(1, dtype=torch.float64))),
                     (o.jvp_op, (x, k, v, None)),
                     (o.backward_jvp_op, (x, k, energy(x, k), torch.ones(1, dtype=torch.float64), v, None, None))):
        res = torch.library.opcheck(op, args)
        assert all(r == "SUCCESS" for r in res.values()), (op, res)


# -------------------------------------------------------------------- reverse over reverse

def test_double_backward_hvp_and_functional_hessian():
    energy, wave, mix = ops()
    x, k, v, _, _ = data()
    close(torch.autograd.functional.hvp(lambda x: energy(x, k), x, v)[1],
          torch.autograd.functional.hvp(lambda x: energy_ref(x, k), x, v)[1])
    close(torch.autograd.functional.hessian(lambda x, k: energy(x, k)[0], (x, k)),
          torch.autograd.functional.hessian(lambda x, k: energy_ref(x, k)[0], (x, k)))
    # create_graph twice by hand: d/dx (dE/dx . v) and d/dk of it (mixed partials)
    xg, kg = x.clone().requires_grad_(), k.clone().requires_grad_()
    (gx,) = torch.autograd.grad(energy(xg, kg).sum(), xg, create_graph=True)
    hx, hk = torch.autograd.grad((gx * v).sum(), (xg, kg))
    xr, kr = x.clone().requires_grad_(), k.clone().requires_grad_()
    (gr,) = torch.autograd.grad(energy_ref(xr, kr).sum(), xr, create_graph=True)
    hxr, hkr = torch.autograd.grad((gr * v).sum(), (xr, kr))
    close(hx, hxr)
    close(hk, hkr)


def test_second_order_with_a_leading_scalar_argument():
    op = tg.torch_op(scaled_ad)
    x, _, v, w, _ = data()

    def ref(s, x, w):
        return s * torch.sin(x) * w * w
    assert torch.autograd.gradgradcheck(op, (0.7, x.clone().requires_grad_(), w.clone().requires_grad_()))
    for f in (op, ref):
        close(torch.autograd.functional.hvp(lambda x, w: f(0.7, x, w).sum(), (x, w), (v, v))[1],
              torch.autograd.functional.hvp(lambda x, w: ref(0.7, x, w).sum(), (x, w), (v, v))[1])
    res = []
    for f in (op, ref):
        xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
        (gx,) = torch.autograd.grad(f(0.7, xg, wg).sum(), xg, create_graph=True)
        res.append(torch.autograd.grad((gx * gx).sum(), (xg, wg)))
    close(res[0], res[1])


# -------------------------------------------------------------------- forward mode

def test_forward_ad_dual_tensors():
    energy, wave, mix = ops()
    x, k, v, w, idx = data()
    u = torch.randn(N, dtype=torch.float64)
    with fwAD.dual_level():
        t = fwAD.unpack_dual(wave(fwAD.make_dual(x, v))).tangent
        ty, tz = (fwAD.unpack_dual(o).tangent for o in mix(fwAD.make_dual(x, v), fwAD.make_dual(w, u), 0.7, idx))
        # a tangent on one input only
        te = fwAD.unpack_dual(energy(x, fwAD.make_dual(k, v[:-1]))).tangent
    close(t, jvp(wave_ref, (x,), (v,))[1])
    ry, rz = jvp(lambda x, w: mix_ref(x, w, 0.7, idx), (x, w), (v, u))[1]
    close(ty, ry)
    close(tz, rz)
    close(te, jvp(lambda k: energy_ref(x, k), (k,), (v[:-1],))[1])


def test_func_jvp_jacfwd_and_vmap_of_them():
    energy, wave, mix = ops()
    x, k, v, _, _ = data()
    close(jvp(lambda x: energy(x, k), (x,), (v,))[1], jvp(lambda x: energy_ref(x, k), (x,), (v,))[1])
    close(jacfwd(wave)(x), jacfwd(wave_ref)(x))
    close(jacfwd(energy, argnums=(0, 1))(x, k)[1], jacfwd(energy_ref, argnums=(0, 1))(x, k)[1])
    V = torch.randn(3, N, dtype=torch.float64)
    close(vmap(lambda v: jvp(wave, (x,), (v,))[1])(V), vmap(lambda v: jvp(wave_ref, (x,), (v,))[1])(V))


# -------------------------------------------------------------------- torch.func reverse and second order

def test_func_grad_vjp_jacrev_hessian_vmap():
    energy, wave, mix = ops()
    x, k, v, w, idx = data()

    def e(x, k):
        return energy(x, k)[0]

    def er(x, k):
        return energy_ref(x, k)[0]
    close(grad(e, argnums=(0, 1))(x, k)[1], grad(er, argnums=(0, 1))(x, k)[1])
    close(vjp(wave, x)[1](v)[0], vjp(wave_ref, x)[1](v)[0])
    close(jacrev(wave)(x), jacrev(wave_ref)(x))
    close(jacrev(lambda x, w: mix(x, w, 0.7, idx)[0], argnums=1)(x, w),
          jacrev(lambda x, w: mix_ref(x, w, 0.7, idx)[0], argnums=1)(x, w))
    close(hessian(e, argnums=(0, 1))(x, k)[0][1], hessian(er, argnums=(0, 1))(x, k)[0][1])   # mixed partials
    close(hessian(lambda x: wave(x).sum())(x), hessian(lambda x: wave_ref(x).sum())(x))
    close(jacrev(jacrev(wave))(x), jacrev(jacrev(wave_ref))(x))   # reverse over reverse
    close(grad(lambda x: grad(e)(x, k) @ v)(x), grad(lambda x: grad(er)(x, k) @ v)(x))
    X = x + 0.1 * torch.randn(4, N, dtype=torch.float64)
    close(vmap(grad(lambda x: e(x, k)))(X), vmap(grad(lambda x: er(x, k)))(X))
    close(vmap(wave)(X), vmap(wave_ref)(X))
    close(vmap(hessian(lambda x: e(x, k)))(X), vmap(hessian(lambda x: er(x, k)))(X))
    close(vmap(lambda x, k: e(x, k), in_dims=(None, 0))(x, k.expand(3, -1) * torch.arange(1, 4)[:, None]),
          vmap(lambda x, k: er(x, k), in_dims=(None, 0))(x, k.expand(3, -1) * torch.arange(1, 4)[:, None]))


# -------------------------------------------------------------------- what is not supported raises

def test_unsupported_transforms_raise_naming_op_and_transform():
    energy, wave, mix = ops()
    x, k, v, _, _ = data()
    with pytest.raises(NotImplementedError, match=r"torch_op '.*wave_ad'.*forward over forward"):
        jacfwd(jacfwd(wave))(x)
    with pytest.raises(NotImplementedError, match=r"wave_ad.*third-order"):
        jacrev(jacrev(jacrev(wave)))(x)
    with pytest.raises(NotImplementedError, match=r"wave_ad.*(third-order|forward over forward)"):
        jacfwd(jacfwd(jacrev(wave)))(x)
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(wave(xg).sum(), xg, create_graph=True)
    (h,) = torch.autograd.grad((g * v).sum(), xg, create_graph=True)
    with pytest.raises(NotImplementedError, match=r"wave_ad.*third-order"):
        torch.autograd.grad(h.sum(), xg)


def test_forward_mode_on_the_raw_custom_op_raises():
    """torch.ops.tapegrad.<name> (what compiled and exported graphs call) has no forward rule of its
    own: dual tensors there raise instead of losing their tangents."""
    energy, wave, mix = ops()
    x, _, v, _, _ = data()
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match=r"wave_ad.*forward-mode AD through the custom op itself"):
            wave._opoverload(fwAD.make_dual(x, v))
        t = fwAD.unpack_dual(wave(fwAD.make_dual(x, v))).tangent
    close(t, jvp(wave_ref, (x,), (v,))[1])


def test_a_compiled_graph_under_forward_ad_raises_a_clear_error():
    """A compiled graph calling the op while a dual level is open reached the tangent check at
    its runtime, where torch refuses to unpack duals: 'INTERNAL ASSERT FAILED ... please report a
    bug to PyTorch', dual inputs or not. The error now says what happened and what to do."""
    energy, wave, mix = ops()
    x, _, v, _, _ = data()
    close(torch.compile(lambda a: wave(a).sum(), fullgraph=True)(x), wave_ref(x).sum())   # no dual level: runs
    fn = torch.compile(lambda a: wave(a).sum() * 1.0, fullgraph=True)   # first compiled inside the level
    clear = r"wave_ad.*(called from a compiled graph \(torch.compile\) while forward-mode AD is active|" \
            r"forward-mode AD through the custom op itself)"
    with fwAD.dual_level():
        # which of the two clear errors depends on what torch lets the op's runtime see
        with pytest.raises(RuntimeError, match=clear) as e:
            fn(fwAD.make_dual(x, v))
        assert "INTERNAL ASSERT" not in str(e.value)
        try:                                                # plain inputs: the value, or the clear error
            close(fn(x), wave_ref(x).sum())
        except RuntimeError as e:
            assert re.search(clear, str(e)) and "INTERNAL ASSERT" not in str(e), e


def test_enable_backward_false_raises_under_every_derivative_transform():
    op = tg.torch_op(wave_nobwd)
    x, _, v, _, _ = data()
    close(op(x), x * x)
    xg = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match=r"wave_nobwd.*reverse mode.*enable_backward=False"):
        op(xg).sum().backward()
    with pytest.raises(RuntimeError, match=r"wave_nobwd.*forward mode.*enable_backward=False"):
        jvp(op, (x,), (v,))
    with fwAD.dual_level(), pytest.raises(RuntimeError, match=r"wave_nobwd.*forward mode"):
        op(fwAD.make_dual(x, v))
    for transform in (jacrev, grad):
        with pytest.raises(RuntimeError, match=r"wave_nobwd.*enable_backward=False"):
            transform(lambda x: op(x).sum())(x)
    close(vmap(op)(torch.stack([x, 2 * x])), torch.stack([x * x, 4 * x * x]))   # vmap alone is fine


def test_compile_and_export_still_see_the_custom_op():
    energy, wave, mix = ops()
    x, k, v, _, _ = data()
    xg = x.clone().requires_grad_()
    loss = torch.compile(lambda x: wave(x).sum(), fullgraph=True)(xg)
    loss.backward()
    xr = x.clone().requires_grad_()
    wave_ref(xr).sum().backward()
    close(xg.grad, xr.grad)

    class M(torch.nn.Module):
        def forward(self, x):
            return wave(x)
    prog = torch.export.export(M(), (x,))
    assert any(wave._qualname.split("::")[1] in str(n.target) for n in prog.graph.nodes)
    close(prog.module()(x), wave_ref(x))


# -------------------------------------------------------------------- CUDA

@pytest.mark.cuda
def test_cuda_double_backward_forward_mode_and_func():
    energy, wave, mix = ops()
    x, k, v, w, idx = data(device="cuda")
    assert torch.autograd.gradgradcheck(wave, (x.clone().requires_grad_(),))
    close(torch.autograd.functional.hvp(lambda x: energy(x, k), x, v)[1].cpu(),
          torch.autograd.functional.hvp(lambda x: energy_ref(x, k), x, v)[1].cpu())
    close(jvp(wave, (x,), (v,))[1].cpu(), jvp(wave_ref, (x,), (v,))[1].cpu())
    close(hessian(lambda x: energy(x, k)[0])(x).cpu(), hessian(lambda x: energy_ref(x, k)[0])(x).cpu())
    X = x + 0.1 * torch.randn(4, N, dtype=torch.float64, device="cuda")
    close(vmap(grad(lambda x: energy(x, k)[0]))(X).cpu(), vmap(grad(lambda x: energy_ref(x, k)[0]))(X).cpu())
