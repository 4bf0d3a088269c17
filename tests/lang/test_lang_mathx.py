"""lerp, smoothstep, step, isnan/isinf/isfinite, degrees/radians in kernels (issue 16); their
adjoints are checked by test_builtins_grad.py from the table's samples."""

import numpy as np

import tapegrad as tg


@tg.kernel
def k_mathx(x: tg.array(dtype=tg.float64), v: tg.array(dtype=tg.vec3d), out: tg.array(dtype=tg.float64),
            flags: tg.array(dtype=int)):
    i = tg.tid()
    a = tg.lerp(x[i], 2.0 * x[i], 0.25)
    w = tg.lerp(v[i], tg.vec3d(3.0), x[i])
    out[i] = a + w[1] + tg.smoothstep(-1.0, 1.0, x[i]) + tg.step(x[i]) + tg.degrees(x[i]) + tg.radians(x[i])
    flags[i] = int(tg.isnan(x[i] / x[i])) + 2 * int(tg.isinf(1.0 / x[i])) + 4 * int(tg.isfinite(v[i] / x[i]))


def test_mathx_values(device):
    x = np.array([0.5, 0.0, -0.3, 2.0])
    o = tg.zeros(4, dtype=tg.float64, device=device)
    f = tg.zeros(4, dtype=int, device=device)
    tg.launch(k_mathx, dim=4, inputs=[tg.array(x, dtype=tg.float64, device=device),
                                      tg.array(np.ones((4, 3)), dtype=tg.vec3d, device=device), o, f], device=device)
    t = np.clip((x + 1) / 2, 0, 1)
    exp = 1.25 * x * 0 + (x + 0.25 * x) + (1 + 2 * x) + t * t * (3 - 2 * t) + (x < 0) + np.degrees(x) + np.radians(x)
    np.testing.assert_allclose(o.numpy(), exp, rtol=1e-12)
    np.testing.assert_array_equal(f.numpy(), [4, 3, 4, 4])
    assert tg.lerp(1.0, 3.0, 0.25) == 1.5 and tg.isnan(float("nan")) and not tg.isinf(1.0)
