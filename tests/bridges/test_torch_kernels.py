"""PyTorch bridge with kernels: tensors passed directly, descriptors, the tape with torch
gradients, Adam both ways, hand-written autograd.Function and custom ops, the lazy-grad
patterns and the gradient-ownership rules (R1, R12, R15-R20, B3, B9)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")   # a module that imports torch cannot be skipped by its marker

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import BridgeTypeError  # noqa: E402

from ._bridge_kernels import copy2d, saxpy, scale_vec3, square, sum_sq, trace22  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:.*torch.jit.script_method.*:DeprecationWarning")]

@pytest.fixture(autouse=True)
def _on_cpu():
    with tg.ScopedDevice("cpu"):
        yield


# ------------------------------------------------------------------------ direct passing

def test_tensors_passed_directly_including_requires_grad():
    x = torch.arange(8, dtype=torch.float32)
    y = torch.ones(8, requires_grad=True)     # requires_grad tensors work (no gradient travels)
    tg.launch(saxpy, dim=8, inputs=[x, y.detach(), 2.0])
    tg.launch(saxpy, dim=8, inputs=[x, y, 1.0])
    assert y.detach().tolist() == (3 * x + 1).tolist()
    assert y.grad is None


def test_direct_vectors_matrices_and_strides():
    v = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    out = torch.zeros(4, 3)
    tg.launch(scale_vec3, dim=4, inputs=[v, 2.0, out])
    assert torch.equal(out, 2 * v)
    m = torch.arange(16, dtype=torch.float32).reshape(4, 2, 2)
    tr = torch.zeros(4)
    tg.launch(trace22, dim=4, inputs=[m], outputs=[tr])
    assert torch.equal(tr, m[:, 0, 0] + m[:, 1, 1])
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()        # strided, no copy
    b = torch.zeros(4, 3)
    tg.launch(copy2d, dim=(4, 3), inputs=[a, b])
    assert torch.equal(a, b)
    e = torch.arange(3, dtype=torch.float32).reshape(1, 3).expand(4, 3)  # 0-strides
    tg.launch(copy2d, dim=(4, 3), inputs=[e, b])
    assert torch.equal(b, e)


def test_direct_passing_errors_name_the_argument():
    with pytest.raises(BridgeTypeError, match="argument 0"):
        tg.launch(saxpy, dim=4, inputs=[torch.zeros(4, dtype=torch.float64), torch.zeros(4), 1.0])
    with pytest.raises(TypeError, match="1-D"):
        tg.launch(saxpy, dim=4, inputs=[torch.zeros(2, 2), torch.zeros(4), 1.0])
    with pytest.raises(RuntimeError, match="trailing"):
        tg.launch(scale_vec3, dim=4, inputs=[torch.zeros(4, 2), 1.0, torch.zeros(4, 3)])
    with pytest.raises(RuntimeError, match="contiguous"):
        tg.launch(scale_vec3, dim=4, inputs=[torch.zeros(3, 4).t(), 1.0, torch.zeros(4, 3)])


def test_three_fast_paths_agree():
    n = 1024
    x = torch.arange(n, dtype=torch.float32)
    ys = [torch.ones(n) for _ in range(3)]
    xw, yw = tg.from_torch(x), tg.from_torch(ys[0])
    for _ in range(5):
        tg.launch(saxpy, dim=n, inputs=[xw, yw, 1.0])
        tg.launch(saxpy, dim=n, inputs=[tg.from_torch(x, return_ctype=True),
                                        tg.from_torch(ys[1], return_ctype=True), 1.0])
        tg.launch(saxpy, dim=n, inputs=[x, ys[2], 1.0])
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[1], ys[2])
    assert torch.equal(ys[0], 5 * x + 1)


def test_descriptor_gradients_feed_an_adjoint_launch():
    a = torch.arange(5, dtype=torch.float32, requires_grad=True)
    out = torch.zeros(5, requires_grad=True)
    out.grad = torch.ones(5)
    da = tg.from_torch(a, return_ctype=True)      # allocates a.grad with torch
    do = tg.from_torch(out, return_ctype=True)
    tg.launch(square, dim=5, inputs=[da], outputs=[do])
    tg.launch(square, dim=5, inputs=[da], outputs=[do], adjoint=True,
              adj_inputs=[tg.from_torch(a.grad, requires_grad=False)],
              adj_outputs=[tg.from_torch(out.grad, requires_grad=False)])
    assert torch.equal(out.detach(), a.detach() ** 2)
    assert torch.equal(a.grad, 2 * a.detach())


# -------------------------------------------------------------------------- tape and Adam

def test_tape_fills_torch_grads_and_adam_optimizes_from_torch():
    torch.manual_seed(0)
    xs = torch.randn(50, 2, requires_grad=True)
    loss = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([xs], lr=0.1)
    wxs, wl = tg.from_torch(xs), tg.from_torch(loss)
    tape = tg.Tape()
    with tape:
        tg.launch(sum_sq, dim=len(xs), inputs=[wxs], outputs=[wl])
    first = loss.item()
    tape.backward(loss=wl)
    assert torch.allclose(xs.grad, 2 * xs.detach())
    for _ in range(200):
        tape.zero()
        tape.backward(loss=wl)
        opt.step()        # changes xs in place: the records that read it are stale (backward would refuse)
        tape.reset()
        wl.zero_()
        with tape:
            tg.launch(sum_sq, dim=len(xs), inputs=[wxs], outputs=[wl])
    assert loss.item() < 1e-2 * first


def test_adam_over_tapegrad_parameters_to_torch():
    xs = tg.array(np.random.default_rng(0).normal(size=(50, 2)), dtype=tg.float32, requires_grad=True)
    loss = tg.zeros(1, dtype=tg.float32, requires_grad=True)
    txs = tg.to_torch(xs)
    opt = torch.optim.Adam([txs], lr=0.1)
    tape = tg.Tape()
    with tape:
        tg.launch(sum_sq, dim=len(xs), inputs=[xs], outputs=[loss])
    first = float(loss.numpy()[0])
    for _ in range(200):
        tape.zero()
        tape.backward(loss=loss)
        assert txs.grad.data_ptr() == xs.grad.ptr
        opt.step()
        loss.zero_()
        tg.launch(sum_sq, dim=len(xs), inputs=[xs], outputs=[loss])
    assert float(loss.numpy()[0]) < 1e-2 * first


# ------------------------------------------------------------ autograd.Function patterns

@tg.kernel
def eval_rosenbrock(xs: tg.array[tg.vec2d], z: tg.array[tg.float64]):
    i = tg.tid()
    x = xs[i]
    z[i] = (1.0 - x[0]) ** 2.0 + 100.0 * (x[1] - x[0] ** 2.0) ** 2.0


def _rosenbrock_ref(xy):
    return (1 - xy[:, 0]) ** 2 + 100 * (xy[:, 1] - xy[:, 0] ** 2) ** 2


class RosenbrockAdjoint(torch.autograd.Function):
    """Backward by a manual adjoint launch (the pattern of scenario s13)."""

    @staticmethod
    def forward(ctx, xy):
        ctx.save_for_backward(xy)
        ctx.xy = tg.from_torch(xy.detach(), dtype=tg.vec2d, requires_grad=False)
        ctx.z = tg.zeros(len(xy), dtype=tg.float64, device=ctx.xy.device)
        tg.launch(eval_rosenbrock, dim=len(xy), inputs=[ctx.xy], outputs=[ctx.z])
        return tg.to_torch(ctx.z).clone()

    @staticmethod
    def backward(ctx, adj_z):
        (xy,) = ctx.saved_tensors
        adj_xy = torch.zeros_like(xy)
        tg.launch(eval_rosenbrock, dim=len(xy), inputs=[ctx.xy], outputs=[ctx.z],
                  adj_inputs=[tg.from_torch(adj_xy, dtype=tg.vec2d, requires_grad=False)],
                  adj_outputs=[tg.from_torch(adj_z.contiguous(), requires_grad=False)], adjoint=True)
        return adj_xy


class RosenbrockTape(torch.autograd.Function):
    """Backward by a Tape with the recommended ownership recipe (Solution C of R20)."""

    @staticmethod
    def forward(ctx, xy):
        ctx.grad_xy = torch.zeros_like(xy)
        ctx.xy = tg.from_torch(xy.detach(), dtype=tg.vec2d, grad=ctx.grad_xy)
        z = torch.zeros(len(xy), dtype=torch.float64)
        ctx.grad_z = torch.zeros_like(z)
        ctx.z = tg.from_torch(z, grad=ctx.grad_z)          # z owns its grad: backward copies into it
        ctx.tape = tg.Tape()
        with ctx.tape:
            tg.launch(eval_rosenbrock, dim=len(xy), inputs=[ctx.xy], outputs=[ctx.z])
        return z

    @staticmethod
    def backward(ctx, adj_z):
        ctx.tape.backward(grads={ctx.z: tg.from_torch(adj_z.contiguous(), requires_grad=False)})
        g = ctx.grad_xy.clone()                            # clone before tape.zero()
        ctx.tape.zero()
        return g


@pytest.mark.parametrize("fn", [RosenbrockAdjoint, RosenbrockTape])
def test_autograd_function_gradcheck_and_values(fn):
    xy = torch.tensor(np.random.default_rng(1).normal(size=(16, 2)), dtype=torch.float64, requires_grad=True)
    assert torch.allclose(fn.apply(xy), _rosenbrock_ref(xy))
    assert torch.autograd.gradcheck(fn.apply, (xy,), eps=1e-6, atol=1e-5)


def test_autograd_function_backward_is_reentrant_and_leaves_torch_grads_alone():
    xy = torch.tensor([[0.5, 0.2], [-1.0, 1.5]], dtype=torch.float64, requires_grad=True)
    z = RosenbrockTape.apply(xy)
    g_out = torch.ones(2, dtype=torch.float64)
    (g1,) = torch.autograd.grad(z, xy, g_out, retain_graph=True)
    (g2,) = torch.autograd.grad(z, xy, g_out, retain_graph=True)
    assert torch.equal(g1, g2)
    assert torch.equal(g_out, torch.ones(2, dtype=torch.float64)), "backward(grads=...) copies, never modifies"
    ref = torch.autograd.grad(_rosenbrock_ref(xy).sum(), xy)[0]
    assert torch.allclose(g1, ref)


def test_to_torch_of_a_grad_is_a_view_until_zeroed():
    x = tg.array(np.array([1.0, 2.0], np.float32), requires_grad=True)
    out = tg.zeros(2, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square, dim=2, inputs=[x], outputs=[out])
    tape.backward(grads={out: tg.array(np.ones(2, np.float32))})
    view = tg.to_torch(x.grad)
    kept = view.clone()
    assert view.tolist() == [2.0, 4.0]
    tape.zero()
    assert view.tolist() == [0.0, 0.0] and kept.tolist() == [2.0, 4.0]


# --------------------------------------------------------------------- hand-written op (s14)

@torch.library.custom_op("tgtest::square", mutates_args=())
def handwritten_square(a: torch.Tensor) -> torch.Tensor:
    wa = tg.from_torch(a, requires_grad=False)
    out = tg.zeros(len(a), dtype=tg.float32, device=wa.device)
    tg.launch(square, dim=len(a), inputs=[wa], outputs=[out])
    return tg.to_torch(out)


@handwritten_square.register_fake
def _(a):
    return torch.empty_like(a)


@torch.library.custom_op("tgtest::square_backward", mutates_args=())
def handwritten_square_backward(a: torch.Tensor, out: torch.Tensor, adj_out: torch.Tensor) -> torch.Tensor:
    adj_a = torch.zeros_like(a)
    tg.launch(square, dim=len(a), inputs=[tg.from_torch(a, requires_grad=False)],
              outputs=[tg.from_torch(out, requires_grad=False)],
              adj_inputs=[tg.from_torch(adj_a, requires_grad=False)],
              adj_outputs=[tg.from_torch(adj_out.contiguous(), requires_grad=False)], adjoint=True)
    return adj_a


@handwritten_square_backward.register_fake
def _(a, out, adj_out):
    return torch.empty_like(a)


handwritten_square.register_autograd(
    lambda ctx, g: handwritten_square_backward(ctx.a, ctx.out, g),
    setup_context=lambda ctx, inputs, output: (setattr(ctx, "a", inputs[0]), setattr(ctx, "out", output)))


def test_hand_written_custom_op_under_compile():
    a = torch.linspace(-1, 1, 32, requires_grad=True)
    eager = handwritten_square(a)
    compiled = torch.compile(lambda x: handwritten_square(x).sum(), fullgraph=True)
    loss = compiled(a)
    loss.backward()
    assert torch.allclose(eager, a.detach() ** 2)
    assert torch.allclose(a.grad, 2 * a.detach())


# --------------------------------------------------------------------- lazy-grad patterns

def _lazy_step(mode, a):
    if mode == "baseline":
        t = a.clone().detach().requires_grad_(True)
        w = tg.from_torch(t)
    elif mode == "A":
        t = a.clone().detach().requires_grad_(True)
        w = tg.from_torch(t, requires_grad=False)
    elif mode == "B":
        t = a.clone().detach()
        w = tg.from_torch(t)
    else:
        t = a.clone().detach().requires_grad_(True)
        t.grad = torch.zeros_like(t)
        w = tg.from_torch(t, grad=t.grad)
    out = tg.zeros(len(a), dtype=tg.float32, device=w.device)
    tg.launch(square, dim=len(a), inputs=[w], outputs=[out])
    return t, w, tg.to_torch(out).clone()


def test_lazy_grad_patterns_agree_and_share_torch_grads():
    a = torch.linspace(-1, 1, 100)
    ref = _lazy_step("baseline", a)[2]
    for mode in ("A", "B", "C"):
        assert torch.equal(_lazy_step(mode, a)[2], ref), mode
    t, w, _ = _lazy_step("baseline", a)
    assert t.grad is not None and w.grad.ptr == t.grad.data_ptr()
    t, w, _ = _lazy_step("A", a)
    assert t.grad is None and w.grad is None
    t, w, _ = _lazy_step("C", a)
    assert w.grad.ptr == t.grad.data_ptr()


# ------------------------------------------------------------------------------------ CUDA

@pytest.mark.cuda
def test_cuda_direct_passing_of_requires_grad_tensors():
    with tg.ScopedDevice("cuda:0"):
        x = torch.arange(64, dtype=torch.float32, device="cuda:0", requires_grad=True)
        y = torch.ones(64, device="cuda:0")
        tg.launch(saxpy, dim=64, inputs=[x, y, 2.0], device="cuda:0")   # CAI would refuse x
        tg.synchronize()
        assert torch.equal(y, 2 * x.detach() + 1)
        d = tg.from_torch(x, return_ctype=True)
        tg.launch(saxpy, dim=64, inputs=[d, y, 1.0], device="cuda:0")
        tg.synchronize()
        assert torch.equal(y, 3 * x.detach() + 1)
        with pytest.raises(RuntimeError, match="device"):
            tg.launch(saxpy, dim=64, inputs=[torch.zeros(64), y, 1.0], device="cuda:0")


@pytest.mark.cuda
def test_cuda_work_on_a_torch_stream():
    ts = torch.cuda.Stream(device="cuda:0")
    s = tg.stream_from_torch(ts)
    with torch.cuda.stream(ts):
        x = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
        y = torch.ones(1 << 20, device="cuda:0")
        with tg.ScopedStream(s, sync_enter=False):
            tg.launch(saxpy, dim=x.numel(), inputs=[x, y, 1.0])
        z = y * 2            # torch work on the same stream sees the kernel's result
    ts.synchronize()
    assert torch.equal(z, 2 * (x + 1))


@pytest.mark.cuda
def test_cuda_tape_with_torch_grads():
    xs = torch.randn(64, 2, device="cuda:0", requires_grad=True)
    loss = torch.zeros(1, device="cuda:0", requires_grad=True)
    with tg.ScopedDevice("cuda:0"):
        wxs, wl = tg.from_torch(xs), tg.from_torch(loss)
        tape = tg.Tape()
        with tape:
            tg.launch(sum_sq, dim=64, inputs=[wxs], outputs=[wl])
        tape.backward(loss=wl)
        tg.synchronize()
    assert torch.allclose(xs.grad, 2 * xs.detach())


@pytest.mark.cuda
def test_cuda_graph_capture_with_torch_streams():
    """R14 / scenario s16: capture tapegrad work on a torch stream, and torch work on a
    tapegrad stream."""
    @tg.kernel
    def scale(a: tg.array[float], s: float):
        tid = tg.tid()
        a[tid] = a[tid] * s

    n = 1 << 16
    ts = torch.cuda.Stream(device="cuda:0")
    s = tg.stream_from_torch(ts)
    a = tg.ones(n, dtype=float, device="cuda:0")
    with tg.ScopedStream(s):
        tg.launch(scale, dim=n, inputs=[a, 1.0])    # warm-up: load the module outside capture
        with tg.ScopedCapture() as capture:
            tg.launch(scale, dim=n, inputs=[a, 2.0])
    tg.capture_launch(capture.graph, stream=s)
    tg.synchronize_stream(s)
    assert float(a.numpy()[7]) == 2.0
    b = tg.ones(n, dtype=float, device="cuda:0")
    tb = tg.to_torch(b)
    ts2 = tg.stream_to_torch("cuda:0")
    with tg.ScopedDevice("cuda:0"), torch.cuda.stream(ts2):
        tg.launch(scale, dim=n, inputs=[b, 1.0])
        tb.add_(0.0)
        with tg.ScopedCapture() as capture:
            tg.launch(scale, dim=n, inputs=[b, 3.0])
            tb.add_(1.0)
    tg.capture_launch(capture.graph)
    tg.synchronize()
    assert float(b.numpy()[5]) == 4.0
