"""Inputs for the differential audit against NVIDIA Warp: kernel name, launch dim, arguments."""
import numpy as np

from tests.lang.warp_diff_harness import In, Out, Scalar, Struct, View

rng = np.random.default_rng(7)
N = 16

IA = np.array([7, -7, 7, -7, 0, 1, -1, 5, -5, 2147483647, -2147483647 - 1, -2147483647 - 1, 13, -13], np.int32)
# INT_MIN // -1 traps (SIGFPE) in Warp's CPU build: left out here, tapegrad's answer is tested on its own

IB = np.array([2, 2, -2, -2, 3, -3, 3, 5, 5, 2, 2, 3, -4, -4], np.int32)
FA = np.array([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1e-8, -1e-8, 5.0, -5.0, 3.0, np.inf, 1.0, np.nan], np.float32)
FB = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 1.0, 1.0, 5.0, 5.0, np.inf, 2.0, 0.0, 1.0], np.float32)
CASTS = np.array([1.9, -1.9, 0.5, -0.5, -0.0, 127.9, 128.5, -128.9, -129.5, 255.9, 256.5, -1.0, 3e9, -3e9,
                  1e20, -1e20, np.inf, -np.inf, np.nan, 2147483520.0], np.float32)
HALVES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0, -1.7, 1.7, -0.2, 0.49999997, 8388609.0,
                   -8388609.0, 1e30, np.inf, -np.inf, np.nan], np.float32)
NANS_A = np.array([np.nan, 1.0, np.nan, -0.0, 0.0, 2.0, -np.inf, 0.5], np.float32)
NANS_B = np.array([1.0, np.nan, np.nan, 0.0, -0.0, 1.0, np.inf, np.nan], np.float32)
SIGNS = np.array([-0.0, 0.0, -1.0, 1.0, np.nan, -np.nan, -np.inf, np.inf, 1e-40, -1e-40], np.float32)
UNARY = np.array([-1.0, -0.0, 0.0, 1e-40, 0.5, 1.0, 1.0000001, 2.0, -2.0, np.inf, -np.inf, np.nan, 100.0,
                  -100.0], np.float32)


def v3(n, scale=1.0):
    return (rng.standard_normal((n, 3)) * scale).astype(np.float32)


VA = np.concatenate([v3(6), np.zeros((2, 3), np.float32), np.array([[1e-30, 0, 0], [np.nan, 0, 0]], np.float32)])
VB = np.concatenate([v3(6), np.array([[1, 0, 0], [0, 0, 0], [1, 2, 3], [0, 1, 0]], np.float32)])
M33 = np.concatenate([rng.standard_normal((4, 3, 3)).astype(np.float32),
                      np.zeros((1, 3, 3), np.float32),
                      np.array([[[1, 2, 3], [2, 4, 6], [1, 0, 1]]], np.float32),
                      np.eye(3, dtype=np.float32)[None] * 1e-13])
Q = rng.standard_normal((6, 4)).astype(np.float32)
Q = np.concatenate([Q, np.zeros((1, 4), np.float32)])
QV = np.concatenate([v3(6), np.zeros((1, 3), np.float32)])
XF = np.concatenate([v3(5), rng.standard_normal((5, 4)).astype(np.float32)], axis=1)
XF[:, 3:] /= np.linalg.norm(XF[:, 3:], axis=1, keepdims=True)
M22 = np.concatenate([rng.standard_normal((3, 2, 2)), np.zeros((1, 2, 2)), [[[1, 2], [2, 4]]]]).astype(np.float32)
M44 = np.concatenate([rng.standard_normal((3, 4, 4)), np.zeros((1, 4, 4)), np.ones((1, 4, 4))]).astype(np.float32)

GX = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, 0.3, 1.5, -2.5, 0.7, 3.0], np.float32)
GY = np.array([0.0, 0.0, 0.5, 0.25, 1.0, 1.0, 2.0, 0.3, -1.5, 2.0, 0.7, 0.5], np.float32)


NOISE_P = v3(8, 3.0)


