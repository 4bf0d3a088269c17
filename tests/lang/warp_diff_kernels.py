"""Kernels for the differential audit against NVIDIA Warp (tests/lang/test_warp_differential.py).

The file is loaded twice, once with ``wp`` bound to ``warp`` and once to ``tapegrad``
(the loader sets ``WP_BACKEND`` before running it), so both run the same source text.
"""
import importlib

wp = importlib.import_module(globals().get("WP_BACKEND", "tapegrad"))


# ------------------------------------------------------------------ integer semantics

@wp.kernel
def int_divmod(a: wp.array(dtype=wp.int32), b: wp.array(dtype=wp.int32),
               q: wp.array(dtype=wp.int32), r: wp.array(dtype=wp.int32), d: wp.array(dtype=wp.int32)):
    i = wp.tid()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]
    d[i] = a[i] / b[i]


@wp.kernel
def float_divmod(a: wp.array(dtype=float), b: wp.array(dtype=float),
                 q: wp.array(dtype=float), r: wp.array(dtype=float)):
    i = wp.tid()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]


@wp.kernel
def float_to_int(x: wp.array(dtype=float), o32: wp.array(dtype=wp.int32), o8: wp.array(dtype=wp.int8),
                 ou8: wp.array(dtype=wp.uint8), o64: wp.array(dtype=wp.int64), ou32: wp.array(dtype=wp.uint32)):
    i = wp.tid()
    o32[i] = int(x[i])
    o8[i] = wp.int8(x[i])
    ou8[i] = wp.uint8(x[i])
    o64[i] = wp.int64(x[i])
    ou32[i] = wp.uint32(x[i])


@wp.kernel
def int_wrap(a: wp.array(dtype=wp.int32), b: wp.array(dtype=wp.int32), s: wp.array(dtype=wp.int32),
             m: wp.array(dtype=wp.int32), n: wp.array(dtype=wp.int32), ab: wp.array(dtype=wp.int32)):
    i = wp.tid()
    s[i] = a[i] + b[i]
    m[i] = a[i] * b[i]
    n[i] = -a[i]
    ab[i] = wp.abs(a[i])


@wp.kernel
def small_int_wrap(a: wp.array(dtype=wp.uint8), b: wp.array(dtype=wp.uint8), s: wp.array(dtype=wp.uint8),
                   d: wp.array(dtype=wp.uint8), c: wp.array(dtype=wp.int8), e: wp.array(dtype=wp.int8)):
    i = wp.tid()
    s[i] = a[i] + b[i]
    d[i] = a[i] - b[i]
    x = wp.int8(a[i])
    c[i] = x * wp.int8(3)
    e[i] = -x


@wp.kernel
def int_shifts(a: wp.array(dtype=wp.int32), b: wp.array(dtype=wp.int32), sl: wp.array(dtype=wp.int32),
               r: wp.array(dtype=wp.int32), x: wp.array(dtype=wp.int32), inv: wp.array(dtype=wp.int32)):
    i = wp.tid()
    sl[i] = a[i] << b[i]
    r[i] = a[i] >> b[i]
    x[i] = (a[i] & b[i]) | (a[i] ^ 5)
    inv[i] = ~a[i]


@wp.kernel
def mixed_promotion(x: wp.array(dtype=float), k: wp.array(dtype=wp.int32), o: wp.array(dtype=float),
                    o2: wp.array(dtype=float), o3: wp.array(dtype=wp.int32), o4: wp.array(dtype=float)):
    i = wp.tid()
    o[i] = x[i] * 2.0 + 1.0
    o2[i] = float(k[i]) / 3.0
    o3[i] = k[i] * 2 // 3
    o4[i] = 2.0 ** x[i] + x[i] ** 2.0


# ------------------------------------------------------------------ scalar math

@wp.kernel
def rounding(x: wp.array(dtype=float), r: wp.array(dtype=float), ri: wp.array(dtype=float),
             f: wp.array(dtype=float), c: wp.array(dtype=float), fr: wp.array(dtype=float),
             t: wp.array(dtype=float)):
    i = wp.tid()
    r[i] = wp.round(x[i])
    ri[i] = wp.rint(x[i])
    f[i] = wp.floor(x[i])
    c[i] = wp.ceil(x[i])
    fr[i] = wp.frac(x[i])
    t[i] = wp.trunc(x[i])


