"""Parameters declared in tapegrad, stepped by tapegrad's own fused ``tg.optim.Adam`` (one launch
per parameter group, no framework at all).

    python -m optim_examples.native_adam
"""
import tapegrad as tg
from optim_examples.common import start_points, train_on_tape


def main(steps=1500, device="cpu"):
    p = tg.array(start_points(9), dtype=tg.vec2, device=device, requires_grad=True)
    return train_on_tape(p, tg.optim.Adam([p], lr=0.02).step, steps)


if __name__ == "__main__":
    main()
