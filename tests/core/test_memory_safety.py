"""Memory safety at the launch boundary (issue 24 items 1-4, SPEC B21): grids that overrun arrays
a kernel indexes by ``tid()`` unguarded, sizes whose byte counts overflow, adjoint buffers of
another shape than their arrays, views of foreign storage moved under them. Every case is a
clear Python exception, on the Python path and the native launch helper alike, and nothing is
written; the crash-prone ones (the old code wrote freed or unallocated memory) run in a
subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang import facts
from tapegrad.launch import fastlaunch


@tg.kernel
def twice(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = 2.0 * x[i]


@tg.kernel
def twice_guarded(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    if i < x.shape[0]:
        y[i] = 2.0 * x[i]


@tg.kernel
def rows(m: tg.array2d[float], out: tg.array2d[float]):
    i, j = tg.tid()
    k = j                      # a local assigned once from tid(): still an unguarded index
    out[i, k] = m[i, k] + 1.0


@tg.kernel
def flat_into_2d(m: tg.array2d[float], out: tg.array[float]):
    i = tg.tid()               # one component over a 2-D grid: the flat thread index
    out[i] = m[0, 0]


@tg.kernel
def sq(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i]


def _launch_n(n, *args, **kw):
    """The same launch ``n`` times (the first ones take the Python path, later ones the native helper)."""
    for _ in range(n):
        tg.launch(*args, **kw)


# ---------------------------------------------------------------------------- 1. grids past the arrays

def test_tid_accesses_are_read_from_the_ir():
    assert facts.tid_accesses(twice) == (facts.TidAccess(0, 0, 0, 1), facts.TidAccess(1, 0, 0, 1))
    assert facts.tid_accesses(twice_guarded) == ()            # behind an if: never refused
    got = set(facts.tid_accesses(rows))
    assert {facts.TidAccess(0, 0, 0, 2), facts.TidAccess(0, 1, 1, 2), facts.TidAccess(1, 1, 1, 2)} <= got
    assert facts.tid_extent(0, 1, (3, 4)) == 12 and facts.tid_extent(1, 2, (3, 4)) == 4


@pytest.mark.parametrize("repeats", [1, 4])
def test_grid_past_unguarded_array_is_refused_on_every_path(device, repeats):
    a, b = tg.ones(3, device=device), tg.zeros(3, device=device)
    _launch_n(repeats, twice, dim=3, inputs=[a, b])            # warm: later launches are native
    b.zero_()
    before = fastlaunch.stats()
    for _ in range(3):
        with pytest.raises(ValueError) as err:
            tg.launch(twice, dim=10, inputs=[a, b])
        msg = str(err.value)
        assert "twice" in msg and "dim=(10,)" in msg and "'x'" in msg and "length 3" in msg
    assert np.all(b.numpy() == 0.0)                             # nothing ran
    if repeats > 1 and fastlaunch.error() is None:
        assert fastlaunch.stats()[1] >= before[1] + 3           # the native helper passed each to Python
    _launch_n(repeats, twice_guarded, dim=10, inputs=[a, b])    # a guarded kernel runs
    assert np.allclose(b.numpy(), 2.0)


def test_multi_dim_grids_check_each_component(device):
    m, out = tg.zeros((3, 4), device=device), tg.zeros((3, 4), device=device)
    _launch_n(3, rows, dim=(3, 4), inputs=[m, out])
    with pytest.raises(ValueError, match=r"dimension 1 of 'm' \(length 4\)"):
        tg.launch(rows, dim=(3, 5), inputs=[m, out])
    with pytest.raises(ValueError, match=r"dimension 0 of 'm' \(length 3\)"):
        tg.launch(rows, dim=(4, 4), inputs=[m, out])
    small = tg.zeros(11, device=device)
    with pytest.raises(ValueError, match=r"dimension 0 of 'out' \(length 11\)"):
        tg.launch(flat_into_2d, dim=(3, 4), inputs=[m, small])   # 12 flat thread indices
    tg.launch(flat_into_2d, dim=(3, 4), inputs=[m, tg.zeros(12, device=device)])


def test_grid_check_with_foreign_arrays():
    x, y = np.ones(3), np.zeros(3)
    with pytest.raises(ValueError, match="'x'"):
        tg.launch(twice, dim=4, inputs=[x.astype(np.float32), y.astype(np.float32)])


def test_cached_kernel_facts_need_no_lowering(tmp_path):
    """A fresh process reads a cached kernel's tid() facts from the direct cache's manifest."""
    mod = tmp_path / "cached_facts_mod.py"
    mod.write_text(textwrap.dedent("""
        import tapegrad as tg

        @tg.kernel
        def k(x: tg.array[float], y: tg.array[float]):
            i = tg.tid()
            y[i] = x[i] + 1.0
    """))
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import sys
        import tapegrad as tg
        from tapegrad.lang import facts
        from cached_facts_mod import k
        if sys.argv[1] == "build":
            tg.launch(k, dim=2, inputs=[tg.zeros(2), tg.zeros(2)])
        else:
            acc = facts.tid_accesses(k)
            assert k._ir is None, "lowered"
            assert len(acc) == 2, acc
            try:
                tg.launch(k, dim=5, inputs=[tg.zeros(2), tg.zeros(2)])
            except ValueError as e:
                assert "length 2" in str(e), e
            else:
                raise SystemExit("accepted")
            assert k._ir is None, "lowered"
            try:
                import jax.numpy as jnp
            except ImportError:
                pass
            else:                 # jax_kernel's grid check reads the same facts: still no lowering
                out = tg.jax_kernel(k)(jnp.zeros(2, dtype=jnp.float32))[0]
                assert float(out.sum()) == 2.0, out
                try:
                    tg.jax_kernel(k, launch_dims=3)(jnp.zeros(2, dtype=jnp.float32))
                except ValueError as e:
                    assert "length 2" in str(e), e
                else:
                    raise SystemExit("jax_kernel accepted")
                assert k._ir is None, "jax_kernel lowered"
        print("ok")
    """))
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               TAPEGRAD_CACHE=str(tmp_path / "cache"))
    for step in ("build", "check"):
        r = subprocess.run([sys.executable, str(script), step], capture_output=True, text=True, timeout=300, env=env,
                           cwd=tmp_path)
        assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


