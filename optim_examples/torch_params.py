"""Parameters declared in torch, loss written as a tapegrad kernel, stepped by ``torch.optim.Adam``:
``tg.from_torch(t)`` wraps the tensor and its ``.grad`` (allocated by torch) without copying, so the
tape writes the gradient torch's Adam reads (the other direction of ``optim_examples.torch_adam``).

    python -m optim_examples.torch_params
"""
import torch

import tapegrad as tg
from optim_examples.common import share_near_minimum, start_points, train_on_tape


def main(steps=1500, device="cpu"):
    w = torch.tensor(start_points(2), device=tg.device_to_torch(device), requires_grad=True)
    opt = torch.optim.Adam([w], lr=0.02)
    result = train_on_tape(tg.from_torch(w, dtype=tg.vec2), opt.step, steps)
    print(f"  points near the minimum (1, 1): {share_near_minimum(w.detach().cpu().numpy()):.0%}")
    return result


if __name__ == "__main__":
    main()
