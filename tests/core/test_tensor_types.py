"""One registration per foreign tensor type (issue 25, item 3): a ``tensortypes.TensorType`` row.

A minimal tensor type defined here (a NumPy buffer with an optional gradient buffer, no array
protocol at all) is registered with one row and then launched directly, recorded on a tape and
differentiated, on the native launch path and on the Python path. References: NumPy in float64
and central finite differences. Also: the core names no framework (the bridges' rows carry what
the core used to special-case, such as paddle's "gpu:N" device strings).
"""
from __future__ import annotations

import io
import pathlib
import sys
import tokenize

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import GradLayoutError, tensortypes
from tapegrad.launch import fastlaunch
from tapegrad.tensortypes import TensorLayout, TensorType, register_tensor_type
from tests.core.test_fast_launch import counted, k_copy1, python_path

L = sys.modules["tapegrad.launch.core"]   # launch() and its native switch (_fast)


@pytest.fixture
def helper():
    """The native launch helper, loaded (skips when TAPEGRAD_FAST_LAUNCH=0 turns it off)."""
    for _ in range(2):   # the kernel's first launch (the Python path) registers its module
        tg.launch(k_copy1, 1, inputs=[tg.zeros(1), tg.zeros(1)])
    if L._fast is None:
        if "TAPEGRAD_FAST_LAUNCH" in (fastlaunch.error() or ""):
            pytest.skip("the native launch helper is switched off (TAPEGRAD_FAST_LAUNCH=0)")
        pytest.fail(f"the native launch helper did not load: {fastlaunch.error()}")


class Buf:
    """A minimal foreign tensor: values in a NumPy buffer, optionally a gradient ``Buf``.

    It exposes no ``__array_interface__`` and no ``__cuda_array_interface__``: only its row
    tells tapegrad how to read it."""

    def __init__(self, values, grad=None):
        self.values = np.array(values, dtype=np.float64)
        self.grad = grad
        self.version = 0

    def ptr(self):
        return self.values.ctypes.data


