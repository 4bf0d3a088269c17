"""``tg.torch_op``: a kernel as a torch custom op in one call (B2, R17) — eager, gradcheck,
opcheck and torch.compile(fullgraph=True), with shapes, scalars, several outputs, errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")   # a module that imports torch cannot be skipped by its marker

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import BridgeTypeError  # noqa: E402

from . import _bridge_checks as checks  # noqa: E402
from ._bridge_kernels import fwd_only, gather, outer, rosenbrock, row_sums, scale_vec, sincos, square32  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")]

def _xy(n=16, seed=0):
    return torch.tensor(np.random.default_rng(seed).normal(size=(n, 2)), dtype=torch.float64, requires_grad=True)


def _rb_ref(xy):
    return (1 - xy[:, 0]) ** 2 + 100 * (xy[:, 1] - xy[:, 0] ** 2) ** 2


# ---------------------------------------------------------------------------------- basics

def test_eager_gradcheck_opcheck_and_compile():
    op = tg.torch_op(rosenbrock)
    xy = _xy()
    z = op(xy)
    assert z.shape == (16,) and z.dtype == torch.float64 and torch.allclose(z, _rb_ref(xy))
    assert torch.autograd.gradcheck(op, (xy,), eps=1e-6, atol=1e-5)
    res = torch.library.opcheck(op, (xy,))
    assert all(v == "SUCCESS" for v in res.values()), res
    compiled = torch.compile(lambda a: op(a).sum(), fullgraph=True)
    loss = compiled(xy)
    loss.backward()
    assert torch.allclose(loss, _rb_ref(xy).sum())
    ref = torch.autograd.grad(_rb_ref(xy).sum(), xy)[0]
    assert torch.allclose(xy.grad, ref)


def test_same_configuration_same_op():
    assert tg.torch_op(rosenbrock) is tg.torch_op(rosenbrock)
    named = tg.torch_op(rosenbrock, name="tgtest::rb_named")
    assert named is not tg.torch_op(rosenbrock)
    assert "tgtest::rb_named" in str(named)
    assert tg.torch_op(rosenbrock).backward_op is not None


def test_optimizes_under_compile():
    op = tg.torch_op(rosenbrock)
    xy = _xy(64, seed=3)
    opt = torch.optim.Adam([xy], lr=5e-2)
    step = torch.compile(lambda: op(xy).sum(), fullgraph=True)
    first = step().item()
    for _ in range(300):
        opt.zero_grad()
        step().backward()
        opt.step()
    assert step().item() < 0.1 * first


def test_several_outputs_and_a_scalar():
    op = tg.torch_op(sincos, num_outputs=2)
    x = torch.linspace(-2, 2, 11, dtype=torch.float64, requires_grad=True)
    a, b = op(x, 3.0)
    assert torch.allclose(a, 3 * torch.sin(x)) and torch.allclose(b, torch.cos(x))
    assert torch.autograd.gradcheck(lambda t: op(t, 3.0), (x,), eps=1e-6, atol=1e-6)
    res = torch.library.opcheck(op, (x, 3.0))
    assert all(v == "SUCCESS" for v in res.values()), res
    # only one output used: the other's gradient is absent (None) and treated as zero
    (g,) = torch.autograd.grad(op(x, 3.0)[1].sum(), x)
    assert torch.allclose(g, -torch.sin(x))
    f = torch.compile(lambda t: sum(o.sum() for o in op(t, 0.5)), fullgraph=True)
    assert torch.allclose(f(x), (0.5 * torch.sin(x) + torch.cos(x)).sum())


def test_integer_inputs_get_no_gradient():
    op = tg.torch_op(gather)
    idx = torch.tensor([2, 0, 2, 1], dtype=torch.int32)
    table = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    out = op(idx, table)
    assert out.tolist() == [6.0, 2.0, 6.0, 4.0]
    out.sum().backward()
    assert table.grad.tolist() == [2.0, 2.0, 4.0]     # atomically accumulated adjoint reads
    assert torch.autograd.gradcheck(lambda t: op(idx, t), (table,), eps=1e-6, atol=1e-6)
    res = torch.library.opcheck(op, (idx, table))
    assert all(v == "SUCCESS" for v in res.values()), res


def test_launch_dims_and_output_dims_functions_with_dynamic_shapes():
    op = tg.torch_op(row_sums, launch_dims=lambda m: m.shape[0])
    m = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(op(m), (m * m).sum(1))
    assert torch.autograd.gradcheck(op, (m,), eps=1e-6, atol=1e-6)
    res = torch.library.opcheck(op, (m,))
    assert all(v == "SUCCESS" for v in res.values()), res
    f = torch.compile(lambda t: op(t).sum(), fullgraph=True, dynamic=True)
    for rows in (3, 6, 9):
        t = torch.randn(rows, 4, dtype=torch.float64)
        assert torch.allclose(f(t), (t * t).sum())

    op2 = tg.torch_op(outer, launch_dims=lambda a, b: (a.shape[0], b.shape[0]),
                      output_dims={"out": lambda a, b: (a.shape[0], b.shape[0])})
    a = torch.randn(3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(op2(a, b), torch.outer(a, b))
    assert torch.autograd.gradcheck(op2, (a, b), eps=1e-6, atol=1e-6)
    res = torch.library.opcheck(op2, (a, b))
    assert all(v == "SUCCESS" for v in res.values()), res
    op3 = tg.torch_op(outer, launch_dims=(3, 4), output_dims=(3, 4))
    assert torch.allclose(op3(a, b), torch.outer(a, b))


def test_vector_outputs_int_scalars_and_non_contiguous_inputs():
    op = tg.torch_op(scale_vec)
    v = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    out = op(v, 0.5, 4)
    assert out.shape == (6, 3) and torch.allclose(out, 2 * v)
    assert torch.autograd.gradcheck(lambda t: op(t, 0.5, 4), (v,), eps=1e-6, atol=1e-6)
    res = torch.library.opcheck(op, (v, 0.5, 4))
    assert all(x == "SUCCESS" for x in res.values()), res
    vt = torch.randn(3, 6, dtype=torch.float64).t().requires_grad_()   # component dim not contiguous
    assert torch.allclose(op(vt, 1.0, 1), vt)
    (g,) = torch.autograd.grad(op(vt, 3.0, 1).sum(), vt)
    assert torch.equal(g, torch.full((6, 3), 3.0, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda t: op(t, 0.5, 2), (vt,), eps=1e-6, atol=1e-6)


def test_expanded_output_gradient_is_not_modified():
    op = tg.torch_op(square32)
    x = torch.arange(5, dtype=torch.float32, requires_grad=True)
    g = torch.ones(1).expand(5)
    (gx,) = torch.autograd.grad(op(x), x, g)
    assert torch.equal(gx, 2 * x.detach()) and torch.equal(g, torch.ones(5))


def test_vmap_over_an_empty_batch():
    """vmap over a batch of 0 (native torch ops give (0, ...) results) raised 'stack expects a
    non-empty TensorList' from the op's vmap rule; the shapes now come from the fake impl."""
    op = tg.torch_op(sincos, num_outputs=2)
    a, b = torch.func.vmap(op, in_dims=(0, None))(torch.zeros(0, 7, dtype=torch.float64), 3.0)
    assert a.shape == b.shape == (0, 7) and a.dtype == torch.float64
    g = torch.func.vmap(torch.func.grad(lambda x: op(x, 3.0)[0].sum()))(torch.zeros(0, 7, dtype=torch.float64))
    assert g.shape == (0, 7)
    x = torch.linspace(-1, 1, 7, dtype=torch.float64)
    a, _ = torch.func.vmap(op, in_dims=(0, None))(torch.stack([x, 2 * x]), 3.0)   # non-empty: as before
    torch.testing.assert_close(a, 3.0 * torch.sin(torch.stack([x, 2 * x])))


def test_forward_only_kernel():
    op = tg.torch_op(fwd_only)
    assert op.backward_op is None
    x = torch.zeros(3)
    assert op(x).tolist() == [1.0, 1.0, 1.0]
    y = op(torch.zeros(3, requires_grad=True))
    with pytest.raises(RuntimeError):
        y.sum().backward()


# ---------------------------------------------------------------------------------- errors

def test_construction_errors():
    checks.op_construction_errors(tg.torch_op)


def test_call_errors_name_the_argument():
    op = tg.torch_op(rosenbrock)
    with pytest.raises(BridgeTypeError, match="'xy'"):
        op(torch.zeros(4, 2, dtype=torch.float32))
    with pytest.raises(TypeError, match="2-D"):
        op(torch.zeros(8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="trailing"):
        op(torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(Exception, match="2-D"):   # at trace time, from the fake impl (Dynamo wraps it)
        torch.compile(lambda t: op(t), fullgraph=True)(torch.zeros(8, dtype=torch.float64))


# ------------------------------------------------------------------------------------ CUDA

@pytest.mark.cuda
def test_cuda_op_gradcheck_opcheck_compile_and_streams():
    op = tg.torch_op(rosenbrock)
    xy = _xy().detach().cuda().requires_grad_()
    assert torch.allclose(op(xy), _rb_ref(xy))
    assert torch.autograd.gradcheck(op, (xy,), eps=1e-6, atol=1e-5)
    res = torch.library.opcheck(op, (xy,))
    assert all(v == "SUCCESS" for v in res.values()), res
    f = torch.compile(lambda a: op(a).sum(), fullgraph=True)
    f(xy).backward()
    assert torch.allclose(xy.grad, torch.autograd.grad(_rb_ref(xy).sum(), xy)[0])
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):          # the op runs on torch's current stream
        x = xy.detach() * 1.0
        z = op(x)
        r = z * 1.0
    ts.synchronize()
    assert torch.allclose(r, _rb_ref(xy.detach()))
