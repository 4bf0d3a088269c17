"""The direct cache (``tapegrad/lang/direct.py``): a fresh process loads a kernel's cached binary
without lowering it, and lowers again whenever anything the lowering read has changed.

Every test runs real fresh processes on a private cache directory: one to build, then others
after editing the module, a global, a helper, a closure value... Each prints whether the
kernel was lowered and the launch's results, checked against NumPy."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

RUNNER = """
import json, sys, warnings
warnings.simplefilter("always")
caught = []
warnings.showwarning = lambda m, c, *a, **k: caught.append(c.__name__)
sys.path.insert(0, {dir!r})
import numpy as np
import tapegrad as tg
import {module} as m
out = m.run()
print("@@" + json.dumps({{"lowered": [k._ir is not None for k in m.KERNELS], "out": out, "warnings": caught}}))
"""


def _run(tmp_path, source, module="kmod", extra=None):
    d = tmp_path / "src"
    d.mkdir(exist_ok=True)
    (d / f"{module}.py").write_text(textwrap.dedent(source))
    for name, text in (extra or {}).items():
        (d / f"{name}.py").write_text(textwrap.dedent(text))
    env = dict(os.environ, TAPEGRAD_CACHE=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-c", RUNNER.format(dir=str(d), module=module)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("@@")][-1]
    return json.loads(line[2:])


def _manifests(tmp_path):
    return sorted(p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".dep"))


BASE = """
import numpy as np
import tapegrad as tg

SCALE = {scale}
OFFSET = tg.constant(tg.vec3(1.0, 2.0, {z}))

@tg.func
def helper(x: float, y: float) -> float:
    return x * SCALE + y + OFFSET[2]

@tg.kernel
def k(a: tg.array(dtype=float), b: tg.array(dtype=float)):
    i = tg.tid()
    b[i] = helper(a[i], tg.sin(a[i])) + float(len(a))

KERNELS = [k]

def run():
    a = tg.array(np.arange(5, dtype=np.float32))
    b = tg.zeros(5, dtype=float)
    tg.launch(k, 5, inputs=[a, b])
    return b.numpy().tolist()
"""


def _expect(scale, z):
    a = np.arange(5, dtype=np.float32)
    return (a * np.float32(scale) + np.sin(a) + np.float32(z) + np.float32(5)).astype(np.float32)


def test_second_process_loads_without_lowering(tmp_path):
    src = BASE.format(scale=2.0, z=3.0)
    first = _run(tmp_path, src)
    assert first["lowered"] == [True]
    assert len(_manifests(tmp_path)) == 1
    second = _run(tmp_path, src)
    assert second["lowered"] == [False]
    np.testing.assert_allclose(second["out"], _expect(2.0, 3.0), rtol=1e-6)
    assert second["out"] == first["out"]


@pytest.mark.parametrize("scale,z", [(3.0, 3.0), (2.0, 7.0)], ids=["global-number", "global-constant-vector"])
def test_a_changed_global_lowers_again(tmp_path, scale, z):
    _run(tmp_path, BASE.format(scale=2.0, z=3.0))
    changed = _run(tmp_path, BASE.format(scale=scale, z=z))
    assert changed["lowered"] == [True]
    np.testing.assert_allclose(changed["out"], _expect(scale, z), rtol=1e-6)
    again = _run(tmp_path, BASE.format(scale=scale, z=z))
    assert again["lowered"] == [False]
    np.testing.assert_allclose(again["out"], _expect(scale, z), rtol=1e-6)


def test_an_edited_helper_body_lowers_again(tmp_path):
    src = BASE.format(scale=2.0, z=3.0)
    _run(tmp_path, src)
    edited = _run(tmp_path, src.replace("return x * SCALE + y + OFFSET[2]", "return x * SCALE - y + OFFSET[2]"))
    assert edited["lowered"] == [True]
    a = np.arange(5, dtype=np.float32)
    np.testing.assert_allclose(edited["out"], a * 2 - np.sin(a) + 3 + 5, rtol=1e-6)


HELPER_MOD = """
import tapegrad as tg
@tg.func
def twice(x: float) -> float:
    return x * {factor}
"""

USES_OTHER_MODULE = """
import numpy as np
import tapegrad as tg
import helpers

