"""Issue 28 (arrays): Warp semantics its own array tests pin — None passed for an array parameter
is a null array (``if not a:`` in the kernel, no gradient; refused where the kernel would
dereference it untested);
``Tape.backward(loss=..., grads=...)`` seeds both; an object exposing both array interfaces is
host data when asked for on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def scaled_square(w: tg.array(dtype=tg.float64), x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    s = tg.float64(1.0)
    if w:                       # a null array is false: the optional weight is skipped
        s = w[i]
    y[i] = s * x[i] * x[i]


@tg.kernel
def truth_values(a: tg.array(dtype=float), b: tg.array(dtype=float), out: tg.array(dtype=tg.int32)):
    if not a:
        out[0] = 1
    if b:
        out[1] = 1
    out[2] = a.shape[0]


def test_none_is_a_null_array_in_kernels(device):
    out = tg.zeros(3, dtype=tg.int32, device=device)
    tg.launch(truth_values, dim=1, inputs=[None, tg.zeros(8, dtype=float, device=device), out], device=device)
    assert out.numpy().tolist() == [1, 1, 0]


def test_null_array_gradients_are_exact(device):
    x = tg.array([1.5, -2.0, 3.0], dtype=tg.float64, device=device, requires_grad=True)
    w = tg.array([2.0, 0.5, -1.0], dtype=tg.float64, device=device, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, device=device, requires_grad=True)
    for weight, scale in ((None, np.ones(3)), (w, w.numpy())):
        x.grad.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(scaled_square, dim=3, inputs=[weight, x], outputs=[y], device=device)
        tape.backward(grads={y: np.ones(3)})
        xs = x.numpy()
        np.testing.assert_array_equal(y.numpy(), scale * xs * xs)
        np.testing.assert_array_equal(x.grad.numpy(), 2.0 * scale * xs)
    np.testing.assert_array_equal(w.grad.numpy(), x.numpy() ** 2)


def test_recorded_launch_takes_none_as_tg_launch_does():
    x = tg.array([1.0, 2.0], dtype=tg.float64)
    y = tg.zeros(2, dtype=tg.float64)
    cmd = tg.launch(scaled_square, dim=2, inputs=[None, x], outputs=[y], record_cmd=True)
    cmd.launch()
    assert y.numpy().tolist() == [1.0, 4.0]
    fresh = tg.Launch(scaled_square, "cpu")   # an array never set is still refused
    fresh.set_dim(2)
    with pytest.raises(ValueError, match="has no array set"):
        fresh.launch()


@tg.kernel
def reads_first(a: tg.array(dtype=float), out: tg.array(dtype=float)):
    out[0] = a[0]


@tg.func
def first_of(a: tg.array(dtype=float)):
    return a[0]


@tg.kernel
def reads_through_a_function(a: tg.array(dtype=float), out: tg.array(dtype=float)):
    out[0] = first_of(a)


@tg.kernel
def reads_through_a_local_and_a_view(m: tg.array(dtype=float, ndim=2), out: tg.array(dtype=float)):
    b = m
    row = b[0]
    out[0] = row[1]


@tg.func
def first_or_zero(a: tg.array(dtype=float)):
    if a:
        return a[0]
    return 0.0


@tg.kernel
def guarded_in_a_function(a: tg.array(dtype=float), out: tg.array(dtype=float)):
    out[0] = first_or_zero(a) + 1.0


@pytest.mark.parametrize("mode", ["release", "debug"])
def test_a_null_array_the_kernel_dereferences_untested_is_refused(mode):
    """None for an array whose elements the kernel loads or stores without ever testing it would
    dereference a null pointer (the process died of SIGSEGV): the launch refuses it, naming the
    argument, whatever the index (a constant one escapes the grid check), through locals, views
    and functions; a kernel that tests the array (here inside a function) takes None."""
    old = tg.config.mode
    tg.config.mode = mode
    try:
        for kernel, args in ((reads_first, [None, tg.zeros(1)]), (reads_through_a_function, [None, tg.zeros(1)]),
                             (reads_through_a_local_and_a_view, [None, tg.zeros(1)]),
                             (truth_values, [tg.zeros(2), tg.zeros(2), None])):
            with pytest.raises(TypeError, match=r"argument \d \('\w+'\): got None \(Warp's null array, no memory\), "
                                                r"but the kernel loads or stores its elements without testing it"):
                tg.launch(kernel, dim=1, inputs=args, device="cpu")
        out = tg.zeros(1)
        tg.launch(guarded_in_a_function, dim=1, inputs=[None, out], device="cpu")
        assert out.numpy().tolist() == [1.0]
        tg.launch(guarded_in_a_function, dim=1, inputs=[tg.array([4.0], dtype=float), out], device="cpu")
        assert out.numpy().tolist() == [5.0]
    finally:
        tg.config.mode = old


@tg.kernel
def add_into(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    x[i] += y[i]


@tg.kernel
def square_into(x: tg.array(dtype=tg.float64), z: tg.array(dtype=tg.float64)):
    z[0] = x[0] * x[0]


def test_backward_with_loss_and_grads_seeds_both():
    v = tg.ones(3, dtype=tg.float64, requires_grad=True)
    u = tg.clone(v, requires_grad=True)
    x = tg.array([3.0], dtype=tg.float64, requires_grad=True)
    z = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(add_into, dim=3, inputs=[v, u])
        tg.launch(square_into, dim=1, inputs=[x, z])
    tape.backward(loss=z, grads={v: tg.full(3, 2.0, dtype=tg.float64)})
    assert z.numpy().tolist() == [9.0] and v.numpy().tolist() == [2.0] * 3
    assert u.grad.numpy().tolist() == [2.0] * 3         # from grads=
    assert x.grad.numpy().tolist() == [6.0]             # from loss=: d(x^2)/dx
    # an array named in both takes its grads= value (seeded after the loss), as in Warp
    x.grad.zero_()
    tape.backward(loss=z, grads={z: tg.array([0.5], dtype=tg.float64)})
    assert x.grad.numpy().tolist() == [3.0]


class BothInterfaces:
    """Warp's test object: a NumPy array exposed through both interfaces."""

    def __init__(self, data, npdtype):
        self.data = np.array(data, dtype=npdtype)
        self.__array_interface__ = self.data.__array_interface__
        self.__cuda_array_interface__ = self.data.__array_interface__


