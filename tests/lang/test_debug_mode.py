"""Debug mode (issue 14, fault 7): ``tg.config.mode = "debug"`` (or the module option ``"mode"``)
builds kernels with bounds checks; an out-of-range index raises ``tg.KernelIndexError`` after
the launch, naming the kernel, the array, the index and the Python line, and the access is
skipped. Release builds are unchanged (no checks in their source)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import tapegrad as tg


@pytest.fixture
def debug_mode():
    prev = tg.config.mode
    tg.config.mode = "debug"
    yield
    tg.config.mode = prev


def _line_of(fn, text):
    src, first = inspect.getsourcelines(fn.func if isinstance(fn, tg.Kernel) else fn)
    return first + next(k for k, line in enumerate(src) if text in line)


@tg.kernel
def shifted_read(x: tg.array[float], y: tg.array[float], off: int):
    i = tg.tid()
    y[i] = x[i + off] * 2.0


@tg.kernel
def shifted_write(y: tg.array[float], off: int):
    i = tg.tid()
    y[i + off] = float(i)


@tg.kernel
def grid_add(m: tg.array2d[float], di: int):
    i, j = tg.tid()
    tg.atomic_add(m, i + di, j, 1.0)


@tg.func
def fetch(a: tg.array[float], k: int) -> float:
    return a[k]


@tg.kernel
def via_func(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = fetch(x, i - 4)    # thread 0: -4 is past the front of 3 elements; -3, -2 count from the end


def test_out_of_range_read_names_kernel_array_index_and_line(device, debug_mode):
    x = tg.array(np.arange(4, dtype=np.float32), device=device)
    y = tg.zeros(4, device=device)
    with pytest.raises(tg.KernelIndexError) as err:
        tg.launch(shifted_read, dim=4, inputs=[x, y, 2])
    e = err.value
    assert isinstance(e, IndexError)
    msg = str(e)
    line = _line_of(shifted_read, "y[i] = x[i + off]")
    assert shifted_read.key in msg and "read of array 'x'" in msg and "shape (4,)" in msg
    assert f"test_debug_mode.py:{line}" in msg
    assert e.array == "x" and e.shape == (4,) and e.index[0] in (4, 5) and e.access == "read" and e.count == 2
    # the in-range threads ran, the out-of-range reads were skipped (zero)
    assert y.numpy().tolist() == [4.0, 6.0, 0.0, 0.0]
    # the slot is cleared: the next in-range launch is fine
    tg.launch(shifted_read, dim=4, inputs=[x, y, 0])
    assert y.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_out_of_range_write_is_skipped(device, debug_mode):
    y = tg.full(6, -1.0, device=device)
    with pytest.raises(tg.KernelIndexError, match=r"write of array 'y' at index -?\d+ is out of range for its shape "
                                                  r"\(6,\)"):
        tg.launch(shifted_write, dim=6, inputs=[y, 3])
    assert y.numpy().tolist() == [-1.0, -1.0, -1.0, 0.0, 1.0, 2.0]   # nothing past the end was written
    # negative indices count from the end (as Warp's): -6 is the first element, -7 is out of range
    tg.launch(shifted_write, dim=1, inputs=[y, -6])
    assert y.numpy()[0] == 0.0
    with pytest.raises(tg.KernelIndexError, match=r"at index -7 is out of range"):
        tg.launch(shifted_write, dim=1, inputs=[y, -7])


def test_two_dimensional_atomic(device, debug_mode):
    m = tg.zeros((3, 2), device=device)
    with pytest.raises(tg.KernelIndexError) as err:
        tg.launch(grid_add, dim=(3, 2), inputs=[m, 1])
    assert "atomic_add of array 'm' at index (3, " in str(err.value) and "shape (3, 2)" in str(err.value)
    assert m.numpy().tolist() == [[0, 0], [1, 1], [1, 1]]


def test_access_inside_a_func_names_the_func(device, debug_mode):
    x = tg.array(np.arange(3, dtype=np.float32), device=device)
    y = tg.zeros(3, device=device)
    with pytest.raises(tg.KernelIndexError) as err:
        tg.launch(via_func, dim=3, inputs=[x, y])
    msg = str(err.value)
    assert "in @func 'fetch'" in msg and "index -4" in msg and via_func.key in msg
    assert f"test_debug_mode.py:{_line_of(fetch, 'return a[k]')}" in msg
    assert y.numpy().tolist() == [0.0, 0.0, 1.0]


def test_backward_launch_is_checked(device, debug_mode):
    x = tg.array(np.arange(4, dtype=np.float32), device=device, requires_grad=True)
    y = tg.zeros(4, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(shifted_read, dim=4, inputs=[x, y, 0])
    tape.backward(grads={y: tg.ones(4, device=device)})
    assert x.grad.numpy().tolist() == [2.0, 2.0, 2.0, 2.0]
    with pytest.raises(tg.KernelIndexError, match=r"\(backward launch\) \(debug mode\): read of array 'x'"):
        tg.launch(shifted_read, dim=4, inputs=[x, y, 1], adjoint=True, adj_inputs=[x.grad, y.grad, 0])


def test_release_builds_have_no_checks_and_modes_are_cached_apart(debug_mode):
    cpu = tg.get_device("cpu")
    x = tg.array(np.arange(4, dtype=np.float32))
    y = tg.zeros(4)
    tg.launch(shifted_read, dim=4, inputs=[x, y, 0])
    dbg = shifted_read.module_for(cpu)
    assert getattr(dbg, "debug", False)
    tg.config.mode = "release"
    rel = shifted_read.module_for(cpu)
    assert rel is not dbg and not getattr(rel, "debug", False)
    assert "dbg_ok" not in shifted_read.source() and "tg_dbg_slot" not in shifted_read.source()
    tg.launch(shifted_read, dim=4, inputs=[x, y, 1])   # release: in range here, no check either way
    tg.config.mode = "debug"
    assert shifted_read.module_for(cpu) is dbg              # switching back picks the cached debug build


def test_mode_values_and_module_option():
    with pytest.raises(ValueError, match=r"mode.*'release' or 'debug', got 'fast'"):
        tg.config.mode = "fast"
    with pytest.raises(ValueError, match=r"'mode'.*'release' or 'debug', got 1"):
        tg.set_module_options({"mode": 1})
    assert tg.config.mode == "release"
    cpu = tg.get_device("cpu")
    x = tg.array(np.arange(4, dtype=np.float32))
    y = tg.zeros(4)
    try:
        tg.set_module_options({"mode": "debug"})
        assert tg.get_module_options()["mode"] == "debug"
        with pytest.raises(tg.KernelIndexError):
            tg.launch(shifted_read, dim=4, inputs=[x, y, 1])
        assert getattr(shifted_read.module_for(cpu), "debug", False)
    finally:
        tg.set_module_options({"mode": None})
    assert not getattr(shifted_read.module_for(cpu), "debug", False)


@tg.kernel
def last_of(x: tg.array[tg.int8], out: tg.array[tg.int8]):
    out[0] = x[len(x) - 1]


def test_int32_len_of_an_array_past_int32_is_caught(device, debug_mode):
    # in a launch of at most 2^31 - 1 threads len() is an int32 (Warp's type): it would wrap
    x = tg.zeros(2 ** 31 + 64, dtype=tg.int8, device=device)
    out = tg.zeros(1, dtype=tg.int8, device=device)
    with pytest.raises(tg.KernelIndexError, match=r"len\(\)/shape of array 'x' \(shape \(2147483712,\)\) at "
                                                  r".*test_debug_mode.py:\d+ does not fit the int32"):
        tg.launch(last_of, dim=1, inputs=[x, out])
    small = tg.array(np.array([1, 2, 3], dtype=np.int8), device=device)
    tg.launch(last_of, dim=1, inputs=[small, out])
    assert int(out.numpy()[0]) == 3


# ------------------------------------------------------------------ every launch path (issue 24 item 6)

@tg.kernel
def comp_read(x: tg.array[tg.vec3], k: int, y: tg.array[float]):
    i = tg.tid()
    v = x[i]
    y[i] = v[k]


@tg.kernel
def comp_write(x: tg.array[tg.vec3], k: int, y: tg.array[tg.vec3]):
    i = tg.tid()
    v = x[i]
    v[k] = 5.0
    y[i] = v


@tg.kernel
def mat_entry(m: tg.array[tg.mat22], r: int, c: int, y: tg.array[float]):
    i = tg.tid()
    y[i] = m[i][r, c]


def test_runtime_component_indices_are_checked(device, debug_mode):
    x = tg.array(np.arange(6, dtype=np.float32).reshape(2, 3), dtype=tg.vec3, device=device)
    y = tg.zeros(2, device=device)
    tg.launch(comp_read, dim=2, inputs=[x, 2, y])
    assert np.allclose(y.numpy(), [2.0, 5.0])
    line = _line_of(comp_read, "y[i] = v[k]")
    with pytest.raises(tg.KernelIndexError, match=rf"component read of a .*vec3 value at index 3 is out of range "
                                                  rf"for its shape \(3,\), at .*test_debug_mode.py:{line}"):
        tg.launch(comp_read, dim=2, inputs=[x, 3, y])
    out = tg.zeros(2, dtype=tg.vec3, device=device)
    with pytest.raises(tg.KernelIndexError, match=r"component write of .* at index -1 is out of range"):
        tg.launch(comp_write, dim=2, inputs=[x, -1, out])
    assert np.allclose(out.numpy(), x.numpy())          # the update was skipped, the value kept
    tg.launch(comp_write, dim=2, inputs=[x, 0, out])
    assert np.allclose(out.numpy()[:, 0], 5.0)
    m = tg.zeros(2, dtype=tg.mat22, device=device)
    with pytest.raises(tg.KernelIndexError, match=r"index \(0, 2\) is out of range for its shape \(2, 2\)"):
        tg.launch(mat_entry, dim=2, inputs=[m, 0, 2, y])
    tg.launch(mat_entry, dim=2, inputs=[m, 1, 1, y])     # no stale error afterwards


def test_release_builds_have_no_component_checks():
    assert "dbg_comp(" not in comp_read.source()


@tg.kernel
def shift_by(x: tg.array[float], off: int, y: tg.array[float]):
    i = tg.tid()
    y[i] = x[i + off] * 2.0


@pytest.mark.jax
def test_jax_kernel_launches_are_checked_eager_jit_and_vmap(debug_mode):
    import jax
    import jax.numpy as jnp
    x = jnp.arange(4, dtype=jnp.float32)
    jk = tg.jax_kernel(shift_by)
    line = _line_of(shift_by, "x[i + off]")
    calls = {"eager": lambda: jk(x, 1)[0].block_until_ready(),
             "jit": lambda: jax.jit(lambda v: jk(v, 1)[0])(x).block_until_ready(),
             "vmap": lambda: jax.vmap(lambda v: jk(v, 1)[0])(jnp.stack([x, x])).block_until_ready()}
    for how, call in calls.items():
        with pytest.raises(Exception) as err:
            call()
        text = str(err.value)
        assert "KernelIndexError" in text and f"test_debug_mode.py:{line}" in text, (how, text)
    assert np.allclose(np.asarray(jk(x, 0)[0]), 2.0 * np.arange(4.0))
    y = tg.zeros(4)
    tg.launch(shifted_read, dim=4, inputs=[tg.array(np.arange(4, dtype=np.float32)), y, 0])   # no stale error
    assert np.allclose(y.numpy(), 2.0 * np.arange(4.0))


@tg.kernel
def gather_sq(x: tg.array[float], idx: tg.array[int], y: tg.array[float]):
    i = tg.tid()
    v = x[idx[i]]
    y[i] = v * v


@pytest.mark.jax
def test_jax_kernel_adjoint_is_checked(debug_mode):
    import jax
    import jax.numpy as jnp
    jk = tg.jax_kernel(gather_sq, enable_backward=True)
    x = jnp.arange(4, dtype=jnp.float32)
    good = jnp.array([3, 2, 1, 0], dtype=jnp.int32)
    g = jax.grad(lambda v: jk(v, good)[0].sum())(x)
    assert np.allclose(np.asarray(g), 2.0 * np.arange(4.0))
    with pytest.raises(Exception, match="KernelIndexError"):
        jax.grad(lambda v: jk(v, jnp.array([0, 1, 2, 9], dtype=jnp.int32))[0].sum())(x).block_until_ready()


@pytest.mark.torch
def test_torch_op_launches_are_checked(debug_mode):
    import torch
    op = tg.torch_op(gather_sq)
    x = torch.arange(4.0, requires_grad=True)
    with pytest.raises(tg.KernelIndexError, match="read of array 'x' at index 9"):
        op(x, torch.tensor([0, 1, 2, 9], dtype=torch.int32))
    out = op(x, torch.tensor([3, 2, 1, 0], dtype=torch.int32))
    out.sum().backward()
    assert torch.allclose(x.grad, 2 * torch.arange(4.0))


@pytest.mark.paddle
def test_paddle_op_launches_are_checked(debug_mode):
    import paddle
    op = tg.paddle_op(gather_sq)
    x = paddle.arange(4, dtype="float32")
    with pytest.raises(tg.KernelIndexError, match="read of array 'x' at index 9"):
        op(x, paddle.to_tensor([0, 1, 2, 9], dtype="int32"))
    assert np.allclose(op(x, paddle.to_tensor([3, 2, 1, 0], dtype="int32")).numpy(), [9.0, 4.0, 1.0, 0.0])
