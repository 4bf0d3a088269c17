"""bfloat16 in kernels: loads and stores convert, arithmetic runs in float, adjoints flow through
float (the same storage mechanism as float16, ``runtime/core.h``). Values are compared with float32
math on the bf16-rounded inputs at bf16 tolerance (8 significant bits: relative 2^-8)."""
from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import types

BF = tg.bfloat16
RTOL = 2 ** -7     # one rounding of the result plus the float->bf16 rounding of intermediates


def _bf16(values, device):
    """A bfloat16 array of ``values`` (rounded as the kernels round), with or without ml_dtypes."""
    bits = types.bits16(BF, np.asarray(values, np.float32))
    return tg.array(bits.view(BF.np_dtype), dtype=BF, device=device)


def _float(a) -> np.ndarray:
    bits = np.ascontiguousarray(a.numpy()).view(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


@tg.kernel
def k_bf16(x: tg.array(dtype=tg.bfloat16), s: tg.bfloat16, y: tg.array(dtype=tg.bfloat16),
           total: tg.array(dtype=tg.bfloat16)):
    i = tg.tid()
    v = x[i]
    y[i] = tg.sin(v) * v * s + tg.bfloat16(0.5)
    tg.atomic_add(total, 0, v * v)


def test_bits16_rounds_to_nearest_even_like_ml_dtypes():
    vals = np.array([1.0, 1.00390625, 1.01171875, 3.14159, -2.5e-3, 65504.0, 1e38, np.inf, -np.inf], np.float32)
    bits = types.bits16(BF, vals)
    assert bits[:3].tolist() == [0x3F80, 0x3F80, 0x3F82]     # ties go to the even mantissa
    ml_dtypes = pytest.importorskip("ml_dtypes")
    np.testing.assert_array_equal(bits, vals.astype(ml_dtypes.bfloat16).view(np.uint16))
    assert np.isnan((types.bits16(BF, [np.nan]).astype(np.uint32) << 16).view(np.float32)[0])
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        types.bits16(tg.float32, [1.0])


def test_bfloat16_kernel_forward_and_adjoint(device):
    n = 16
    x = _bf16(np.linspace(-2, 2, n), device)
    xf = _float(x)
    y, total = tg.zeros(n, dtype=BF, device=device), tg.zeros(1, dtype=BF, device=device)
    tg.launch(k_bf16, dim=n, inputs=[x, 1.5], outputs=[y, total], device=device)
    np.testing.assert_allclose(_float(y), np.sin(xf) * xf * 1.5 + 0.5, rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(_float(total)[0], (xf * xf).sum(), rtol=4 * RTOL)

    gx = tg.zeros(n, dtype=BF, device=device)
    gy, gt = _bf16(np.ones(n), device), _bf16([2.0], device)
    tg.launch(k_bf16, dim=n, inputs=[x, 1.5], outputs=[y, total], adjoint=True, adj_inputs=[gx, 0.0],
              adj_outputs=[gy, gt], device=device)
    want = 1.5 * (np.cos(xf) * xf + np.sin(xf)) + 2.0 * 2 * xf
    np.testing.assert_allclose(_float(gx), want, rtol=2 * RTOL, atol=2 * RTOL)


def test_bfloat16_through_the_tape(device):
    x = _bf16([0.5, -1.0, 2.0, 0.25], device)
    x.requires_grad = True
    y = tg.zeros(4, dtype=BF, device=device, requires_grad=True)
    total = tg.zeros(1, dtype=BF, device=device, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_bf16, dim=4, inputs=[x, 2.0], outputs=[y, total], device=device)
    tape.backward(loss=total)
    np.testing.assert_allclose(_float(x.grad), 2 * _float(x), rtol=RTOL)


def test_bfloat16_is_a_kernel_type():
    assert types.type_of(tg.array(dtype=BF), arg="x").dtype is BF
    assert types.type_of(BF, arg="x") is BF
