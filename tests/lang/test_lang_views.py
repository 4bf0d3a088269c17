"""Sub-array views and slices of arrays inside kernels: ``a[i]`` of a 2-D array, ``a[i, j]`` of a
3-D one, ``a[lo:hi:step, k]``; read, written, atomically updated, passed to ``@func``s, and
differentiated in reverse and forward mode (float64, against finite differences)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import autograd
from tapegrad.lang.kernel import Kernel
from tapegrad.lang.lower import Target, lower

DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.cuda)]
F64 = tg.float64


def _jacobians_agree(kernel, dim, inputs, outputs, device, fwd=True):
    """Reverse-mode (and forward-mode) Jacobians equal central finite differences."""
    fd = autograd.jacobian_fd(kernel, dim, inputs, outputs, device=device, eps=1e-6)
    rev = autograd.jacobian(kernel, dim, inputs, outputs, device=device)
    assert set(fd) == set(rev)
    for key in fd:
        np.testing.assert_allclose(rev[key], fd[key], rtol=1e-6, atol=1e-8, err_msg=f"adjoint {key}")
    if fwd:
        tan = autograd.jacobian_fwd(kernel, dim, inputs, outputs, device=device)
        for key in fd:
            np.testing.assert_allclose(tan[key], fd[key], rtol=1e-6, atol=1e-8, err_msg=f"tangent {key}")


@tg.kernel
def row_square(x: tg.array2d[F64], y: tg.array2d[F64], r: int):
    j = tg.tid()
    xr = x[r]
    yr = y[r]
    yr[j] = xr[j] * xr[j] + x[r][0]


@pytest.mark.parametrize("device", DEVICES)
def test_row_view_forward_and_gradients(device):
    rng = np.random.default_rng(1)
    xn = rng.normal(size=(3, 4))
    x = tg.array(xn, dtype=F64, device=device)
    y = tg.zeros((3, 4), dtype=F64, device=device)
    tg.launch(row_square, dim=4, inputs=[x, y, 1], device=device)
    want = np.zeros((3, 4))
    want[1] = xn[1] ** 2 + xn[1, 0]
    np.testing.assert_allclose(y.numpy(), want)
    _jacobians_agree(row_square, 4, [x], [y, -2], device)   # -2: the second row, counted from the end


@tg.func
def dot_view(a: tg.array[F64], b: tg.array[F64]) -> F64:
    s = F64(0.0)
    for k in range(a.shape[0]):
        s += a[k] * b[k]
    return s


@tg.kernel
def view_func_atomic(x: tg.array3d[F64], w: tg.array2d[F64], out: tg.array2d[F64]):
    i, j = tg.tid()
    v = x[i, j]                          # a 1-D view of a 3-D array
    plane = x[i]                         # a 2-D view
    tg.atomic_add(out[i], j, dot_view(v, w[j]) * plane[j, 0])


@pytest.mark.parametrize("device", DEVICES)
def test_views_passed_to_func_and_atomics(device):
    rng = np.random.default_rng(2)
    xn, wn = rng.normal(size=(2, 3, 4)), rng.normal(size=(3, 4))
    x = tg.array(xn, dtype=F64, device=device)
    w = tg.array(wn, dtype=F64, device=device)
    out = tg.zeros((2, 3), dtype=F64, device=device)
    tg.launch(view_func_atomic, dim=(2, 3), inputs=[x, w, out], device=device)
    want = np.einsum("ijk,jk->ij", xn, wn) * xn[:, :, 0]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    out.zero_()
    _jacobians_agree(view_func_atomic, (2, 3), [x, w], [out], device)


@tg.kernel
def strided_slice(x: tg.array2d[F64], y: tg.array[F64], lo: int, hi: int, st: int):
    i = tg.tid()
    s = x[lo:hi:st, 1]
    if i < s.shape[0]:
        y[i] = s[i] * s[s.shape[0] - 1 - i]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lo,hi,st", [(1, 6, 2), (5, 0, -2), (-100, 100, 1), (4, -100, -1), (3, 1, 1)])
def test_runtime_slice_matches_numpy_and_differentiates(device, lo, hi, st):
    rng = np.random.default_rng(3)
    xn = rng.normal(size=(6, 3))
    x = tg.array(xn, dtype=F64, device=device)
    y = tg.zeros(6, dtype=F64, device=device)
    tg.launch(strided_slice, dim=6, inputs=[x, y, lo, hi, st], device=device)
    s = xn[lo:hi:st, 1]
    want = np.zeros(6)
    want[:len(s)] = s * s[::-1]
    np.testing.assert_allclose(y.numpy(), want)
    _jacobians_agree(strided_slice, 6, [x], [y, lo, hi, st], device)


@tg.kernel
def slice_facts(a: tg.array3d[tg.int32], out: tg.array[tg.int32]):
    s = a[-1:, ::2]                      # 3-D: 1 x 2 x 4
    out[0] = s.shape[0]
    out[1] = s.shape[1]
    out[2] = s.shape[2]
    out[3] = s.shape[3]                  # past ndim: 0, as Warp's
    out[4] = s[0, 1, 3]
    t = a[:2, -3]                        # 2-D: 2 x 4
    out[5] = t.ndim
    out[6] = t[1, 2]
    u = a[1, ::-1, 2]                    # 1-D, reversed
    out[7] = u[0]
    out[8] = u.ndim


def test_slice_shapes_ndim_and_elements_match_numpy():
    an = np.arange(64, dtype=np.int32).reshape(2, 8, 4)
    out = tg.zeros(9, dtype=tg.int32)
    tg.launch(slice_facts, dim=1, inputs=[tg.array(an), out])
    s, t, u = an[-1:, ::2], an[:2, -3], an[1, ::-1, 2]
    assert out.numpy().tolist() == [*s.shape, 0, s[0, 1, 3], 2, t[1, 2], u[0], 1]


@tg.kernel
def write_through_views(a: tg.array2d[tg.int32]):
    i = tg.tid()
    a[i][1] = 100 + i
    r = a[1:, ::-1]
    tg.atomic_add(r[0], 0, 7)            # a[1, -1]


def test_store_and_atomic_through_views():
    a = tg.zeros((3, 3), dtype=tg.int32)
    tg.launch(write_through_views, dim=3, inputs=[a])
    want = np.zeros((3, 3), dtype=np.int32)
    want[:, 1] = [100, 101, 102]
    want[1, 2] += 3 * 7
    np.testing.assert_array_equal(a.numpy(), want)


def test_view_writes_count_as_writes_of_the_array():
    """The tape's overwrite checks see a store through a view as a store into the array."""
    k = Kernel(write_through_views.func, key="views_param_access")
    ir = lower(Target(k.func, "kernel", "views_param_access", (tg.array2d[tg.int32],)))
    assert ir.param_access == [(False, True)]


