"""``deterministic=DeterministicMode.RUN_TO_RUN`` (Warp's module option): CPU launches of such a
module run the grid on one thread in grid order, so floating-point atomics accumulate in the
same order on every run. The reference is the same sum done one float32 addition at a time in
index order with NumPy: the kernel's result must equal it bit for bit (an OpenMP-parallel
accumulation of these values, spread over ten decades, rounds differently)."""
import types

import numpy as np
import pytest

import tapegrad as tg

RUN_TO_RUN = tg.DeterministicMode.RUN_TO_RUN
N = 50_000


@tg.kernel(module="unique", module_options={"deterministic": RUN_TO_RUN})
def det_square_sum(x: tg.array(dtype=tg.float32), out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    tg.atomic_add(out, 0, x[i] * x[i])


@tg.kernel(module="unique", module_options={"deterministic": RUN_TO_RUN})
def det_scatter(x: tg.array(dtype=tg.float32), bins: tg.array(dtype=tg.int32), out: tg.array(dtype=tg.float32)):
    i = tg.tid()
    out[bins[i]] += 3.0 * x[i]


def _values(seed=0, n=N):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 10.0 ** rng.uniform(-5, 5, n)).astype(np.float32)


def _sequential_sum(values):
    acc = np.float32(0)
    for v in values.astype(np.float32):
        acc = np.float32(acc + v)
    return acc


def test_forward_atomics_accumulate_in_grid_order():
    xn = _values()
    x = tg.array(xn)
    ref = _sequential_sum(xn * xn)
    for _ in range(3):
        out = tg.zeros(1, dtype=tg.float32)
        tg.launch(det_square_sum, dim=N, inputs=[x], outputs=[out])
        assert out.numpy()[0] == ref     # bit-exact, every run


def test_adjoint_atomics_accumulate_in_grid_order():
    # out[bins[i]] += 3 x[i]: the adjoint reads adj_out[bins[i]] into adj_x[i]; and the forward's
    # scatter into 7 bins, whose sums the sequential reference reproduces bit for bit
    xn = _values(1)
    bn = (np.arange(N) * 7919 % 7).astype(np.int32)
    x = tg.array(xn, requires_grad=True)
    out = tg.zeros(7, dtype=tg.float32, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(det_scatter, dim=N, inputs=[x, tg.array(bn)], outputs=[out])
    ref = np.array([_sequential_sum(np.float32(3.0) * xn[bn == b]) for b in range(7)])
    np.testing.assert_array_equal(out.numpy(), ref)
    seed = np.arange(1, 8, dtype=np.float32)
    tape.backward(grads={out: tg.array(seed)})
    np.testing.assert_array_equal(x.grad.numpy(), np.float32(3.0) * seed[bn])


def test_tangent_atomics_accumulate_in_grid_order():
    xn = _values(2)
    x = tg.array(xn)
    t = tg.array(np.ones(N, dtype=np.float32))
    out = tg.zeros(1, dtype=tg.float32)
    tout = tg.zeros(1, dtype=tg.float32)
    tg.launch(det_square_sum, dim=N, inputs=[x], outputs=[out], tangent=True, tan_inputs=[t], tan_outputs=[tout])
    assert out.numpy()[0] == _sequential_sum(xn * xn)
    # d/dx (x*x) along ones: x + x per thread (the dual product's two terms), summed in order
    assert tout.numpy()[0] == _sequential_sum(xn + xn)


def test_the_option_selects_the_serial_build_and_toggles():
    @tg.kernel(module="unique")
    def toggled(x: tg.array(dtype=tg.float32), out: tg.array(dtype=tg.float32)):
        tg.atomic_add(out, 0, x[tg.tid()])

    cpu = tg.get_device("cpu")
    assert not toggled.deterministic()
    parallel = toggled.module_for(cpu)
    toggled.module.options["deterministic"] = RUN_TO_RUN
    assert toggled.deterministic()
    serial = toggled.module_for(cpu)
    assert serial is not parallel
    xn = _values(3)
    out = tg.zeros(1, dtype=tg.float32)
    tg.launch(toggled, dim=N, inputs=[tg.array(xn)], outputs=[out])
    assert out.numpy()[0] == _sequential_sum(xn)
    toggled.module.options["deterministic"] = tg.DeterministicMode.NOT_GUARANTEED
    assert toggled.module_for(cpu) is parallel
    # a kernel's own option wins over its module's
    assert tg.Kernel(toggled.func, key="det_own", options={"deterministic": RUN_TO_RUN}).deterministic()


def test_unsupported_requests_raise():
    with pytest.raises(ValueError, match="GPU_TO_GPU"):
        tg.set_module_options({"deterministic": tg.DeterministicMode.GPU_TO_GPU}, module="det_refused")
    with pytest.raises(ValueError, match="expected None, a bool or a DeterministicMode"):
        tg.set_module_options({"deterministic": "yes"}, module="det_refused")
    # the process-wide default would reach every module (tapegrad's own kernels too): per module only
    tg.config.deterministic = tg.DeterministicMode.NOT_GUARANTEED
    tg.config.deterministic = None
    with pytest.raises(ValueError, match="per module"):
        tg.config.deterministic = RUN_TO_RUN
    assert tg.config.deterministic is None
    # CUDA has no serial build: loading one there raises before anything is built
    with pytest.raises(RuntimeError, match="honoured on the CPU only"):
        det_square_sum.module_for(types.SimpleNamespace(is_cuda=True, alias="cuda:0"))


@pytest.mark.cuda
def test_cuda_launch_of_a_deterministic_kernel_raises():
    x = tg.zeros(4, dtype=tg.float32, device="cuda:0")
    out = tg.zeros(1, dtype=tg.float32, device="cuda:0")
    with pytest.raises(RuntimeError, match="honoured on the CPU only"):
        tg.launch(det_square_sum, dim=4, inputs=[x], outputs=[out], device="cuda:0")
