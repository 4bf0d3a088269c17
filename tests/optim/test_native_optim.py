"""tg.optim.Adam / SGD: fused steps checked against torch.optim on the same numbers."""
import os
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

import tapegrad as tg
from tapegrad.optim import SGD, Adam
from tapegrad.optim.multi_tensor import CHUNK

pytestmark = pytest.mark.torch

SHAPES = [(3,), (2 * CHUNK + 5,), (7, 3), (0,)]
FLAT = 4096   # multi_tensor.FLAT_MIN where a test asks for launches of their own


@pytest.fixture
def flat_launches(monkeypatch):
    """CPU parameters of FLAT elements or more step in launches of their own (by default every
    CPU parameter is in the one table launch: multi_tensor.FLAT_MIN is None)."""
    from tapegrad.optim import multi_tensor
    monkeypatch.setattr(multi_tensor, "FLAT_MIN", FLAT)


def _params(rng, dtype=np.float32, shapes=SHAPES, device="cpu"):
    tg_dtype = tg.dtype_from_numpy(dtype)
    return [tg.array(rng.normal(size=s).astype(dtype), dtype=tg_dtype, requires_grad=True, device=device)
            for s in shapes]


def _run_pair(make_tg, make_torch, dtype=np.float32, steps=6, device="cpu", tol=1e-6):
    rng = np.random.default_rng(0)
    ps = _params(rng, dtype, device=device)
    tps = [torch.tensor(p.numpy().copy(), dtype=torch.float64, requires_grad=True) for p in ps]
    _step_and_compare(ps, tps, make_tg(ps), make_torch(tps), rng, steps, dtype, tol, device)


def _step_and_compare(ps, tps, opt, topt, rng, steps, dtype, tol, device="cpu"):
    """``steps`` steps of ``opt`` over ``ps`` and ``topt`` over their float64 torch twins ``tps``
    with the same random gradients, then the parameters compared."""
    for _ in range(steps):
        for p, t in zip(ps, tps):
            g = rng.normal(size=p.shape).astype(dtype)
            p.grad.assign(g)
            t.grad = torch.tensor(g, dtype=torch.float64)
        tg.synchronize_device(device)
        opt.step()
        topt.step()
    for i, (p, t) in enumerate(zip(ps, tps)):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=tol, atol=tol, err_msg=f"params[{i}]")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_matches_torch(dtype, device):
    _run_pair(lambda ps: Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6),
              lambda ts: torch.optim.Adam(ts, lr=0.01, betas=(0.8, 0.99), eps=1e-6),
              dtype=dtype, device=device, tol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
                                dict(momentum=0.9, nesterov=True, weight_decay=0.01), dict(weight_decay=0.1)])
def test_sgd_matches_torch(kw, device):
    _run_pair(lambda ps: SGD(ps, lr=0.05, **kw), lambda ts: torch.optim.SGD(ts, lr=0.05, **kw),
              dtype=np.float64, device=device, tol=1e-12)


def test_float16_params_keep_float32_state():
    rng = np.random.default_rng(1)
    p = tg.array(rng.normal(size=100).astype(np.float16), dtype=tg.float16, requires_grad=True)
    ref = p.numpy().astype(np.float64)
    opt = Adam([p], lr=0.01)
    assert opt.groups[0].states["m"][0].dtype is tg.float32
    g = rng.normal(size=100).astype(np.float16)
    p.grad.assign(g)
    opt.step()
    gd = g.astype(np.float64)
    m, v = 0.1 * gd, 0.001 * gd * gd
    expect = ref - 0.01 * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8)
    np.testing.assert_allclose(p.numpy().astype(np.float64), expect, atol=2e-3)


def test_one_launch_per_group(monkeypatch):
    """Parameters of one dtype and device share a launch; a second dtype is a second group."""
    import tapegrad.optim.optimizer as optimizer_module
    calls = []
    real = optimizer_module.launch
    monkeypatch.setattr(optimizer_module, "launch", lambda k, **kw: (calls.append(k), real(k, **kw)))
    rng = np.random.default_rng(2)
    ps = _params(rng, np.float32, shapes=[(10,), (20,), (30,)]) + _params(rng, np.float64, shapes=[(4,)])
    opt = Adam(ps)
    assert len(opt.groups) == 2
    opt.step()
    assert len(calls) == 2