@wp.kernel
def minmax_nan(a: wp.array(dtype=float), b: wp.array(dtype=float), mn: wp.array(dtype=float),
               mx: wp.array(dtype=float), cl: wp.array(dtype=float), cl2: wp.array(dtype=float)):
    i = wp.tid()
    mn[i] = wp.min(a[i], b[i])
    mx[i] = wp.max(a[i], b[i])
    cl[i] = wp.clamp(a[i], 0.0, 1.0)
    cl2[i] = wp.clamp(0.5, a[i], b[i])


@wp.kernel
def sign_abs(x: wp.array(dtype=float), s: wp.array(dtype=float), a: wp.array(dtype=float),
             st: wp.array(dtype=float), cs: wp.array(dtype=float), si: wp.array(dtype=wp.int32)):
    i = wp.tid()
    s[i] = wp.sign(x[i])
    a[i] = wp.abs(x[i])
    st[i] = wp.step(x[i])
    cs[i] = wp.copysign(1.0, x[i])
    si[i] = wp.sign(int(x[i]))


@wp.kernel
def unary_math(x: wp.array(dtype=float), o: wp.array2d(dtype=float)):
    i = wp.tid()
    v = x[i]
    o[i, 0] = wp.sqrt(v)
    o[i, 1] = wp.log(v)
    o[i, 2] = wp.exp(v)
    o[i, 3] = wp.acos(v)
    o[i, 4] = wp.asin(v)
    o[i, 5] = wp.atan(v)
    o[i, 6] = wp.tanh(v)
    o[i, 7] = wp.cbrt(v)
    o[i, 8] = wp.pow(v, 0.5)
    o[i, 9] = wp.atan2(v, 0.0)
    o[i, 10] = wp.log2(v)
    o[i, 11] = wp.sin(v) * wp.cos(v)
    o[i, 12] = wp.erf(v)
    o[i, 13] = wp.smoothstep(0.0, 1.0, v)
    o[i, 14] = wp.pow(v, 3.0)
    o[i, 15] = wp.pow(v, 2.0)


# ------------------------------------------------------------------ vectors, matrices, quaternions, transforms

@wp.kernel
def vec_ops(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), cr: wp.array(dtype=wp.vec3),
            nz: wp.array(dtype=wp.vec3), ln: wp.array(dtype=float), dt: wp.array(dtype=float),
            op: wp.array(dtype=wp.mat33)):
    i = wp.tid()
    cr[i] = wp.cross(a[i], b[i])
    nz[i] = wp.normalize(a[i])
    ln[i] = wp.length(a[i])
    dt[i] = wp.dot(a[i], b[i])
    op[i] = wp.outer(a[i], b[i])


@wp.kernel
def mat_ops(m: wp.array(dtype=wp.mat33), v: wp.array(dtype=wp.vec3), det: wp.array(dtype=float),
            inv: wp.array(dtype=wp.mat33), mv: wp.array(dtype=wp.vec3), vm: wp.array(dtype=wp.vec3),
            mm: wp.array(dtype=wp.mat33), tr: wp.array(dtype=float)):
    i = wp.tid()
    det[i] = wp.determinant(m[i])
    inv[i] = wp.inverse(m[i])
    mv[i] = m[i] * v[i]
    vm[i] = v[i] * m[i]
    mm[i] = m[i] @ wp.transpose(m[i])
    tr[i] = wp.trace(m[i])


@wp.kernel
def mat22_44_ops(m2: wp.array(dtype=wp.mat22), m4: wp.array(dtype=wp.mat44), d2: wp.array(dtype=float),
                 d4: wp.array(dtype=float), i2: wp.array(dtype=wp.mat22), i4: wp.array(dtype=wp.mat44)):
    i = wp.tid()
    d2[i] = wp.determinant(m2[i])
    d4[i] = wp.determinant(m4[i])
    i2[i] = wp.inverse(m2[i])
    i4[i] = wp.inverse(m4[i])