@pytest.mark.torch
def test_torch_op_refuses_a_grid_past_its_arrays():
    import torch
    op = tg.torch_op(twice, launch_dims=lambda x: 2 * x.shape[0])
    with pytest.raises(ValueError, match="length 3"):
        op(torch.ones(3))
    assert torch.equal(tg.torch_op(twice)(torch.ones(3)), torch.full((3,), 2.0))


# --------------------------------------------------------------------------------------- 2. sizes

@pytest.mark.parametrize("make", [
    lambda: tg.zeros(2 ** 61, dtype=tg.float64),                 # 2^64 bytes: wrapped to a 64-byte buffer
    lambda: tg.zeros((2 ** 31, 2 ** 31, 4), dtype=tg.float64),
    lambda: tg.empty(2 ** 60, dtype=tg.vec4),
    lambda: tg.zeros((0, 2 ** 62, 8), dtype=tg.float64),         # empty, but its strides overflow
    lambda: tg.zeros(2 ** 64),
    lambda: tg.zeros(-1),
    lambda: tg.zeros((3, -2)),
    lambda: tg.array(ptr=64, shape=(2 ** 40, 2 ** 40), strides=(2 ** 43, 8), dtype=tg.float64),
    lambda: tg.array(ptr=64, shape=(4,), strides=(2 ** 63,), dtype=tg.float64),
    lambda: tg.zeros(3).reshape((2 ** 62, 0)),
], ids=["2^61_f64", "3d_product", "vec4", "empty_strides", "2^64_dim", "negative", "negative_2d", "ptr_extent",
        "ptr_stride", "reshape"])
def test_sizes_that_overflow_are_refused(make):
    with pytest.raises(ValueError):
        make()


def test_size_limits_at_the_allocators():
    from tapegrad import storage
    with pytest.raises(ValueError, match="cannot allocate"):
        storage.HostBuffer(2 ** 64)
    with pytest.raises(ValueError, match="cannot allocate"):
        storage.alloc(tg.get_device("cpu"), -8)
    assert storage.contiguous_strides((2, 3), 8) == (24, 8)
    with pytest.raises((MemoryError, ValueError)):
        tg.zeros(2 ** 62, dtype=tg.uint8)                         # fits int64: the allocator says no


# ----------------------------------------------------------------------------- 3. adjoint buffers