def test_cpu_step_grid_reaches_the_thread_team():
    """A large CPU step's launches reach the OpenMP team of the generated loop (one grid thread
    per 4096-element chunk kept 10^6 parameters under its threshold: one core): a flat launch
    has a grid thread per element, the table launch a grid thread per CPU_SPAN run and a
    cpu_grain of RUN_GRAIN runs when it holds TEAM_MIN elements (else the default grain: one
    thread); a small parameter costs one grid thread per run (64 lanes per chunk made a
    64-element parameter 64 grid threads), and every element of sizes that straddle runs and
    chunks is updated exactly once (float64 reference)."""
    from tapegrad.lang.emit import OMP_MIN, OMP_MIN_CHUNKS
    from tapegrad.optim.multi_tensor import CPU_SPAN, RUN_GRAIN, TEAM_MIN
    many = Adam([tg.zeros(FLAT - 1, dtype=tg.float32, device="cpu") for _ in range(20)])
    (runs,) = many.groups[0].dim
    assert many.groups[0].flat == () and runs == 20 * (-(-(FLAT - 1) // CPU_SPAN))
    assert many.groups[0].cpu_grain == RUN_GRAIN and runs >= OMP_MIN_CHUNKS * RUN_GRAIN
    assert many._kernel_of(many.groups[0]).options["cpu_grain"] == RUN_GRAIN
    small = Adam([tg.zeros(n, dtype=tg.float32, device="cpu") for n in (CPU_SPAN, 1, 0, CPU_SPAN + 1)])
    assert small.groups[0].dim == (4,) and small.groups[0].cpu_grain is None
    assert "cpu_grain" not in small._kernel_of(small.groups[0]).options
    assert small.groups[0].chunk_slot.numpy().tolist() == [0, 1, 3, 3]
    assert small.groups[0].chunk_start.numpy().tolist() == [0, 0, 0, CPU_SPAN]
    assert Adam([tg.zeros(TEAM_MIN - 1, dtype=tg.float32, device="cpu")]).groups[0].cpu_grain is None
    big = Adam([tg.zeros(10 ** 6, dtype=tg.float32, device="cpu")])   # the table launch, a team
    assert big.groups[0].flat == () and big.groups[0].dim == (-(-10 ** 6 // CPU_SPAN),) and big.groups[0].cpu_grain
    assert 10 ** 6 >= OMP_MIN
    rng = np.random.default_rng(5)
    shapes = [(CPU_SPAN - 1,), (CPU_SPAN + 1,), (CHUNK + CPU_SPAN + 3,), (3 * CHUNK - 1,)]
    ps = _params(rng, np.float64, shapes=shapes)
    init = [p.numpy().copy() for p in ps]
    grads = [rng.normal(size=s) for s in shapes]
    for p, g in zip(ps, grads):
        p.grad.assign(g)
    SGD(ps, lr=0.5).step()
    for i, (p, p0, g) in enumerate(zip(ps, init, grads)):
        np.testing.assert_allclose(p.numpy(), p0 - 0.5 * g, rtol=0, atol=1e-15, err_msg=f"params[{i}]")


def test_vector_params_and_explicit_grads():
    """Vector dtypes update component-wise; step(grad) takes Warp's explicit gradient list."""
    x = tg.array(np.ones((4, 3), np.float32), dtype=tg.vec3)
    g = tg.array(np.full((4, 3), 2.0, np.float32), dtype=tg.vec3)
    SGD([x], lr=0.25).step([g])
    np.testing.assert_allclose(x.numpy(), 0.5)


def test_reset_internal_state_restarts_bias_correction():
    p = tg.array(np.zeros(5, np.float32), requires_grad=True)
    opt = Adam([p], lr=0.1)
    p.grad.fill_(1.0)
    opt.step()
    first = p.numpy().copy()
    opt.step()
    p.assign(np.zeros(5, np.float32))
    opt.reset_internal_state()
    opt.step()
    np.testing.assert_allclose(p.numpy(), first)


def test_minimises_a_tape_loss():
    @tg.kernel
    def sq(x: tg.array[float], out: tg.array[float]):
        i = tg.tid()
        tg.atomic_add(out, 0, (x[i] - 3.0) * (x[i] - 3.0))

    x = tg.zeros(16, dtype=tg.float32, requires_grad=True)
    out = tg.zeros(1, dtype=tg.float32, requires_grad=True)
    opt = Adam([x], lr=0.1)
    for _ in range(300):
        out.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(sq, dim=16, inputs=[x], outputs=[out])
        tape.backward(loss=out)
        opt.step()
        tape.zero()
    np.testing.assert_allclose(x.numpy(), 3.0, atol=1e-2)


def test_errors_name_the_parameter():
    p = tg.array(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"params\[0\] has no gradient"):
        Adam([p]).step()
    with pytest.raises(ValueError, match=r"gradient of params\[0\] must match"):
        Adam([p]).step([tg.zeros(4)])
    with pytest.raises(ValueError, match="expected 1 gradient arrays, got 2"):
        Adam([p]).step([tg.zeros(5), tg.zeros(5)])
    with pytest.raises(TypeError, match=r"params\[1\]: expected a floating-point array"):
        Adam([p, tg.zeros(3, dtype=tg.int32)])
    with pytest.raises(TypeError, match=r"params\[0\]: expected a tapegrad array, got ndarray"):
        Adam([np.zeros(3)])
    with pytest.raises(TypeError, match="wrap it in a list"):
        Adam(p)
    with pytest.raises(ValueError, match=r"params\[0\]: expected a contiguous array"):
        Adam([tg.zeros((4, 4)).transpose()])
    with pytest.raises(ValueError, match=r"betas\[1\]"):
        Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="nesterov"):
        SGD([p], nesterov=True)
    with pytest.raises(RuntimeError, match="no parameters"):
        Adam().step()


@pytest.mark.parametrize("cls", [Adam, SGD])
def test_parameters_sharing_memory_are_refused(cls, device):
    """Two rows over the same elements would update them from different grid threads at once
    (an OpenMP team, CUDA blocks: a lost update, a result that changes from run to run); the
    same array twice and overlapping views are refused, adjacent views are not."""
    base = tg.zeros(3 * 4096, dtype=tg.float32, device=device, requires_grad=True)
    other = tg.zeros(8, dtype=tg.float32, device=device, requires_grad=True)
    with pytest.raises(ValueError, match=r"params\[0\] and params\[2\]: .*share"):
        cls([base, other, base])
    with pytest.raises(ValueError, match=r"params\[0\] and params\[1\]: .*share"):
        cls([base[:4096], base[4000:5000]])
    opt = cls([base[:4096], base[4096:8192], other])   # neighbours, not overlapping
    with pytest.raises(ValueError, match="share"):
        opt.set_params([other, base, base[5:6]])
    assert len(opt.params) == 3


@pytest.mark.cuda
@pytest.mark.parametrize("cls", [Adam, SGD])
def test_step_captured_in_a_cuda_graph(cls):
    """A captured step replays with the device-side step count: k replays == k eager steps."""
    rng = np.random.default_rng(3)
    init = [rng.normal(size=s).astype(np.float32) for s in [(100,), (CHUNK + 1,)]]
    grads = [rng.normal(size=x.shape).astype(np.float32) for x in init]
    kw = dict(lr=0.01) if cls is Adam else dict(lr=0.01, momentum=0.9)

    def make():
        ps = [tg.array(x, device="cuda:0", requires_grad=True) for x in init]
        for p, g in zip(ps, grads):
            p.grad.assign(g)
        return ps, cls(ps, **kw)

    eager, opt_e = make()
    for _ in range(4):
        opt_e.step()
    graphed, opt_g = make()
    opt_g.step()                       # the first step builds the device tables (a host copy)
    with tg.ScopedCapture() as capture:
        opt_g.step()                   # recorded, not run
    for _ in range(3):
        tg.capture_launch(capture.graph)
    tg.synchronize_device("cuda:0")
    for e, g in zip(eager, graphed):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------- large CPU parameters: a launch each (issue 30 item 2)

def _flat_shapes():
    return [(FLAT,), (3,), (FLAT + 5, 1), (FLAT - 1,)]


@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
                                dict(momentum=0.9, nesterov=True, weight_decay=0.01)])
def test_sgd_large_cpu_params_run_flat_and_match_torch(kw, flat_launches):
    """Parameters of FLAT_MIN elements or more step in launches of their own (unit-stride loops
    the compiler vectorizes); the others share the table launch. Both match torch (float64),
    the first momentum step (b = g) included, with and without dampening."""
    rng = np.random.default_rng(7)
    ps = _params(rng, np.float64, shapes=_flat_shapes())
    tps = [torch.tensor(p.numpy().copy(), requires_grad=True) for p in ps]
    opt, topt = SGD(ps, lr=0.05, **kw), torch.optim.SGD(tps, lr=0.05, **kw)
    assert opt.groups[0].flat == (0, 2)
    _step_and_compare(ps, tps, opt, topt, rng, 4, np.float64, 1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_large_cpu_params_run_flat_and_match_torch(dtype, flat_launches):
    rng = np.random.default_rng(8)
    ps = _params(rng, dtype, shapes=_flat_shapes())
    tps = [torch.tensor(p.numpy().astype(np.float64), requires_grad=True) for p in ps]
    opt, topt = Adam(ps, lr=0.01, betas=(0.8, 0.99)), torch.optim.Adam(tps, lr=0.01, betas=(0.8, 0.99))
    assert opt.groups[0].flat == (0, 2)
    _step_and_compare(ps, tps, opt, topt, rng, 4, dtype, 1e-5 if dtype == np.float32 else 1e-12)


def test_float16_large_param_keeps_float32_state_in_its_own_launch(flat_launches):
    FLAT_MIN = FLAT
    rng = np.random.default_rng(9)
    p = tg.array(rng.normal(size=FLAT_MIN).astype(np.float16), dtype=tg.float16, requires_grad=True)
    ref = p.numpy().astype(np.float64)
    opt = Adam([p], lr=0.01)
    assert opt.groups[0].flat == (0,) and opt.groups[0].states["m"][0].dtype is tg.float32
    g = rng.normal(size=FLAT_MIN).astype(np.float16)
    p.grad.assign(g)
    opt.step()
    gd = g.astype(np.float64)
    m, v = 0.1 * gd, 0.001 * gd * gd
    np.testing.assert_allclose(p.numpy().astype(np.float64), ref - 0.01 * (m / 0.1) / (np.sqrt(v / 0.001) + 1e-8),
                               atol=2e-3)


def test_adam_moments_per_param_and_set_params_keeps_state():
    import tapegrad.optim as tgo
    for dtype in (tg.float32, tg.float16, tg.vec3):
        p = tg.zeros(4, dtype=dtype, requires_grad=True)
        q = tg.zeros(2, dtype=dtype, requires_grad=True)
        opt = tgo.Adam([p, q], lr=0.02)
        m, v = opt.m[0], opt.v[0]
        n = 4 * (3 if dtype is tg.vec3 else 1)
        assert m.size == n and opt.m[1].size == n // 2 and m.dtype is tg.float32   # 16-bit: float32 state
        m.fill_(1.0)
        v.fill_(2.0)
        opt.set_params([p, q])            # the same arrays: the state stays
        assert opt.m[0] is m and opt.v[0] is v
        assert (opt.m[0].numpy() == 1.0).all() and (opt.v[0].numpy() == 2.0).all()
        opt.set_params([q, p])            # other arrays (order): state starts at zero
        assert (opt.m[1].numpy() == 0.0).all()


# ------------------------------------------ the CPU table launch: runs of CPU_SPAN (issue 30 item 2)

@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
                                dict(momentum=0.9, nesterov=True), dict(weight_decay=0.1),
                                dict(momentum=0.8, nesterov=True, weight_decay=0.01)])
