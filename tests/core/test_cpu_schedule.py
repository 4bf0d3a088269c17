"""The CPU dense loop's team schedule (``tg::omp_plan_t`` / ``tg::omp_walk_t``): each thread
drains a block of chunks of its own, then the others'; every grid thread runs exactly once
whatever the team size OpenMP grants. And its loop is vectorized (a run-time start of the
thread index once kept ``tg::wrap_index``'s branch in it: no packed arithmetic at all)."""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg

_SCRIPT = r"""
import numpy as np, tapegrad as tg

@tg.kernel
def bump(c: tg.array[tg.int32]):
    i = tg.tid()
    c[i] = c[i] + 1

@tg.kernel
def bump2(c: tg.array2d[tg.int32], w: tg.array2d[tg.int32]):
    i, j = tg.tid()
    c[i, j] = c[i, j] + 1
    w[i, j] = i * 10000 + j

@tg.kernel(cpu_grain=1)
def heavy(c: tg.array[tg.int32]):
    i = tg.tid()
    acc = 0
    for k in range(100):
        acc += k
    c[i] = c[i] + acc - 4949

for n in (1, 3, 4, 5, 37, 1000):     # a team from 4 grid threads (cpu_grain=1), chunks of 1
    c = tg.zeros(n, dtype=tg.int32, device="cpu")
    tg.launch(heavy, n, inputs=[c])
    assert (c.numpy() == 1).all(), (n, c.numpy()[:20])
for n in (4096, 4097, 70001, 1000003):
    c = tg.zeros(n, dtype=tg.int32, device="cpu")
    for _ in range(3):
        tg.launch(bump, n, inputs=[c])
    v = c.numpy()
    assert (v == 3).all(), (n, np.flatnonzero(v != 3)[:10], v[v != 3][:10])
c = tg.zeros((1001, 1003), dtype=tg.int32, device="cpu")
w = tg.zeros((1001, 1003), dtype=tg.int32, device="cpu")
tg.launch(bump2, (1001, 1003), inputs=[c, w])
assert (c.numpy() == 1).all()
i, j = np.meshgrid(np.arange(1001), np.arange(1003), indexing="ij")
assert (w.numpy() == i * 10000 + j).all()

@tg.kernel
def total(c: tg.array4d[tg.int32], s: tg.array[tg.int64]):
    i, j, k, l = tg.tid()
    if (i + j + k + l) % 5 == 2:     # an early return
        return
    c[i, j, k, l] = c[i, j, k, l] + 1
    tg.atomic_add(s, 0, tg.int64(((i * 5 + j) * 7 + k) * 401 + l))   # every thread into one cell

shape = (3, 5, 7, 401)
c = tg.zeros(shape, dtype=tg.int32, device="cpu")
s = tg.zeros(1, dtype=tg.int64, device="cpu")
tg.launch(total, shape, inputs=[c, s])
idx = np.indices(shape)
keep = idx.sum(axis=0) % 5 != 2
assert (c.numpy() == keep).all()
assert s.numpy()[0] == np.arange(c.size).reshape(shape)[keep].sum(), s.numpy()
print("ok")
"""


@pytest.mark.parametrize("env", [{"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2"}, {"OMP_NUM_THREADS": "3"},
                                 {"OMP_NUM_THREADS": "7"},
                                 # a team smaller than the plan's blocks: the ownerless ones drained by the others
                                 {"OMP_NUM_THREADS": "7", "OMP_THREAD_LIMIT": "2"},
                                 {"OMP_NUM_THREADS": "5", "OMP_DYNAMIC": "true"}],
                         ids=["1", "2", "3", "7", "7-limit-2", "5-dynamic"])
