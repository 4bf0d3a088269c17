"""A kernel whose binary is cached is never lowered in a fresh process (issue 25, item 5).

The direct cache's manifest stores the kernel's IR facts (parameter access, tid() accesses for
the grid checks, the tape's load/store order ``lang.reads.param_reads``), so building a
``jax_kernel``, ``paddle_op`` or ``torch_op`` of a cached kernel, launching it forward and
backward, and recording launches on a ``Tape`` (in-place steps and struct arguments included)
must not call the lowering. Each check runs twice in a fresh process over one kernel cache:
the first builds (and must lower, which shows the counter works), the second must lower nothing.
Values are checked against NumPy in float64.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_MODULE = """
import tapegrad as tg


@tg.struct
class Pair:
    a: tg.array(dtype=tg.float64)
    s: tg.float64


@tg.kernel
def k_sq(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i] + 1.0


@tg.kernel
def k_step(x: tg.array(dtype=tg.float64)):
    i = tg.tid()
    x[i] = x[i] * x[i]                 # in place: the tape saves x (its load/store order)


@tg.kernel
def k_struct(p: Pair, y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = p.a[i] * p.a[i] * p.s
"""

_SCRIPT = """
import sys
import numpy as np
import tapegrad as tg

K = sys.modules["tapegrad.lang.kernel"]   # (tapegrad.lang.kernel the attribute is the decorator)
lowered = []
real_lower = K.lower
K.lower = lambda target, *a, **k: (lowered.append(target.label), real_lower(target, *a, **k))[1]

from lower_mod import Pair, k_sq, k_step, k_struct   # noqa: E402

x0 = np.array([0.5, -1.25, 2.0])
framework, step = sys.argv[1], sys.argv[2]

if framework == "tape":
    x = tg.array(x0, dtype=tg.float64, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, requires_grad=True)
    z = tg.array(x0, dtype=tg.float64, requires_grad=True)
    p = Pair()
    p.a, p.s = tg.array(x0, dtype=tg.float64, requires_grad=True), 3.0
    w = tg.zeros(3, dtype=tg.float64, requires_grad=True)
    with tg.Tape() as tape:
        tg.launch(k_sq, 3, inputs=[x], outputs=[y])
        tg.launch(k_step, 3, inputs=[z])
        tg.launch(k_struct, 3, inputs=[p], outputs=[w])
    tape.backward(grads={y: np.ones(3), z: np.ones(3), w: np.ones(3)})
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0, rtol=1e-15)
    np.testing.assert_allclose(z.grad.numpy(), 2 * x0, rtol=1e-15)   # from the saved x0
    np.testing.assert_allclose(p.a.grad.numpy(), 6 * x0, rtol=1e-15)
elif framework == "torch":
    import torch
    op = tg.torch_op(k_sq)
    t = torch.tensor(x0, requires_grad=True)
    out = op(t)
    out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), x0 * x0 + 1, rtol=1e-15)
    np.testing.assert_allclose(t.grad.numpy(), 2 * x0, rtol=1e-15)
elif framework == "paddle":
    import paddle
    op = tg.paddle_op(k_sq)
    t = paddle.to_tensor(x0, dtype="float64", stop_gradient=False)
    out = op(t)
    out.sum().backward()
    np.testing.assert_allclose(out.numpy(), x0 * x0 + 1, rtol=1e-15)
    np.testing.assert_allclose(t.grad.numpy(), 2 * x0, rtol=1e-15)
elif framework == "jax":
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    kern = tg.jax_kernel(k_sq, enable_backward=True)
    out = kern(jnp.asarray(x0))[0]
    g = jax.grad(lambda v: kern(v)[0].sum())(jnp.asarray(x0))
    np.testing.assert_allclose(np.asarray(out), x0 * x0 + 1, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(g), 2 * x0, rtol=1e-15)

if step == "build":
    assert lowered, "the first process lowered nothing: the counter does not see the lowering"
else:
    assert not lowered, f"lowered in a process with a warm cache: {lowered}"
    assert k_sq._ir is None and k_step._ir is None and k_struct._ir is None
print("ok")
"""


@pytest.mark.parametrize("framework", ["tape", "torch", "paddle", "jax"])
def test_a_cached_kernel_lowers_nothing(framework, tmp_path):
    if framework != "tape":
        pytest.importorskip(framework)
    (tmp_path / "lower_mod.py").write_text(textwrap.dedent(_MODULE))
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               TAPEGRAD_CACHE=str(tmp_path / "cache"))
    for step in ("build", "check"):
        r = subprocess.run([sys.executable, str(script), framework, step], capture_output=True, text=True,
                           timeout=600, env=env, cwd=tmp_path)
        assert r.returncode == 0 and r.stdout.strip().endswith("ok"), f"{step}:\n{r.stdout}\n{r.stderr}"