@pytest.mark.parametrize("many", [False, True], ids=["serial", "team"])
def test_sgd_cpu_table_runs_match_torch(kw, many):
    """CPU parameters step through the table launch, one grid thread per run of CPU_SPAN
    elements (sizes straddling runs; ``team``: enough elements for the table kernel's
    cpu_grain and its OpenMP team), float64 against torch.optim.SGD."""
    from tapegrad.optim.multi_tensor import CPU_SPAN, TEAM_MIN
    shapes = [(3 * CPU_SPAN - 1,), (CPU_SPAN + 1,), (5, 7), (1,), (CPU_SPAN,)]
    if many:
        shapes = shapes * 40 + [(FLAT - 1,)] * 10 + [(FLAT,), (3 * FLAT + 1,)]
    rng = np.random.default_rng(11)
    ps = _params(rng, np.float64, shapes=shapes)
    tps = [torch.tensor(p.numpy().copy(), requires_grad=True) for p in ps]
    opt, topt = SGD(ps, lr=0.05, **kw), torch.optim.SGD(tps, lr=0.05, **kw)
    table = sum(p.size for p in ps)   # every CPU parameter in the table (FLAT_MIN None)
    assert (table >= TEAM_MIN) == many and (opt.groups[0].cpu_grain is not None) == many
    _step_and_compare(ps, tps, opt, topt, rng, 3, np.float64, 1e-12)