@wp.kernel
def quat_ops(q: wp.array(dtype=wp.quat), v: wp.array(dtype=wp.vec3), r: wp.array(dtype=wp.vec3),
             ri: wp.array(dtype=wp.vec3), qn: wp.array(dtype=wp.quat), qi: wp.array(dtype=wp.quat),
             qm: wp.array(dtype=wp.mat33), qq: wp.array(dtype=wp.quat)):
    i = wp.tid()
    r[i] = wp.quat_rotate(q[i], v[i])
    ri[i] = wp.quat_rotate_inv(q[i], v[i])
    qn[i] = wp.normalize(q[i])
    qi[i] = wp.quat_inverse(q[i])
    qm[i] = wp.quat_to_matrix(q[i])
    qq[i] = q[i] * wp.quat_from_axis_angle(wp.normalize(v[i]), 0.3)


@wp.kernel
def xform_ops(t: wp.array(dtype=wp.transform), p: wp.array(dtype=wp.vec3), tp: wp.array(dtype=wp.vec3),
              tv: wp.array(dtype=wp.vec3), ti: wp.array(dtype=wp.transform), tm: wp.array(dtype=wp.transform)):
    i = wp.tid()
    tp[i] = wp.transform_point(t[i], p[i])
    tv[i] = wp.transform_vector(t[i], p[i])
    ti[i] = wp.transform_inverse(t[i])
    tm[i] = wp.transform_multiply(t[i], ti[i])


# ------------------------------------------------------------------ atomics

@wp.kernel
def atomic_returns(acc: wp.array(dtype=float), iacc: wp.array(dtype=wp.int32), old: wp.array(dtype=float),
                   iold: wp.array(dtype=wp.int32), mn: wp.array(dtype=float), mx: wp.array(dtype=float)):
    i = wp.tid()
    # a single thread, so the returned old values are deterministic
    old[0] = wp.atomic_add(acc, 0, 2.5)
    old[1] = wp.atomic_sub(acc, 0, 1.0)
    old[2] = wp.atomic_min(mn, 0, -3.0)
    old[3] = wp.atomic_max(mx, 0, 7.0)
    old[4] = wp.atomic_add(acc, 0, 0.0)
    iold[0] = wp.atomic_add(iacc, 0, 5)
    iold[1] = wp.atomic_exch(iacc, 0, 11)
    iold[2] = wp.atomic_cas(iacc, 0, 11, 4)
    iold[3] = wp.atomic_cas(iacc, 0, 99, 1)
    iold[4] = iacc[0] + i


# ------------------------------------------------------------------ random numbers and noise

