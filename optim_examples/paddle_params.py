"""Parameters declared in paddle, loss written as a tapegrad kernel, stepped by
``paddle.optimizer.Adam``: ``tg.from_paddle`` wraps the tensor and its gradient (allocated by
paddle's own allocator) without copying.

    python -m optim_examples.paddle_params
"""
import paddle

import tapegrad as tg
from optim_examples.common import start_points, train_on_tape


def main(steps=1500, device="cpu"):
    w = paddle.to_tensor(start_points(7), stop_gradient=False, place=tg.device_to_paddle(device))
    opt = paddle.optimizer.Adam(learning_rate=0.02, parameters=[w])
    return train_on_tape(tg.from_paddle(w, dtype=tg.vec2), opt.step, steps)


if __name__ == "__main__":
    main()
