"""Gradient links of ``from_torch`` arrays through torch's own habits (SPEC B19, issue 23 item 2):
``zero_grad()`` (``set_to_none=True``), a replaced ``.grad``, torch's autograd allocating a new
gradient, and in-place modification of a tensor between recording and ``backward``."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tapegrad as tg  # noqa: E402
from tapegrad.bridges._base import GradLayoutError  # noqa: E402

pytestmark = pytest.mark.torch


@tg.kernel
def sq_sum(x: tg.array[tg.float64], f: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(f, 0, x[i] * x[i])


@tg.kernel
def dot_sum(x: tg.array[tg.float64], w: tg.array[tg.float64], f: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(f, 0, x[i] * w[i])


@tg.kernel
def sq_sum2d(m: tg.array2d[tg.float64], f: tg.array[tg.float64]):
    i, j = tg.tid()
    tg.atomic_add(f, 0, m[i, j] * m[i, j])


def _step(wa, loss, n):
    """One recorded launch of sum(w^2) and its backward."""
    loss.zero_()
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=n, inputs=[wa], outputs=[loss])
    tape.backward(loss=loss)
    return tape


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_sgd_loop_with_default_zero_grad_trains(device):
    """s27(b): torch's default zero_grad() sets w.grad to None; the array converted once still
    delivers its gradient to w.grad (the same buffer, zeroed and installed again)."""
    w = torch.ones(4, dtype=torch.float64, device=device, requires_grad=True)
    wa = tg.from_torch(w)
    buf = w.grad
    loss = tg.zeros(1, dtype=tg.float64, device=wa.device, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    for it in range(3):
        opt.zero_grad()
        assert w.grad is None
        _step(wa, loss, 4)
        assert w.grad is not None, it
        assert w.grad.data_ptr() == buf.data_ptr() == wa.grad.ptr    # zero-copy: the shared buffer
        np.testing.assert_allclose(w.grad.cpu().numpy(), 2 * w.detach().cpu().numpy(), rtol=0, atol=0)
        opt.step()
    np.testing.assert_allclose(w.detach().cpu().numpy(), np.full(4, 0.8 ** 3), rtol=1e-15)


def test_zero_grad_between_record_and_backward():
    """The usual torch order (forward, zero_grad, backward): the stale buffer is not accumulated into."""
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    _step(wa, loss, 3)                       # w.grad = 2w, left there
    loss.zero_()
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=3, inputs=[wa], outputs=[loss])
    w.grad = None                            # what zero_grad() does
    tape.backward(loss=loss)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0, 6.0])   # not 4w


def test_reading_the_array_grad_after_zero_grad_gives_zeros():
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    wa.grad.fill_(5.0)
    w.grad = None
    np.testing.assert_array_equal(wa.grad.numpy(), [0.0, 0.0])
    assert w.grad is not None and w.grad.data_ptr() == wa.grad.ptr


def test_a_replaced_grad_is_followed():
    """``w.grad = g`` (a new tensor): the tape accumulates into g, zero-copy; the old buffer is left alone."""
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    old = w.grad
    new = torch.full((3,), 7.0, dtype=torch.float64)
    w.grad = new
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = _step(wa, loss, 3)
    assert w.grad is new and wa.grad.ptr == new.data_ptr()
    np.testing.assert_array_equal(new.numpy(), [9.0, 11.0, 13.0])
    np.testing.assert_array_equal(old.numpy(), [0.0, 0.0, 0.0])
    tape.zero()                              # zeroes the gradient torch sees now
    np.testing.assert_array_equal(new.numpy(), [0.0, 0.0, 0.0])


def test_torch_autograd_after_zero_grad_and_the_tape_add_up():
    """torch's own backward after zero_grad() allocates a new w.grad; the tape adds to that one."""
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    w.grad = None
    (w * w * w).sum().backward()             # 3w^2 in a gradient torch allocated
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    _step(wa, loss, 3)                       # + 2w
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(w.grad.numpy(), 3 * x ** 2 + 2 * x, rtol=1e-15)


def test_a_grad_set_on_the_array_wins():
    """``wa.grad = g`` on tapegrad's side: the array keeps it; torch's resets no longer matter."""
    w = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    mine = tg.zeros(2, dtype=tg.float64)
    wa.grad = mine
    w.grad = None
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    _step(wa, loss, 2)
    assert wa.grad is mine and w.grad is None
    np.testing.assert_array_equal(mine.numpy(), [2.0, 4.0])


