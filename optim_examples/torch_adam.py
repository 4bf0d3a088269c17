"""Parameters declared in tapegrad, stepped by ``torch.optim.Adam``: ``to_torch`` exposes each
tapegrad array as a leaf tensor whose ``.grad`` *is* the array's gradient buffer, so the tape
writes gradients straight where Adam reads them (no copies).

    python -m optim_examples.torch_adam
"""
import numpy as np
import torch

import tapegrad as tg


@tg.kernel
def rosenbrock(p: tg.array[tg.vec2], loss: tg.array[float]):
    i = tg.tid()
    x = p[i][0]
    y = p[i][1]
    tg.atomic_add(loss, 0, (1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x))


def main(steps=1500, device=None):
    rng = np.random.default_rng(1)
    p = tg.array(rng.uniform(-1.5, 1.5, size=(64, 2)).astype(np.float32), dtype=tg.vec2,
                 device=device, requires_grad=True)
    loss = tg.zeros(1, dtype=float, device=device, requires_grad=True)
    tp = tg.to_torch(p)                            # leaf tensor (64, 2); tp.grad views p.grad
    opt = torch.optim.Adam([tp], lr=0.02)
    first = None
    for t in range(1, steps + 1):
        loss.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(rosenbrock, dim=len(p), inputs=[p], outputs=[loss])
        tape.backward(loss=loss)
        opt.step()                                 # updates p's memory in place
        tape.zero()
        value = float(loss.numpy()[0]) / len(p)
        first = value if first is None else first
        if t == 1 or t % 500 == 0:
            print(f"  step {t:5d}  mean Rosenbrock {value:.6f}")
    print(f"  points near the minimum (1, 1): {np.mean(np.linalg.norm(p.numpy() - 1.0, axis=1) < 0.1):.0%}")
    return first, value


if __name__ == "__main__":
    main()