def test_every_grid_thread_runs_once(env, tmp_path):
    script = tmp_path / "schedule.py"   # a file: kernels are parsed from their source
    script.write_text(_SCRIPT)
    r = subprocess.run([sys.executable, str(script)], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


@tg.kernel
def sched_saxpy(x: tg.array[float], y: tg.array[float], a: float, b: float):
    i = tg.tid()
    v = a * x[i] + y[i]
    if b != 0.0:           # an invariant branch, as an optimizer's `if momentum != 0.0:`
        v = v + b * x[i]
    y[i] = v


def test_results_match_numpy_across_chunks():
    n = 1_000_003
    rng = np.random.default_rng(3)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    ty = tg.array(y.copy(), device="cpu")
    tg.launch(sched_saxpy, n, inputs=[tg.array(x, device="cpu"), ty, 1.5, 0.25])
    ref = (np.float32(1.5) * x + y) + np.float32(0.25) * x
    np.testing.assert_array_equal(ty.numpy(), ref)


@tg.kernel
def sched_vec(x: tg.array[float], y: tg.array[float], a: float, b: float):
    i = tg.tid()
    v = a * x[i] + y[i]
    if b != 0.0:
        v = v + b * x[i]
    y[i] = v


@pytest.mark.skipif(shutil.which("objdump") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="reads x86-64 code with objdump")
def test_dense_loop_is_vectorized(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))   # this kernel's one library is built here
    n = 8192
    tg.launch(sched_vec, n, inputs=[tg.zeros(n, device="cpu"), tg.zeros(n, device="cpu"), 1.0, 0.0])
    (so,) = [p for p in os.listdir(tmp_path) if p.startswith(sched_vec.symbol) and p.endswith(".so")]
    out = subprocess.run(["objdump", "-d", "-C", "--no-show-raw-insn", str(tmp_path / so)],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(rf"<{sched_vec.symbol}_dense\(.*?>:\n(.*?)\n\n", out, re.S)
    assert m, "no _dense function in the kernel's library"
    # packed single-precision multiplies (SSE mulps, AVX vmulps) or fused multiply-adds
    assert re.search(r"\b(v?mulps|vfn?madd\d+ps)\b", m.group(1)), m.group(1)[:4000]


@tg.kernel(cpu_grain=3)
def grained(x: tg.array[float]):
    x[tg.tid()] = 1.0


def test_cpu_grain_sets_the_schedule_and_the_build():
    """``cpu_grain``: the fewest grid threads of a chunk and 4x that as the serial threshold, in
    the emitted CPU loop; part of the build key (the direct cache tells the builds apart)."""
    src = grained.source()
    assert "tg::omp_plan_t tg_plan(tg_n, 3);" in src and "if (tg_n < 12) {" in src
    assert "tg::omp_chunk(tg_bounds.size, 3)" in src
    plain = tg.kernel(grained.func, key="tests.core.test_cpu_schedule.grained_plain")
    assert "tg::omp_plan_t tg_plan(tg_n, 1024);" in plain.source() and "if (tg_n < TG_OMP_MIN) {" in plain.source()
    assert grained.build_key() != tg.kernel(grained.func, key=grained.key + "_b").build_key()
    assert grained.options["cpu_grain"] == 3
    x = tg.zeros(40, device="cpu")
    tg.launch(grained, 40, inputs=[x])
    assert (x.numpy() == 1.0).all()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4", 2 ** 25])
def test_cpu_grain_rejects_non_positive_ints(bad):
    with pytest.raises(ValueError, match="cpu_grain"):
        tg.kernel(cpu_grain=bad)
    with pytest.raises(ValueError, match="cpu_grain"):
        tg.Kernel(grained.func, options={"cpu_grain": bad})
    with pytest.raises(ValueError, match="cpu_grain"):
        tg.set_module_options({"cpu_grain": 4})   # a kernel's option, not a module's


_MUTATED = r"""
import numpy as np, tapegrad as tg

@tg.kernel
def fill(a: tg.array[tg.float32]):
    a[tg.tid()] = 1.0

fill.options["cpu_grain"] = 0     # Warp code writes kernel.options items directly
a = tg.zeros(10, dtype=tg.float32, device="cpu")
try:
    tg.launch(fill, 10, inputs=[a])
except ValueError as e:
    print("refused:", e)
fill.options["cpu_grain"] = 2
tg.launch(fill, 10, inputs=[a])
print("ok", a.numpy().sum())
"""


def test_cpu_grain_written_into_kernel_options_is_checked(tmp_path):
    """``kernel.options["cpu_grain"] = 0`` after decoration skipped the decorator's check: the
    emitted plan divided by a chunk of 0 and the process died of SIGFPE (a subprocess here)."""
    script = tmp_path / "mutated.py"
    script.write_text(_MUTATED)
    r = subprocess.run([sys.executable, str(script)], env={**os.environ, "OMP_NUM_THREADS": "2"},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "refused: kernel '__main__.fill' options: 'cpu_grain' expects None or an int in [1, 2**24]" in r.stdout
    assert "ok 10.0" in r.stdout