def test_a_replaced_grad_of_another_layout_is_a_clear_error():
    """A transposed parameter given a contiguous .grad: kernels address a gradient with the
    array's strides, so the tape refuses rather than write the wrong elements."""
    m = torch.arange(1.0, 7.0, dtype=torch.float64).reshape(2, 3).t().detach().requires_grad_()
    ma = tg.from_torch(m)
    m.grad = torch.zeros(3, 2, dtype=torch.float64)       # contiguous, not m's strides
    f = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    with pytest.raises(GradLayoutError, match=r"tensor's .grad was replaced .* strides"):
        ma.grad
    tape = tg.Tape()
    with pytest.raises(GradLayoutError, match="replaced"):
        with tape:
            tg.launch(sq_sum2d, dim=(3, 2), inputs=[ma], outputs=[f])
        tape.backward(loss=f)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_in_place_modification_before_backward_raises(device):
    """``t.mul_(10)`` after a launch read t: the adjoint would read 10x the values (grad
    [20, 40, 60] instead of [2, 4, 6]); torch's version counter says so, and backward refuses."""
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, device=device, requires_grad=True)
    ta = tg.from_torch(t)
    loss = tg.zeros(1, dtype=tg.float64, device=ta.device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=3, inputs=[ta], outputs=[loss])
    with torch.no_grad():
        t.mul_(10)
    with pytest.raises(RuntimeError, match=r"modified in place after launch #0 of kernel .*sq_sum"):
        tape.backward(loss=loss)
    assert not t.grad.any()                  # nothing ran


def test_in_place_modification_of_an_input_without_gradient_raises():
    """The values a kernel read matter whether or not the array has a gradient: x is read by
    the adjoint of w's gradient (d(x.w)/dw = x)."""
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    w = torch.ones(3, dtype=torch.float64, requires_grad=True)
    xa, wa = tg.from_torch(x), tg.from_torch(w)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(dot_sum, dim=3, inputs=[xa, wa], outputs=[loss])
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="torch tensor behind an array of shape"):
        tape.backward(loss=loss)


def test_modification_before_recording_or_after_backward_is_fine():
    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    ta = tg.from_torch(t)
    with torch.no_grad():
        t.mul_(2)                            # before the record: the launch reads these values
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    _step(ta, loss, 3)
    np.testing.assert_array_equal(t.grad.numpy(), [4.0, 8.0, 12.0])
    with torch.no_grad():
        t.sub_(t.grad)                       # after backward: the next tape starts afresh
    t.grad = None
    _step(ta, loss, 3)
    np.testing.assert_array_equal(t.grad.numpy(), [-4.0, -8.0, -12.0])


def test_a_reset_tape_forgets_versions():
    t = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    ta = tg.from_torch(t)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=2, inputs=[ta], outputs=[loss])
    with torch.no_grad():
        t.mul_(3)
    tape.reset()
    loss.zero_()
    with tape:
        tg.launch(sq_sum, dim=2, inputs=[ta], outputs=[loss])
    tape.backward(loss=loss)
    np.testing.assert_array_equal(t.grad.numpy(), [6.0, 12.0])


# ------------------------------------------------- return_ctype descriptors (issue 23 item 5, bridge half)

@tg.kernel
def sq_into(x: tg.array[tg.float64], s: tg.float64, y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i] * s


def test_descriptor_grad_answers_as_warps():
    """Warp's array_t.grad: the gradient's address as an int, 0 without one."""
    t = torch.ones(3, dtype=torch.float64, requires_grad=True)
    d = tg.from_torch(t, return_ctype=True)
    assert t.grad is not None and d.grad == t.grad.data_ptr() and isinstance(d.grad, int)
    assert tg.from_torch(torch.ones(3), return_ctype=True).grad == 0
    assert tg.from_torch(t, requires_grad=False, return_ctype=True).grad == 0
    g = torch.zeros(3, dtype=torch.float64)
    assert tg.from_torch(torch.ones(3, dtype=torch.float64), grad=g, return_ctype=True).grad == g.data_ptr()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_adjoint_launch_accumulates_into_the_descriptors_gradients(device):
    """adj_inputs/adj_outputs entries of None for return_ctype descriptors: the adjoint reads
    and writes the tensors' own .grad, as Warp's kernels do through the gradient pointer."""
    x0 = np.array([0.5, -1.5, 2.0, 3.0])
    x = torch.tensor(x0, device=device, requires_grad=True)
    y = torch.zeros(4, dtype=torch.float64, device=device, requires_grad=True)
    xd, yd = tg.from_torch(x, return_ctype=True), tg.from_torch(y, return_ctype=True)
    tg.launch(sq_into, dim=4, inputs=[xd, 3.0], outputs=[yd])
    np.testing.assert_allclose(y.detach().cpu().numpy(), 3 * x0 ** 2, rtol=1e-15)
    y.grad.fill_(1.0)
    tg.launch(sq_into, dim=4, inputs=[xd, 3.0], outputs=[yd], adjoint=True, adj_inputs=[None, None],
              adj_outputs=[None])
    tg.synchronize_device(tg.device_from_torch(x.device))
    np.testing.assert_allclose(x.grad.cpu().numpy(), 6 * x0, rtol=1e-15)    # d(3x^2)/dx, accumulated


# ------------------------------------------------------------------ views of converted arrays