@pytest.mark.parametrize("dtype, values, expected", [
    (tg.int8, (1, 2, 3), [1, 2, 3]), (tg.float32, (1, 2, 3), [1, 2, 3]),
    (tg.vec3, (1, 2, 3), [[1, 2, 3]]), (tg.mat22, (1, 2, 3, 4), [[[1, 2], [3, 4]]])])
def test_object_with_both_interfaces_is_host_data_on_the_cpu(dtype, values, expected):
    src = BothInterfaces(values, np.int8 if dtype is tg.int8 else np.float32)
    a = tg.array(src, dtype=dtype, device="cpu")
    assert a.device.is_cpu and a.ptr != src.data.ctypes.data     # copied, as Warp's default copy=True
    assert a.numpy().tolist() == expected
    alias = tg.array(src, dtype=dtype, device="cpu", copy=False)
    assert alias.ptr == src.data.ctypes.data


@tg.struct
class Holder:
    a: tg.array(dtype=tg.float64)
    scale: tg.float64


@tg.struct
class Outer:
    inner: Holder
    b: tg.array(dtype=tg.float64)


@tg.func
def third_of(h: Holder):
    return h.a[3] * h.scale


@tg.kernel
def reads_a_struct_field(h: Holder, out: tg.array(dtype=tg.float64)):
    out[0] = third_of(h)


@tg.kernel
def reads_a_nested_field(o: Outer, out: tg.array(dtype=tg.float64)):
    v = o.inner
    out[0] = v.a[1]
    if o.b:                     # tested: None allowed
        out[0] += o.b[0]


@tg.kernel
def reads_an_indexed_array(a: tg.indexedarray[tg.float64], out: tg.array(dtype=tg.float64)):
    out[0] = a[2]