@pytest.mark.parametrize("repeats", [1, 4])
def test_adjoint_buffer_smaller_than_its_array_is_refused(device, repeats):
    x = tg.array(np.arange(8.0), dtype=tg.float64, device=device)
    y = tg.zeros(8, dtype=tg.float64, device=device)
    gx, gy = tg.zeros(8, dtype=tg.float64, device=device), tg.ones(8, dtype=tg.float64, device=device)
    _launch_n(repeats, sq, dim=8, inputs=[x, y], adjoint=True, adj_inputs=[gx, gy], adj_outputs=[])
    assert np.allclose(gx.numpy(), repeats * 2.0 * np.arange(8.0))
    for bad in (tg.zeros(2, dtype=tg.float64, device=device), tg.zeros((8, 1), dtype=tg.float64, device=device)):
        with pytest.raises((ValueError, TypeError)) as err:
            tg.launch(sq, dim=8, inputs=[x, y], adjoint=True, adj_inputs=[bad, gy], adj_outputs=[])
        assert "'x'" in str(err.value)
    small = tg.zeros(2, dtype=tg.float64, device=device)
    with pytest.raises(ValueError, match=r"adjoint buffer of kernel .* \('y'\) has shape \(2,\), its array has "
                                         r"shape \(8,\)"):
        tg.launch(sq, dim=8, inputs=[x, y], adjoint=True, adj_inputs=[gx, small], adj_outputs=[])


def _run_script(tmp_path, body):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TAPEGRAD_CACHE=str(tmp_path / "cache")))


def test_short_adjoint_buffer_in_a_fresh_process_raises_instead_of_aborting(tmp_path):
    """The old code ran the adjoint into a 2-element buffer (``free(): invalid next size``, SIGABRT)."""
    r = _run_script(tmp_path, """
        import numpy as np
        import tapegrad as tg

        @tg.kernel
        def sq(x: tg.array[tg.float64], y: tg.array[tg.float64]):
            i = tg.tid()
            y[i] = x[i] * x[i]

        x, y = tg.array(np.arange(64.0), dtype=tg.float64), tg.zeros(64, dtype=tg.float64)
        for k in range(5):
            try:
                tg.launch(sq, dim=64, inputs=[x, y], adjoint=True,
                          adj_inputs=[tg.zeros(2, dtype=tg.float64), tg.ones(64, dtype=tg.float64)], adj_outputs=[])
            except ValueError:
                pass
            else:
                raise SystemExit("accepted")
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr)


# --------------------------------------------------------------------------- 4. foreign storage

@pytest.mark.torch
@pytest.mark.parametrize("repeats", [1, 4])
def test_torch_storage_reallocated_under_a_view_is_refused(repeats):
    import torch
    t, u = torch.arange(1000, dtype=torch.float32), torch.zeros(1000)
    v, w = tg.from_torch(t), tg.from_torch(u)
    _launch_n(repeats, twice, dim=1000, inputs=[v, w])
    assert torch.equal(u, 2 * torch.arange(1000.0))
    head = v[:10]                                      # a view of the view: the same storage
    t.resize_(10 ** 6)                                 # torch moves the data; v's memory is freed
    for args in ([v, w], [w, v]):
        with pytest.raises(RuntimeError, match=r"argument \d \('[xy]'\): the torch tensor this array views was "
                                               "reallocated or freed"):
            tg.launch(twice, dim=1000, inputs=args)
    with pytest.raises(RuntimeError, match="reallocated or freed"):
        v.numpy()
    with pytest.raises(RuntimeError, match="reallocated or freed"):
        head.numpy()
    tg.launch(twice, dim=1000, inputs=[w, tg.from_torch(u)])   # the untouched one works
    v2 = tg.from_torch(t)                                       # converted again: fine
    tg.launch(twice, dim=1000, inputs=[w, v2])


@pytest.mark.torch
def test_torch_storage_swapped_or_freed_is_refused():
    import torch
    t = torch.ones(16)
    v = tg.from_torch(t)
    t.set_(torch.zeros(16))
    with pytest.raises(RuntimeError, match="reallocated or freed"):
        tg.launch(twice, dim=16, inputs=[v, v])
    s = torch.ones(16)
    vs = tg.from_torch(s)
    s.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError, match="reallocated or freed"):
        vs.numpy()


@pytest.mark.torch
def test_torch_resize_in_a_fresh_process_writes_nothing(tmp_path):
    """The scenario the old code ran into freed memory (heap corruption): a subprocess."""
    r = _run_script(tmp_path, """
        import torch
        import tapegrad as tg

        @tg.kernel
        def twice(x: tg.array[float], y: tg.array[float]):
            i = tg.tid()
            y[i] = 2.0 * x[i]

        others = []
        for k in range(20):
            t = torch.arange(100000, dtype=torch.float32)
            v = tg.from_torch(t)
            for _ in range(3):
                tg.launch(twice, dim=100000, inputs=[v, v])
            t.resize_(10 ** 6)
            others.append(torch.full((100000,), 7.0))
            try:
                tg.launch(twice, dim=100000, inputs=[v, v])
            except RuntimeError:
                pass
            else:
                raise SystemExit("accepted")
        assert all(bool((o == 7.0).all()) for o in others)
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr)


