"""A tapegrad kernel inside a hand-written ``torch.autograd.Function``: forward launches the
kernel, backward launches its generated adjoint with ``adjoint=True`` — torch's Adam then trains
through it like through any torch op.

    python -m optim_examples.rosenbrock_function
"""
import torch

import tapegrad as tg
from optim_examples.common import rosenbrock_each, start_points, train


class Rosenbrock(torch.autograd.Function):
    @staticmethod
    def forward(ctx, points):
        p = tg.from_torch(points.detach(), dtype=tg.vec2)
        out = torch.empty(points.shape[0], device=points.device)
        tg.launch(rosenbrock_each, dim=len(p), inputs=[p], outputs=[tg.from_torch(out)])
        ctx.save_for_backward(points, out)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        points, out = ctx.saved_tensors
        adj_points = torch.zeros_like(points)
        tg.launch(rosenbrock_each, dim=points.shape[0], inputs=[tg.from_torch(points.detach(), dtype=tg.vec2)],
                  outputs=[tg.from_torch(out)], adjoint=True,
                  adj_inputs=[tg.from_torch(adj_points, dtype=tg.vec2)],
                  adj_outputs=[tg.from_torch(grad_out.contiguous())])
        return adj_points


def main(steps=1500, device="cpu"):
    points = torch.tensor(start_points(2), device=tg.device_to_torch(device), requires_grad=True)
    opt = torch.optim.Adam([points], lr=0.02)

    def step():
        opt.zero_grad()
        loss = Rosenbrock.apply(points).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return train(step, steps)


if __name__ == "__main__":
    main()