def test_a_none_array_field_the_kernel_dereferences_is_refused():
    """A struct's array field left None (its default) or an indexed array without data, read at
    a constant index: the process died of SIGSEGV (the None check saw top-level parameters only).
    The launch (tg.launch, a recorded launch, an adjoint launch) refuses it naming the field; a
    tested field takes None; an adjoint buffer's None field is "no gradient"."""
    out = tg.zeros(1, dtype=tg.float64)
    h = Holder()
    h.scale = 2.0
    with pytest.raises(TypeError, match=r"argument 0 \('h'\): field h\.a is None \(Warp's null array"):
        tg.launch(reads_a_struct_field, dim=1, inputs=[h, out])
    with pytest.raises(TypeError, match=r"field h\.a is None"):
        tg.launch(reads_a_struct_field, dim=1, inputs=[h, out], adj_inputs=[Holder(), tg.zeros(1, dtype=tg.float64)],
                  adjoint=True)
    o = Outer()
    o.inner = h
    with pytest.raises(TypeError, match=r"field o\.inner\.a is None"):
        tg.launch(reads_a_nested_field, dim=1, inputs=[o, out])
    h.a = tg.array([1.0, 2.0, 3.0, 4.0], dtype=tg.float64)
    tg.launch(reads_a_nested_field, dim=1, inputs=[o, out])          # o.b None: tested
    assert out.numpy().tolist() == [2.0]
    tg.launch(reads_a_struct_field, dim=1, inputs=[h, out], adj_inputs=[Holder(), tg.ones(1, dtype=tg.float64)],
              adjoint=True)                                           # a None gradient field: no gradient
    tg.launch(reads_a_struct_field, dim=1, inputs=[h, out])
    assert out.numpy().tolist() == [8.0]
    with pytest.raises(TypeError, match=r"argument 0 \('a'\): got an indexed array without data"):
        tg.launch(reads_an_indexed_array, dim=1, inputs=[tg.indexedarray(dtype=tg.float64), out])
    # a recorded launch packs its default struct (None fields) without complaint, refuses at launch
    cmd = tg.Launch(reads_a_struct_field, "cpu", bounds=1)
    cmd.set_param_by_name("out", out)
    with pytest.raises(TypeError, match=r"field h\.a is None"):
        cmd.launch()
    cmd.set_param_by_name("h", h)
    h.a = None                    # the struct's current fields count (Warp's recorded launches)
    with pytest.raises(TypeError, match=r"field h\.a is None"):
        cmd.launch()


@tg.func
def second_of(h: Holder):
    return h.a[1]


@tg.kernel
def reads_through_built_structs(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64),
                                out: tg.array(dtype=tg.float64)):
    s = Holder()
    s.a = x                          # a struct the kernel builds, holding a parameter's array
    t = Holder(a=y, scale=2.0)
    out[0] = s.a[2] + second_of(t)


def test_a_none_array_inside_a_struct_the_kernel_builds_is_refused():
    """None passed for an array the kernel stores into a struct it builds (``s.a = x``,
    ``Holder(a=y)``) and reads back from there: the process died of SIGSEGV (the null check
    lost the array at the struct)."""
    out = tg.zeros(1, dtype=tg.float64)
    x = tg.array([1.0, 2.0, 3.0], dtype=tg.float64)
    for args, name in (([None, x, out], "x"), ([x, None, out], "y")):
        with pytest.raises(TypeError, match=rf"\('{name}'\): got None \(Warp's null array"):
            tg.launch(reads_through_built_structs, dim=1, inputs=args)
    tg.launch(reads_through_built_structs, dim=1, inputs=[x, x, out])
    assert out.numpy().tolist() == [5.0]


@tg.struct
class Nest:
    inner: Holder