CASES = {
    "int_divmod": dict(kernel="int_divmod", dim=len(IA), args=[
        In(IA, "int32"), In(IB, "int32"), Out(len(IA), "int32"), Out(len(IA), "int32"), Out(len(IA), "int32")]),
    "float_divmod": dict(kernel="float_divmod", dim=len(FA), args=[
        In(FA, "float32"), In(FB, "float32"), Out(len(FA), "float32"), Out(len(FA), "float32")]),
    "float_to_int": dict(kernel="float_to_int", dim=len(CASTS), args=[
        In(CASTS, "float32"), Out(len(CASTS), "int32"), Out(len(CASTS), "int8"), Out(len(CASTS), "uint8"),
        Out(len(CASTS), "int64"), Out(len(CASTS), "uint32")]),
    "int_wrap": dict(kernel="int_wrap", dim=6, args=[
        In(np.array([2147483647, -2147483647 - 1, 65536, -5, 46341, 0], np.int32), "int32"),
        In(np.array([1, -1, 65536, 3, 46341, 0], np.int32), "int32"),
        Out(6, "int32"), Out(6, "int32"), Out(6, "int32"), Out(6, "int32")]),
    "small_int_wrap": dict(kernel="small_int_wrap", dim=5, args=[
        In(np.array([250, 3, 128, 255, 0], np.uint8), "uint8"), In(np.array([10, 5, 128, 1, 1], np.uint8), "uint8"),
        Out(5, "uint8"), Out(5, "uint8"), Out(5, "int8"), Out(5, "int8")]),
    "int_shifts": dict(kernel="int_shifts", dim=5, args=[
        In(np.array([1, -8, 1, 12345, -1], np.int32), "int32"), In(np.array([3, 1, 31, 4, 0], np.int32), "int32"),
        Out(5, "int32"), Out(5, "int32"), Out(5, "int32"), Out(5, "int32")]),
    "mixed_promotion": dict(kernel="mixed_promotion", dim=5, args=[
        In(np.array([0.1, -2.5, 3.0, 1e10, -0.0], np.float32), "float32"),
        In(np.array([7, -7, 1, 2147483647, 16777217], np.int32), "int32"),
        Out(5, "float32"), Out(5, "float32"), Out(5, "int32"), Out(5, "float32")]),
    "rounding": dict(kernel="rounding", dim=len(HALVES), args=[In(HALVES, "float32")] + [
        Out(len(HALVES), "float32") for _ in range(6)]),
    "minmax_nan": dict(kernel="minmax_nan", dim=len(NANS_A), args=[
        In(NANS_A, "float32"), In(NANS_B, "float32")] + [Out(len(NANS_A), "float32") for _ in range(4)]),
    "sign_abs": dict(kernel="sign_abs", dim=len(SIGNS), args=[In(SIGNS, "float32")] + [
        Out(len(SIGNS), "float32") for _ in range(4)] + [Out(len(SIGNS), "int32")]),
    "unary_math": dict(kernel="unary_math", dim=len(UNARY), args=[
        In(UNARY, "float32"), Out((len(UNARY), 16), "float32")]),
    "vec_ops": dict(kernel="vec_ops", dim=len(VA), args=[
        In(VA, "vec3"), In(VB, "vec3"), Out(len(VA), "vec3"), Out(len(VA), "vec3"), Out(len(VA), "float32"),
        Out(len(VA), "float32"), Out(len(VA), "mat33")]),
    "mat_ops": dict(kernel="mat_ops", rtol=4e-6, atol=4e-7, dim=len(M33), args=[
        In(M33, "mat33"), In(v3(len(M33)), "vec3"), Out(len(M33), "float32"), Out(len(M33), "mat33"),
        Out(len(M33), "vec3"), Out(len(M33), "vec3"), Out(len(M33), "mat33"), Out(len(M33), "float32")]),
    "mat22_44_ops": dict(kernel="mat22_44_ops", rtol=4e-6, atol=4e-7, dim=len(M22), args=[
        In(M22, "mat22"), In(M44, "mat44"), Out(len(M22), "float32"), Out(len(M22), "float32"),
        Out(len(M22), "mat22"), Out(len(M22), "mat44")]),
    "quat_ops": dict(kernel="quat_ops", rtol=4e-6, atol=4e-7, dim=len(Q), args=[
        In(Q, "quat"), In(QV, "vec3"), Out(len(Q), "vec3"), Out(len(Q), "vec3"), Out(len(Q), "quat"),
        Out(len(Q), "quat"), Out(len(Q), "mat33"), Out(len(Q), "quat")]),
    "xform_ops": dict(kernel="xform_ops", rtol=4e-6, atol=4e-7, dim=len(XF), args=[
        In(XF, "transform"), In(v3(len(XF)), "vec3"), Out(len(XF), "vec3"), Out(len(XF), "vec3"),
        Out(len(XF), "transform"), Out(len(XF), "transform")]),
    "atomic_returns": dict(kernel="atomic_returns", dim=1, args=[
        In(np.array([1.0], np.float32), "float32"), In(np.array([3], np.int32), "int32"), Out(5, "float32"),
        Out(5, "int32"), In(np.array([0.0], np.float32), "float32"), In(np.array([0.0], np.float32), "float32")]),
    "random_stream": dict(kernel="random_stream", dim=N, args=[
        Scalar(42), Out(N, "float32"), Out(N, "float32"), Out(N, "uint32"), Out(N, "int32"), Out(N, "float32"),
        Out(N, "vec3")]),
    "random_seed_only": dict(kernel="random_seed_only", dim=N, args=[
        Scalar(12345), Out(N, "float32"), Out(N, "uint32")]),
    "noise_fns": dict(kernel="noise_fns", dim=8, args=[
        Scalar(3), In(NOISE_P, "vec3"), Out(8, "float32"), Out(8, "float32"), Out(8, "float32"),
        Out(8, "float32"), Out(8, "float32"), Out(8, "vec3")]),
    "read2d_slice": dict(kernel="read2d", dim=(3, 3), args=[
        View(np.arange(24, dtype=np.float32).reshape(4, 6), "float32", lambda a: a[1:, ::2]), Out((3, 3), "float32")]),
    "read2d_transpose": dict(kernel="read2d", dim=(6, 4), args=[
        View(np.arange(24, dtype=np.float32).reshape(4, 6), "float32", lambda a: a.transpose()),
        Out((6, 4), "float32")]),
    "loops": dict(kernel="loops", dim=6, args=[
        In(np.array([0, 1, 3, 7, 12, 27], np.int32), "int32"), Out(6, "int32"), Out(6, "int32")]),
    "struct_use": dict(kernel="struct_use", dim=4, args=[
        Struct(scale=1.5, offset=(1.0, -2.0, 0.5), count=3), In(v3(4), "vec3"), Out(4, "vec3")]),
    # gradients (tape.backward with a seed)
    "grad_vec": dict(kernel="grad_vec", dim=6, backward=True, rtol=1e-5, atol=1e-6, args=[
        In(np.concatenate([v3(5), np.zeros((1, 3), np.float32)]), "vec3", True), In(v3(6), "vec3", True),
        In(np.concatenate([Q[:5], np.zeros((1, 4), np.float32)]), "quat", True),
        In(np.concatenate([M33[:4], M33[5:6], np.eye(3, dtype=np.float32)[None]]), "mat33", True),
        Out((6, 10), "float32", True, seed=np.ones((6, 10), np.float32))]),
    "grad_loops": dict(kernel="grad_loops", dim=5, backward=True, args=[
        In(np.array([0.1, 0.2, 0.3, 0.4, 0.5], np.float32), "float32", True),
        In(np.array([0, 1, 3, 6, 9], np.int32), "int32"), Out(5, "float32", True, seed=np.ones(5, np.float32))]),
    "grad_atomic_accum": dict(kernel="grad_atomic_accum", dim=5, backward=True, args=[
        In(np.array([0.1, -0.2, 0.9, 0.4, 0.9], np.float32), "float32", True),
        Out(3, "float32", True, seed=np.ones(3, np.float32))]),
    "grad_overwrite": dict(kernel="grad_overwrite", dim=4, backward=True, args=[
        In(np.array([0.1, -0.2, 0.9, 2.0], np.float32), "float32", True),
        Out(4, "float32", True, seed=np.ones(4, np.float32))]),
    "grad_struct": dict(kernel="grad_struct", dim=4, backward=True, args=[
        Struct(scale=1.5, offset=(1.0, -2.0, 0.5), count=3), In(v3(4), "vec3", True),
        Out(4, "float32", True, seed=np.ones(4, np.float32))]),
    "grad_ints_in_path": dict(kernel="grad_ints_in_path", dim=4, backward=True, args=[
        In(np.array([0.1, -0.9, 0.9, 2.0], np.float32), "float32", True),
        Out(4, "float32", True, seed=np.ones(4, np.float32))]),
}
for _c in range(21):
    CASES[f"grad_scalar_{_c}"] = dict(kernel="grad_scalar", dim=len(GX), backward=True, rtol=1e-6, atol=0.0, args=[
        In(GX, "float32", True), In(GY, "float32", True), Scalar(_c),
        Out(len(GX), "float32", True, seed=np.ones(len(GX), np.float32))])

