"""The Tape (R26, R16, B9) and gradcheck (B6), on the CPU and (marked) on CUDA."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autograd import GradcheckError, gradcheck, jacobian, jacobian_fd


@pytest.fixture(autouse=True)
def _default_cpu():
    """Tests without a device parameter are about the CPU (the GPU machine defaults to cuda:0)."""
    with tg.ScopedDevice("cpu"):
        yield


@pytest.fixture
def on_device(device):
    """Run the test with this device as the default one (arrays are created there)."""
    with tg.ScopedDevice(device):
        yield device


@tg.kernel
def double(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = 2.0 * x[i]


@tg.kernel
def square_and_sin(x: tg.array[float], a: tg.array[float], b: tg.array[float]):
    i = tg.tid()
    a[i] = x[i] * x[i]
    b[i] = tg.sin(x[i])


@tg.kernel
def total(v: tg.array[float], s: tg.array[float]):
    i = tg.tid()
    tg.atomic_add(s, 0, v[i])


@tg.kernel
def inplace_scale(x: tg.array[float]):
    i = tg.tid()
    x[i] = x[i] * x[i] * 3.0      # nonlinear: the adjoint needs the old x (a tape saves it)


@tg.struct
class Scaled:
    values: tg.array(dtype=float)
    scale: float


@tg.kernel
def struct_scale(s: Scaled, out: tg.array[float]):
    i = tg.tid()
    out[i] = s.values[i] * s.scale


def test_chain_of_16_launches(device):
    n = 8
    arrays = [tg.array(np.ones(n), dtype=float, device=device, requires_grad=True)]
    for _ in range(16):
        arrays.append(tg.zeros(n, device=device, requires_grad=True))
    loss = tg.zeros(1, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        for k in range(16):
            tg.launch(double, dim=n, inputs=[arrays[k]], outputs=[arrays[k + 1]])
        tg.launch(total, dim=n, inputs=[arrays[-1]], outputs=[loss])
    assert loss.numpy()[0] == n * 2 ** 16
    assert len(tape.launches) == 17
    tape.backward(loss=loss)
    assert np.all(arrays[0].grad.numpy() == 2.0 ** 16)


def test_multiple_outputs_zero_between_passes(device):
    xn = np.linspace(-1, 1, 16)
    x = tg.array(xn, dtype=tg.float64, device=device, requires_grad=True)
    a = tg.zeros(16, dtype=tg.float64, device=device, requires_grad=True)
    b = tg.zeros(16, dtype=tg.float64, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square_and_sin_d, dim=16, inputs=[x], outputs=[a, b])
    ones = tg.array(np.ones(16), dtype=tg.float64, device=device)
    tape.backward(grads={a: ones})
    assert np.allclose(x.grad.numpy(), 2 * xn)
    tape.zero()
    assert not x.grad.numpy().any() and not a.grad.numpy().any()
    tape.backward(grads={b: ones})
    assert np.allclose(x.grad.numpy(), np.cos(xn))


@tg.kernel
def square_and_sin_d(x: tg.array[tg.float64], a: tg.array[tg.float64], b: tg.array[tg.float64]):
    i = tg.tid()
    a[i] = x[i] * x[i]
    b[i] = tg.sin(x[i])


def test_struct_inputs_with_array_fields(on_device):
    vals = tg.array(np.arange(5, dtype=np.float32), requires_grad=True)
    s = Scaled(values=vals, scale=3.0)
    out = tg.zeros(5, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(struct_scale, dim=5, inputs=[s], outputs=[out])
    assert out.numpy().tolist() == [0, 3, 6, 9, 12]
    tape.backward(grads={out: np.ones(5, np.float32)})
    assert vals.grad.numpy().tolist() == [3.0] * 5


def test_reset_forgets_records_and_zeroes(on_device):
    x = tg.array(np.ones(4), dtype=float, requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(double, dim=4, inputs=[x], outputs=[y])
    tape.backward(grads={y: np.ones(4, np.float32)})
    assert x.grad.numpy().tolist() == [2.0] * 4
    tape.reset()
    assert tape.records == [] and not x.grad.numpy().any()
    tape.backward(grads={y: np.ones(4, np.float32)})  # nothing recorded: nothing flows
    assert not x.grad.numpy().any()


def test_record_func_runs_in_reverse_order():
    x = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    z = tg.zeros(4, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(double, dim=4, inputs=[x], outputs=[y])
        # a non-kernel step z = y ** 2 done in numpy, with its adjoint as a callback
        z.numpy()[:] = y.numpy() ** 2

        def back():
            y.grad.numpy()[:] += 2 * y.numpy() * z.grad.numpy()

        tape.record_func(back, [y, z])
    tape.backward(grads={z: np.ones(4, np.float32)})
    # dz/dx = 2 * y * 2 = 8x
    assert np.allclose(x.grad.numpy(), 8 * np.arange(4))
    tape.zero()
    assert not y.grad.numpy().any()


def test_repeated_backward_with_external_grads_is_reentrant(on_device):
    x = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    y = tg.zeros(4)                     # no grad buffer of its own: the tape owns one
    tape = tg.Tape()
    with tape:
        tg.launch(double, dim=4, inputs=[x], outputs=[y])
    g = tg.array(np.full(4, 0.5, np.float32))
    before = g.numpy().copy()
    results = []
    for _ in range(3):
        tape.zero()
        tape.backward(grads={y: g})
        results.append(x.grad.numpy().copy())
    assert all(np.array_equal(r, results[0]) for r in results) and results[0].tolist() == [1.0] * 4
    assert np.array_equal(g.numpy(), before), "the caller's gradient buffer must not change"
    assert y.grad is not g, "external gradients are copied, never adopted"


def test_backward_copies_into_an_owned_grad(on_device):
    x = tg.array(np.ones(4, np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    own = y.grad
    tape = tg.Tape()
    with tape:
        tg.launch(double, dim=4, inputs=[x], outputs=[y])
    g = tg.array(np.full(4, 3.0, np.float32))
    tape.backward(grads={y: g})
    assert y.grad is own and x.grad.numpy().tolist() == [6.0] * 4
    assert g.numpy().tolist() == [3.0] * 4


def test_copy_clone_assign_are_recorded(on_device):
    x = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    s = tg.zeros(1, requires_grad=True)
    tape = tg.Tape()
    with tape:
        c = tg.clone(x)
        tg.copy(y, c)
        tg.launch(total, dim=4, inputs=[y], outputs=[s])
    tape.backward(loss=s)
    assert x.grad.numpy().tolist() == [1.0] * 4


def test_mutation_warning_names_kernel_and_array(on_device):
    x = tg.array(np.ones(4, np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    b = tg.zeros(4, requires_grad=True)
    tape = tg.Tape(save_overwritten=False)    # saving on (the default): exact, no warning
    with tape:
        tg.launch(square_and_sin, dim=4, inputs=[x], outputs=[y, b])   # its adjoint needs x
        with pytest.warns(tg.TapeWarning, match=r"double.*launch #0|launch #0.*double"):
            tg.launch(double, dim=4, inputs=[y], outputs=[x])   # overwrites x, read by launch #0


def test_inplace_kernel_warns_and_strict_mode_raises(on_device):
    x = tg.array(np.ones(4, np.float32), requires_grad=True)
    tape = tg.Tape(save_overwritten=False)    # saving on (the default): exact, no warning
    with tape:
        with pytest.warns(tg.TapeWarning, match="inplace_scale.*'x'"):
            tg.launch(inplace_scale, dim=4, inputs=[x])
    tg.config.strict_tape = True
    try:
        with tg.Tape(save_overwritten=False):
            with pytest.raises(RuntimeError, match="inplace_scale"):
                tg.launch(inplace_scale, dim=4, inputs=[x])
    finally:
        tg.config.strict_tape = False


def test_writes_between_backward_calls_are_silent(recwarn):
    x = tg.array(np.ones(4, np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(double, dim=4, inputs=[x], outputs=[y])
    for _ in range(3):  # the optimizer-loop idiom: update x outside the tape, backward again
        tape.backward(grads={y: np.ones(4, np.float32)})
        x.numpy()[:] -= 0.1 * x.grad.numpy()
        tg.launch(inplace_scale, dim=4, inputs=[x])
        tape.zero()
    assert not [w for w in recwarn if issubclass(w.category, tg.TapeWarning)]


def test_nested_tapes_and_bad_calls():
    t1 = tg.Tape()
    with t1:
        with pytest.raises(RuntimeError, match="nested"):
            with tg.Tape():
                pass
    with pytest.raises(RuntimeError, match="no gradient"):
        t1.backward(loss=tg.zeros(1))
    with pytest.raises(ValueError, match="shape"):
        t1.backward(grads={tg.zeros(3): np.ones(4, np.float32)})
    with pytest.raises(TypeError, match="callable"):
        t1.record_func(42, [])


def test_gradients_map(on_device):
    x = tg.array(np.ones(4, np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(double, dim=4, inputs=[x], outputs=[y])
    assert tape.gradients[x] is x.grad and tape.gradients[y] is y.grad


# ------------------------------------------------------------------------------ gradcheck

@tg.kernel
def smooth(x: tg.array[tg.float64], w: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.exp(w[i] * x[i]) + tg.sqrt(x[i] * x[i] + 1.0)


@tg.func
def wrong_square(x: tg.float64):
    return x * x


@tg.func_grad(wrong_square)
def adj_wrong_square(x: tg.float64, adj_ret: tg.float64):
    tg.adjoint[x] += 3.0 * x * adj_ret      # deliberately wrong: should be 2x


@tg.kernel
def uses_wrong(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = wrong_square(x[i])


def _rand(n, seed=0):
    return tg.array(np.random.default_rng(seed).uniform(0.1, 1.0, n), dtype=tg.float64)


def test_gradcheck_passes_on_a_correct_kernel(on_device):
    x, w, y = _rand(6, 1), _rand(6, 2), tg.zeros(6, dtype=tg.float64)
    assert gradcheck(smooth, 6, [x, w], [y], eps=1e-6, atol=1e-7, rtol=1e-6)
    ja = jacobian(smooth, 6, [x, w], [y])
    jf = jacobian_fd(smooth, 6, [x, w], [y], eps=1e-6)
    assert set(ja) == {(0, 0), (1, 0)}
    assert np.allclose(ja[(0, 0)], jf[(0, 0)], atol=1e-7)
    assert np.count_nonzero(ja[(0, 0)] - np.diag(np.diag(ja[(0, 0)]))) == 0


def test_gradcheck_finds_a_wrong_func_grad(on_device):
    x, y = _rand(4, 3), tg.zeros(4, dtype=tg.float64)
    with pytest.raises(GradcheckError, match=r"d y\[\d\] / d x\[\d\]: adjoint .* finite difference"):
        gradcheck(uses_wrong, 4, [x], [y], eps=1e-6)
    assert gradcheck(uses_wrong, 4, [x], [y], eps=1e-6, raise_exception=False) is False


def test_gradcheck_handles_accumulating_outputs(on_device):
    x = _rand(5, 4)
    s = tg.zeros(1, dtype=tg.float64)
    assert gradcheck(total_d, 5, [x], [s], eps=1e-6, atol=1e-8)


@tg.kernel
def total_d(v: tg.array[tg.float64], s: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_add(s, 0, v[i] * v[i])


def test_zero_uses_one_native_call_for_host_gradients():
    from tapegrad import memory_ops
    assert memory_ops.load_zero_many(), "the batched zeroing helper must build wherever kernels build"
    bufs = [tg.array(np.ones(7, np.float32)) for _ in range(5)]
    plan = memory_ops.ZeroPlan([(b.ptr, b.nbytes) for b in bufs])
    plan.run()
    assert all(not b.numpy().any() for b in bufs)
