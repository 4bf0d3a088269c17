"""Recorded launches (``tg.Launch``, ``tg.launch(..., record_cmd=True)``): packed once, replayed
with changed parameters; NumPy references."""
from __future__ import annotations

import ctypes
import typing

import numpy as np
import pytest

import tapegrad as tg


@tg.struct
class Scale:
    k: float


@tg.kernel
def affine(x: tg.array(dtype=float), s: float, v: tg.vec3, sc: Scale, y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = x[i] * s + v[1] + sc.k


@tg.kernel
def square(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def fill_tid(out: tg.array(dtype=tg.int32)):
    i = tg.tid()
    out[i] = i


@tg.kernel
def takes_vec(v: tg.vec3, m: tg.mat22, out: tg.array(dtype=float)):
    out[0] = v[0] + v[1] + v[2] + m[0, 0] + m[1, 1]


def _x(n=5):
    return np.linspace(-1.0, 2.0, n).astype(np.float32)


def test_record_cmd_launches_nothing_until_replayed():
    x, y = tg.array(_x()), tg.zeros(5)
    sc = Scale()
    sc.k = 0.5
    cmd = tg.launch(affine, 5, inputs=[x, 2.0, tg.vec3(0.0, 1.0, 0.0), sc], outputs=[y], record_cmd=True)
    assert isinstance(cmd, tg.Launch)
    assert np.all(y.numpy() == 0.0)
    cmd.launch()
    np.testing.assert_allclose(y.numpy(), _x() * 2.0 + 1.0 + 0.5, rtol=1e-6)


def test_set_params_repack_only_what_changes():
    x, y = tg.array(_x()), tg.zeros(5)
    cmd = tg.launch(affine, 5, inputs=[x, 2.0, tg.vec3(0.0, 1.0, 0.0), Scale()], outputs=[y], record_cmd=True)
    before = list(cmd.params)
    cmd.set_param_at_index(1, -3.0)
    cmd.set_param_by_name("v", (0.0, 4.0, 0.0))
    after = cmd.params
    assert after[1] is before[1]            # x: packed once
    assert after[2] is not before[2]        # s: re-packed
    cmd.launch()
    np.testing.assert_allclose(y.numpy(), _x() * -3.0 + 4.0, rtol=1e-6)


def test_struct_fields_are_read_at_each_replay():
    x, y = tg.array(_x()), tg.zeros(5)
    sc = Scale()
    cmd = tg.launch(affine, 5, inputs=[x, 1.0, tg.vec3(), sc], outputs=[y], record_cmd=True)
    sc.k = 7.0   # not set again: Warp's recorded launches see the instance's current fields
    cmd.launch()
    np.testing.assert_allclose(y.numpy(), _x() + 7.0, rtol=1e-6)


def test_set_dim_and_empty_launch():
    out = tg.zeros(10, dtype=tg.int32)
    cmd = tg.Launch(fill_tid, "cpu")
    cmd.launch()                       # empty grid: nothing runs, no array needed
    cmd.set_param_by_name("out", out)
    cmd.set_dim(4)
    cmd.launch()
    np.testing.assert_array_equal(out.numpy(), [0, 1, 2, 3, 0, 0, 0, 0, 0, 0])
    cmd.set_dim(10)
    cmd.launch()
    np.testing.assert_array_equal(out.numpy(), np.arange(10))


def test_from_ctype_setters():
    x, y = tg.array(_x()), tg.zeros(5)
    sc = Scale()
    sc.k = 1.5
    cmd = tg.Launch(affine, "cpu")
    cmd.set_params_from_ctypes([x.__ctype__(), 2.0, tg.vec3(0.0, 1.0, 0.0), sc.__ctype__()])
    cmd.set_param_by_name_from_ctype("y", y.__ctype__())
    cmd.set_dim(5)
    cmd.launch()
    np.testing.assert_allclose(y.numpy(), _x() * 2.0 + 1.0 + 1.5, rtol=1e-6)
    with pytest.raises(TypeError, match=r"argument 3 \('sc'\): expected a ctypes"):
        cmd.set_param_at_index_from_ctype(3, (ctypes.c_float * 3)())


def test_adjoint_launch_defaults_to_each_arrays_grad():
    x = tg.array(_x(), requires_grad=True)
    y = tg.zeros(5, requires_grad=True)
    y.grad.fill_(1.0)
    cmd = tg.Launch(square, "cpu", adjoint=True)
    cmd.set_param_by_name("x", x)
    cmd.set_param_by_name("y", y)
    cmd.set_dim(5)
    cmd.launch()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * _x(), rtol=1e-6)
    # explicit adjoint buffers take over, of another size (Warp's test_launch_cmd_adjoint_empty)
    x2 = tg.array(_x(7))
    gx, gy = tg.zeros(7), tg.full(7, 3.0)
    cmd.set_param_by_name("x", x2)
    cmd.set_param_by_name("y", tg.zeros(7))
    cmd.set_param_by_name("x", gx, adjoint=True)
    cmd.set_param_by_name("y", gy, adjoint=True)
    cmd.set_dim(7)
    cmd.launch()
    np.testing.assert_allclose(gx.numpy(), 6.0 * _x(7), rtol=1e-6)


def test_record_cmd_adjoint():
    x = tg.array(_x(), requires_grad=True)
    y = tg.zeros(5, requires_grad=True)
    y.grad.fill_(1.0)
    cmd = tg.launch(square, 5, inputs=[x, y], adj_inputs=[None, None], adjoint=True, record_cmd=True)
    cmd.launch()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * _x(), rtol=1e-6)


