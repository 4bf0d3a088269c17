"""Native optimizers over tapegrad arrays: ``tg.optim.Adam`` and ``tg.optim.SGD``.

Warp's ``warp.optim`` names and signatures (``Adam(params, lr, betas, eps)``,
``step(grad)``), but fused: one launch per parameter group (all parameters of one dtype on
one device) instead of one per array, with the step count on the device so that a step can
be captured in a CUDA graph.
"""
from .adam import Adam
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adam", "SGD", "Optimizer"]
