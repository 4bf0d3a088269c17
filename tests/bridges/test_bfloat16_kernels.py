"""bfloat16 torch tensors through bfloat16 kernels: zero-copy in, forward and tape adjoint equal
torch's own bfloat16 math (both round float results to bfloat16)."""
from __future__ import annotations

import pytest

import tapegrad as tg

pytestmark = [pytest.mark.torch]
torch = pytest.importorskip("torch")


@tg.kernel
def k_square_sin(x: tg.array(dtype=tg.bfloat16), y: tg.array(dtype=tg.bfloat16)):
    i = tg.tid()
    y[i] = x[i] * tg.sin(x[i])


def test_bfloat16_torch_tensors_in_a_kernel_forward_and_backward():
    t = torch.linspace(-2, 2, 9, dtype=torch.bfloat16)
    out = torch.zeros(9, dtype=torch.bfloat16)
    x, y = tg.from_torch(t, requires_grad=True), tg.from_torch(out, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(k_square_sin, dim=9, inputs=[x], outputs=[y])
    tf = t.float()
    torch.testing.assert_close(out.float(), tf * torch.sin(tf), rtol=2 ** -7, atol=2 ** -7)
    y.grad.fill_(1.0)
    tape.backward()
    g = tg.to_torch(x.grad)
    assert g.dtype == torch.bfloat16
    torch.testing.assert_close(g.float(), torch.sin(tf) + tf * torch.cos(tf), rtol=2 ** -6, atol=2 ** -6)
