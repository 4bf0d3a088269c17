"""``tg.launch`` as the native helper's builtin (``fastlaunch.front``): the common forward call
binds and launches in C; every other call reaches the Python function unchanged.

The front must be invisible: the same results, the same errors (the Python function's own
TypeError for a bad call), the same signature, docstring and pickling. Each test checks with
``fastlaunch.stats()`` which path ran, so a front that sent everything to Python (or nothing)
fails.
"""
from __future__ import annotations

import inspect
import pickle
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import cpu_capture, recording
from tapegrad.launch import fastlaunch

L = sys.modules["tapegrad.launch.core"]


@tg.kernel
def k_axpy(a: float, x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
    i = tg.tid()
    y[i] = a * x[i] + y[i]


@pytest.fixture(autouse=True)
def front():
    if not isinstance(tg.launch, type(len)):
        pytest.skip(f"the native launch helper is not loaded: {fastlaunch.error()}")
    x, y = tg.ones(2, device="cpu"), tg.zeros(2, device="cpu")
    tg.launch(k_axpy, 2, inputs=[1.0, x, y], device="cpu")   # the kernel's first launch registers its module


def counts():
    return fastlaunch.stats(False)


def run(call, n=8):
    """``call(x, y)`` on fresh CPU arrays; returns (y, native launches, Python-path launches)."""
    x = tg.array(np.arange(n, dtype=np.float32), device="cpu")
    y = tg.full(n, 1.0, dtype=tg.float32, device="cpu")
    f0, b0 = counts()
    call(x, y)
    f1, b1 = counts()
    return y.numpy(), f1 - f0, b1 - b0


EXPECTED = 2.0 * np.arange(8, dtype=np.float32) + 1.0


@pytest.mark.parametrize("form", ["keywords", "positional", "mixed", "all_named", "defaults_given", "kwargs_dict"])
def test_every_binding_of_the_common_call_is_native(form):
    calls = {
        "keywords": lambda x, y: tg.launch(k_axpy, 8, inputs=[2.0, x], outputs=[y]),
        "positional": lambda x, y: tg.launch(k_axpy, 8, [2.0, x], [y]),
        "mixed": lambda x, y: tg.launch(k_axpy, 8, [2.0, x, y], device="cpu", stream=None),
        "all_named": lambda x, y: tg.launch(kernel=k_axpy, dim=8, inputs=[2.0, x, y], record_tape=True),
        "defaults_given": lambda x, y: tg.launch(k_axpy, 8, [2.0, x], [y], None, None, False, None, None, True, 256,
                                                 0, False, None, None, None, None, False),
        "kwargs_dict": lambda x, y: tg.launch(k_axpy, **{"dim": 8, "inputs": (2.0, x), "outputs": (y,),
                                                         "block_dim": 128, "max_blocks": 0}),
    }
    y, fast, slow = run(calls[form])
    np.testing.assert_array_equal(y, EXPECTED)
    assert (fast, slow) == (1, 0)


def python_function_calls(call):
    """How many times ``call()`` entered launch()'s Python function (a profile hook sees Python
    frames only: the front's native calls leave none)."""
    seen = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "launch" and frame.f_code.co_filename == L.__file__:
            seen.append(frame)

    sys.setprofile(prof)
    try:
        r = call()
    finally:
        sys.setprofile(None)
    return len(seen), r


def test_the_common_call_makes_no_python_frame():
    x, y = tg.ones(2, device="cpu"), tg.zeros(2, device="cpu")
    n, _ = python_function_calls(lambda: tg.launch(k_axpy, 2, inputs=[1.0, x], outputs=[y]))
    assert n == 0
    np.testing.assert_array_equal(y.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("kw", [dict(record_cmd=True), dict(adjoint=True), dict(tangent=True),
                                dict(adjoint=0), dict(adj_inputs=[None, None]), dict(tan_outputs=[None])])
def test_other_calls_reach_the_python_function(kw):
    """Switches set (even falsy ones other than False) and buffers given: the Python function,
    which makes the call as it always did."""
    x = tg.array(np.arange(2, dtype=np.float32), device="cpu", requires_grad=True)
    y = tg.zeros(2, device="cpu", requires_grad=True)
    y.grad.fill_(1.0)
    if kw.get("tangent"):
        kw = dict(kw, tan_inputs=[1.0, None], tan_outputs=[tg.zeros(2, device="cpu")])
    n, r = python_function_calls(lambda: tg.launch(k_axpy, 2, inputs=[2.0, x], outputs=[y], **kw))
    assert n == 1
    if kw.get("record_cmd"):
        assert isinstance(r, tg.Launch)
    elif kw.get("adjoint") is True:
        np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])
    elif kw.get("tangent"):
        np.testing.assert_allclose(kw["tan_outputs"][0].numpy(), [0.0, 1.0])   # d(a x + y)/da = x
    else:
        np.testing.assert_allclose(y.numpy(), [0.0, 2.0])   # a forward launch


def test_bad_calls_raise_the_python_functions_errors():
    x, y = tg.ones(2, device="cpu"), tg.zeros(2, device="cpu")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        tg.launch(k_axpy, 2, inputs=[1.0, x], outputs=[y], bogus=1)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'dim'"):
        tg.launch(k_axpy)
    with pytest.raises(TypeError, match="multiple values for argument 'kernel'"):
        tg.launch(k_axpy, 2, [1.0, x], [y], kernel=k_axpy)
    with pytest.raises(TypeError, match="takes from 2 to 18 positional arguments but 19 were given"):
        tg.launch(k_axpy, 2, [1.0, x], [y], *([None] * 15))
    with pytest.raises(TypeError, match="takes 3 arguments"):
        tg.launch(k_axpy, 2, inputs=[1.0, x], outputs=[y, y])
    with pytest.raises(TypeError, match="inputs must be a list or tuple"):
        tg.launch(k_axpy, 2, inputs=3)
    with pytest.raises(TypeError, match="expected a @tg.kernel function"):
        tg.launch(len, 2)


