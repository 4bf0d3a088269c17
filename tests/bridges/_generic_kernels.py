"""A generic kernel (typing.Any parameters) the op tests share (kernels need a source file)."""
import typing

import tapegrad as tg


@tg.kernel
def scaled_square(x: tg.array(dtype=typing.Any), s: typing.Any, y: tg.array(dtype=typing.Any)):
    i = tg.tid()
    y[i] = x[i] * x[i] * s
