"""Kernels shared by the framework-bridge tests (torch and paddle): the same kernel, launched
from each framework, checks the same behaviour."""
import tapegrad as tg

# ------------------------------------------------------------ kernels taking tensors directly

@tg.kernel
def saxpy(x: tg.array[float], y: tg.array[float], a: float):
    i = tg.tid()
    y[i] = a * x[i] + y[i]


@tg.kernel
def scale_vec3(v: tg.array[tg.vec3], s: float, out: tg.array[tg.vec3]):
    i = tg.tid()
    out[i] = v[i] * s


@tg.kernel
def trace22(m: tg.array[tg.mat22], out: tg.array[float]):
    i = tg.tid()
    out[i] = m[i][0, 0] + m[i][1, 1]


@tg.kernel
def copy2d(a: tg.array2d[float], b: tg.array2d[float]):
    i, j = tg.tid()
    b[i, j] = a[i, j]


@tg.kernel
def square(a: tg.array[float], out: tg.array[float]):
    i = tg.tid()
    out[i] = a[i] * a[i]


@tg.kernel
def sum_sq(xs: tg.array2d[float], loss: tg.array[float]):
    tid = tg.tid()
    tg.atomic_add(loss, 0, xs[tid, 0] ** 2.0 + xs[tid, 1] ** 2.0)


# ----------------------------------------------------------------- kernels made into ops

@tg.kernel
def rosenbrock(xy: tg.array[tg.vec2d], z: tg.array[tg.float64]):
    i = tg.tid()
    v = xy[i]
    z[i] = (1.0 - v[0]) ** 2.0 + 100.0 * (v[1] - v[0] ** 2.0) ** 2.0


@tg.kernel
def sincos(x: tg.array[tg.float64], s: tg.float64, a: tg.array[tg.float64], b: tg.array[tg.float64]):
    i = tg.tid()
    a[i] = tg.sin(x[i]) * s
    b[i] = tg.cos(x[i])


@tg.kernel
def gather(idx: tg.array[tg.int32], table: tg.array[tg.float64], out: tg.array[tg.float64]):
    i = tg.tid()
    out[i] = table[idx[i]] * 2.0


@tg.kernel
def row_sums(m: tg.array2d[tg.float64], out: tg.array[tg.float64]):
    i = tg.tid()
    s = tg.float64(0.0)
    for j in range(m.shape[1]):
        s += m[i, j] * m[i, j]
    out[i] = s


@tg.kernel
def outer(a: tg.array[tg.float64], b: tg.array[tg.float64], out: tg.array2d[tg.float64]):
    i, j = tg.tid()
    out[i, j] = a[i] * b[j]


@tg.kernel
def scale_vec(v: tg.array[tg.vec3d], s: tg.float64, k: int, out: tg.array[tg.vec3d]):
    i = tg.tid()
    out[i] = v[i] * (s * tg.float64(k))


@tg.kernel(enable_backward=False)
def fwd_only(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = x[i] + 1.0


@tg.kernel
def square32(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def count_pos(x: tg.array[tg.float64], n: tg.array[tg.int32]):
    i = tg.tid()
    if x[i] > 0.0:
        tg.atomic_add(n, 0, 1)