@tg.kernel
def reads_element_fields(hs: tg.array(dtype=Holder), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    out[i] = hs[i].a[2] * hs[i].scale


@tg.kernel
def reads_nested_element_fields(ns: tg.array(dtype=Nest), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    n = ns[i]
    out[i] = n.inner.a[1]


@tg.kernel
def guarded_element_fields(hs: tg.array(dtype=Holder), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    h = hs[i]
    if h.a:
        out[i] = h.a[2]


def test_a_none_array_field_in_an_array_of_structs_is_refused():
    """An array of structs whose element has an array field left None, read by the kernel
    untested: the process died of SIGSEGV. The launch reads the elements and refuses, naming the
    element and field (after fast launches of good arrays too: such kernels take the checked
    path); a kernel testing the field takes it."""
    good = Holder()
    good.a = tg.array([1.0, 2.0, 3.0], dtype=tg.float64)
    good.scale = 2.0
    bad = Holder()
    out = tg.zeros(2, dtype=tg.float64)
    for _ in range(3):
        tg.launch(reads_element_fields, dim=2, inputs=[tg.array([good, good], dtype=Holder), out])
    assert out.numpy().tolist() == [6.0, 6.0]
    with pytest.raises(TypeError, match=r"argument 0 \('hs'\): element \(1,\) has field a None \(Warp's null array"):
        tg.launch(reads_element_fields, dim=2, inputs=[tg.array([good, bad], dtype=Holder), out])
    n_good, n_bad = Nest(), Nest()
    n_good.inner = good
    with pytest.raises(TypeError, match=r"element \(0,\) has field inner\.a None"):
        tg.launch(reads_nested_element_fields, dim=2, inputs=[tg.array([n_bad, n_good], dtype=Nest), out])
    out.zero_()
    tg.launch(guarded_element_fields, dim=2, inputs=[tg.array([good, bad], dtype=Holder), out])
    assert out.numpy().tolist() == [3.0, 0.0]


@pytest.mark.cuda
def test_cuda_arrays_of_structs_are_checked_again_only_after_a_write():
    """CUDA: the element check reads the elements back (a device-to-host copy, illegal while a
    graph is captured), so an array of structs that passed it is not read again until tapegrad
    writes its elements (its version moves): a launch captured in a graph after a checked one
    runs, and assigning an element with a None field is refused at the next launch."""
    dev = "cuda:0"
    good = Holder()
    good.a = tg.array([1.0, 2.0, 3.0], dtype=tg.float64, device=dev)
    good.scale = 2.0
    hs = tg.array([good, good], dtype=Holder, device=dev)
    out = tg.zeros(2, dtype=tg.float64, device=dev)
    tg.launch(reads_element_fields, dim=2, inputs=[hs, out], device=dev)    # checked here
    out.zero_()
    with tg.ScopedCapture(device=dev) as capture:
        tg.launch(reads_element_fields, dim=2, inputs=[hs, out], device=dev)
    tg.capture_launch(capture.graph)
    tg.synchronize_device(dev)
    assert out.numpy().tolist() == [6.0, 6.0]
    hs.assign(tg.array([good, Holder()], dtype=Holder, device=dev))
    with pytest.raises(TypeError, match=r"element \(1,\) has field a None"):
        tg.launch(reads_element_fields, dim=2, inputs=[hs, out], device=dev)


@tg.kernel
def reads_after_testing(a: tg.array(dtype=tg.float64), b: tg.array(dtype=tg.float64),
                            out: tg.array(dtype=tg.float64)):
    if a:
        out[0] = b[2]
    out[1] = a[2]                 # every thread reads it, tested or not


def test_an_array_read_unconditionally_is_refused_even_if_tested_elsewhere():
    """A kernel that tests the array in one place but reads it outside every branch: the test
    counted as a guard for all accesses and the unconditional read died of SIGSEGV."""
    out = tg.zeros(2, dtype=tg.float64)
    with pytest.raises(TypeError, match=r"argument 0 \('a'\): got None \(Warp's null array, no memory\), but the "
                                        r"kernel loads or stores its elements without testing it"):
        tg.launch(reads_after_testing, dim=1, inputs=[None, tg.zeros(3, dtype=tg.float64), out])
    with pytest.raises(TypeError, match=r"argument 1 \('b'\): got None"):     # b: never tested
        tg.launch(reads_after_testing, dim=1, inputs=[tg.array([1.0, 2.0, 3.0], dtype=tg.float64), None, out])
    tg.launch(reads_after_testing, dim=1, inputs=[tg.array([1.0, 2.0, 3.0], dtype=tg.float64),
                                                  tg.array([0.0, 0.0, 5.0], dtype=tg.float64), out])
    assert out.numpy().tolist() == [5.0, 3.0]