@tg.kernel
def k(a: tg.array(dtype=float)):
    i = tg.tid()
    a[i] = helpers.twice(a[i])

KERNELS = [k]

def run():
    a = tg.array(np.arange(4, dtype=np.float32))
    tg.launch(k, 4, inputs=[a])
    return a.numpy().tolist()
"""


def test_a_helper_edited_in_another_module_lowers_again(tmp_path):
    assert _run(tmp_path, USES_OTHER_MODULE, extra={"helpers": HELPER_MOD.format(factor=2.0)})["out"] == [0, 2, 4, 6]
    cached = _run(tmp_path, USES_OTHER_MODULE, extra={"helpers": HELPER_MOD.format(factor=2.0)})
    assert cached["lowered"] == [False]
    # the kernel's module is unchanged: only the helper's file is edited
    edited = _run(tmp_path, USES_OTHER_MODULE, extra={"helpers": HELPER_MOD.format(factor=3.0)})
    assert edited["lowered"] == [True]
    assert edited["out"] == [0, 3, 6, 9]


FACTORY = """
import numpy as np
import tapegrad as tg

def make(c):
    @tg.kernel
    def k(a: tg.array(dtype=float)):
        i = tg.tid()
        a[i] = a[i] + c
    return k

KERNELS = [make(1.0), make(10.0)]

def run():
    outs = []
    for k in KERNELS:
        a = tg.zeros(3, dtype=float)
        tg.launch(k, 3, inputs=[a])
        outs.append(a.numpy().tolist())
    return outs
"""


def test_kernels_from_a_factory_keep_their_closure_values(tmp_path):
    first = _run(tmp_path, FACTORY)
    assert first["out"] == [[1, 1, 1], [10, 10, 10]]
    second = _run(tmp_path, FACTORY)
    assert second["lowered"] == [False, False]
    assert second["out"] == [[1, 1, 1], [10, 10, 10]]
    swapped = _run(tmp_path, FACTORY.replace("[make(1.0), make(10.0)]", "[make(10.0), make(1.0)]"))
    assert swapped["out"] == [[10, 10, 10], [1, 1, 1]]


SHADOW = """
import numpy as np
import tapegrad as tg

@tg.kernel
def k(a: tg.array(dtype=float)):
    i = tg.tid()
    a[i] = abs(a[i])
{shadow}

KERNELS = [k]

def run():
    a = tg.array(np.array([-1.0, 2.0, -3.0], dtype=np.float32))
    tg.launch(k, 3, inputs=[a])
    return a.numpy().tolist()
"""


def test_a_python_builtin_shadowed_later_lowers_again(tmp_path):
    # the shadowing helper comes after the kernel: the kernel's source and lines are unchanged
    assert _run(tmp_path, SHADOW.format(shadow=""))["out"] == [1, 2, 3]
    shadow = "@tg.func\ndef abs(x: float) -> float:\n    return x * 2.0\n"
    out = _run(tmp_path, SHADOW.format(shadow=shadow))
    assert out["lowered"] == [True]
    assert out["out"] == [-2, 4, -6]


COMPILE_TIME = """
import numpy as np
import tapegrad as tg

def count(n):
    return n * {mult}

@tg.kernel
def k(a: tg.array(dtype=float)):
    i = tg.tid()
    a[i] = float(count(3))

KERNELS = [k]

def run():
    a = tg.zeros(2, dtype=float)
    tg.launch(k, 2, inputs=[a])
    return a.numpy().tolist()
"""


def test_compile_time_calls_are_checked_again(tmp_path):
    assert _run(tmp_path, COMPILE_TIME.format(mult=2))["out"] == [6, 6]
    assert _run(tmp_path, COMPILE_TIME.format(mult=2))["lowered"] == [False]
    out = _run(tmp_path, COMPILE_TIME.format(mult=5))
    assert out["lowered"] == [True]
    assert out["out"] == [15, 15]


STRUCT = """
import numpy as np
import tapegrad as tg

@tg.struct
class P:
    w: {wtype}

@tg.kernel
def k(p: P, a: tg.array(dtype=float)):
    i = tg.tid()
    a[i] = float(p.w) * 1.5

KERNELS = [k]

def run():
    p = P()
    p.w = 3
    a = tg.zeros(2, dtype=float)
    tg.launch(k, 2, inputs=[p, a])
    return a.numpy().tolist()