@pytest.mark.torch
def test_storage_check_costs_nothing_for_plain_arrays():
    a = tg.zeros(4)
    assert a._storage_check is None and type(a.descriptor()) is tg.types.ArrayDesc


@pytest.mark.paddle
def test_paddle_cleared_storage_is_refused():
    import paddle
    t, u = paddle.arange(100, dtype="float32"), paddle.zeros([100], dtype="float32")
    v, w = tg.from_paddle(t), tg.from_paddle(u)
    _launch_n(3, twice, dim=100, inputs=[v, w])
    assert np.allclose(u.numpy(), 2 * np.arange(100.0))
    t._clear_data()
    with pytest.raises(RuntimeError, match=r"\('x'\): the paddle tensor this array views was reallocated or freed"):
        tg.launch(twice, dim=100, inputs=[v, w])
    with pytest.raises(RuntimeError, match="reallocated or freed"):
        v.numpy()


@pytest.mark.jax
def test_jax_array_deleted_under_a_view_is_refused_at_use(tmp_path):
    """``x.delete()`` under a DLPack import aborted inside jaxlib: a subprocess."""
    r = _run_script(tmp_path, """
        import numpy as np
        import jax.numpy as jnp
        import tapegrad as tg

        @tg.kernel
        def twice(x: tg.array[float], y: tg.array[float]):
            i = tg.tid()
            y[i] = 2.0 * x[i]

        x = jnp.arange(100, dtype=jnp.float32)
        v, out = tg.from_jax(x), tg.zeros(100)
        for _ in range(3):
            tg.launch(twice, dim=100, inputs=[v, out])
        assert np.allclose(out.numpy(), 2 * np.arange(100.0))
        x.delete()
        for use in (lambda: tg.launch(twice, dim=100, inputs=[v, out]), v.numpy):
            try:
                use()
            except RuntimeError as e:
                assert "JAX array this array views was reallocated or freed" in str(e), e
            else:
                raise SystemExit("accepted")
        y = jnp.ones(100, dtype=jnp.float32)
        tg.launch(twice, dim=100, inputs=[tg.from_jax(y), out])     # a live one still works
        assert np.allclose(out.numpy(), 2.0)
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


@pytest.mark.cuda
@pytest.mark.torch
def test_torch_cuda_storage_reallocated_under_a_view_is_refused():
    import torch
    t, u = torch.arange(1000, dtype=torch.float32, device="cuda"), torch.zeros(1000, device="cuda")
    v, w = tg.from_torch(t), tg.from_torch(u)
    _launch_n(4, twice, dim=1000, inputs=[v, w])
    torch.cuda.synchronize()
    assert torch.equal(u, 2 * torch.arange(1000.0, device="cuda"))
    t.resize_(10 ** 6)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="reallocated or freed"):
            tg.launch(twice, dim=1000, inputs=[w, v])
    tg.launch(twice, dim=1000, inputs=[tg.from_torch(t)[:1000], w])


@pytest.mark.cuda
def test_cuda_grid_and_adjoint_checks_on_the_native_path():
    a, b = tg.ones(3, device="cuda:0"), tg.zeros(3, device="cuda:0")
    _launch_n(4, twice, dim=3, inputs=[a, b])
    with pytest.raises(ValueError, match="length 3"):
        tg.launch(twice, dim=4, inputs=[a, b])
    x = tg.ones(8, dtype=tg.float64, device="cuda:0")
    y = tg.zeros(8, dtype=tg.float64, device="cuda:0")
    g = tg.ones(8, dtype=tg.float64, device="cuda:0")
    _launch_n(4, sq, dim=8, inputs=[x, y], adjoint=True, adj_inputs=[tg.zeros_like(x), g], adj_outputs=[])
    with pytest.raises(ValueError, match="adjoint buffer"):
        tg.launch(sq, dim=8, inputs=[x, y], adjoint=True, adj_inputs=[tg.zeros(2, dtype=tg.float64, device="cuda:0"),
                                                                       g], adj_outputs=[])


class _Iface:
    """A CPU object whose ``__array_interface__`` claims a layout past int64."""

    def __init__(self, shape, strides):
        self.__array_interface__ = {"version": 3, "shape": shape, "typestr": "<f4", "data": (4096, False),
                                    "strides": strides}


@pytest.mark.parametrize("shape,strides", [((2 ** 63,), None), ((2 ** 62,), (8,)), ((3,), (2 ** 64,))])
def test_foreign_layouts_past_int64_are_refused_at_launch(shape, strides):
    with pytest.raises(ValueError, match=r"argument 0 \('x'\): shape"):
        tg.launch(twice_guarded, dim=3, inputs=[_Iface(shape, strides), np.zeros(3, np.float32)])
