"""Loops Warp accepts (issue 16, item 9): reversed(range(...)) with constant and runtime bounds,
runtime start/stop/step, break/continue in differentiable loops, with finite-difference adjoints."""

import numpy as np
import pytest

import tapegrad as tg

from ._lang_util import check_grad, run

F64 = tg.array(dtype=tg.float64)
pytestmark = pytest.mark.filterwarnings("ignore::tapegrad.TapeCompileWarning")   # O(n^2) replays named


@tg.kernel
def k_reversed(x: F64, n: int, out: F64, order: tg.array(dtype=int)):
    i = tg.tid()
    s = tg.float64(0.0)
    w = tg.float64(1.0)
    for k in reversed(range(n)):
        s += w * x[k]
        w = w * 0.5
    c = int(0)
    for k in reversed(range(1, n, 2)):
        order[c] = k
        c += 1
    for k in reversed(range(3)):
        s += tg.float64(k) * x[k] * x[k]
    out[i] = s


def test_reversed_range(device):
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    out, order = run(k_reversed, 1, [x, 5], [np.zeros(1), np.full(4, -1, np.int32)], device)
    w = 0.5 ** np.arange(5)
    assert out[0] == pytest.approx((w * x[::-1]).sum() + (np.arange(3) * x[:3] ** 2).sum())
    np.testing.assert_array_equal(order, [3, 1, -1, -1])
    check_grad(k_reversed, 1, [x, 5], [np.zeros(1), np.zeros(4, np.int32)], device=device)


@tg.kernel
def k_runtime_range(x: F64, a: int, b: int, step: int, out: F64):
    i = tg.tid()
    s = tg.float64(0.0)
    for k in range(a, b, step):
        if x[k] < 0.0:
            continue
        if k > 7:
            break
        s += tg.sin(x[k]) * x[k]
    j = int(0)
    while j < b:
        if x[j] > 2.5:
            break
        s += x[j] * 0.25
        j += 1
    out[i] = s


def test_runtime_range_break_continue_while():
    x = np.array([0.5, -1.0, 2.0, 0.3, 3.0, 1.5, -0.2, 0.7, 0.9, 1.1])
    for a, b, st in ((0, 10, 1), (1, 10, 3), (9, 0, -2)):
        out, = run(k_runtime_range, 1, [x, a, b, st], [np.zeros(1)])
        exp = 0.0
        for k in range(a, b, st):
            if x[k] < 0:
                continue
            if k > 7:
                break
            exp += np.sin(x[k]) * x[k]
        for j in range(max(b, 0)):
            if x[j] > 2.5:
                break
            exp += x[j] * 0.25
        assert out[0] == pytest.approx(exp)
        check_grad(k_runtime_range, 1, [x, a, b, st], [np.zeros(1)])


def test_unsupported_iteration_says_what_to_write():
    @tg.kernel
    def bad(v: tg.array(dtype=tg.vec3), out: tg.array(dtype=float)):
        for c in v[0]:
            out[0] += c

    with pytest.raises(tg.KernelError, match=r"test_lang_loops16.py:\d+.*iterate over an index instead"):
        tg.launch(bad, dim=1, inputs=[tg.zeros(1, dtype=tg.vec3), tg.zeros(1)])


@pytest.mark.parametrize("body,hint", [
    ("assert x[0] > 0.0", "expect_eq"),
    ("y = [x[0], 1.0]", "use a vector"),
    ("f = lambda v: v", "@tg.func"),
    ("y = {'a': 1.0}", "@tg.struct"),
    ("print(f'{x[0]}')", "f-strings"),
])
def test_unsupported_constructs_name_line_and_replacement(tmp_path, body, hint):
    import importlib.util
    path = tmp_path / f"bad_{abs(hash(body))}.py"
    path.write_text("import tapegrad as tg\n\n\n@tg.kernel\ndef k(x: tg.array(dtype=float)):\n"
                    f"    {body}\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(tg.KernelError) as e:
        tg.launch(mod.k, dim=1, inputs=[tg.zeros(1)])
    msg = str(e.value)
    assert f"{path.name}:6" in msg and hint in msg and "unsupported" in msg
