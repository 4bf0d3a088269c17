"""First launches from several threads at once (issue 14, fault 2).

Every round makes *new* kernel objects and has several threads launch them for the first time
together, so each round races the whole first-use path: parsing, lowering, the launch plan,
the cache lookup, the verified load and the module memo. A kernel made after its predecessor
died takes the same key (``Kernel`` reuses the keys of dead kernels), hence the same source
and disk-cache entry: after the first round the build is a verified cache hit, and 200 rounds
fit in a CI budget.
"""
from __future__ import annotations

import gc
import random
import sys
import threading
import typing

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import build, memory_ops
from tapegrad.dlpack import capsules

THREADS = 6
ROUNDS = 200
N = 64


def _make_kernels():
    """Three fresh kernels (new objects; same keys as the previous round's once those died)."""
    @tg.kernel(key="concurrency.axpb")
    def axpb(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32), a: float):
        i = tg.tid()
        y[i] = a * x[i] + 1.0

    @tg.kernel(key="concurrency.square")
    def square(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = x[i] * x[i]

    @tg.kernel(key="concurrency.count")
    def count(x: tg.array(dtype=tg.float32), n: tg.array(dtype=tg.int32)):
        i = tg.tid()
        if x[i] > 10.0:
            tg.atomic_add(n, 0, 1)

    return axpb, square, count


def _race(n_threads, work):
    """Run ``work(thread_index)`` on ``n_threads`` threads released together; re-raise the
    first failure."""
    barrier = threading.Barrier(n_threads)
    errors = []

    def run(t):
        try:
            barrier.wait()
            work(t)
        except BaseException as e:  # noqa: BLE001  reported below with its traceback
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    if errors:
        raise errors[0]


def test_first_launches_of_new_kernels_from_many_threads():
    x_np = np.linspace(0.0, 20.0, N, dtype=np.float32)
    x = tg.array(x_np, device="cpu")   # the CPU modules are checked (a GPU machine defaults to cuda:0)
    want_axpb = 2.5 * x_np + 1.0
    want_square = x_np * x_np
    want_count = int((x_np > 10.0).sum())
    gc.freeze()   # the collection each round then scans only what the round made
    try:
        _rounds(x, want_axpb, want_square, want_count)
    finally:
        gc.unfreeze()


def _rounds(x, want_axpb, want_square, want_count):
    keys = None
    for rnd in range(ROUNDS):
        kernels = list(_make_kernels())
        if keys is None:
            keys = [k.key for k in kernels]
        # the previous round's kernels are gone: their keys (and cache entries) are reused
        assert [k.key for k in kernels] == keys, f"round {rnd}"
        order = random.Random(rnd)
        orders = [order.sample(range(3), 3) for _ in range(THREADS)]
        modules = [[None] * 3 for _ in range(THREADS)]

        def work(t):
            axpb, square, count = kernels
            for j in orders[t]:
                if j == 0:
                    y = tg.zeros(N, dtype=tg.float32, device="cpu")
                    tg.launch(axpb, N, inputs=[x, y, 2.5])
                    np.testing.assert_allclose(y.numpy(), want_axpb, rtol=1e-6)
                elif j == 1:
                    y = tg.zeros(N, dtype=tg.float32, device="cpu")
                    tg.launch(square, N, inputs=[x, y])
                    np.testing.assert_allclose(y.numpy(), want_square, rtol=1e-6)
                else:
                    n = tg.zeros(1, dtype=tg.int32, device="cpu")
                    tg.launch(count, N, inputs=[x, n])
                    assert int(n.numpy()[0]) == want_count
                modules[t][j] = kernels[j].module_for(tg.get_device("cpu"))

        _race(THREADS, work)
        for j in range(3):   # one module per kernel: nobody saw a half-built or second one
            assert all(modules[t][j] is modules[0][j] for t in range(THREADS)), f"round {rnd} kernel {j}"
        kernels.clear()   # this round's kernels die: their keys are free again
        modules.clear()
        gc.collect()   # kernels hold cycles (their plan's packers name them): free their keys


def test_a_launched_kernel_dies_with_its_last_reference():
    """What the rounds above rely on (and a leak otherwise): after a launch, a kernel is freed by
    the garbage collector once nothing refers to it, and its key is free again."""
    import weakref
    kernels = list(_make_kernels())
    x, y = tg.zeros(4, dtype=tg.float32), tg.zeros(4, dtype=tg.float32)
    tg.launch(kernels[1], 4, inputs=[x, y])
    ref = weakref.ref(kernels[1])
    kernels.clear()
    gc.collect()
    assert ref() is None, ("a launched kernel outlived its last reference: something outside Python's garbage "
                           "collector holds it (a native launch plan holding strong references to the packers, "
                           "whose closures name the kernel?)")
    assert _make_kernels()[1].key == "concurrency.square"


def test_a_new_kernel_compiles_once_under_many_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))
    calls = []
    real = build.build_cpu

    def counting(source, name, kernels=(), **kw):
        calls.append(name)
        return real(source, name, kernels, **kw)

    monkeypatch.setattr(build, "build_cpu", counting)

    @tg.kernel(key="concurrency.once")
    def once(y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = float(i) + 0.5

    outs = [tg.zeros(8, dtype=tg.float32) for _ in range(8)]
    _race(8, lambda t: tg.launch(once, 8, inputs=[outs[t]]))
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), np.arange(8) + 0.5)
    assert calls == [once.symbol], calls
    sos = [p.name for p in tmp_path.iterdir() if p.suffix == ".so"]
    assert len(sos) == 1 and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_a_compile_does_not_hold_up_other_kernels(tmp_path, monkeypatch):
    """While one kernel compiles (held here until the other is done), another kernel compiles,
    loads and launches: builds lock per kernel, never the whole process."""
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))

    @tg.kernel(key="concurrency.slow_build")
    def slow(y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = 1.0

    @tg.kernel(key="concurrency.quick_build")
    def quick(y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = 2.0

    started, release, quick_done = threading.Event(), threading.Event(), threading.Event()
    real = build.build_cpu

    def gated(source, name, kernels=(), **kw):
        if name == slow.symbol:
            started.set()
            release.wait(30)
        return real(source, name, kernels, **kw)

    monkeypatch.setattr(build, "build_cpu", gated)
    ys, yq = tg.zeros(4, dtype=tg.float32), tg.zeros(4, dtype=tg.float32)
    t_slow = threading.Thread(target=lambda: tg.launch(slow, 4, inputs=[ys]))
    t_slow.start()
    try:
        assert started.wait(30)
        t_quick = threading.Thread(target=lambda: (tg.launch(quick, 4, inputs=[yq]), quick_done.set()))
        t_quick.start()
        assert quick_done.wait(30), "the second kernel waited for the first kernel's compile"
    finally:
        release.set()
        t_slow.join(60)
        t_quick.join(60)
    assert ys.numpy().tolist() == [1.0] * 4 and yq.numpy().tolist() == [2.0] * 4


def test_kernel_registry_snapshots_while_kernels_are_made():
    """``all_kernels()`` (force_load) iterating while other threads make kernels: a WeakSet
    snapshot racing an add raised "Set changed size during iteration"."""
    from tapegrad.lang.kernel import all_kernels
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)   # switch threads often: inside the iteration, not between
    try:
        for _ in range(5):
            made = []
            makers_done = [threading.Event(), threading.Event()]

            def work(t):
                if t == 0:
                    while not all(e.is_set() for e in makers_done):
                        all_kernels()
                    return
                try:
                    for _ in range(400):
                        @tg.kernel(key=f"concurrency.many_{t}")
                        def k(y: tg.array(dtype=tg.float32)):
                            y[tg.tid()] = 1.0
                        made.append(k)
                finally:
                    makers_done[t - 1].set()

            _race(3, work)
            assert len(made) == 800
    finally:
        sys.setswitchinterval(interval)


def test_generic_kernel_specializations_from_many_threads():
    dtypes = [(tg.float32, np.float32), (tg.float64, np.float64), (tg.int32, np.int32)]
    gc.freeze()
    try:
        _generic_rounds(dtypes)
    finally:
        gc.unfreeze()


def _make_generic():
    @tg.kernel(key="concurrency.generic_scale")
    def scale(x: tg.array(dtype=typing.Any), y: tg.array(dtype=typing.Any)):
        i = tg.tid()
        y[i] = x[i] + x[i]
    return scale


def _generic_rounds(dtypes):
    for rnd in range(40):
        kernel = [_make_generic()]      # a fresh generic kernel (same key: its specializations hit the cache)
        seen = [None] * THREADS

        def work(t):
            dt, np_dt = dtypes[t % len(dtypes)]
            x = tg.array(np.arange(N).astype(np_dt), dtype=dt)
            y = tg.zeros(N, dtype=dt)
            tg.launch(kernel[0], N, inputs=[x, y])
            np.testing.assert_array_equal(y.numpy(), 2 * np.arange(N))
            seen[t] = kernel[0].specialize([tg.array(dtype=dt), tg.array(dtype=dt)])

        _race(THREADS, work)
        for t in range(THREADS):   # one specialization per type combination, shared by all threads
            assert seen[t] is seen[t % len(dtypes)], f"round {rnd}"
        kernel.clear()
        seen.clear()
        gc.collect()


def test_host_helpers_first_use_from_many_threads(monkeypatch):
    """The batched host zeroing helper and the DLPack helper, loaded by several threads at once."""
    for rnd in range(20):
        monkeypatch.setattr(memory_ops, "_hostops", None)
        monkeypatch.setattr(capsules, "_backend", None)
        monkeypatch.setattr(capsules, "ENTRY_POINTS", [None, None])

        def work(t):
            bufs = [np.ones(5 + k, dtype=np.float64) for k in range(4)]
            memory_ops.ZeroPlan([(b.ctypes.data, b.nbytes) for b in bufs]).run()
            assert not any(b.any() for b in bufs)
            src = np.arange(3.0) + t
            memory_ops.copy_regions([(b.ctypes.data, src.ctypes.data, src.nbytes) for b in bufs])
            assert all(b[:3].tolist() == src.tolist() for b in bufs)
            a = tg.array(np.arange(6.0) + t, device="cpu")
            n = np.from_dlpack(a)
            assert n.ctypes.data == a.ptr and n.tolist() == (np.arange(6.0) + t).tolist()
            b = tg.from_dlpack(n)
            assert b.ptr == a.ptr

        _race(THREADS, work)
        assert memory_ops.load_zero_many(), f"round {rnd}: the native zeroing helper did not load"
        assert capsules.backend().name == "native", f"round {rnd}"


@pytest.mark.cuda
@pytest.mark.parametrize("allocator", ["cupy", "async"])
def test_first_cuda_launches_and_allocations_from_many_threads(allocator):
    """On the GPU: first allocations (the allocator's one-time pool setup) and first launches
    (module loads) of new kernels from several threads together."""
    dev = tg.get_device("cuda:0")
    with tg.ScopedAllocator(allocator, device=dev):
        gc.freeze()
        try:
            for rnd in range(20):
                kernels = list(_make_kernels())

                def work(t):
                    x = tg.array(np.linspace(0.0, 20.0, N, dtype=np.float32), device=dev)
                    y = tg.zeros(N, dtype=tg.float32, device=dev)
                    tg.launch(kernels[1], N, inputs=[x, y], device=dev)
                    np.testing.assert_allclose(y.numpy(), x.numpy() ** 2, rtol=1e-6)
                    n = tg.zeros(1, dtype=tg.int32, device=dev)
                    tg.launch(kernels[2], N, inputs=[x, n], device=dev)
                    assert int(n.numpy()[0]) == int((x.numpy() > 10.0).sum())

                _race(THREADS, work)
                kernels.clear()
                gc.collect()
        finally:
            gc.unfreeze()
