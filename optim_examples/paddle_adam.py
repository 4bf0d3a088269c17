"""Parameters declared in tapegrad, stepped by ``paddle.optimizer.Adam``: ``tg.to_paddle`` exposes
the array as a paddle tensor whose gradient *is* the array's gradient buffer, so the tape writes
what Adam reads (no copies).

    python -m optim_examples.paddle_adam
"""
import paddle

import tapegrad as tg
from optim_examples.common import start_points, train_on_tape


def main(steps=1500, device="cpu"):
    p = tg.array(start_points(6), dtype=tg.vec2, device=device, requires_grad=True)
    opt = paddle.optimizer.Adam(learning_rate=0.02, parameters=[tg.to_paddle(p)])
    return train_on_tape(p, opt.step, steps)


if __name__ == "__main__":
    main()