"""


def test_a_struct_whose_fields_change_lowers_again(tmp_path):
    assert _run(tmp_path, STRUCT.format(wtype="float"))["out"] == [4.5, 4.5]
    assert _run(tmp_path, STRUCT.format(wtype="float"))["lowered"] == [False]
    out = _run(tmp_path, STRUCT.format(wtype="tg.int64"))
    assert out["lowered"] == [True]
    assert out["out"] == [4.5, 4.5]


def test_a_damaged_manifest_is_ignored_and_rewritten(tmp_path):
    src = BASE.format(scale=2.0, z=3.0)
    _run(tmp_path, src)
    (dep,) = _manifests(tmp_path)
    path = tmp_path / "cache" / dep
    path.write_bytes(path.read_bytes()[:-20])
    out = _run(tmp_path, src)
    assert out["lowered"] == [True]
    np.testing.assert_allclose(out["out"], _expect(2.0, 3.0), rtol=1e-6)
    assert _run(tmp_path, src)["lowered"] == [False]


def test_a_missing_binary_is_rebuilt(tmp_path):
    src = BASE.format(scale=2.0, z=3.0)
    _run(tmp_path, src)
    for p in (tmp_path / "cache").iterdir():
        if p.name.startswith("tgk_k_") and p.name.endswith(".so"):
            p.unlink()
    out = _run(tmp_path, src)
    assert out["lowered"] == [True]
    np.testing.assert_allclose(out["out"], _expect(2.0, 3.0), rtol=1e-6)


UNFINGERPRINTABLE = """
import numpy as np
import tapegrad as tg

class Box:
    value = 4.0

@tg.kernel
def k(a: tg.array(dtype=float)):
    i = tg.tid()
    a[i] = Box.value

KERNELS = [k]

def run():
    a = tg.zeros(2, dtype=float)
    tg.launch(k, 2, inputs=[a])
    return a.numpy().tolist()
"""


def test_a_value_without_fingerprint_always_lowers(tmp_path):
    assert _run(tmp_path, UNFINGERPRINTABLE)["out"] == [4, 4]
    assert _manifests(tmp_path) == []
    out = _run(tmp_path, UNFINGERPRINTABLE.replace("value = 4.0", "value = 6.0"))
    assert out["lowered"] == [True]
    assert out["out"] == [6, 6]


WARNS = """
import numpy as np
import tapegrad as tg

@tg.kernel
def k(a: tg.array(dtype=float), b: tg.array(dtype=float), n: int):
    i = tg.tid()
    s = a[i]
    for j in range(n):
        s = s * s
    b[i] = s

KERNELS = [k]

def run():
    a = tg.array(np.full(2, 1.5, dtype=np.float32))
    b = tg.zeros(2, dtype=float)
    tg.launch(k, 2, inputs=[a, b, 2])
    return b.numpy().tolist()
"""


def test_compile_warnings_are_given_again_from_the_cache(tmp_path):
    first = _run(tmp_path, WARNS)
    assert "TapeCompileWarning" in first["warnings"]
    second = _run(tmp_path, WARNS)
    assert second["lowered"] == [False]
    assert "TapeCompileWarning" in second["warnings"]
    assert second["out"] == [1.5 ** 4] * 2


TAPE_AND_TID = """
import numpy as np
import tapegrad as tg

@tg.kernel
def sq(a: tg.array(dtype=tg.float64), b: tg.array(dtype=tg.float64)):
    i = tg.tid()
    b[i] = a[i] * a[i] * 3.0

@tg.kernel
def grid(a: tg.array2d(dtype=float)):
    i, j = tg.tid()
    a[i, j] = float(i * 10 + j)

KERNELS = [sq, grid]