H_A = np.array([1.5, -2.25, 65504.0, 0.1, 6e-8, -0.0, np.nan, 3.0, 2.5, 1000.0], np.float16)
H_B = np.array([0.7, 3.0, 2.0, 0.3, 3.0, 0.0, 1.0, np.nan, 0.5, -0.001], np.float16)
D_A = np.array([0.1, -2.5, 1.0000000001, np.nan, -7.5, 1e300, -0.0, 2.5], np.float64)
D_B = np.array([0.3, 2.0, 1.0, 1.0, -2.0, 1e-300, 0.0, np.nan], np.float64)
IV_A = np.array([[7, -7, 0], [-2147483647 - 1, 5, -9], [100, 3, -3]], np.int32)
IV_B = np.array([[2, 2, 3], [3, -5, 4], [9, -1, 7]], np.int32)   # no 0 divisor: Warp traps on it
VE = np.array([[1e20, 0, 0], [0, 0, 0], [np.nan, 1, 0], [-0.0, 2, -3], [1e-20, 1e-20, 0]], np.float32)
CASES.update({
    "half_ops": dict(kernel="half_ops", dim=len(H_A), args=[
        In(H_A, "float16"), In(H_B, "float16"), Out((len(H_A), 8), "float16")]),
    "double_ops": dict(kernel="double_ops", dim=len(D_A), args=[
        In(D_A, "float64"), In(D_B, "float64"), Out((len(D_A), 8), "float64"), Out(len(D_A), "int64")]),
    "ivec_ops": dict(kernel="ivec_ops", dim=len(IV_A), args=[
        In(IV_A, "vec3i"), In(IV_B, "vec3i"), Out(3, "vec3i"), Out(3, "vec3i"), Out(3, "vec3i"), Out(3, "vec3i"),
        Out(3, "vec3")]),
    "vec_edge": dict(kernel="vec_edge", dim=len(VE), args=[
        In(VE, "vec3"), Out(len(VE), "float32"), Out(len(VE), "quat"), Out(len(VE), "vec3"), Out(len(VE), "vec3")]),
})
GV = np.array([[0.3, 0.5, 0.7], [0.0, 0.0, 0.0], [-1.0, 2.0, 0.5], [0.5, 0.5, 0.1]], np.float32)
CASES.update({
    "grad_view_transpose": dict(kernel="grad_view", dim=(4, 3), backward=True, rtol=1e-6, atol=1e-7, args=[
        View(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "float32", lambda a: a.transpose(), True),
        View(np.concatenate([GV, GV]), "vec3", lambda a: a[::2], True),
        Out((4, 3), "float32", True, seed=np.arange(12, dtype=np.float32).reshape(4, 3))]),
    "grad_view_slice": dict(kernel="grad_view", dim=(2, 3), backward=True, rtol=1e-6, atol=1e-7, args=[
        View(np.arange(20, dtype=np.float32).reshape(4, 5) / 10, "float32", lambda a: a[1:3, 1:4], True),
        View(GV, "vec3", lambda a: a[2:], True),
        Out((2, 3), "float32", True, seed=np.ones((2, 3), np.float32))]),
})