def test_a_keyword_string_not_interned_is_bound_by_the_python_function():
    name = "".join(["out", "puts"])   # equal to "outputs", another object
    assert name is not "outputs"      # noqa: F632
    y, fast, slow = run(lambda x, y: tg.launch(k_axpy, 8, inputs=[2.0, x], **{name: [y]}))
    np.testing.assert_array_equal(y, EXPECTED)
    assert fast + slow == 1   # one launch, on either path (the Python function calls the helper itself)


def test_signature_doc_name_and_pickle_are_launchs():
    sig = inspect.signature(tg.launch)
    assert list(sig.parameters)[:4] == ["kernel", "dim", "inputs", "outputs"]
    assert sig.parameters["block_dim"].default == 256 and sig.parameters["record_cmd"].default is False
    assert tg.launch.__doc__.startswith("Run ``kernel`` over a grid")
    assert "Raises:" in tg.launch.__doc__
    assert (tg.launch.__name__, tg.launch.__qualname__, tg.launch.__module__) == \
        ("launch", "launch", "tapegrad.launch.core")
    assert pickle.loads(pickle.dumps(tg.launch)) is tg.launch
    assert tg.launch is L.launch is sys.modules["tapegrad.launch"].launch


def test_native_launches_off_sends_the_front_to_the_python_path():
    was = L.native_launches(False)
    try:
        y, fast, slow = run(lambda x, y: tg.launch(k_axpy, 8, inputs=[2.0, x], outputs=[y]))
        assert (fast, slow) == (0, 0)   # the helper was not asked
    finally:
        L.native_launches(was)
    np.testing.assert_array_equal(y, EXPECTED)
    y, fast, slow = run(lambda x, y: tg.launch(k_axpy, 8, inputs=[2.0, x], outputs=[y]))
    assert (fast, slow) == (1, 0)


def test_a_kernel_runtime_error_raises_through_the_front():
    @tg.kernel
    def k_step(x: tg.array(dtype=tg.float32), s: int, y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        v = x[0:4:s]
        y[i] = float(len(v))

    x, y = tg.ones(4, device="cpu"), tg.zeros(1, device="cpu")
    tg.launch(k_step, 1, inputs=[x, 1], outputs=[y])
    f0 = counts()[0]
    with pytest.raises(tg.KernelRuntimeError):
        tg.launch(k_step, 1, inputs=[x, 0], outputs=[y])
    assert counts()[0] - f0 == 1   # the helper ran it; the front's Python continuation raised
    tg.launch(k_step, 1, inputs=[x, 2], outputs=[y])
    assert y.numpy()[0] == 2.0


def test_the_counts_the_helper_reads_follow_their_owners():
    """The capture and recording counts the helper reads from memory (one load each) move with
    the Python counts, and a launch under each takes the right path."""
    x, y = tg.ones(2, device="cpu"), tg.zeros(2, device="cpu")
    with tg.ScopedCapture(device="cpu") as cap:
        assert cpu_capture.OPEN_COUNT_CELL.value == cpu_capture.open_count == 1
        tg.launch(k_axpy, 2, inputs=[1.0, x], outputs=[y])
        assert np.all(y.numpy() == 0.0)   # recorded, not run
    assert cpu_capture.OPEN_COUNT_CELL.value == cpu_capture.open_count == 0
    tg.capture_launch(cap.graph)
    np.testing.assert_array_equal(y.numpy(), [1.0, 1.0])
    x = tg.ones(2, device="cpu", requires_grad=True)
    y = tg.zeros(2, device="cpu", requires_grad=True)
    tape = tg.Tape()
    with tape:
        assert recording.TAPES_ACTIVE_CELL.value == recording.tapes_active == 1
        tg.launch(k_axpy, 2, inputs=[3.0, x], outputs=[y])
    assert recording.TAPES_ACTIVE_CELL.value == recording.tapes_active == 0
    tape.backward(grads={y: tg.ones(2, device="cpu")})
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("env, builtin", [("1", True), ("0", False)])
def test_a_fresh_process_gets_the_front_at_import(tmp_path, env, builtin):
    """The helper loads at import (the front wraps launch); off (TAPEGRAD_FAST_LAUNCH=0), launch
    is the Python function. A kernel's first launch takes the Python path, its second is native."""
    script = tmp_path / "first.py"
    script.write_text(
        "import tapegrad as tg\n"
        "from tapegrad.launch import fastlaunch\n"
        "@tg.kernel\n"
        "def k(a: tg.array(dtype=tg.float32), b: tg.array(dtype=tg.float32)):\n"
        "    b[tg.tid()] = a[tg.tid()] + 1.0\n"
        "print(type(tg.launch).__name__)\n"
        "a, b = tg.ones(4, device='cpu'), tg.zeros(4, device='cpu')\n"
        "tg.launch(k, 4, inputs=[a], outputs=[b])\n"
        "tg.launch(k, 4, inputs=[b], outputs=[a])\n"
        "print(fastlaunch.stats(), a.numpy().tolist())\n")
    import os
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TAPEGRAD_FAST_LAUNCH": env})
    assert out.returncode == 0, out.stderr
    kind, stats = out.stdout.splitlines()
    assert kind == ("builtin_function_or_method" if builtin else "function")
    assert stats == ("(1, 1) [3.0, 3.0, 3.0, 3.0]" if builtin else "(0, 0) [3.0, 3.0, 3.0, 3.0]")