def _layout(b):
    return TensorLayout(tg.float64, b.values.shape, tuple(s // 8 for s in b.values.strides), tg.get_device("cpu"),
                        "buf.float64")


ROW = register_tensor_type(TensorType(
    framework="buf", classes=(Buf,), layout=_layout, layout_key=lambda b: (b.values.shape, b.values.strides),
    data_ptr=Buf.ptr, grad=lambda b: b.grad, version=lambda b: b.version))


@tg.kernel
def k_f(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * x[i]


@tg.kernel
def k_loss(y: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(loss, 0, y[i] * y[i])


X0 = np.linspace(-1.5, 2.0, 7)


def _f(x):
    return np.sin(x) * x


def _grad_ref(x):
    """d/dx sum((sin(x) x)^2), analytic, float64."""
    y = _f(x)
    return 2 * y * (np.cos(x) * x + np.sin(x))


def _run_tape(x0):
    """Forward and backward through a tape with Buf tensors passed directly; the gradients."""
    x = Buf(x0, grad=Buf(np.zeros_like(x0)))
    y = Buf(np.zeros_like(x0), grad=Buf(np.zeros_like(x0)))
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_f, len(x0), inputs=[x], outputs=[y])
        tg.launch(k_loss, len(x0), inputs=[y], outputs=[loss])
    tape.backward(loss)
    return x, y, loss, tape


def test_the_registry_finds_the_row_for_the_class_and_its_subclasses():
    class Sub(Buf):
        pass
    assert tensortypes.tensor_type_for(Buf) is ROW
    assert tensortypes.tensor_type_for(Sub) is ROW
    assert tensortypes.tensor_type_for(int) is None
    assert ROW in tensortypes.registered()


def test_a_launch_on_a_registered_type_python_path():
    x, y = Buf(X0), Buf(np.zeros_like(X0))
    with python_path():
        tg.launch(k_f, len(X0), inputs=[x], outputs=[y])   # no tapegrad array, no device=: the row's
    np.testing.assert_allclose(y.values, _f(X0), rtol=1e-15, atol=0)


def test_a_launch_on_a_registered_type_native_path(helper):
    x, y = Buf(X0), Buf(np.zeros_like(X0))
    tg.launch(k_f, len(X0), inputs=[x], outputs=[y])   # registers the kernel's module with the helper
    x2, y2 = Buf(X0 + 1), Buf(np.zeros_like(X0))
    with counted(fast=1):
        tg.launch(k_f, len(X0), inputs=[x2], outputs=[y2])
    np.testing.assert_allclose(y.values, _f(X0), rtol=1e-15, atol=0)
    np.testing.assert_allclose(y2.values, _f(X0 + 1), rtol=1e-15, atol=0)


@pytest.mark.parametrize("path", ["native", "python"])
def test_tape_gradients_reach_the_rows_gradient(path, request):
    if path == "native":
        request.getfixturevalue("helper")
    if path == "python":
        with python_path():
            x, y, loss, tape = _run_tape(X0)
    else:
        _run_tape(X0)                         # registers the modules (forward and adjoint entries)
        with counted(fast=2, adjoint=True):   # both adjoints launched by the helper
            x, y, loss, tape = _run_tape(X0)
    assert len(tape.records) == 2 and tape.records[0].inputs[0] is x
    np.testing.assert_allclose(loss.numpy(), [np.sum(_f(X0) ** 2)], rtol=1e-14)
    np.testing.assert_allclose(x.grad.values, _grad_ref(X0), rtol=1e-13, atol=1e-15)
    # the same tape over tapegrad arrays: bit-identical gradients (y's, consumed by the
    # adjoint of the write that produced y, is zero again in both)
    xa, ya = tg.array(X0, dtype=tg.float64, requires_grad=True), tg.zeros(len(X0), dtype=tg.float64,
                                                                         requires_grad=True)
    la = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    with tg.Tape() as ta:
        tg.launch(k_f, len(X0), inputs=[xa], outputs=[ya])
        tg.launch(k_loss, len(X0), inputs=[ya], outputs=[la])
    ta.backward(la)
    np.testing.assert_array_equal(x.grad.values, xa.grad.numpy())
    np.testing.assert_array_equal(y.grad.values, ya.grad.numpy())
    # central finite differences of the same forward, float64
    h, fd = 1e-6, np.zeros_like(X0)
    for k in range(len(X0)):
        e = np.zeros_like(X0)
        e[k] = h
        fd[k] = (np.sum(_f(X0 + e) ** 2) - np.sum(_f(X0 - e) ** 2)) / (2 * h)
    np.testing.assert_allclose(x.grad.values, fd, rtol=1e-7, atol=1e-9)


def test_adjoint_launch_accumulates_into_the_rows_gradient():
    x = Buf(X0, grad=Buf(np.ones_like(X0)))
    y = Buf(np.zeros_like(X0), grad=Buf(np.full_like(X0, 2.0)))
    tg.launch(k_f, len(X0), inputs=[x], outputs=[y], adjoint=True)
    np.testing.assert_allclose(x.grad.values, 1 + 2 * (np.cos(X0) * X0 + np.sin(X0)), rtol=1e-14)


def test_a_gradient_laid_out_otherwise_is_refused():
    x = Buf(X0, grad=Buf(np.zeros(len(X0) + 1)))
    y = Buf(np.zeros_like(X0))
    with pytest.raises(GradLayoutError, match=r"argument 0 \('x'\).*gradient"):
        with python_path():
            tg.launch(k_f, len(X0), inputs=[x], outputs=[y])


def test_a_wrong_dtype_is_the_packers_error():
    @tg.kernel
    def k32(x: tg.array(dtype=tg.float32)):
        x[tg.tid()] = 1.0
    with pytest.raises(TypeError, match=r"argument 0 \('x'\): cannot view a tensor of buf.float64 as tapegrad"):
        tg.launch(k32, 3, inputs=[Buf(np.zeros(3))])


def test_row_fields_are_checked():
    ok = dict(framework="t", classes=(Buf,), layout=_layout, layout_key=id, data_ptr=Buf.ptr)
    TensorType(**ok)
    with pytest.raises(TypeError, match=r"TensorType\(layout=...\): expected a callable, got int"):
        TensorType(**dict(ok, layout=3))
    with pytest.raises(TypeError, match=r"TensorType\(classes=...\)"):
        TensorType(**dict(ok, classes=[Buf]))
    with pytest.raises(ValueError, match="classes=.*match="):
        TensorType(**dict(ok, classes=()))
    with pytest.raises(TypeError, match=r"native_keys"):
        TensorType(**dict(ok, native_keys=(("a", False),) * 5, native_ptr="p"))
    with pytest.raises(TypeError, match=r"native_ptr"):
        TensorType(**dict(ok, native_keys=(("a", False),)))
    with pytest.raises(TypeError, match="register_tensor_type: expected a TensorType, got dict"):
        register_tensor_type(ok)


def test_a_predicate_row_covers_types_it_accepts():
    class Marked:
        def __init__(self, n):
            self.values = np.arange(n, dtype=np.float64)

        def ptr(self):
            return self.values.ctypes.data
    Marked._is_marked = True

    row = register_tensor_type(TensorType(
        framework="marked", match=lambda cls: getattr(cls, "_is_marked", False), layout=_layout,
        layout_key=lambda b: b.values.shape, data_ptr=lambda b: b.ptr()))
    assert tensortypes.tensor_type_for(Marked) is row
    y = Buf(np.zeros(4))
    tg.launch(k_f, 4, inputs=[Marked(4)], outputs=[y])
    np.testing.assert_allclose(y.values, _f(np.arange(4.0)), rtol=1e-15)


def test_native_layout_sources_come_from_the_row(monkeypatch):
    seen = []
    monkeypatch.setattr(fastlaunch, "register_foreign", lambda *a: seen.append(a))

    class Keyed(Buf):
        pass

    def stream(ordinal):
        return 0
    row = register_tensor_type(TensorType(
        framework="keyed", classes=(Keyed,), layout=_layout, layout_key=lambda b: b.values.shape,
        data_ptr=Buf.ptr, current_stream=stream, native_keys=(("values", False),), native_ptr="ptr"))
    assert seen == [(Keyed, (("values", False),), "ptr", stream)]
    assert tensortypes.tensor_type_for(Keyed) is row


# --------------------------------------------------------------------- no framework in the core

_FRAMEWORKS = ("torch", "paddle", "jax")


def _code_tokens(path):
    """(line, token) of the identifiers and the non-docstring, non-message string literals of a
    Python file (a string with a space in it is a message or documentation)."""
    src = path.read_text()
    out, prev = [], tokenize.NEWLINE
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type == tokenize.NAME:
            out.append((t.start[0], t.string))
        elif t.type == tokenize.STRING and prev not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT) \
                and " " not in t.string:
            out.append((t.start[0], t.string))
        if t.type not in (tokenize.COMMENT, tokenize.NL):
            prev = t.type
    return out


def test_the_core_names_no_framework():
    """Outside the table of bridges (``frameworks.py``), the scalar table's dtype-name columns
    (``types.py``) and Warp's deprecated ``jax_experimental`` alias namespace, no identifier or
    bare string literal of the core names a framework or a framework's device spelling ("gpu:N"
    was paddle's, parsed in ``launch``)."""
    root = pathlib.Path(tg.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in ("frameworks.py", "types.py"):
            continue
        if rel.startswith("jax_experimental/"):
            # Warp's deprecated module path (the name is Warp's): it binds the JAX bridge's names
            # by name, as the package face does, and imports no bridge itself
            continue
        for line, tok in _code_tokens(path):
            low = tok.lower()
            if any(f in low for f in _FRAMEWORKS) or "gpu:" in low:
                found.append(f"{rel}:{line}: {tok}")
    assert not found, found


# ----------------------------------------------------------------------------------- CUDA twin

class DevBuf:
    """A minimal CUDA tensor: device memory held by a hidden tapegrad array, no array protocol."""

    def __init__(self, values, grad=None):
        self._mem = tg.array(np.asarray(values, dtype=np.float64), dtype=tg.float64, device="cuda:0")
        self.grad = grad

    def ptr(self):
        return self._mem.ptr

    def host(self):
        return self._mem.numpy()


register_tensor_type(TensorType(
    framework="devbuf", classes=(DevBuf,),
    layout=lambda b: TensorLayout(tg.float64, b._mem.shape, (1,), b._mem.device, "devbuf.float64"),
    layout_key=lambda b: b._mem.shape, data_ptr=DevBuf.ptr, grad=lambda b: b.grad))


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["native", "python"])
def test_cuda_tape_gradients_reach_the_rows_gradient(path, request):
    if path == "native":
        request.getfixturevalue("helper")

    def run():
        x = DevBuf(X0, grad=DevBuf(np.zeros_like(X0)))
        y = DevBuf(np.zeros_like(X0), grad=DevBuf(np.zeros_like(X0)))
        loss = tg.zeros(1, dtype=tg.float64, requires_grad=True, device="cuda:0")
        with tg.Tape() as tape:
            tg.launch(k_f, len(X0), inputs=[x], outputs=[y])      # the device: the row's
            tg.launch(k_loss, len(X0), inputs=[y], outputs=[loss])
        tape.backward(loss)
        tg.synchronize_device("cuda:0")
        return x, y, loss
    if path == "python":
        with python_path():
            x, y, loss = run()
    else:
        run()
        x, y, loss = run()
    np.testing.assert_allclose(y.host(), _f(X0), rtol=1e-14)
    np.testing.assert_allclose(loss.numpy(), [np.sum(_f(X0) ** 2)], rtol=1e-13)
    np.testing.assert_allclose(x.grad.host(), _grad_ref(X0), rtol=1e-12, atol=1e-14)
