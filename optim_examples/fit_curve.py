"""Fit y = a * sin(b * x) + c with a tapegrad kernel, its generated adjoint and a small Adam
written on tapegrad arrays (no framework needed).

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


def adam_step(p, m, v, t, lr=0.05, b1=0.9, b2=0.999, eps=1e-8):
    g = p.grad.numpy()
    m[:] = b1 * m + (1 - b1) * g
    v[:] = b2 * v + (1 - b2) * g * g
    mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
    p.assign((p.numpy() - lr * mh / (np.sqrt(vh) + eps)).astype(np.float32))


def main(steps=300, device=None):
    rng = np.random.default_rng(0)
    xs = np.linspace(-3, 3, 256).astype(np.float32)
    ys = (1.5 * np.sin(2.0 * xs) + 0.3 + 0.01 * rng.normal(size=xs.size)).astype(np.float32)
    x = tg.array(xs, dtype=float, device=device)
    y = tg.array(ys, dtype=float, device=device)
    p = tg.array(np.array([1.0, 1.8, 0.0], np.float32), dtype=float, device=device, requires_grad=True)
    loss = tg.zeros(1, dtype=float, device=device, requires_grad=True)
    m, v = np.zeros(3), np.zeros(3)
    for t in range(1, steps + 1):
        loss.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(sq_error, dim=len(xs), inputs=[x, y, p], outputs=[loss])
        tape.backward(loss=loss)
        adam_step(p, m, v, t)
        tape.zero()
        if t % 100 == 0 or t == 1:
            print(f"  step {t:4d}  loss {loss.numpy()[0]:.5f}  params {np.round(p.numpy(), 3)}")
    return float(loss.numpy()[0]), p.numpy()


if __name__ == "__main__":
    main()