# random inputs (a fixed seed): many values through the same kernels
_fz = np.random.default_rng(2024)
FZ_N = 4096
FZ_IA = _fz.integers(-2**31, 2**31, FZ_N, dtype=np.int64).astype(np.int32)
FZ_IB = _fz.integers(-2**31, 2**31, FZ_N, dtype=np.int64).astype(np.int32)
FZ_IB[: FZ_N // 2] = _fz.integers(-9, 10, FZ_N // 2).astype(np.int32)
FZ_IB[FZ_IB == 0] = 7
FZ_IB[(FZ_IA == -2**31) & (FZ_IB == -1)] = 3          # INT_MIN // -1 traps in Warp
FZ_F = np.concatenate([
    (_fz.standard_normal(FZ_N // 4) * 10).astype(np.float32),
    (_fz.integers(-40, 40, FZ_N // 4) / 2).astype(np.float32),                   # halves
    _fz.standard_normal(FZ_N // 4).astype(np.float32) * np.float32(3e9),      # out of int range
    np.frombuffer(_fz.integers(0, 2**32, FZ_N // 4, dtype=np.uint64).astype(np.uint32).tobytes(), np.float32),
])
FZ_G = np.roll(FZ_F, 7)
with np.errstate(invalid="ignore", over="ignore"):
    FZ_F10 = FZ_F / np.float32(10)
CASES.update({
    "fuzz_int_divmod": dict(kernel="int_divmod", dim=FZ_N, args=[
        In(FZ_IA, "int32"), In(FZ_IB, "int32"), Out(FZ_N, "int32"), Out(FZ_N, "int32"), Out(FZ_N, "int32")]),
    "fuzz_float_divmod": dict(kernel="float_divmod", dim=FZ_N, args=[
        In(FZ_F, "float32"), In(FZ_G, "float32"), Out(FZ_N, "float32"), Out(FZ_N, "float32")]),
    "fuzz_float_to_int": dict(kernel="float_to_int", dim=FZ_N, args=[
        In(FZ_F, "float32"), Out(FZ_N, "int32"), Out(FZ_N, "int8"), Out(FZ_N, "uint8"), Out(FZ_N, "int64"),
        Out(FZ_N, "uint32")]),
    "fuzz_rounding": dict(kernel="rounding", dim=FZ_N, args=[In(FZ_F, "float32")] + [
        Out(FZ_N, "float32") for _ in range(6)]),
    "fuzz_minmax_nan": dict(kernel="minmax_nan", dim=FZ_N, args=[
        In(FZ_F, "float32"), In(FZ_G, "float32")] + [Out(FZ_N, "float32") for _ in range(4)]),
    "fuzz_sign_abs": dict(kernel="sign_abs", dim=FZ_N, args=[In(FZ_F, "float32")] + [
        Out(FZ_N, "float32") for _ in range(4)] + [Out(FZ_N, "int32")]),
    # rtol: Warp's CPU build (clang) turns pow(x, 0.5) into a correctly rounded sqrt; tapegrad calls
    # powf (within an ulp)
    "fuzz_unary_math": dict(kernel="unary_math", dim=FZ_N, rtol=2.5e-7, atol=0.0, args=[
        In(FZ_F10, "float32"), Out((FZ_N, 16), "float32")]),
    "fuzz_random_stream": dict(kernel="random_stream", dim=FZ_N, args=[
        Scalar(987654321), Out(FZ_N, "float32"), Out(FZ_N, "float32"), Out(FZ_N, "uint32"), Out(FZ_N, "int32"),
        Out(FZ_N, "float32"), Out(FZ_N, "vec3")]),
})
CASES.update({
    "mat_build": dict(kernel="mat_build", dim=4, args=[
        In(v3(4), "vec3"), In(rng.standard_normal((4, 3, 3)).astype(np.float32), "mat33"), Out(4, "mat33"),
        Out(4, "vec3"), Out(4, "mat33"), Out(4, "int32")]),
    "grad_inplace": dict(kernel="grad_inplace", dim=4, backward=True, rtol=1e-6, atol=1e-6, args=[
        In(v3(4), "vec3", True), In(np.array([0.5, -1.0, 2.0, 0.0], np.float32), "float32", True),
        Out(4, "vec3", True, seed=np.ones((4, 3), np.float32)), Out(2, "float32", True, seed=np.ones(2, np.float32))]),
})
CASES["random_samples"] = dict(kernel="random_samples", dim=512, args=[
    Scalar(-17), Out((512, 9), "float32"), Out(512, "int32")])
CASES["constants_use"] = dict(kernel="constants_use", dim=4, args=[
    In(np.array([1.0, 3.0, -7.0, 0.3], np.float32), "float32"), In(np.array([1.0, 3.0, -7.0, 0.3]), "float64"),
    Out(4, "float32"), Out(4, "float64"), Out(4, "int32"), Out(4, "vec3")])
CASES["index_shapes_transposed"] = dict(kernel="index_shapes", dim=(4, 2, 3), args=[
    View(np.arange(24, dtype=np.float32).reshape(3, 2, 4), "float32", lambda a: a.transpose((2, 1, 0))),
    Out((4, 2, 3), "float32"), Out(4, "int32")])
