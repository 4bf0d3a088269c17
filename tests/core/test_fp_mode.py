"""CPU launches compute under the launching thread's floating-point mode, whatever another library
left on the OpenMP pool's threads.

libgomp's pool threads are shared by every library linked to it (torch's CPU ops run on them).
One that leaves flush-to-zero / denormals-are-zero set on a pool thread made tapegrad's subnormal
results 0 in the rows that thread ran (the differential audit against Warp failed in CI on rows
3075.. of a 4096-thread launch). Here a small C library, linked to the same libgomp, sets FTZ and
DAZ on every pool thread but the caller; each kind of CPU entry (forward on the dense and the
generic loop, adjoint, tangent, tangent of the adjoint) must still return the exact subnormal
numpy computes on the calling thread, and leave the pool threads' own mode as it found it.
"""
from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess

import numpy as np
import pytest

import tapegrad as tg

_POISON = r"""
#include <omp.h>
#include <stdint.h>
#if defined(__x86_64__) || defined(__i386__)
#define FLUSH 0x8040u                      /* MXCSR: flush-to-zero | denormals-are-zero */
static uint64_t get_mode(void) { return __builtin_ia32_stmxcsr(); }
static void set_mode(uint64_t m) { __builtin_ia32_ldmxcsr((unsigned)m); }
#elif defined(__aarch64__)
#define FLUSH (1ull << 24)                  /* FPCR.FZ */
static uint64_t get_mode(void) { uint64_t m; __asm__ __volatile__("mrs %0, fpcr" : "=r"(m)); return m; }
static void set_mode(uint64_t m) { __asm__ __volatile__("msr fpcr, %0" : : "r"(m)); }
#endif
/* on: set (1) or clear (0) the flush bits on every team thread but the caller's */
void poison(int on) {
    #pragma omp parallel num_threads(omp_get_max_threads())
    if (omp_get_thread_num() != 0) set_mode(on ? (get_mode() | FLUSH) : (get_mode() & ~(uint64_t)FLUSH));
}
/* how many team threads but the caller's have the flush bits set */
int flushing(void) {
    int n = 0;
    #pragma omp parallel num_threads(omp_get_max_threads()) reduction(+ : n)
    if (omp_get_thread_num() != 0 && (get_mode() & FLUSH) == FLUSH) n += 1;
    return n;
}
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        pytest.skip(f"no known floating-point mode register on {platform.machine()}")
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the pool-poisoning helper")
    d = tmp_path_factory.mktemp("fpmode")
    (d / "poison.c").write_text(_POISON)
    subprocess.run([cc, "-O2", "-fopenmp", "-shared", "-fPIC", str(d / "poison.c"), "-o", str(d / "libpoison.so")],
                   check=True, capture_output=True)
    lib = ctypes.CDLL(str(d / "libpoison.so"))
    lib.poison(1)
    if lib.flushing() == 0:
        lib.poison(0)
        pytest.skip("one OpenMP thread (OMP_NUM_THREADS=1?): no pool thread besides the caller")
    yield lib
    lib.poison(0)
    assert lib.flushing() == 0


N = 1 << 22                         # long enough that every pool thread takes chunks (a short launch
                                   # can end on the caller before a woken thread claims one)
TINY = np.float32(1e-39)           # a float32 subnormal
EXPECT = np.float32(2) * TINY      # numpy, on the calling thread (no flushing there)


@tg.kernel
def affine(x: tg.array[tg.float32], out: tg.array[tg.float32]):
    i = tg.tid()
    out[i] = x[i] * x[i] + 2.0 * x[i]


def _check(pool, got, what):
    assert pool.flushing() > 0, "the launch cleared the pool threads' own mode"
    bad = np.flatnonzero(got != EXPECT)
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} results differ from {EXPECT!r} (first at "
                           f"{bad[0]}: {got[bad[0]]!r}); a pool thread's flush-to-zero leaked into the launch")


@pytest.mark.parametrize("layout", ["dense", "strided"])
def test_forward(pool, layout):
    step = 1 if layout == "dense" else 2      # a strided view takes the generic loop
    base = tg.array(np.full(N * step, TINY, np.float32), device="cpu")
    x = base if step == 1 else base[::step]
    out = tg.zeros(N, dtype=tg.float32, device="cpu")
    tg.launch(affine, N, inputs=[x], outputs=[out], device="cpu")
    _check(pool, out.numpy(), f"forward ({layout})")


def test_adjoint(pool):
    x = tg.array(np.full(N, TINY, np.float32), device="cpu")
    out = tg.zeros(N, dtype=tg.float32, device="cpu")
    gx = tg.zeros(N, dtype=tg.float32, device="cpu")
    tg.launch(affine, N, inputs=[x], outputs=[out], adjoint=True, adj_inputs=[gx],
              adj_outputs=[tg.array(np.full(N, TINY, np.float32), device="cpu")], device="cpu")
    _check(pool, gx.numpy(), "adjoint")          # d out / dx = 2x + 2, times TINY


def test_tangent_and_second_order(pool):
    x = tg.array(np.full(N, TINY, np.float32), device="cpu")
    tx = tg.array(np.full(N, TINY, np.float32), device="cpu")
    out, tout = tg.zeros(N, dtype=tg.float32, device="cpu"), tg.zeros(N, dtype=tg.float32, device="cpu")
    tg.launch(affine, N, inputs=[x], outputs=[out], tangent=True, tan_inputs=[tx], tan_outputs=[tout],
              device="cpu")
    _check(pool, tout.numpy(), "tangent")        # (2x + 2) * TINY
    gx, hx = tg.zeros(N, dtype=tg.float32, device="cpu"), tg.zeros(N, dtype=tg.float32, device="cpu")
    tg.launch(affine, N, inputs=[x], outputs=[out], adjoint=True, adj_inputs=[gx],
              adj_outputs=[tg.array(np.ones(N, np.float32), device="cpu")],
              tangent=True, tan_inputs=[tx], tan_adj_inputs=[hx], device="cpu")
    _check(pool, hx.numpy(), "tangent of the adjoint")   # d2 out / dx2 = 2, times TINY
