"""Fit y = a * sin(b * x) + c with a tapegrad kernel, its generated adjoint and tapegrad's own
fused ``tg.optim.Adam`` (no framework needed).

    python -m optim_examples.fit_curve
"""
import numpy as np

import tapegrad as tg


@tg.kernel
def sq_error(x: tg.array[float], y: tg.array[float], p: tg.array[float], loss: tg.array[float]):
    i = tg.tid()
    pred = p[0] * tg.sin(p[1] * x[i]) + p[2]
    d = pred - y[i]
    tg.atomic_add(loss, 0, d * d / float(len(x)))


def main(steps=300, device=None):
    rng = np.random.default_rng(0)
    xs = np.linspace(-3, 3, 256).astype(np.float32)
    ys = (1.5 * np.sin(2.0 * xs) + 0.3 + 0.01 * rng.normal(size=xs.size)).astype(np.float32)
    x = tg.array(xs, dtype=float, device=device)
    y = tg.array(ys, dtype=float, device=device)
    p = tg.array(np.array([1.0, 1.8, 0.0], np.float32), dtype=float, device=device, requires_grad=True)
    loss = tg.zeros(1, dtype=float, device=device, requires_grad=True)
    opt = tg.optim.Adam([p], lr=0.05)
    for t in range(1, steps + 1):
        loss.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(sq_error, dim=len(xs), inputs=[x, y, p], outputs=[loss])
        tape.backward(loss=loss)
        opt.step()                                 # reads p.grad, updates p in place
        tape.zero()
        if t % 100 == 0 or t == 1:
            print(f"  step {t:4d}  loss {loss.numpy()[0]:.5f}  params {np.round(p.numpy(), 3)}")
    return float(loss.numpy()[0]), p.numpy()


if __name__ == "__main__":
    main()