def run():
    a = tg.array(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    b = tg.zeros(3, dtype=tg.float64, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(sq, 3, inputs=[a, b])
    tape.backward(grads={b: tg.array(np.ones(3))})
    g = tg.zeros((2, 2), dtype=float)
    try:
        tg.launch(grid, 4, inputs=[g])
        err = None
    except ValueError as e:
        err = str(e)
    tg.launch(grid, (2, 2), inputs=[g])
    return [a.grad.numpy().tolist(), g.numpy().tolist(), err]
"""


def test_tape_and_launch_checks_in_a_cached_process(tmp_path):
    first = _run(tmp_path, TAPE_AND_TID)
    second = _run(tmp_path, TAPE_AND_TID)
    # the tape's in-place analysis of sq comes from the manifest too (Kernel.fact): nothing lowers
    assert second["lowered"] == [False, False]
    for out in (first, second):
        grad, g, err = out["out"]
        np.testing.assert_allclose(grad, [6.0, 12.0, 18.0])
        assert g == [[0, 1], [10, 11]]
        assert err is not None and "dim" in err


def test_record_lists_every_outside_lookup():
    """In-process: the record of a lowering names each global, helper and builtin it read."""
    import tapegrad as tg
    from tapegrad.lang import depends

    k = _record_kernel(tg)
    k.ir  # noqa: B018  lowers
    chains = {tuple(d[2]) for d in k._record.deps}
    assert {("tg",), ("tg", "tid"), ("_RECORD_HELPER",), ("_RECORD_N",), ("tg", "cos")} <= chains
    assert k._record.reason is None
    assert depends.verify(k.func, k._record.deps)


_RECORD_N = 3


def _record_kernel(tg):
    global _RECORD_HELPER

    @tg.func
    def _RECORD_HELPER(x: float) -> float:
        return tg.cos(x) * float(_RECORD_N)

    @tg.kernel
    def rk(a: tg.array(dtype=float)):
        i = tg.tid()
        a[i] = _RECORD_HELPER(a[i])
    return rk


CUDA_KERNEL = """
import numpy as np
import tapegrad as tg

@tg.kernel
def saxpy(x: tg.array(dtype=float), y: tg.array(dtype=float), a: float):
    i = tg.tid()
    y[i] = a * x[i] + y[i]

KERNELS = [saxpy]

def run():
    n = 1 << 12
    x = tg.array(np.arange(n, dtype=np.float32), device="cuda:0")
    y = tg.ones(n, dtype=float, device="cuda:0")
    tg.launch(saxpy, n, inputs=[x, y, 2.0], device="cuda:0")
    return y.numpy()[[0, 1, n - 1]].tolist()
"""


@pytest.mark.cuda
def test_cuda_second_process_loads_the_image_without_lowering(tmp_path):
    n = 1 << 12
    want = [1.0, 3.0, 2.0 * (n - 1) + 1.0]
    first = _run(tmp_path, CUDA_KERNEL)
    assert first["lowered"] == [True] and first["out"] == want
    second = _run(tmp_path, CUDA_KERNEL)
    assert second["lowered"] == [False] and second["out"] == want


INPLACE = """
import numpy as np
import tapegrad as tg

@tg.kernel
def square_in_place(x: tg.array(dtype=tg.float64)):
    i = tg.tid()
    x[i] = x[i] * x[i]

@tg.kernel
def axpy_in_place(x: tg.array(dtype=tg.float64), v: tg.array(dtype=tg.float64)):
    i = tg.tid()
    x[i] = x[i] + 0.5 * v[i]

KERNELS = [square_in_place, axpy_in_place]

def run():
    x = tg.array(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    v = tg.array(np.array([1.0, 1.0, 1.0]), requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(square_in_place, 3, inputs=[x])
        tg.launch(axpy_in_place, 3, inputs=[x, v])
        tg.launch(square_in_place, 3, inputs=[x])
    tape.backward(grads={x: tg.array(np.ones(3))})
    return [x.grad.numpy().tolist(), v.grad.numpy().tolist(), len(tape._saves)]
"""


def test_in_place_gradients_from_a_cached_process_are_exact(tmp_path):
    """The tape's in-place analysis (what to save before an overwrite) comes from the manifest
    in a cached process: same saves, same exact gradients, nothing lowered."""
    x0 = np.array([1.0, 2.0, 3.0])
    y = x0 ** 2 + 0.5
    want_x = 2 * y * 2 * x0          # d/dx0 of (x0^2 + 0.5)^2
    want_v = 2 * y * 0.5
    first = _run(tmp_path, INPLACE)
    second = _run(tmp_path, INPLACE)
    assert second["lowered"] == [False, False]
    for out in (first, second):
        gx, gv, saves = out["out"]
        np.testing.assert_allclose(gx, want_x)
        np.testing.assert_allclose(gv, want_v)
    assert second["out"][2] == first["out"][2]
