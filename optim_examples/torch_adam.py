"""Parameters declared in tapegrad, stepped by ``torch.optim.Adam``: ``to_torch`` exposes each
tapegrad array as a leaf tensor whose ``.grad`` *is* the array's gradient buffer, so the tape
writes gradients straight where Adam reads them (no copies).

    python -m optim_examples.torch_adam
"""
import torch

import tapegrad as tg
from optim_examples.common import share_near_minimum, start_points, train_on_tape


def main(steps=1500, device="cpu"):
    p = tg.array(start_points(1), dtype=tg.vec2, device=device, requires_grad=True)
    opt = torch.optim.Adam([tg.to_torch(p)], lr=0.02)   # a leaf tensor (64, 2); its .grad views p.grad
    result = train_on_tape(p, opt.step, steps)
    print(f"  points near the minimum (1, 1): {share_near_minimum(p.numpy()):.0%}")
    return result


if __name__ == "__main__":
    main()