def test_a_view_follows_its_bases_replaced_gradient():
    """A slice of a from_torch array, made once: after torch replaces w.grad, a launch through
    the slice accumulates into the new gradient, at the slice's place."""
    w = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    mid = wa[1:3]
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    for fill in (0.0, 10.0):
        w.grad = torch.full((4,), fill, dtype=torch.float64)       # a new tensor each time
        _step(mid, loss, 2)
        np.testing.assert_array_equal(w.grad.numpy(), [fill, fill + 4.0, fill + 6.0, fill])
    w.grad = None                                                  # zero_grad(): the buffer comes back, zeroed
    _step(mid, loss, 2)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 4.0, 6.0, 0.0])


def test_a_transposed_view_through_zero_grad_loops():
    m0 = np.arange(1.0, 7.0).reshape(2, 3)
    m = torch.tensor(m0, requires_grad=True)
    mt = tg.from_torch(m).transpose()
    f = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    opt = torch.optim.SGD([m], lr=0.25)
    for _ in range(2):
        opt.zero_grad()
        f.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(sq_sum2d, dim=(3, 2), inputs=[mt], outputs=[f])
        tape.backward(loss=f)
        np.testing.assert_array_equal(m.grad.numpy(), 2 * m.detach().numpy())
        opt.step()
    np.testing.assert_allclose(m.detach().numpy(), m0 * 0.5 * 0.5, rtol=1e-15)


def test_in_place_modification_seen_through_a_view():
    t = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, requires_grad=True)
    part = tg.from_torch(t)[::2]
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=2, inputs=[part], outputs=[loss])
    with torch.no_grad():
        t.mul_(10)
    with pytest.raises(RuntimeError, match="torch tensor behind an array of shape"):
        tape.backward(loss=loss)


# ------------------------------------------- tapegrad parameters stepped by torch (to_torch)

@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_to_torch_parameters_train_through_default_zero_grad(device):
    """The other direction: p is tapegrad's, torch's SGD steps to_torch(p), whose .grad views
    p.grad. zero_grad() drops that .grad (SGD then skipped the parameter: no training); the
    view is zeroed and installed again when the tape uses the gradient."""
    p = tg.array(np.ones(4), dtype=tg.float64, device=device, requires_grad=True)
    tp = tg.to_torch(p)
    opt = torch.optim.SGD([tp], lr=0.1)
    loss = tg.zeros(1, dtype=tg.float64, device=device, requires_grad=True)
    for _ in range(3):
        opt.zero_grad()
        assert tp.grad is None
        _step(p, loss, 4)
        assert tp.grad is not None and tp.grad.data_ptr() == p.grad.ptr
        opt.step()
    np.testing.assert_allclose(p.numpy(), np.full(4, 0.8 ** 3), rtol=1e-15)


def test_to_torch_parameter_follows_torchs_own_new_gradient():
    """After zero_grad(), torch's own backward allocates a new tp.grad; the tape then adds to it."""
    p = tg.array(np.array([1.0, 2.0, 3.0]), dtype=tg.float64, requires_grad=True)
    tp = tg.to_torch(p)
    tp.grad = None
    (tp * tp * tp).sum().backward()
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    _step(p, loss, 3)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(tp.grad.numpy(), 3 * x ** 2 + 2 * x, rtol=1e-15)
    assert p.grad.ptr == tp.grad.data_ptr()


def test_to_torch_link_is_weak_and_first_come():
    import gc
    import weakref
    p = tg.array(np.ones(2), dtype=tg.float64, requires_grad=True)
    first = tg.to_torch(p)
    second = tg.to_torch(p)                  # a later view for reading: the first stays linked
    second.grad = None
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])
    assert second.grad is None and first.grad is not None
    ref = weakref.ref(first)
    del first
    gc.collect()
    assert ref() is None                     # the link does not keep the tensor alive
    p.grad.fill_(1.0)
    np.testing.assert_array_equal(p.grad.numpy(), [1.0, 1.0])


def test_the_replay_idiom_zero_then_backward_after_an_optimizer_step():
    """Warp's interop loop (scenario s11): record once, then per step tape.zero(), backward,
    the optimizer's in-place step and a fresh forward outside the tape. zero() starts a new
    evaluation at the tensors' current values; a modification after it still raises."""
    w = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    wa = tg.from_torch(w)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    tape = tg.Tape()
    with tape:
        tg.launch(sq_sum, dim=3, inputs=[wa], outputs=[loss])
    for _ in range(3):
        tape.zero()
        tape.backward(loss=loss)
        np.testing.assert_allclose(w.grad.numpy(), 2 * w.detach().numpy())
        opt.step()                                   # torch's in-place update: version bumped
        loss.zero_()
        tg.launch(sq_sum, dim=3, inputs=[wa], outputs=[loss])
    np.testing.assert_allclose(w.detach().numpy(), np.array([1.0, -2.0, 3.0]) * 0.8 ** 3)
    tape.zero()
    with torch.no_grad():
        w.mul_(10)                                   # after zero(): the adjoints would read these
    with pytest.raises(RuntimeError, match="modified in place"):
        tape.backward(loss=loss)
