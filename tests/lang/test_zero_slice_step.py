"""A slice step that is 0 at run time in a CPU kernel (``x[a:b:s]`` with ``s`` read from an array):
the launch raises ``tg.KernelRuntimeError`` (a RuntimeError, and a ValueError as Python's
``a[::0]``) after it ran, naming the kernel and the Python line; the process goes on, the slice
was empty for that launch, and the next launch with a valid step gives numpy's answer. Through
every launch form: ``tg.launch`` (native helper and Python path), its adjoint, ``Tape.backward``,
``tg.Launch`` replays, tangent launches, CPU graph replays, debug builds, OpenMP launches, and
with ``TAPEGRAD_FAST_LAUNCH=0`` (a subprocess).

Before this, the CPU kernel ran ``__builtin_trap()``: each test here killed the process.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.launch import fastlaunch

L = sys.modules["tapegrad.launch.core"]   # launch() and its native switch (native_launches)

MESSAGE = "slice step cannot be zero"     # Python's words for a[::0]


@tg.kernel
def strided_sq(x: tg.array(dtype=tg.float64), steps: tg.array(dtype=tg.int32), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    v = x[1:9:steps[i % steps.shape[0]]]   # the slice whose step is read at run time
    s = tg.float64(0.0)
    for j in range(v.shape[0]):
        s += v[j] * v[j]
    y[i] = s


def _slice_line() -> str:
    with open(__file__) as fh:
        for n, text in enumerate(fh, 1):
            if "# the slice whose step" in text:
                return f"{__file__}:{n}"
    raise AssertionError("the slice's line")


SLICE_AT = _slice_line()
X = np.linspace(-1.0, 2.0, 10)


def expected(steps, n):
    """numpy's y: each thread's sum of squares over x[1:9:step] (0 where the step is 0: an empty slice)."""
    out = np.zeros(n)
    for i in range(n):
        s = int(steps[i % len(steps)])
        out[i] = 0.0 if s == 0 else float(np.sum(X[1:9:s] ** 2))
    return out


def expected_grad(steps, n):
    """numpy's x.grad for y.grad = 1: 2 x at each index a thread's slice takes."""
    g = np.zeros_like(X)
    idx = np.arange(len(X))
    for i in range(n):
        s = int(steps[i % len(steps)])
        if s:
            g[idx[1:9:s]] += 2 * X[idx[1:9:s]]
    return g


def args(steps, n=4, grad=False):
    x = tg.array(X, dtype=tg.float64, requires_grad=grad)
    st = tg.array(np.asarray(steps, dtype=np.int32), dtype=tg.int32)
    y = tg.zeros(n, dtype=tg.float64, requires_grad=grad)
    return x, st, y


def check_error(e, phase=None):
    text = str(e.value)
    assert MESSAGE in text and "strided_sq" in text and SLICE_AT in text, text
    if phase is not None:
        assert f"({phase} launch)" in text, text
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, ValueError)
    assert e.value.location == SLICE_AT


@pytest.fixture
def native():
    """The native launch helper loaded (skips when TAPEGRAD_FAST_LAUNCH=0 turns it off)."""
    for _ in range(2):   # the kernel's first launch (the Python path) registers its module
        x, st, y = args([2])
        tg.launch(strided_sq, 4, inputs=[x, st], outputs=[y])
    if L._fast is None:
        if "TAPEGRAD_FAST_LAUNCH" in (fastlaunch.error() or ""):
            pytest.skip("the native launch helper is switched off (TAPEGRAD_FAST_LAUNCH=0)")
        pytest.fail(f"the native launch helper did not load: {fastlaunch.error()}")


@pytest.mark.parametrize("path", ["native", "python"])
def test_forward_launch_raises_then_recovers(native, path):
    if path == "python":
        L.native_launches(False)
    try:
        forward_launch_raises_then_recovers(path)
    finally:
        L.native_launches(True)


def forward_launch_raises_then_recovers(path):
    for adjoint in (False, True):
        f0 = fastlaunch.stats(adjoint)[0]
        x, st, y = args([0], grad=adjoint)
        y.fill_(5.0)
        with pytest.raises(tg.KernelRuntimeError) as e:
            tg.launch(strided_sq, 4, inputs=[x, st], outputs=[y], adjoint=adjoint)
        check_error(e, "backward" if adjoint else None)
        assert (fastlaunch.stats(adjoint)[0] - f0 == 1) == (path == "native")   # the path under test ran it
        if not adjoint:
            np.testing.assert_array_equal(y.numpy(), 0.0)   # it ran on: the slices were empty
        # the flag was cleared, the next launch runs and is right
        for step in (2, -3, 3):
            x, st, y = args([step], grad=True)
            tg.launch(strided_sq, 4, inputs=[x, st], outputs=[y])
            np.testing.assert_allclose(y.numpy(), expected([step], 4))


def test_many_threads_some_with_a_zero_step(native):
    n = 20000        # past TG_OMP_MIN (4096): an OpenMP team, several threads meeting the zero step
    steps = [2, 0, 3, -1, 0, 1, 4]
    x, st, y = args(steps, n)
    with pytest.raises(tg.KernelRuntimeError) as e:
        tg.launch(strided_sq, n, inputs=[x, st], outputs=[y])
    check_error(e)
    np.testing.assert_allclose(y.numpy(), expected(steps, n))   # the other threads' results are exact
    x, st, y = args([2, 3, -2], n)
    tg.launch(strided_sq, n, inputs=[x, st], outputs=[y])
    np.testing.assert_allclose(y.numpy(), expected([2, 3, -2], n))


def test_tape_backward_replay_raises(native):
    n = 6
    x, st, y = args([2, 3], n, grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(strided_sq, n, inputs=[x, st], outputs=[y])
    np.testing.assert_allclose(y.numpy(), expected([2, 3], n))
    st.numpy()[1] = 0          # the adjoint replay reads the step again: now 0
    with pytest.raises(tg.KernelRuntimeError) as e:
        tape.backward(grads={y: tg.ones(n, dtype=tg.float64)})
    check_error(e, "backward")
    tape.zero()
    st.numpy()[1] = 3
    tape.backward(grads={y: tg.ones(n, dtype=tg.float64)})
    np.testing.assert_allclose(x.grad.numpy(), expected_grad([2, 3], n))


def test_forward_under_a_tape_raises_once(native):
    n = 4
    x, st, y = args([0], n, grad=True)
    tape = tg.Tape()
    with tape:
        with pytest.raises(tg.KernelRuntimeError) as e:
            tg.launch(strided_sq, n, inputs=[x, st], outputs=[y])
    check_error(e)
    st.numpy()[0] = 2
    tape.backward(grads={y: tg.ones(n, dtype=tg.float64)})   # the record was made; replays once
    np.testing.assert_allclose(x.grad.numpy(), expected_grad([2], n))


@pytest.mark.parametrize("adjoint", [False, True])
def test_recorded_launch_replays_raise(native, adjoint):
    n = 5
    x, st, y = args([0], n, grad=True)
    cmd = tg.launch(strided_sq, n, inputs=[x, st], outputs=[y], adjoint=adjoint, record_cmd=True)
    phase = "backward" if adjoint else None
    with pytest.raises(tg.KernelRuntimeError) as e:     # the checked launch (module launch)
        cmd.launch()
    check_error(e, phase)
    st.numpy()[0] = 2
    cmd.launch()             # sets up the direct replay (entry point called as is)
    st.numpy()[0] = 0
    with pytest.raises(tg.KernelRuntimeError) as e:     # the direct replay
        cmd.launch()
    check_error(e, phase)
    st.numpy()[0] = 3
    x.grad.zero_()
    y.zero_()
    y.grad.fill_(1.0)
    cmd.launch()
    if adjoint:
        np.testing.assert_allclose(x.grad.numpy(), expected_grad([3], n))
    else:
        np.testing.assert_allclose(y.numpy(), expected([3], n))


@pytest.mark.parametrize("adjoint", [False, True])
def test_tangent_launch_raises(adjoint):
    n = 4
    x, st, y = args([0], n, grad=True)
    tx = tg.array(np.ones_like(X), dtype=tg.float64)
    ty = tg.zeros(n, dtype=tg.float64)
    kw = dict(tangent=True, tan_inputs=[tx, None], tan_outputs=[ty])
    if adjoint:
        y.grad.fill_(1.0)
        kw.update(adjoint=True, tan_adj_inputs=[tg.zeros(len(X), dtype=tg.float64), None],
                  tan_adj_outputs=[tg.zeros(n, dtype=tg.float64)])
    with pytest.raises(tg.KernelRuntimeError) as e:
        tg.launch(strided_sq, n, inputs=[x, st], outputs=[y], **kw)
    assert MESSAGE in str(e.value) and "strided_sq" in str(e.value)
    assert ("tangent of the adjoint" if adjoint else "(tangent launch)") in str(e.value)
    st.numpy()[0] = 2
    if adjoint:
        x.grad.zero_()
        y.grad.fill_(1.0)   # (the failed launch's store adjoint consumed it)
    tg.launch(strided_sq, n, inputs=[x, st], outputs=[y], **kw)
    if adjoint:
        np.testing.assert_allclose(x.grad.numpy(), expected_grad([2], n))
    else:   # d/dx sum(v^2) along ones: 2 sum(v)
        np.testing.assert_allclose(y.numpy(), expected([2], n))
        np.testing.assert_allclose(ty.numpy(), 2 * np.sum(X[1:9:2]))


def test_cpu_graph_replay_raises():
    n = 4
    x, st, y = args([2], n)
    with tg.ScopedCapture(device="cpu") as cap:
        tg.launch(strided_sq, n, inputs=[x, st], outputs=[y])
    st.numpy()[0] = 0
    with pytest.raises(tg.KernelRuntimeError) as e:
        tg.capture_launch(cap.graph)
    check_error(e)
    st.numpy()[0] = 3
    tg.capture_launch(cap.graph)
    np.testing.assert_allclose(y.numpy(), expected([3], n))


def test_debug_build_reports_the_step_not_the_empty_slice():
    prev = tg.config.mode
    tg.config.mode = "debug"
    try:
        x, st, y = args([0])
        with pytest.raises(tg.KernelRuntimeError) as e:
            tg.launch(strided_sq, 4, inputs=[x, st], outputs=[y])
        check_error(e)
        x, st, y = args([2])
        tg.launch(strided_sq, 4, inputs=[x, st], outputs=[y])   # no stale error of either slot
        np.testing.assert_allclose(y.numpy(), expected([2], 4))
    finally:
        tg.config.mode = prev


def test_native_helper_off_in_a_subprocess(tmp_path):
    """``TAPEGRAD_FAST_LAUNCH=0``: the Python path alone raises, and the process lives on."""
    script = tmp_path / "zero_step.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import tapegrad as tg
        from tapegrad.launch import fastlaunch

        @tg.kernel
        def k(x: tg.array(dtype=float), st: tg.array(dtype=int), y: tg.array(dtype=float)):
            i = tg.tid()
            v = x[0:8:st[0]]
            s = float(0.0)
            for j in range(v.shape[0]):
                s += v[j]
            y[i] = s

        x = tg.array(np.arange(8, dtype=np.float32))
        y = tg.zeros(3, dtype=float)
        for step in (0, 0, 3, 0, 3, 0):
            try:
                tg.launch(k, 3, inputs=[x, tg.array(np.array([step], dtype=np.int32))], outputs=[y])
                print("ok", y.numpy().tolist())
            except RuntimeError as e:
                print("error", type(e).__name__, e)
        print("helper", fastlaunch.error())
    """))
    env = dict(os.environ, TAPEGRAD_FAST_LAUNCH="0")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("error KernelRuntimeError") and MESSAGE in lines[0], r.stdout
    assert f"{script}:9" in lines[0], r.stdout
    assert lines[1].startswith("error KernelRuntimeError"), r.stdout
    assert lines[2] == lines[4] == "ok [9.0, 9.0, 9.0]", r.stdout   # 0 + 3 + 6
    assert lines[3].startswith("error KernelRuntimeError") and lines[5].startswith("error KernelRuntimeError")
    assert "TAPEGRAD_FAST_LAUNCH" in lines[6], r.stdout     # the helper was off