def test_zero_literal_step_is_a_compile_error():
    @tg.kernel
    def zero_step(a: tg.array[tg.int32]):
        v = a[0:2:0]  # noqa: F841

    with pytest.raises(tg.WarpCodegenValueError, match="Slice step cannot be zero"):
        tg.launch(zero_step, dim=1, inputs=[tg.zeros(2, dtype=tg.int32)])


def test_zero_runtime_step_stops_the_process(tmp_path):
    script = tmp_path / "zero_step.py"
    script.write_text(textwrap.dedent("""
        import tapegrad as tg

        @tg.kernel
        def k(a: tg.array[tg.int32], step: int, out: tg.array[tg.int32]):
            out[0] = a[0:2:step].shape[0]

        tg.launch(k, dim=1, inputs=[tg.zeros(2, dtype=tg.int32), 0, tg.zeros(1, dtype=tg.int32)])
        tg.synchronize()
        print("not reached")
    """))
    env = dict(os.environ, TAPEGRAD_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode != 0
    assert "slice step cannot be zero" in r.stdout + r.stderr
    assert "not reached" not in r.stdout


def test_too_many_indices_and_sub_array_assignment_are_refused():
    @tg.kernel
    def too_many(out: tg.array2d[tg.mat44]):
        out[0][2, 2] = 6.0

    with pytest.raises(tg.WarpCodegenError, match="Incorrect number of indices specified for array indexing"):
        tg.launch(too_many, dim=1, inputs=[tg.zeros((1, 1), dtype=tg.mat44)])

    @tg.kernel
    def assign_row(a: tg.array2d[float], b: tg.array[float]):
        a[0] = b

    with pytest.raises(tg.KernelError, match="cannot assign to a sub-array"):
        tg.launch(assign_row, dim=1, inputs=[tg.zeros((2, 2)), tg.zeros(2)])