def test_replay_records_on_the_tape():
    x = tg.array(_x(), requires_grad=True)
    y = tg.zeros(5, requires_grad=True)
    cmd = tg.launch(square, 5, inputs=[x, y], record_cmd=True)
    with tg.Tape() as tape:
        cmd.launch()
    assert len(tape.launches) == 1
    tape.backward(grads={y: tg.array(np.ones(5, dtype=np.float32))})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * _x(), rtol=1e-6)
    assert y.version == 1   # a replay bumps the written array's version, as a launch does


def test_composite_defaults_are_zero():
    out = tg.full(1, -1.0)
    cmd = tg.Launch(takes_vec, "cpu")
    cmd.set_param_by_name("out", out)
    cmd.set_dim(1)
    cmd.launch()
    assert out.numpy()[0] == 0.0
    assert [a.label for a in takes_vec.adj.args] == ["v", "m", "out"]


def test_scalar_for_a_composite_parameter_is_refused():
    out = tg.zeros(1)
    for value in (123, 1.5, np.float32(1.5), True):
        with pytest.raises(tg.LaunchArgumentError, match=r"argument 'v' expects vec3f but got a single value"):
            tg.launch(takes_vec, 1, inputs=[value, tg.mat22(), out])
    with pytest.raises(RuntimeError, match=r"argument 'm' expects mat22f but got a single value"):
        tg.launch(takes_vec, 1, inputs=[tg.vec3(), 2.0, out])
    with pytest.raises(ValueError, match=r"Failed to convert argument for param v to vec3f"):
        tg.launch(takes_vec, 1, inputs=[None, tg.mat22(), out])
    cmd = tg.Launch(takes_vec, "cpu")
    with pytest.raises(RuntimeError, match=r"argument 'v' expects vec3f but got a single value"):
        cmd.set_param_by_name("v", 123)
    tg.launch(takes_vec, 1, inputs=[np.array([1.0, 2.0, 3.0]), ((1.0, 0.0), (0.0, 1.0)), out])
    assert out.numpy()[0] == 8.0