@tg.kernel
def strided_sum32(x: tg.array(dtype=tg.float32), st: tg.array(dtype=tg.int32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    v = x[0:8:st[0]]
    s = tg.float32(0.0)
    for j in range(v.shape[0]):
        s += v[j]
    y[i] = s


@pytest.mark.jax
def test_jax_kernel_reports_it_through_xla():
    """A jax_kernel's CPU entry runs inside XLA (bridges/jax/ffi_handler.cpp): the handler reads
    the library's error code after the launch and returns XLA's error, and clears it (the next
    tg.launch of the library does not see it)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    op = tg.jax_kernel(strided_sum32, launch_dims=(3,), output_dims=3)
    with jax.default_device(jax.devices("cpu")[0]):   # the CPU entry (a GPU machine's default is CUDA)
        x = jnp.arange(8, dtype=jnp.float32)
        with pytest.raises(RuntimeError, match=MESSAGE) as e:
            np.asarray(op(x, jnp.array([0], dtype=jnp.int32))[0])
        assert "strided_sum32" in str(e.value)
        (y,) = op(x, jnp.array([3], dtype=jnp.int32))
        np.testing.assert_allclose(np.asarray(y), 9.0)      # 0 + 3 + 6
    yt = tg.zeros(3, dtype=tg.float32, device="cpu")
    tg.launch(strided_sum32, 3, inputs=[tg.array(np.arange(8, dtype=np.float32), device="cpu"),
                                        tg.array(np.array([2], dtype=np.int32), device="cpu")], outputs=[yt])
    np.testing.assert_allclose(yt.numpy(), 12.0)        # no stale error from the XLA launch


def test_a_module_loaded_without_its_source_names_the_line():
    """A library loaded through the direct cache comes without its unit's text: the error
    regenerates the kernel's unit to map the C++ line to the Python line."""
    from tapegrad import modules
    lib = strided_sq.module_for(tg.get_device("cpu")).lib
    mod = modules.CpuModule(lib, strided_sq)       # as Kernel._load_direct makes it
    lines = modules.slice_lines(strided_sq.source())   # the forward's slice, the adjoint's (replay, gradient)
    assert lines and set(lines.values()) == {SLICE_AT}
    cpp_line = max(lines)
    mod.errors.flag[0], mod.errors.flag[1] = modules.ERR_SLICE_STEP_ZERO, cpp_line
    with pytest.raises(tg.KernelRuntimeError) as e:
        mod.errors.check()
    check_error(e)
    assert mod.errors.flag[0] == mod.errors.flag[1] == 0
    mod.errors.check()      # cleared: nothing to raise


@pytest.mark.cuda
def test_cuda_kernel_with_a_run_time_step_compiles_and_is_exact():
    """The CUDA build of the same kernel (its slice carries the line argument too) runs valid
    steps forward and backward to numpy's answers; a zero step on CUDA still traps the context
    (no error slot there), so it is not launched here."""
    steps = [2, -3, 3, 1]
    n = 8
    x = tg.array(X, dtype=tg.float64, requires_grad=True, device="cuda:0")
    st = tg.array(np.asarray(steps, dtype=np.int32), dtype=tg.int32, device="cuda:0")
    y = tg.zeros(n, dtype=tg.float64, requires_grad=True, device="cuda:0")
    tape = tg.Tape()
    with tape:
        tg.launch(strided_sq, n, inputs=[x, st], outputs=[y])
    np.testing.assert_allclose(y.numpy(), expected(steps, n))
    tape.backward(grads={y: tg.ones(n, dtype=tg.float64, device="cuda:0")})
    np.testing.assert_allclose(x.grad.numpy(), expected_grad(steps, n))
