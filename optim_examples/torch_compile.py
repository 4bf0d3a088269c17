"""``tg.torch_op`` turns a kernel into a differentiable ``torch.library`` custom op in one call;
it runs inside ``torch.compile(fullgraph=True)`` and torch's Adam trains through it.

    python -m optim_examples.torch_compile
"""
import torch

import tapegrad as tg
from optim_examples.common import rosenbrock_each, start_points, train

rosenbrock_op = tg.torch_op(rosenbrock_each)     # points (n, 2) -> values (n,), with autograd


@torch.compile(fullgraph=True)
def objective(points):
    return rosenbrock_op(points).mean()


def main(steps=1000, device="cpu"):
    points = torch.tensor(start_points(3), device=tg.device_to_torch(device), requires_grad=True)
    opt = torch.optim.Adam([points], lr=0.02)

    def step():
        opt.zero_grad()
        loss = objective(points)
        loss.backward()
        opt.step()
        return loss.detach()

    return train(step, steps, every=250)


if __name__ == "__main__":
    main()