@pytest.mark.skipif(shutil.which("objdump") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="reads x86-64 code with objdump")
def test_cpu_table_kernel_loop_is_vectorized():
    """The CPU table kernel's run loop works on arrays built over the run's address (unit
    stride known to the compiler): its library holds packed float arithmetic (through the
    table row's arrays, a run-time stride, the loop was scalar: 1.1 against 0.3 ns an element)."""
    from tapegrad import build
    from tapegrad.optim.sgd import _runs_kernel
    p = tg.zeros(1000, dtype=tg.float32, device="cpu", requires_grad=True)
    SGD([p], lr=0.1).step()              # built (or found) in the cache
    k = _runs_kernel(tg.float32, tg.float32, None)
    lib = build.cpu_library_path(build.source_digest(k.source()), k.symbol)
    assert os.path.exists(lib), lib
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True,
                         check=True).stdout
    assert re.search(r"\b(v?mulps|v?subps)\b", out)


@pytest.mark.parametrize("cls", [SGD, Adam])
def test_a_read_only_parameter_is_refused(cls):
    """A read-only parameter (a NumPy array with write=False, wrapped without a copy) was stepped
    through its address: the NumPy array changed. The optimizer refuses it up front."""
    x = np.ones(10, np.float32)
    x.setflags(write=False)
    p = tg.array(x, copy=False, requires_grad=True)
    assert p.readonly
    with pytest.raises(RuntimeError, match=r"params\[0\]: the optimizer writes its parameters, but this array is "
                                           r"read-only"):
        cls([p], lr=0.1)
    assert x.tolist() == [1.0] * 10


@pytest.mark.parametrize("module", ["adam", "sgd"])
def test_table_kernels_dereference_no_array_field_of_the_table(module):
    """The CUDA table kernel reads each row's memory through arrays built at the row's addresses,
    never through the rows' array fields: such a field dereferenced would make every launch check
    the table's elements (a read from the GPU, illegal while a graph is captured) and send it down
    the Python launch path (the H200 step went from 15 to 30 us)."""
    import importlib

    from tapegrad.lang import facts
    from tapegrad.launch.core import launch_plan
    mod = importlib.import_module(f"tapegrad.optim.{module}")
    for k in (mod._kernel(tg.float32, tg.float32), mod._kernel(tg.float16, tg.float32),
              mod._runs_kernel(tg.float32, tg.float32, None)):
        assert facts.null_unsafe_fields(k, 0) == () and facts.written_fields(k, 0) == (), k.key
        assert launch_plan(k).native is not None, k.key
