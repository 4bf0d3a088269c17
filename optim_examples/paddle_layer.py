"""``tg.paddle_op`` turns a kernel into a differentiable ``paddle.autograd.PyLayer`` in one call;
paddle's Adam trains through it like through any paddle op.

    python -m optim_examples.paddle_layer
"""
import paddle

import tapegrad as tg
from optim_examples.common import rosenbrock_each, start_points, train

rosenbrock_op = tg.paddle_op(rosenbrock_each)     # points (n, 2) -> values (n,), with autograd


def main(steps=1500, device="cpu"):
    points = paddle.to_tensor(start_points(8), stop_gradient=False, place=tg.device_to_paddle(device))
    opt = paddle.optimizer.Adam(learning_rate=0.02, parameters=[points])

    def step():
        opt.clear_grad()
        loss = rosenbrock_op(points).mean()
        loss.backward()
        opt.step()
        return loss

    return train(step, steps)


if __name__ == "__main__":
    main()
