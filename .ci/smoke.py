"""Smoke test of an installed wheel (run by .ci/run from outside the checkout, in a fresh venv).

A kernel, a tape and a torch conversion, with an empty kernel cache: the wheel's native helpers
were built at install, so only the kernels compile (the launch helper and the DLPack helper
must not appear in the cache), and each build says one 'tapegrad' log line.
"""
import os
import sys

import numpy as np

import tapegrad as tg
from tapegrad import native
from tapegrad.launch import fastlaunch

here = os.path.dirname(os.path.abspath(tg.__file__))
assert here.startswith(sys.prefix), f"tapegrad imported from {here}, not from the venv {sys.prefix}"
for name in native.HELPERS:
    assert native.prebuilt_path(name, native.helper_source(name)), f"the wheel has no prebuilt {name}"


@tg.kernel
def loss(x: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(out, 0, tg.sin(x[i]) * x[i])


xs = np.linspace(0.0, 1.0, 100)
x = tg.array(xs, dtype=tg.float64, requires_grad=True)
out = tg.zeros(1, dtype=tg.float64, requires_grad=True)
tape = tg.Tape()
with tape:
    tg.launch(loss, dim=100, inputs=[x], outputs=[out])
tape.backward(loss=out)
np.testing.assert_allclose(out.numpy()[0], np.sum(np.sin(xs) * xs), rtol=1e-12)
np.testing.assert_allclose(x.grad.numpy(), np.cos(xs) * xs + np.sin(xs), rtol=1e-12)
for _ in range(3):   # the native launch path, from the wheel's library
    tg.launch(loss, dim=100, inputs=[x], outputs=[out])
assert fastlaunch.error() is None and sum(fastlaunch.stats()) > 0, (fastlaunch.error(), fastlaunch.stats())

import torch  # noqa: E402

t = tg.to_torch(x)
assert t.data_ptr() == x.ptr and t.grad is not None
np.testing.assert_allclose(t.grad.numpy(), np.cos(xs) * xs + np.sin(xs), rtol=1e-12)
back = tg.from_torch(torch.arange(4.0, dtype=torch.float64))
assert np.from_dlpack(back).tolist() == [0.0, 1.0, 2.0, 3.0]

cached = sorted(os.listdir(os.environ["TAPEGRAD_CACHE"]))
helpers = [f for f in cached if f.startswith("tg_")]
assert not helpers, f"helpers compiled on the fly: {helpers}"
print(f"wheel smoke test passed: tapegrad from {here}")