@wp.kernel
def random_stream(seed: int, f: wp.array(dtype=float), n: wp.array(dtype=float), u: wp.array(dtype=wp.uint32),
                  ri: wp.array(dtype=wp.int32), fr: wp.array(dtype=float), v: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    s = wp.rand_init(seed, i)
    f[i] = wp.randf(s)
    n[i] = wp.randn(s)
    u[i] = wp.randu(s)
    ri[i] = wp.randi(s, -5, 17)
    fr[i] = wp.randf(s, -2.0, 3.0)
    v[i] = wp.sample_unit_sphere_surface(s)


@wp.kernel
def random_seed_only(seed: int, f: wp.array(dtype=float), p: wp.array(dtype=wp.uint32)):
    i = wp.tid()
    s = wp.rand_init(seed + i)
    f[i] = wp.randf(s)
    p[i] = wp.poisson(s, 3.5)


@wp.kernel
def noise_fns(seed: int, x: wp.array(dtype=wp.vec3), n1: wp.array(dtype=float), n2: wp.array(dtype=float),
              n3: wp.array(dtype=float), n4: wp.array(dtype=float), pn: wp.array(dtype=float),
              cn: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    s = wp.rand_init(seed)
    p = x[i]
    n1[i] = wp.noise(s, p[0])
    n2[i] = wp.noise(s, wp.vec2(p[0], p[1]))
    n3[i] = wp.noise(s, p)
    n4[i] = wp.noise(s, wp.vec4(p[0], p[1], p[2], 0.7))
    pn[i] = wp.pnoise(s, p, 4, 4, 4)
    cn[i] = wp.curlnoise(s, p)


# ------------------------------------------------------------------ arrays, loops, structs

@wp.kernel
def read2d(a: wp.array2d(dtype=float), o: wp.array2d(dtype=float)):
    i, j = wp.tid()
    o[i, j] = a[i, j] * 10.0 + float(a.shape[1])


@wp.kernel
def loops(n: wp.array(dtype=wp.int32), o: wp.array(dtype=wp.int32), w: wp.array(dtype=wp.int32)):
    i = wp.tid()
    acc = int(0)
    for k in range(n[i]):
        if k == 2:
            continue
        if k > 6:
            break
        acc += k * k
    for k in range(10, 0, -3):
        acc += k
    o[i] = acc
    c = n[i]
    steps = int(0)
    while c != 1 and steps < 100:
        if c % 2 == 0:
            c = c // 2
        else:
            c = 3 * c + 1
        steps += 1
    w[i] = steps


@wp.struct
class Params:
    scale: float
    offset: wp.vec3
    count: int


@wp.kernel
def struct_use(p: Params, x: wp.array(dtype=wp.vec3), o: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    o[i] = x[i] * p.scale + p.offset * float(p.count)


# ------------------------------------------------------------------ gradients

@wp.kernel
def grad_scalar(x: wp.array(dtype=float), y: wp.array(dtype=float), col: int, o: wp.array(dtype=float)):
    # one formula per launch (col): the adjoints of untaken branches never run, so an inf or NaN
    # partial of one formula cannot leak into another through a zero seed
    i = wp.tid()
    a = x[i]
    b = y[i]
    r = float(0.0)
    if col == 0:
        r = wp.sqrt(a)
    elif col == 1:
        r = wp.abs(a)
    elif col == 2:
        r = wp.min(a, b)
    elif col == 3:
        r = wp.max(a, b)
    elif col == 4:
        r = wp.clamp(a, -1.0, 1.0)
    elif col == 5:
        r = wp.pow(a, b)
    elif col == 6:
        r = wp.atan2(a, b)
    elif col == 7:
        r = wp.floor(a) + wp.round(b)
    elif col == 8:
        r = a % b
    elif col == 9:
        r = wp.sign(a) * b
    elif col == 10:
        r = wp.where(a > b, a * a, b * 3.0)
    elif col == 11:
        r = wp.acos(wp.clamp(a, -1.0, 1.0))
    elif col == 12:
        r = wp.step(a) * b
    elif col == 13:
        r = wp.frac(a)
    elif col == 14:
        r = wp.log(a) + wp.exp(b)
    elif col == 15:
        r = a / b
    elif col == 16:
        r = wp.cbrt(a)
    elif col == 17:
        r = wp.tanh(a) * wp.sinh(b)
    elif col == 18:
        r = wp.asin(wp.clamp(b, -1.0, 1.0))
    elif col == 19:
        r = wp.smoothstep(-1.0, 1.0, a)
    elif col == 20:
        r = wp.abs(a) ** b
    o[i] = r


@wp.kernel
def grad_vec(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), q: wp.array(dtype=wp.quat),
             m: wp.array(dtype=wp.mat33), o: wp.array2d(dtype=float)):
    i = wp.tid()
    u = a[i]
    v = b[i]
    c = wp.cross(u, v)
    n = wp.normalize(u)
    r = wp.quat_rotate(q[i], v)
    mi = wp.inverse(m[i])
    o[i, 0] = c[0] + 2.0 * c[1] + 3.0 * c[2]
    o[i, 1] = n[0] + 2.0 * n[1] + 3.0 * n[2]
    o[i, 2] = wp.length(u)
    o[i, 3] = r[0] + 2.0 * r[1] + 3.0 * r[2]
    o[i, 4] = wp.determinant(m[i])
    o[i, 5] = mi[0, 0] + 2.0 * mi[1, 2] + 3.0 * mi[2, 1]
    o[i, 6] = wp.length_sq(u) * wp.dot(u, v)
    o[i, 7] = wp.trace(wp.outer(u, v) @ m[i])
    qn = wp.normalize(q[i])
    o[i, 8] = qn[0] + 2.0 * qn[1] + 3.0 * qn[2] + 4.0 * qn[3]
    t = wp.transform(u, q[i])
    tp = wp.transform_point(t, v)
    o[i, 9] = tp[0] + 2.0 * tp[1] + 3.0 * tp[2]


@wp.kernel
def grad_loops(x: wp.array(dtype=float), n: wp.array(dtype=wp.int32), o: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(0.0)
    k = int(0)
    while k < n[i]:
        if k == 1:
            k += 1
            continue
        acc += x[i] * float(k + 1)
        k += 1
    for j in range(n[i]):
        if j > 3:
            break
        acc += wp.sin(x[i]) * float(j)
    o[i] = acc


@wp.kernel
def grad_atomic_accum(x: wp.array(dtype=float), o: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(o, 0, x[i] * x[i])
    wp.atomic_max(o, 1, x[i])
    wp.atomic_min(o, 2, x[i])


@wp.kernel
def grad_overwrite(x: wp.array(dtype=float), o: wp.array(dtype=float)):
    i = wp.tid()
    o[i] = x[i] * 2.0
    o[i] = o[i] * x[i]
    o[i] += wp.sin(x[i])


@wp.kernel
def grad_struct(p: Params, x: wp.array(dtype=wp.vec3), o: wp.array(dtype=float)):
    i = wp.tid()
    y = x[i] * p.scale + p.offset
    o[i] = wp.dot(y, y)


@wp.kernel
def grad_ints_in_path(x: wp.array(dtype=float), o: wp.array(dtype=float)):
    i = wp.tid()
    k = int(x[i] * 3.0)
    f = float(k) * x[i]
    o[i] = f + x[i] * x[i] * float(i)


# ------------------------------------------------------------------ other scalar types, integer vectors

@wp.kernel
def half_ops(a: wp.array(dtype=wp.float16), b: wp.array(dtype=wp.float16), o: wp.array2d(dtype=wp.float16)):
    i = wp.tid()
    x = a[i]
    y = b[i]
    o[i, 0] = x + y
    o[i, 1] = x * y
    o[i, 2] = x / y
    o[i, 3] = wp.sqrt(x)
    o[i, 4] = wp.min(x, y)
    o[i, 5] = wp.float16(float(x) * 3.0)
    o[i, 6] = wp.round(x)
    o[i, 7] = wp.abs(x - y)


@wp.kernel
def double_ops(a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), o: wp.array2d(dtype=wp.float64),
               k: wp.array(dtype=wp.int64)):
    i = wp.tid()
    x = a[i]
    y = b[i]
    o[i, 0] = wp.min(x, y)
    o[i, 1] = wp.clamp(x, wp.float64(-1.0), wp.float64(1.0))
    o[i, 2] = wp.acos(x)
    o[i, 3] = wp.round(x)
    o[i, 4] = x % y
    o[i, 5] = x // y
    o[i, 6] = wp.abs(x)
    o[i, 7] = wp.float64(wp.float32(x))
    k[i] = wp.int64(x * wp.float64(1e10))


@wp.kernel
def ivec_ops(a: wp.array(dtype=wp.vec3i), b: wp.array(dtype=wp.vec3i), q: wp.array(dtype=wp.vec3i),
             r: wp.array(dtype=wp.vec3i), m: wp.array(dtype=wp.vec3i), s: wp.array(dtype=wp.vec3i),
             fl: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    q[i] = wp.vec3i(a[i][0] / b[i][0], a[i][1] // b[i][1], a[i][2] % b[i][2])
    r[i] = a[i] + b[i] * 1000000000
    m[i] = wp.min(a[i], b[i])
    s[i] = a[i] * 3 - b[i]
    fl[i] = wp.vec3(a[i])


@wp.kernel
def vec_edge(v: wp.array(dtype=wp.vec3), ln: wp.array(dtype=float), ax: wp.array(dtype=wp.quat),
             mn: wp.array(dtype=wp.vec3), cl: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    ln[i] = wp.length(v[i])
    ax[i] = wp.quat_from_axis_angle(v[i], 0.5)
    mn[i] = wp.min(v[i], wp.vec3(0.0, 0.0, 0.0))
    cl[i] = wp.max(v[i], wp.vec3(-1.0, -1.0, -1.0))


@wp.kernel
def grad_view(a: wp.array2d(dtype=float), v: wp.array(dtype=wp.vec3), o: wp.array2d(dtype=float)):
    i, j = wp.tid()
    u = v[i]
    o[i, j] = a[i, j] * a[i, j] + wp.length(u) * float(j) + wp.min(u, wp.vec3(0.5, 0.5, 0.5))[j % 3]
    wp.atomic_add(o, 0, 0, a[i, j])


@wp.kernel
def mat_build(v: wp.array(dtype=wp.vec3), m: wp.array(dtype=wp.mat33), o: wp.array(dtype=wp.mat33),
              r: wp.array(dtype=wp.vec3), c: wp.array(dtype=wp.mat33), k: wp.array(dtype=wp.int32)):
    i = wp.tid()
    a = v[i]
    b = wp.vec3(a[2], a[0], a[1])
    o[i] = wp.matrix_from_rows(a, b, a * 2.0)
    c[i] = wp.matrix_from_cols(a, b, a * 2.0)
    mm = m[i]
    mm[1] = b
    mm[2, 0] = 7.0
    mm[0, 1] += 1.0
    r[i] = mm[1] + wp.transpose(mm)[2] + mm @ a
    q = a
    q[1] = 5.0
    q[2] += 2.0
    r[i] = r[i] + q
    n = i + 2
    k[i] = n * n * n + (-n) // 2 * 3


@wp.kernel
def grad_inplace(x: wp.array(dtype=wp.vec3), s: wp.array(dtype=float), o: wp.array(dtype=wp.vec3),
                 acc: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    v[0] = v[0] * s[i]
    v[1] += s[i] * s[i]
    v = v * 2.0
    o[i] = v
    acc[0] += wp.dot(v, v)
    m = wp.mat22(v[0], v[1], v[2], s[i])
    m[1, 1] = m[1, 1] * m[0, 0]
    acc[1] += wp.determinant(m)


@wp.kernel
def random_samples(seed: int, o: wp.array2d(dtype=float), u: wp.array(dtype=wp.int32)):
    i = wp.tid()
    s = wp.rand_init(seed, i * 7919 + 2147483000)
    a = wp.sample_triangle(s)
    b = wp.sample_unit_ring(s)
    c = wp.sample_unit_disk(s)
    d = wp.sample_unit_sphere(s)
    e = wp.sample_unit_hemisphere(s)
    f = wp.sample_unit_hemisphere_surface(s)
    g = wp.sample_unit_square(s)
    h = wp.sample_unit_cube(s)
    o[i, 0] = a[0] + 10.0 * a[1]
    o[i, 1] = b[0] + 10.0 * b[1]
    o[i, 2] = c[0] + 10.0 * c[1]
    o[i, 3] = d[0] + 10.0 * d[1] + 100.0 * d[2]
    o[i, 4] = e[0] + 10.0 * e[1] + 100.0 * e[2]
    o[i, 5] = f[0] + 10.0 * f[1] + 100.0 * f[2]
    o[i, 6] = g[0] + 10.0 * g[1]
    o[i, 7] = h[0] + 10.0 * h[1] + 100.0 * h[2]
    o[i, 8] = wp.randn(s) + wp.randf(s, 5.0, 2.0)
    u[i] = wp.randi(s)


SCALE = wp.constant(0.1)
ICONST = wp.constant(7)
VCONST = wp.constant(wp.vec3(0.1, 0.2, 0.3))


@wp.kernel
def constants_use(x: wp.array(dtype=float), d: wp.array(dtype=wp.float64), o: wp.array(dtype=float),
                  od: wp.array(dtype=wp.float64), k: wp.array(dtype=wp.int32), v: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    o[i] = x[i] * SCALE + 0.1
    od[i] = d[i] * wp.float64(0.1) + wp.float64(2.0)
    k[i] = ICONST // 2 + i * ICONST
    v[i] = VCONST * x[i]


@wp.kernel
def index_shapes(a: wp.array3d(dtype=float), o: wp.array3d(dtype=float), n: wp.array(dtype=wp.int32)):
    i, j, k = wp.tid()
    o[i, j, k] = a[i, j, k] + float(i * 100 + j * 10 + k)
    if i == 0 and j == 0 and k == 0:
        n[0] = len(a)
        n[1] = a.shape[1]
        n[2] = a.shape[2]
        n[3] = 7
