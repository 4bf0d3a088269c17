"""The kernel corpus (issue 16): realistic kernels written the way public Warp examples write
them (``import tapegrad as wp``), each with the data to launch it. ``test_lang_corpus.py``
compiles them all on the CPU, runs them, and checks the adjoints of the differentiable ones
against float64 finite differences.

Groups: particles and cloth, SPH-like neighbour loops (no hash grids), FDTD and stencils,
Navier-Stokes pieces, ray marching and intersection, losses, geometry / FEM / linear algebra,
and kernels that exercise the issue-16 language (structs, tuples, generics, random, atomics).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import tapegrad as wp

F = wp.float64
V3 = wp.vec3d
arr = wp.array(dtype=F)
arr2 = wp.array2d(dtype=F)
varr = wp.array(dtype=V3)
iarr = wp.array(dtype=int)
GRAVITY = wp.constant(-9.81)
KS = 40.0
KD = 0.5


@dataclass
class Case:
    """One corpus kernel: its launch grid, arguments (``A`` for arrays, plain values for scalars),
    which arguments are outputs (for the loss sum(w * out)) and whether it is differentiable."""

    kernel: Any
    dim: Any
    args: list
    outputs: tuple
    grad: bool = True
    atol: float = 1e-7
    rtol: float = 1e-5
    name: str = field(default="")


@dataclass
class A:
    """An array argument: numpy data and the tapegrad dtype."""

    data: np.ndarray
    dtype: Any = F


CASES: list = []
_rng = np.random.default_rng(1234)


def case(dim, args, outputs, **kw):
    def deco(k):
        CASES.append(Case(k, dim, args, outputs, name=k.__name__, **kw))
        return k
    return deco


def rnd(*shape, lo=-1.0, hi=1.0):
    return _rng.uniform(lo, hi, shape)


def v3(n, lo=-1.0, hi=1.0):
    return A(rnd(n, 3, lo=lo, hi=hi), V3)


def z(*shape, dtype=F):
    return A(np.zeros(shape), dtype)


def zv(n):
    return A(np.zeros((n, 3)), V3)


N = 5
SPRINGS = np.array([[0, 1], [1, 2], [2, 3], [3, 4], [0, 2], [1, 3]], np.int32)

# ---------------------------------------------------------------- particles and cloth


@case(N, [v3(N), v3(N), 0.01, zv(N), zv(N)], (3, 4))
@wp.kernel
def integrate_particles(x: varr, v: varr, dt: F, x_new: varr, v_new: varr):
    tid = wp.tid()
    v1 = v[tid] + wp.vec3d(0.0, GRAVITY, 0.0) * dt
    x_new[tid] = x[tid] + v1 * dt
    v_new[tid] = v1


@case(N, [v3(N), 0.3, zv(N)], (2,))
@wp.kernel
def apply_drag(v: varr, k: F, out: varr):
    tid = wp.tid()
    vel = v[tid]
    speed = wp.length(vel)
    out[tid] = vel - vel * (k * speed)


@case(N, [v3(N, -1.0, 1.0), v3(N), 0.8, zv(N), zv(N)], (3, 4))
@wp.kernel
def ground_collision(x: varr, v: varr, restitution: F, x_out: varr, v_out: varr):
    tid = wp.tid()
    p = x[tid]
    vel = v[tid]
    if p[1] < 0.05:
        p = wp.vec3d(p[0], 0.05, p[2])
        vel = wp.vec3d(vel[0], -vel[1] * restitution, vel[2])
    x_out[tid] = p
    v_out[tid] = vel


@case(N, [v3(N), A(rnd(N, lo=0.5, hi=2.0)), z(1)], (2,))
@wp.kernel
def kinetic_energy(v: varr, m: arr, e: arr):
    tid = wp.tid()
    wp.atomic_add(e, 0, 0.5 * m[tid] * wp.dot(v[tid], v[tid]))


@case(len(SPRINGS), [v3(N), v3(N), A(SPRINGS[:, 0], wp.int32), A(SPRINGS[:, 1], wp.int32),
                     A(rnd(len(SPRINGS), lo=0.5, hi=1.0)), zv(N)], (5,))
@wp.kernel
def eval_springs(x: varr, v: varr, ia: iarr, ib: iarr, rest: arr, f: varr):
    tid = wp.tid()
    i = ia[tid]
    j = ib[tid]
    xij = x[i] - x[j]
    vij = v[i] - v[j]
    ln = wp.length(xij)
    dir = xij / ln
    c = ln - rest[tid]
    dcdt = wp.dot(dir, vij)
    fs = dir * (KS * c + KD * dcdt)
    wp.atomic_sub(f, i, fs)
    wp.atomic_add(f, j, fs)


@case(N, [v3(N), v3(N), zv(N), A(rnd(N, lo=0.5, hi=1.5)), 0.01, zv(N), zv(N)], (5, 6))
@wp.kernel
def semi_implicit_euler(x: varr, v: varr, f: varr, inv_m: arr, dt: F, x_out: varr, v_out: varr):
    tid = wp.tid()
    v1 = v[tid] + (f[tid] * inv_m[tid] + wp.vec3d(0.0, GRAVITY, 0.0)) * dt
    x_out[tid] = x[tid] + v1 * dt
    v_out[tid] = v1


@case(N, [v3(N), v3(N), 0.02, zv(N)], (3,))
@wp.kernel
def verlet_step(x: varr, x_prev: varr, dt: F, x_out: varr):
    tid = wp.tid()
    a = wp.vec3d(0.0, GRAVITY, 0.0)
    x_out[tid] = x[tid] * 2.0 - x_prev[tid] + a * (dt * dt)


@case(len(SPRINGS), [v3(N), A(SPRINGS[:, 0], wp.int32), A(SPRINGS[:, 1], wp.int32),
                     A(rnd(len(SPRINGS), lo=0.5, hi=1.0)), zv(N)], (4,))
@wp.kernel
def distance_constraint(x: varr, ia: iarr, ib: iarr, rest: arr, dx: varr):
    tid = wp.tid()
    i = ia[tid]
    j = ib[tid]
    d = x[i] - x[j]
    ln = wp.length(d)
    corr = d * ((ln - rest[tid]) / ln * 0.5)
    wp.atomic_sub(dx, i, corr)
    wp.atomic_add(dx, j, corr)


@case(N, [v3(N, -2.0, 2.0), zv(N)], (1,))
@wp.kernel
def clamp_to_box(x: varr, out: varr):
    tid = wp.tid()
    p = x[tid]
    out[tid] = wp.vec3d(wp.clamp(p[0], -1.5, 1.5), wp.clamp(p[1], -1.7, 1.7), wp.clamp(p[2], -1.3, 1.3))


@case(8, [A(rnd(8, 3, lo=0.0, hi=0.999), V3), 4, A(np.zeros(64, np.int32), wp.int32), A(np.zeros(8, np.int32),
                                                                                         wp.int32)], (), grad=False)
@wp.kernel
def bin_particles(x: varr, res: int, counts: iarr, cell_of: iarr):
    tid = wp.tid()
    p = x[tid]
    ci = int(p[0] * F(res))
    cj = int(p[1] * F(res))
    ck = int(p[2] * F(res))
    c = (ci * res + cj) * res + ck
    cell_of[tid] = c
    wp.atomic_add(counts, c, 1)


# ---------------------------------------------------------------- SPH-like neighbour loops

@case(N, [v3(N), N, 1.5, z(N)], (3,))
@wp.kernel
def sph_density(x: varr, n: int, h: F, rho: arr):
    i = wp.tid()
    s = F(0.0)
    for j in range(n):
        r2 = wp.length_sq(x[i] - x[j])
        if r2 < h * h:
            q = h * h - r2
            s += q * q * q
    rho[i] = s * (315.0 / (64.0 * math.pi * h ** 9.0))


@case(N, [v3(N), A(rnd(N, lo=1.0, hi=2.0)), N, 1.5, 1.2, zv(N)], (5,))
@wp.kernel
def sph_pressure_force(x: varr, rho: arr, n: int, h: F, k: F, f: varr):
    i = wp.tid()
    pi_ = k * (rho[i] - 1.0)
    acc = wp.vec3d(0.0, 0.0, 0.0)
    for j in range(n):
        if j == i:
            continue
        d = x[i] - x[j]
        r = wp.length(d)
        if r < h:
            pj = k * (rho[j] - 1.0)
            w = (h - r) * (h - r)
            acc = acc + d / r * ((pi_ + pj) / (2.0 * rho[j]) * w)
    f[i] = acc


@case(N, [v3(N, -2.0, 2.0), A(rnd(N, lo=0.5, hi=1.5)), N, 0.1, zv(N)], (4,))
@wp.kernel
def nbody_gravity(x: varr, m: arr, n: int, eps: F, a: varr):
    i = wp.tid()
    acc = wp.vec3d()
    for j in range(n):
        d = x[j] - x[i]
        r2 = wp.dot(d, d) + eps * eps
        acc += d * (m[j] / (r2 * wp.sqrt(r2)))
    a[i] = acc


@case(N, [v3(N, -2.0, 2.0), N, 0.5, 1.0, z(1)], (4,))
@wp.kernel
def lennard_jones_energy(x: varr, n: int, sigma: F, eps: F, e: arr):
    i = wp.tid()
    s = F(0.0)
    for j in range(i + 1, n):
        r2 = wp.length_sq(x[i] - x[j]) + 0.25
        sr6 = (sigma * sigma / r2) ** 3.0
        s += 4.0 * eps * (sr6 * sr6 - sr6)
    wp.atomic_add(e, 0, s)


@case(N, [v3(N), v3(N), N, 1.2, 0.3, zv(N)], (5,))
@wp.kernel
def xsph_viscosity(x: varr, v: varr, n: int, h: F, c: F, out: varr):
    i = wp.tid()
    dv = wp.vec3d()
    for j in range(n):
        if j == i:
            continue
        r = wp.length(x[i] - x[j])
        w = wp.max(h - r, 0.0)
        dv += (v[j] - v[i]) * (w * w)
    out[i] = v[i] + dv * c


# ---------------------------------------------------------------- FDTD and stencils

NX = 8


@case(NX, [A(rnd(NX)), A(rnd(NX)), 0.3, z(NX)], (3,))
@wp.kernel
def wave_1d(u: arr, u_prev: arr, c2: F, u_next: arr):
    i = wp.tid()
    n = len(u)
    left = u[wp.max(i - 1, 0)]
    right = u[wp.min(i + 1, n - 1)]
    u_next[i] = 2.0 * u[i] - u_prev[i] + c2 * (left - 2.0 * u[i] + right)


@case((6, 6), [A(rnd(6, 6)), 0.2, z(6, 6)], (2,))
@wp.kernel
def heat_2d(t: arr2, alpha: F, t_out: arr2):
    i, j = wp.tid()
    if i == 0 or j == 0 or i == 5 or j == 5:
        t_out[i, j] = t[i, j]
        return
    lap = t[i - 1, j] + t[i + 1, j] + t[i, j - 1] + t[i, j + 1] - 4.0 * t[i, j]
    t_out[i, j] = t[i, j] + alpha * lap


@case(NX, [A(rnd(NX)), A(rnd(NX)), 0.5, 0.4, z(NX), z(NX)], (4, 5))
@wp.kernel
def maxwell_1d(e: arr, h: arr, ce: F, ch: F, e_out: arr, h_out: arr):
    i = wp.tid()
    n = len(e)
    h_new = h[i] - ch * (e[(i + 1) % n] - e[i])
    h_left = h[(i + n - 1) % n] - ch * (e[i] - e[(i + n - 1) % n])
    h_out[i] = h_new
    e_out[i] = e[i] - ce * (h_new - h_left)


@case(NX, [A(rnd(NX)), A(rnd(NX)), 0.1, z(NX)], (3,))
@wp.kernel
def upwind_advection(q: arr, vel: arr, dt_dx: F, q_out: arr):
    i = wp.tid()
    n = len(q)
    u = vel[i]
    if u > 0.0:
        q_out[i] = q[i] - dt_dx * u * (q[i] - q[(i + n - 1) % n])
    else:
        q_out[i] = q[i] - dt_dx * u * (q[(i + 1) % n] - q[i])


@case((5, 5), [A(rnd(5, 5)), z(5, 5)], (1,))
@wp.kernel
def laplacian_periodic(f: arr2, out: arr2):
    i, j = wp.tid()
    n = f.shape[0]
    m = f.shape[1]
    out[i, j] = (f[(i + 1) % n, j] + f[(i + n - 1) % n, j] + f[i, (j + 1) % m] + f[i, (j + m - 1) % m]
                 - 4.0 * f[i, j])


@case(NX, [A(rnd(NX)), 3, z(NX)], (2,))
@wp.kernel
def box_blur_1d(f: arr, r: int, out: arr):
    i = wp.tid()
    n = len(f)
    s = F(0.0)
    for k in range(-r, r + 1):
        s += f[wp.clamp(i + k, 0, n - 1)]
    out[i] = s / F(2 * r + 1)


# ---------------------------------------------------------------- Navier-Stokes pieces

G = 6


@case((G - 2, G - 2), [A(rnd(G, G)), A(rnd(G, G)), z(G, G)], (2,))
@wp.kernel
def divergence_2d(u: arr2, v: arr2, div: arr2):
    i, j = wp.tid()
    i += 1
    j += 1
    div[i, j] = 0.5 * (u[i + 1, j] - u[i - 1, j] + v[i, j + 1] - v[i, j - 1])


@case((G - 2, G - 2), [A(rnd(G, G)), A(rnd(G, G)), z(G, G)], (2,))
@wp.kernel
def pressure_jacobi(p: arr2, div: arr2, p_out: arr2):
    i, j = wp.tid()
    i += 1
    j += 1
    p_out[i, j] = 0.25 * (p[i - 1, j] + p[i + 1, j] + p[i, j - 1] + p[i, j + 1] - div[i, j])


@case((G - 2, G - 2), [A(rnd(G, G)), A(rnd(G, G)), A(rnd(G, G)), z(G, G), z(G, G)], (3, 4))
@wp.kernel
def project_velocity(u: arr2, v: arr2, p: arr2, u_out: arr2, v_out: arr2):
    i, j = wp.tid()
    i += 1
    j += 1
    u_out[i, j] = u[i, j] - 0.5 * (p[i + 1, j] - p[i - 1, j])
    v_out[i, j] = v[i, j] - 0.5 * (p[i, j + 1] - p[i, j - 1])


@wp.func
def bilinear(f: arr2, x: F, y: F):
    n = f.shape[0]
    m = f.shape[1]
    x = wp.clamp(x, 0.0, F(n - 1) - 1.0e-6)
    y = wp.clamp(y, 0.0, F(m - 1) - 1.0e-6)
    i = int(wp.floor(x))
    j = int(wp.floor(y))
    fx = x - F(i)
    fy = y - F(j)
    a = f[i, j] * (1.0 - fx) + f[i + 1, j] * fx
    b = f[i, j + 1] * (1.0 - fx) + f[i + 1, j + 1] * fx
    return a * (1.0 - fy) + b * fy


@case((G, G), [A(rnd(G, G)), A(rnd(G, G, lo=-0.4, hi=0.4)), A(rnd(G, G, lo=-0.4, hi=0.4)), 0.7, z(G, G)], (4,))
@wp.kernel
def semi_lagrangian_advect(q: arr2, u: arr2, v: arr2, dt: F, q_out: arr2):
    i, j = wp.tid()
    x = F(i) - dt * u[i, j]
    y = F(j) - dt * v[i, j]
    q_out[i, j] = bilinear(q, x, y)


@case((G - 2, G - 2), [A(rnd(G, G)), A(rnd(G, G)), z(G, G)], (2,))
@wp.kernel
def vorticity_2d(u: arr2, v: arr2, w: arr2):
    i, j = wp.tid()
    i += 1
    j += 1
    w[i, j] = 0.5 * (v[i + 1, j] - v[i - 1, j] - u[i, j + 1] + u[i, j - 1])


@case((G - 2, G - 2), [A(rnd(G, G)), A(rnd(G, G)), 0.05, z(G, G)], (3,))
@wp.kernel
def viscous_diffusion(u: arr2, u_prev: arr2, nu: F, u_out: arr2):
    i, j = wp.tid()
    i += 1
    j += 1
    lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
    u_out[i, j] = u_prev[i, j] + nu * lap


# ---------------------------------------------------------------- ray marching and intersection

@wp.func
def sdf_sphere(p: V3, c: V3, r: F):
    return wp.length(p - c) - r


@wp.func
def sdf_box(p: V3, b: V3):
    q = wp.abs(p) - b
    return wp.length(wp.max(q, wp.vec3d())) + wp.min(wp.max(q[0], wp.max(q[1], q[2])), 0.0)


@wp.func
def smooth_min(a: F, b: F, k: F):
    h = wp.clamp(0.5 + 0.5 * (b - a) / k, 0.0, 1.0)
    return b * (1.0 - h) + a * h - k * h * (1.0 - h)


@wp.func
def scene(p: V3, c: V3):
    return smooth_min(sdf_sphere(p, c, 0.5), sdf_box(p - wp.vec3d(0.0, -1.0, 0.0), wp.vec3d(2.0, 0.2, 2.0)), 0.3)


@case((3, 3), [A(np.array([[0.1, 0.2, 0.1]]), V3), z(3, 3)], (1,), rtol=1e-4, atol=1e-6)
@wp.kernel
def ray_march(center: varr, depth: arr2):
    i, j = wp.tid()
    ro = wp.vec3d(0.0, 0.0, -3.0)
    rd = wp.normalize(wp.vec3d(F(i - 1) * 0.2, F(j - 1) * 0.2, 1.0))
    t = F(0.0)
    c = center[0]
    for k in range(32):
        d = scene(ro + rd * t, c)
        t += d
        if d < 1.0e-4 or t > 10.0:
            break
    depth[i, j] = t


@case(4, [v3(4, -0.3, 0.3), v3(4, -1.0, 1.0), z(4)], (2,))
@wp.kernel
def ray_sphere_hit(origins: varr, dirs: varr, t_hit: arr):
    tid = wp.tid()
    o = origins[tid] - wp.vec3d(0.0, 0.0, 4.0)
    d = wp.normalize(dirs[tid] * 0.1 + wp.vec3d(0.0, 0.0, 1.0))
    b = wp.dot(o, d)
    c = wp.dot(o, o) - 1.0
    disc = b * b - c
    if disc < 0.0:
        t_hit[tid] = -1.0
    else:
        t_hit[tid] = -b - wp.sqrt(disc)


@case(4, [v3(4), v3(4), z(4)], (2,))
@wp.kernel
def ray_plane(origins: varr, dirs: varr, t_out: arr):
    tid = wp.tid()
    n = wp.vec3d(0.0, 1.0, 0.0)
    d = dirs[tid] + wp.vec3d(0.0, -3.0, 0.0)
    t_out[tid] = (2.0 - wp.dot(origins[tid], n)) / wp.dot(d, n)


@case(N, [v3(N), v3(N), v3(1), z(N)], (3,))
@wp.kernel
def lambert_shade(normals: varr, albedo_v: varr, light: varr, out: arr):
    tid = wp.tid()
    n = wp.normalize(normals[tid])
    ln = wp.normalize(light[0] + wp.vec3d(0.0, 2.0, 0.0))
    out[tid] = wp.max(wp.dot(n, ln), 0.0) * wp.length(albedo_v[tid]) + 0.1


@case((4, 3), [z(4, 3)], (), grad=False)
@wp.kernel
def camera_rays(out: arr2):
    i, j = wp.tid()
    aspect = F(4) / F(3)
    u = (F(i) + 0.5) / 4.0 * 2.0 - 1.0
    v = (F(j) + 0.5) / 3.0 * 2.0 - 1.0
    rd = wp.normalize(wp.vec3d(u * aspect, v, -1.5))
    out[i, j] = rd[2]


@case(N, [v3(N, -2.0, 2.0), z(N)], (1,))
@wp.kernel
def sdf_normals(p: varr, out: arr):
    tid = wp.tid()
    q = p[tid]
    c = wp.vec3d(0.2, 0.1, 0.0)
    e = F(1.0e-3)
    g = wp.vec3d(sdf_sphere(q + wp.vec3d(e, 0.0, 0.0), c, 0.7) - sdf_sphere(q - wp.vec3d(e, 0.0, 0.0), c, 0.7),
                 sdf_sphere(q + wp.vec3d(0.0, e, 0.0), c, 0.7) - sdf_sphere(q - wp.vec3d(0.0, e, 0.0), c, 0.7),
                 sdf_sphere(q + wp.vec3d(0.0, 0.0, e), c, 0.7) - sdf_sphere(q - wp.vec3d(0.0, 0.0, e), c, 0.7))
    out[tid] = wp.dot(wp.normalize(g), q)


# ---------------------------------------------------------------- losses

@case(NX, [A(rnd(NX)), A(rnd(NX)), z(1)], (2,))
@wp.kernel
def mse_loss(pred: arr, target: arr, loss: arr):
    i = wp.tid()
    d = pred[i] - target[i]
    wp.atomic_add(loss, 0, d * d / F(len(pred)))


@case(NX, [A(rnd(NX, lo=-3, hi=3)), A(rnd(NX)), 1.0, z(1)], (3,))
@wp.kernel
def huber_loss(pred: arr, target: arr, delta: F, loss: arr):
    i = wp.tid()
    d = wp.abs(pred[i] - target[i])
    ln = wp.select(d < delta, delta * (d - 0.5 * delta), 0.5 * d * d)
    wp.atomic_add(loss, 0, ln)


@case(3, [A(rnd(3, 5, lo=-2, hi=2)), A(np.array([1, 4, 0], np.int32), wp.int32), z(1)], (2,))
@wp.kernel
def cross_entropy(logits: arr2, labels: iarr, loss: arr):
    i = wp.tid()
    n = logits.shape[1]
    m = logits[i, 0]
    for k in range(1, n):
        m = wp.max(m, logits[i, k])
    s = F(0.0)
    for k in range(n):
        s += wp.exp(logits[i, k] - m)
    wp.atomic_add(loss, 0, m + wp.log(s) - logits[i, labels[i]])


@case(N, [v3(N), v3(N), z(N)], (2,))
@wp.kernel
def cosine_similarity(a: varr, b: varr, out: arr):
    i = wp.tid()
    out[i] = wp.dot(a[i], b[i]) / (wp.length(a[i]) * wp.length(b[i]) + 1.0e-8)


@case(NX, [A(rnd(NX, lo=-3, hi=3)), A((rnd(NX) > 0).astype(np.float64)), z(1)], (2,))
@wp.kernel
def bce_with_logits(x: arr, y: arr, loss: arr):
    i = wp.tid()
    xi = x[i]
    ln = wp.max(xi, 0.0) - xi * y[i] + wp.log(1.0 + wp.exp(-wp.abs(xi)))
    wp.atomic_add(loss, 0, ln)


@case(N, [v3(N), v3(N), v3(N), 0.5, z(1)], (4,))
@wp.kernel
def triplet_margin(anchor: varr, pos: varr, neg: varr, margin: F, loss: arr):
    i = wp.tid()
    dp = wp.length(anchor[i] - pos[i])
    dn = wp.length(anchor[i] - neg[i])
    wp.atomic_add(loss, 0, wp.max(dp - dn + margin, 0.0))


@case((4, 4), [A(rnd(5, 5)), z(1)], (1,))
@wp.kernel
def total_variation(img: arr2, loss: arr):
    i, j = wp.tid()
    dx = img[i + 1, j] - img[i, j]
    dy = img[i, j + 1] - img[i, j]
    wp.atomic_add(loss, 0, wp.sqrt(dx * dx + dy * dy + 1.0e-6))


@case(N, [v3(N), v3(4), 4, z(1)], (3,))
@wp.kernel
def chamfer_distance(a: varr, b: varr, nb: int, loss: arr):
    i = wp.tid()
    best = F(1.0e30)
    for j in range(nb):
        best = wp.min(best, wp.length_sq(a[i] - b[j]))
    wp.atomic_add(loss, 0, best)


@case(NX, [A(rnd(NX, lo=0.1, hi=1.0)), A(rnd(NX, lo=0.1, hi=1.0)), z(1)], (2,))
@wp.kernel
def kl_divergence(p: arr, q: arr, loss: arr):
    i = wp.tid()
    wp.atomic_add(loss, 0, p[i] * (wp.log(p[i]) - wp.log(q[i])))


@case(NX, [A(rnd(NX, lo=-2, hi=2)), A(rnd(NX)), 0.3, z(1)], (3,))
@wp.kernel
def quantile_loss(pred: arr, target: arr, tau: F, loss: arr):
    i = wp.tid()
    e = target[i] - pred[i]
    wp.atomic_add(loss, 0, wp.max(tau * e, (tau - 1.0) * e))


@case(NX, [A(rnd(NX, lo=-3, hi=3)), z(NX)], (1,))
@wp.kernel
def softplus_sigmoid(x: arr, out: arr):
    i = wp.tid()
    sp = wp.log(1.0 + wp.exp(x[i]))
    sig = 1.0 / (1.0 + wp.exp(-x[i]))
    out[i] = sp * sig + wp.tanh(x[i])


# ---------------------------------------------------------------- geometry, FEM, linear algebra

@case(3, [A(rnd(3, 4)), A(rnd(4)), z(3)], (2,))
@wp.kernel
def matvec(m: arr2, x: arr, y: arr):
    i = wp.tid()
    s = F(0.0)
    for k in range(m.shape[1]):
        s += m[i, k] * x[k]
    y[i] = s


@case((3, 2), [A(rnd(3, 4)), A(rnd(4, 2)), z(3, 2)], (2,))
@wp.kernel
def matmul(a: arr2, b: arr2, c: arr2):
    i, j = wp.tid()
    s = F(0.0)
    for k in range(a.shape[1]):
        s += a[i, k] * b[k, j]
    c[i, j] = s


@case(N, [v3(N), A(rnd(1, 4), wp.quatd), zv(N)], (2,))
@wp.kernel
def rotate_points(x: varr, q: wp.array(dtype=wp.quatd), out: varr):
    tid = wp.tid()
    r = wp.normalize(q[0])
    out[tid] = wp.quat_rotate(r, x[tid])


@case(N, [v3(N), A(rnd(1, 3, 3), wp.mat33d), v3(1), zv(N)], (3,))
@wp.kernel
def rigid_transform(x: varr, rot: wp.array(dtype=wp.mat33d), t: varr, out: varr):
    tid = wp.tid()
    out[tid] = rot[0] * x[tid] + t[0]


@case(N, [v3(N), A(rnd(2, 3, 3), wp.mat33d), A(rnd(N, 2, lo=0, hi=1)), zv(N)], (3,))
@wp.kernel
def linear_blend_skinning(x: varr, bones: wp.array(dtype=wp.mat33d), w: arr2, out: varr):
    tid = wp.tid()
    p = wp.vec3d()
    for b in range(2):
        p += (bones[b] * x[tid]) * w[tid, b]
    out[tid] = p


TRIS = np.array([[0, 1, 2], [1, 3, 2], [2, 3, 4]], np.int32)


@case(len(TRIS), [v3(N), A(TRIS.reshape(-1), wp.int32), z(1)], (2,))
@wp.kernel
def triangle_area(x: varr, idx: iarr, area: arr):
    t = wp.tid()
    a = x[idx[t * 3 + 0]]
    b = x[idx[t * 3 + 1]]
    c = x[idx[t * 3 + 2]]
    wp.atomic_add(area, 0, 0.5 * wp.length(wp.cross(b - a, c - a)))


@case(len(TRIS), [v3(N), A(TRIS.reshape(-1), wp.int32), zv(N)], (2,))
@wp.kernel
def vertex_normals(x: varr, idx: iarr, nrm: varr):
    t = wp.tid()
    i = idx[t * 3 + 0]
    j = idx[t * 3 + 1]
    k = idx[t * 3 + 2]
    n = wp.cross(x[j] - x[i], x[k] - x[i])
    wp.atomic_add(nrm, i, n)
    wp.atomic_add(nrm, j, n)
    wp.atomic_add(nrm, k, n)


@case(1, [A(np.eye(4, 3)[[0, 1, 2, 3]][:, :3] + rnd(4, 3, lo=-0.1, hi=0.1), V3), z(1)], (1,))
@wp.kernel
def tet_volume(x: varr, vol: arr):
    a = x[0]
    m = wp.mat33d(x[1][0] - a[0], x[2][0] - a[0], x[3][0] - a[0],
                  x[1][1] - a[1], x[2][1] - a[1], x[3][1] - a[1],
                  x[1][2] - a[2], x[2][2] - a[2], x[3][2] - a[2])
    vol[0] = wp.determinant(m) / 6.0


@case(1, [A(np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], np.float64) + rnd(4, 3, lo=-0.1, hi=0.1), V3),
          A(np.eye(3)[None], wp.mat33d), 1.0, 2.0, z(1)], (4,), rtol=1e-4)
@wp.kernel
def neo_hookean_energy(x: varr, dm_inv: wp.array(dtype=wp.mat33d), mu: F, lam: F, e: arr):
    a = x[0]
    ds = wp.mat33d(x[1][0] - a[0], x[2][0] - a[0], x[3][0] - a[0],
                   x[1][1] - a[1], x[2][1] - a[1], x[3][1] - a[1],
                   x[1][2] - a[2], x[2][2] - a[2], x[3][2] - a[2])
    f = ds * dm_inv[0]
    j = wp.determinant(f)
    ic = wp.trace(wp.transpose(f) * f)
    e[0] = 0.5 * mu * (ic - 3.0) - mu * wp.log(j) + 0.5 * lam * wp.log(j) * wp.log(j)


@case(NX, [A(rnd(NX)), A(rnd(5)), z(NX)], (2,))
@wp.kernel
def horner_poly(x: arr, coeffs: arr, out: arr):
    i = wp.tid()
    s = F(0.0)
    for k in range(len(coeffs)):
        s = s * x[i] + coeffs[k]
    out[i] = s


@case(3, [A(rnd(3, 4, lo=-2, hi=2)), z(3, 4)], (1,))
@wp.kernel
def softmax_rows(x: arr2, out: arr2):
    i = wp.tid()
    n = x.shape[1]
    m = x[i, 0]
    for k in range(1, n):
        m = wp.max(m, x[i, k])
    s = F(0.0)
    for k in range(n):
        s += wp.exp(x[i, k] - m)
    for k in range(n):
        out[i, k] = wp.exp(x[i, k] - m) / s


@case(3, [A(rnd(3, 4, lo=-2, hi=2)), A(rnd(4)), A(rnd(4)), z(3, 4)], (3,))
@wp.kernel
def layer_norm(x: arr2, gamma: arr, beta: arr, out: arr2):
    i = wp.tid()
    n = x.shape[1]
    mean = F(0.0)
    for k in range(n):
        mean += x[i, k]
    mean = mean / F(n)
    var = F(0.0)
    for k in range(n):
        var += (x[i, k] - mean) * (x[i, k] - mean)
    inv = 1.0 / wp.sqrt(var / F(n) + 1.0e-5)
    for k in range(n):
        out[i, k] = (x[i, k] - mean) * inv * gamma[k] + beta[k]


@case(NX - 2, [A(rnd(NX)), A(rnd(3)), z(NX - 2)], (2,))
@wp.kernel
def conv1d(x: arr, w: arr, out: arr):
    i = wp.tid()
    s = F(0.0)
    for k in range(3):
        s += x[i + k] * w[k]
    out[i] = s


@case((3, 3), [A(rnd(4, 4)), A(rnd(3, 3, 2, lo=0.0, hi=2.9)), z(3, 3)], (2,))
@wp.kernel
def image_resample(img: arr2, coords: wp.array3d(dtype=F), out: arr2):
    i, j = wp.tid()
    out[i, j] = bilinear(img, coords[i, j, 0], coords[i, j, 1])


@case(16, [A(rnd(16, lo=0.0, hi=0.999)), A(np.zeros(4, np.int32), wp.int32)], (), grad=False)
@wp.kernel
def histogram(x: arr, bins: iarr):
    i = wp.tid()
    b = int(x[i] * F(len(bins)))
    wp.atomic_add(bins, b, 1)


# ---------------------------------------------------------------- issue-16 language in realistic use

@wp.struct
class ParticleState:
    x: V3
    v: V3
    m: F


@wp.func
def step_particle(p: ParticleState, dt: F) -> ParticleState:
    out = p
    out.v = p.v + wp.vec3d(0.0, GRAVITY, 0.0) * dt
    out.x = p.x + out.v * dt
    return out


@case(N, [v3(N), v3(N), A(rnd(N, lo=0.5, hi=2.0)), 0.05, z(N)], (4,))
@wp.kernel
def struct_particles(x: varr, v: varr, m: arr, dt: F, energy: arr):
    tid = wp.tid()
    p = ParticleState(x=x[tid], v=v[tid], m=m[tid])
    for k in range(3):
        p = step_particle(p, dt)
    energy[tid] = 0.5 * p.m * wp.dot(p.v, p.v) - p.m * GRAVITY * p.x[1]


@wp.func
def spring_force(xa: V3, xb: V3, rest: F) -> tuple[V3, F]:
    d = xa - xb
    ln = wp.length(d)
    return d * (KS * (ln - rest) / ln), 0.5 * KS * (ln - rest) * (ln - rest)


@case(len(SPRINGS), [v3(N), A(SPRINGS[:, 0], wp.int32), A(SPRINGS[:, 1], wp.int32),
                     A(rnd(len(SPRINGS), lo=0.5, hi=1.0)), zv(N), z(1)], (4, 5))
@wp.kernel
def springs_tuple(x: varr, ia: iarr, ib: iarr, rest: arr, f: varr, pe: arr):
    tid = wp.tid()
    fs, e = spring_force(x[ia[tid]], x[ib[tid]], rest[tid])
    wp.atomic_sub(f, ia[tid], fs)
    wp.atomic_add(f, ib[tid], fs)
    wp.atomic_add(pe, 0, e)


@case(N, [A(rnd(N)), A(rnd(N)), z(N)], (2,))
@wp.kernel
def generic_axpy(x: wp.array(dtype=Any), y: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = x[i] * 2.0 + y[i]


@case(64, [7, A(np.zeros(1, np.int32), wp.int32)], (), grad=False)
@wp.kernel
def monte_carlo_pi(seed: int, inside: iarr):
    tid = wp.tid()
    rng = wp.rand_init(seed, tid)
    for k in range(16):
        p = wp.sample_unit_square(rng)
        if wp.length_sq(p) < 0.25:
            wp.atomic_add(inside, 0, 1)


@case(N, [v3(N), 3, zv(N)], (2,))
@wp.kernel
def jitter_positions(x: varr, seed: int, out: varr):
    tid = wp.tid()
    rng = wp.rand_init(seed, tid)
    n = wp.vec3d(F(wp.randn(rng)), F(wp.randn(rng)), F(wp.randn(rng)))
    out[tid] = x[tid] + n * 0.01


@case(N, [A(rnd(N, 3), wp.vec3), 5, A(np.zeros((N, 3), np.float32), wp.vec3)], (), grad=False)
@wp.kernel
def curl_noise_advect(x: wp.array(dtype=wp.vec3), seed: int, out: wp.array(dtype=wp.vec3)):
    tid = wp.tid()
    s = wp.rand_init(seed)
    p = x[tid]
    out[tid] = p + wp.curlnoise(s, p, octaves=2) * 0.01 + wp.vec3(wp.noise(s, p) * 0.0)


@case(8, [A(np.full(4, -1, np.int32), wp.int32), A(np.zeros(8, np.int32), wp.int32)], (), grad=False)
@wp.kernel
def claim_slots(owner: iarr, got: iarr):
    tid = wp.tid()
    slot = tid % 4
    if wp.atomic_cas(owner, slot, -1, tid) == -1:
        got[tid] = 1
    wp.atomic_or(got, tid, 2)


@case(N, [A(rnd(N)), z(N)], (1,))
@wp.kernel
def reverse_scan(x: arr, out: arr):
    i = wp.tid()
    s = F(0.0)
    for k in reversed(range(i, len(x))):
        s = s * 0.5 + x[k]
    out[i] = s


@case(N, [v3(N), z(N)], (1,))
@wp.kernel
def vector_in_kernel(x: varr, out: arr):
    i = wp.tid()
    p = x[i]
    v5 = wp.vector(p[0], p[1], p[2], p[0] * p[1], 1.0)
    w = wp.vector(length=5, dtype=F)
    w[4] = 2.0
    out[i] = wp.dot(v5, v5) + wp.dot(v5, w) + wp.pi * p[2]
