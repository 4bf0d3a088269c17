"""Kernels and a two-kernel function shared by the JAX bridge tests (CPU and CUDA)."""
import tapegrad as tg


@tg.kernel
def scale(a: tg.array[float], s: float, out: tg.array[float]):
    i = tg.tid()
    out[i] = a[i] * s


@tg.kernel
def add_into(a: tg.array[float], out: tg.array[float]):
    i = tg.tid()
    out[i] = out[i] + a[i]


@tg.kernel
def accum(x: tg.array[float], sums: tg.array[float]):
    i = tg.tid()
    tg.atomic_add(sums, 0, x[i])


@tg.kernel
def triple(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = 3.0 * x[i]


def two_step(a: tg.array[float], s: float, out: tg.array[float]):
    """out = a * s + a, in two launches (a jax_callable body)."""
    tg.launch(scale, dim=a.shape, inputs=[a, s], outputs=[out])
    tg.launch(add_into, dim=a.shape, inputs=[a], outputs=[out])
