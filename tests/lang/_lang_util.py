"""Helpers shared by the kernel-language tests: launch on numpy data, finite differences."""
from __future__ import annotations

import numpy as np

import tapegrad as tg


def run(kernel, dim, inputs, outputs, device="cpu"):
    """Forward launch on numpy inputs/outputs (float64 arrays or scalars); returns output numpy copies."""
    ins = [tg.array(x, dtype=_dtype(x), device=device) if isinstance(x, np.ndarray) else x for x in inputs]
    outs = [tg.array(x, dtype=_dtype(x), device=device) for x in outputs]
    tg.launch(kernel, dim=dim, inputs=ins, outputs=outs, device=device)
    return [o.numpy().copy() for o in outs]


def adjoint(kernel, dim, inputs, outputs, adj_outputs, device="cpu"):
    """Forward then adjoint launch; returns the adjoints of the array inputs."""
    ins = [tg.array(x, dtype=_dtype(x), device=device) if isinstance(x, np.ndarray) else x for x in inputs]
    outs = [tg.array(x, dtype=_dtype(x), device=device) for x in outputs]
    tg.launch(kernel, dim=dim, inputs=ins, outputs=outs, device=device)
    adj_in = [tg.zeros(x.shape[0], dtype=_dtype(x), device=device) if isinstance(x, np.ndarray) else None
              for x in inputs]
    adj_out = [tg.array(g, dtype=_dtype(g), device=device) for g in adj_outputs]
    tg.launch(kernel, dim=dim, inputs=ins, outputs=outs, adjoint=True, device=device,
              adj_inputs=[a if a is not None else 0.0 for a in adj_in], adj_outputs=adj_out)
    return [a.numpy().copy() if a is not None else None for a in adj_in]


def fd(kernel, dim, inputs, outputs, adj_outputs, which, h=1e-6, device="cpu"):
    """Central differences of sum(adj_out * out) w.r.t. the array input ``which``."""
    x = inputs[which]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        vals = []
        for sgn in (1, -1):
            xs = list(inputs)
            xs[which] = x.copy()
            xs[which][idx] += sgn * h
            outs = run(kernel, dim, xs, [o.copy() for o in outputs], device)
            vals.append(sum(float((o * a).sum()) for o, a in zip(outs, adj_outputs)))
        g[idx] = (vals[0] - vals[1]) / (2 * h)
    return g


def check_grad(kernel, dim, inputs, outputs, device="cpu", rtol=1e-5, atol=1e-7, seed=0):
    rng = np.random.default_rng(seed)
    # float32 outputs get a zero adjoint: their finite differences would be noise at this tolerance
    adj_outputs = [rng.normal(size=o.shape) if o.dtype == np.float64 else np.zeros_like(o) for o in outputs]
    got = adjoint(kernel, dim, inputs, outputs, adj_outputs, device)
    for k, x in enumerate(inputs):
        if isinstance(x, np.ndarray) and x.dtype == np.float64:
            exp = fd(kernel, dim, inputs, outputs, adj_outputs, k, device=device)
            np.testing.assert_allclose(got[k], exp, rtol=rtol, atol=atol, err_msg=f"input {k}")


def _dtype(x):
    return {np.dtype(np.float64): tg.float64, np.dtype(np.float32): tg.float32,
            np.dtype(np.int32): tg.int32, np.dtype(np.int64): tg.int64}[np.asarray(x).dtype]
