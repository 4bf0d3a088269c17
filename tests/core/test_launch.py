"""launch(): argument kinds, adjoint launches and every error naming its argument (R1, R27)."""
import numpy as np
import pytest

import tapegrad as tg


@pytest.fixture(autouse=True)
def _default_cpu():
    with tg.ScopedDevice("cpu"):
        yield


@tg.kernel
def axpy(x: tg.array[float], y: tg.array[float], a: float):
    i = tg.tid()
    y[i] = a * x[i] + y[i]


@tg.kernel
def shift(v: tg.array[tg.vec3], d: tg.vec3, n: int, out: tg.array[tg.vec3]):
    i = tg.tid()
    out[i] = v[i] + d * float(n)


@tg.kernel
def grid2(out: tg.array2d[tg.int32]):
    i, j = tg.tid()
    out[i, j] = i * 10 + j


@tg.kernel(enable_backward=False)
def fwd_only(x: tg.array[float]):
    i = tg.tid()
    x[i] = 1.0


@tg.struct
class Affine:
    scale: float
    offset: float


@tg.kernel
def affine(p: Affine, x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = p.scale * x[i] + p.offset


def test_numpy_arrays_are_written_in_place():
    x = np.arange(5, dtype=np.float32)
    y = np.ones(5, dtype=np.float32)
    tg.launch(axpy, dim=5, inputs=[x, y, 2.0])
    assert y.tolist() == [1, 3, 5, 7, 9]


def test_device_is_inferred_from_arrays_and_foreign_objects():
    y = np.zeros(3, dtype=np.float32)
    tg.launch(axpy, dim=3, inputs=[np.ones(3, np.float32), y, 1.0])   # no device=: numpy -> cpu
    assert y.tolist() == [1, 1, 1]


def test_vector_int_and_struct_arguments():
    v = tg.array(np.zeros((4, 3), np.float32), dtype=tg.vec3)
    out = tg.zeros(4, dtype=tg.vec3)
    tg.launch(shift, dim=4, inputs=[v, (1.0, 2.0, 3.0), 2], outputs=[out])
    assert out.numpy()[0].tolist() == [2, 4, 6]
    y = tg.zeros(3)
    tg.launch(affine, dim=3, inputs=[Affine(scale=2.0, offset=1.0), tg.ones(3), y])
    assert y.numpy().tolist() == [3, 3, 3]
    tg.launch(affine, dim=3, inputs=[{"scale": 0.0, "offset": 5.0}, tg.ones(3), y])
    assert y.numpy().tolist() == [5, 5, 5]


def test_multi_dimensional_grid():
    out = tg.zeros((3, 4), dtype=tg.int32)
    tg.launch(grid2, dim=(3, 4), inputs=[out])
    assert out.numpy()[2, 3] == 23 and out.numpy()[1, 0] == 10


def test_adjoint_with_explicit_buffers_and_grad_fallback():
    x = tg.array(np.arange(4, dtype=np.float32), requires_grad=True)
    y = tg.zeros(4, requires_grad=True)
    y.grad.fill_(1.0)
    tg.launch(axpy, dim=4, inputs=[x, y, 3.0], adjoint=True)               # .grad buffers
    assert x.grad.numpy().tolist() == [3.0] * 4
    # y is read and written in place (y = 3x + y): the write consumes y.grad and the read gives
    # it back, d(y_old) = d(y_new) = 1 (Warp's final-write-wins adjoint; it was 2.0, counted twice)
    assert y.grad.numpy().tolist() == [1.0] * 4
    adj_x = tg.zeros(4)
    y.grad.fill_(1.0)
    tg.launch(axpy, dim=4, inputs=[x, y, 3.0], adjoint=True,
              adj_inputs=[adj_x, None, None], adj_outputs=[])
    assert adj_x.numpy().tolist() == [3.0] * 4


def test_zero_sized_launch_is_a_no_op():
    tg.launch(axpy, dim=0, inputs=[tg.zeros(0), tg.zeros(0), 1.0])


@pytest.mark.parametrize("inputs,exc,match", [
    (lambda: [tg.zeros(3), tg.zeros(3)], TypeError, r"takes 3 arguments \(x, y, a\), got 2"),
    (lambda: [tg.zeros(3, dtype=tg.float64), tg.zeros(3), 1.0], TypeError,
     r"argument 0 \('x'\): expected an array of tapegrad.float32, got tapegrad.float64"),
    (lambda: [tg.zeros((3, 1)), tg.zeros(3), 1.0], TypeError, r"argument 0 \('x'\): expected a 1-D array, got 2-D"),
    (lambda: [tg.zeros(3), tg.zeros(3), "two"], TypeError, r"argument 2 \('a'\)"),
    (lambda: [tg.zeros(3), tg.zeros(3), [1.0, 2.0]], TypeError, r"argument 2 \('a'\): expected a scalar"),
    (lambda: [np.zeros(3, np.float64), tg.zeros(3), 1.0], TypeError,
     r"argument 0 \('x'\): expected an array of tapegrad.float32"),
    (lambda: ["not an array", tg.zeros(3), 1.0], TypeError, r"argument 0 \('x'\): expected an array"),
])
def test_argument_errors_name_the_argument(inputs, exc, match):
    with pytest.raises(exc, match=match):
        tg.launch(axpy, dim=3, inputs=inputs())


def test_other_errors():
    with pytest.raises(TypeError, match="@tg.kernel"):
        tg.launch(lambda: None, dim=1)
    with pytest.raises(ValueError, match="dim"):
        tg.launch(axpy, dim=(1, 2, 3, 4, 5), inputs=[tg.zeros(3), tg.zeros(3), 1.0])
    with pytest.raises(TypeError, match="dim"):
        tg.launch(axpy, dim="3", inputs=[tg.zeros(3), tg.zeros(3), 1.0])
    with pytest.raises(TypeError, match=r"argument 1 \('d'\): expected tapegrad.vec3"):
        tg.launch(shift, dim=1, inputs=[tg.zeros(1, dtype=tg.vec3), (1.0, 2.0), 1],
                  outputs=[tg.zeros(1, dtype=tg.vec3)])
    with pytest.raises(TypeError, match=r"argument 2 \('n'\): expected an integer"):
        tg.launch(shift, dim=1, inputs=[tg.zeros(1, dtype=tg.vec3), (1.0, 2.0, 3.0), 1.5],
                  outputs=[tg.zeros(1, dtype=tg.vec3)])
    with pytest.raises(TypeError, match="Affine struct"):
        tg.launch(affine, dim=1, inputs=[3.0, tg.zeros(1), tg.zeros(1)])
    with pytest.raises(RuntimeError, match="enable_backward=False"):
        tg.launch(fwd_only, dim=1, inputs=[tg.zeros(1)], adjoint=True)
    with pytest.raises(TypeError, match="adj_inputs/adj_outputs"):
        tg.launch(axpy, dim=1, inputs=[tg.zeros(1), tg.zeros(1), 1.0], adjoint=True, adj_inputs=[None])


def test_read_only_arrays_refuse_kernel_writes():
    ro = np.zeros(3, np.float32)
    ro.setflags(write=False)
    y = tg.array(ro, copy=False)
    assert y.readonly
    with pytest.raises(RuntimeError, match=r"argument 1 \('y'\).*read-only"):
        tg.launch(axpy, dim=3, inputs=[tg.zeros(3), y, 1.0])


@pytest.mark.cuda
def test_device_mismatch_names_both_devices():
    with pytest.raises(RuntimeError, match=r"argument 0 \('x'\).*cpu.*cuda:0"):
        tg.launch(axpy, dim=3, inputs=[tg.zeros(3, device="cpu"), tg.zeros(3, device="cuda:0"), 1.0],
                  device="cuda:0")
    with pytest.raises(RuntimeError, match="device"):
        tg.launch(axpy, dim=3, inputs=[np.zeros(3, np.float32), tg.zeros(3, device="cuda:0"), 1.0],
                  device="cuda:0")


def test_silent_acceptances_are_errors_naming_the_argument():
    """Issue 14: a string for a float, a null array (None) indexed by tid() unguarded, and grids
    whose thread count overflows are clear errors, not conversions or crashes."""
    @tg.kernel
    def put(x: tg.array[float], s: float):
        i = tg.tid()
        x[i] = s

    a = tg.zeros(4, device="cpu")
    with pytest.raises(TypeError, match=r"argument 1 \('s'\): expected a scalar of .*float32, got '2.0'"):
        tg.launch(put, dim=4, inputs=[a, "2.0"])
    with pytest.raises(TypeError, match=r"argument 1 \('s'\): expected a scalar .* got None"):
        tg.launch(put, dim=4, inputs=[a, None])
    # None for an array is Warp's null array (no memory): a kernel writing it untested is refused
    with pytest.raises(TypeError, match=r"argument 0 \('x'\): got None \(Warp's null array"):
        tg.launch(put, dim=4, inputs=[None, 1.0])
    for dim in ((2 ** 32, 2 ** 32), 2 ** 63, (2 ** 62, 2, 2)):   # past int64 (tests/core/test_large_launch.py)
        with pytest.raises(ValueError, match=r"launch: dim .*over 9223372036854775807|at most 9223372036854775807"):
            tg.launch(put, dim=dim, inputs=[a, 1.0])
    assert a.numpy().tolist() == [0.0, 0.0, 0.0, 0.0]
    tg.launch(put, dim=4, inputs=[a, 2.0])      # adjoint launches still take None for "no gradient"
    tg.launch(put, dim=4, inputs=[a, 2.0], adjoint=True, adj_inputs=[None, 0.0])