def test_bad_use_names_the_problem():
    cmd = tg.Launch(fill_tid, "cpu")
    with pytest.raises(ValueError, match="Argument 'nope' not found in kernel"):
        cmd.set_param_by_name("nope", 1)
    with pytest.raises(IndexError, match="has 1 parameters"):
        cmd.set_param_at_index(3, 1)
    with pytest.raises(ValueError, match="forward launch"):
        cmd.set_param_at_index(0, tg.zeros(1, dtype=tg.int32), adjoint=True)
    cmd.set_dim(3)
    with pytest.raises(ValueError, match=r"argument 0 \('out'\) has no array set"):
        cmd.launch()
    cmd.set_param_by_name("out", tg.zeros(2, dtype=tg.int32))
    with pytest.raises(ValueError):   # the grid overruns an array indexed by tid() unguarded
        cmd.launch()
    with pytest.raises(TypeError, match="params"):
        tg.Launch(fill_tid, "cpu", params=[])


def test_replay_rechecks_after_an_array_changes():
    out = tg.zeros(4, dtype=tg.int32)
    cmd = tg.launch(fill_tid, 4, outputs=[out], record_cmd=True)
    cmd.launch()
    cmd.launch()   # the checked replay
    assert out.version == 2
    cmd.set_param_at_index(0, tg.zeros(2, dtype=tg.int32))
    with pytest.raises(ValueError):
        cmd.launch()
    ro = np.zeros(4, dtype=np.int32)
    ro.flags.writeable = False
    cmd.set_param_at_index(0, ro)
    with pytest.raises(RuntimeError, match="read-only"):
        cmd.launch()


@pytest.mark.cuda
def test_cuda_replay_and_adjoint():
    x = tg.array(_x(), device="cuda:0", requires_grad=True)
    y = tg.zeros(5, device="cuda:0", requires_grad=True)
    cmd = tg.launch(square, 5, inputs=[x, y], record_cmd=True)
    cmd.launch()
    np.testing.assert_allclose(y.numpy(), _x() ** 2, rtol=1e-6)
    x2 = tg.array(_x() * 2.0, device="cuda:0")
    cmd.set_param_by_name("x", x2)
    cmd.launch(stream=tg.get_device("cuda:0").stream)
    np.testing.assert_allclose(y.numpy(), (_x() * 2.0) ** 2, rtol=1e-6)
    y.grad.fill_(1.0)
    adj = tg.launch(square, 5, inputs=[x, y], adjoint=True, record_cmd=True)
    adj.launch()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * _x(), rtol=1e-6)
    out = tg.zeros(6, dtype=tg.int32, device="cuda:0")
    c = tg.Launch(fill_tid, "cuda:0")
    c.set_param_by_name("out", out)
    c.set_dim(3)
    c.launch()
    np.testing.assert_array_equal(out.numpy(), [0, 1, 2, 0, 0, 0])


def test_replay_inside_a_cpu_capture_is_captured():
    out = tg.zeros(4, dtype=tg.int32)
    cmd = tg.launch(fill_tid, 4, outputs=[out], record_cmd=True)
    cmd.launch()          # the checked direct replay first: a capture must still record the next one
    out.zero_()
    with tg.ScopedCapture(device="cpu") as cap:
        cmd.launch()
    assert np.all(out.numpy() == 0)
    tg.capture_launch(cap.graph)
    np.testing.assert_array_equal(out.numpy(), np.arange(4))


@tg.kernel
def scale_any(x: tg.array(dtype=typing.Any), s: float):
    i = tg.tid()
    x[i] = x[i] * type(x[i])(s)


def test_record_cmd_of_a_generic_kernel_specializes():
    x = tg.array(np.arange(3, dtype=np.float64))
    cmd = tg.launch(scale_any, 3, inputs=[x, 2.0], record_cmd=True)
    cmd.launch()
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0, 4.0])
    with pytest.raises(TypeError, match="generic"):
        tg.Launch(scale_any, "cpu")
