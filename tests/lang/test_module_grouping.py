"""Warp's module grouping: the kernels of one module share one ``Module`` object
(``kernel.module``, ``tg.get_module(name)``), whose ``load`` loads all of them; ``module="unique"``
kernels have modules of their own; each kernel still compiles into a binary of its own."""
import gc

import numpy as np
import pytest

import tapegrad as tg


@tg.kernel
def grouped_a(x: tg.array(dtype=float)):
    x[tg.tid()] = 1.0


@tg.kernel
def grouped_b(x: tg.array(dtype=float)):
    x[tg.tid()] = 2.0


@tg.kernel(module="unique")
def grouped_unique(x: tg.array(dtype=float)):
    x[tg.tid()] = 3.0


def test_kernels_of_a_python_module_share_its_module_object():
    m = tg.get_module(__name__)
    assert grouped_a.module is m and grouped_b.module is m and tg.get_module(__name__) is m
    assert m.name == __name__
    assert grouped_unique.module is not m
    assert tg.get_module(grouped_unique.module.name) is grouped_unique.module
    # one options table per module: set through one kernel, read through the other
    grouped_a.module.options["max_unroll"] = 4
    try:
        assert grouped_b.module.options["max_unroll"] == 4
        assert tg.get_module_options(__name__)["max_unroll"] == 4
    finally:
        grouped_a.module.options["max_unroll"] = 16
    # an object of its own (Warp code and test doubles set attributes on it)
    m.note = "kept"
    assert tg.get_module(__name__).note == "kept"
    del m.note


def test_module_load_loads_every_kernel_of_the_module():
    def make(value):
        @tg.kernel(module="tg_grouping_named")
        def writes(x: tg.array(dtype=float)):
            x[tg.tid()] = value
        return writes

    @tg.kernel(module="tg_grouping_named")
    def other(x: tg.array(dtype=float)):
        x[tg.tid()] = -1.0

    first = make(1.0)
    m = tg.get_module("tg_grouping_named")
    assert first.module is m and other.module is m
    cpu = tg.get_device("cpu")
    loaded = m.load("cpu")
    assert set(loaded) == {first.key, other.key}
    # what the launch path uses: nothing left to build at the first launch
    assert loaded[first.key] is first.module_for(cpu) and loaded[other.key] is other.module_for(cpu)
    x = tg.zeros(3, dtype=float)
    tg.launch(other, 3, inputs=[x])
    np.testing.assert_array_equal(x.numpy(), -1.0)

    # a redefinition of the same function replaces the kernel in the module (as Warp's; while the
    # first lives, the second's key gets a suffix)
    second = make(5.0)
    assert second.key_base == first.key_base and second.key != first.key
    again = m.load("cpu")
    assert set(again) == {second.key, other.key} and again[second.key] is second.module_for(cpu)
    tg.launch(second, 3, inputs=[x])
    np.testing.assert_array_equal(x.numpy(), 5.0)

    # a kernel nothing refers to any more leaves its module
    del first, second
    gc.collect()
    assert set(m.load(cpu, block_dim=64)) == {other.key}
    with pytest.raises(ValueError, match="block_dim"):
        m.load("cpu", block_dim=0)


def test_load_module_and_force_load_take_the_module_object():
    @tg.kernel(module="tg_grouping_load")
    def one(x: tg.array(dtype=float)):
        x[tg.tid()] = 1.0

    @tg.kernel(module="tg_grouping_load")
    def two(x: tg.array(dtype=float)):
        x[tg.tid()] = 2.0

    alias = tg.get_device("cpu").alias
    tg.load_module(one.module, device="cpu")     # the module's kernels, both of them
    assert alias in one._modules and alias in two._modules
    tg.force_load(device="cpu", modules=[two.module])


def test_calling_the_module_with_a_device_says_what_to_call():
    with pytest.raises(TypeError, match=r"kernel\.module_for\(device\)"):
        grouped_a.module(tg.get_device("cpu"))
    assert grouped_a.module_for(tg.get_device("cpu")) is grouped_a.module.load("cpu")[grouped_a.key]


def test_a_unique_kernel_collected_under_the_options_lock_does_not_deadlock(monkeypatch):
    # a "unique" module's kernel that dies in a garbage collection triggered while the options
    # lock is held (an allocation inside get_module) runs its finalizer, which takes the lock
    # again on the same thread: with a plain lock that thread waited for itself forever
    import threading

    from tapegrad.lang import options

    real_init = options.Module.__init__

    def collecting_init(self, name):
        gc.collect()           # the kernel below dies here, under the lock
        real_init(self, name)

    def body(x: tg.array(dtype=float)):
        x[tg.tid()] = 1.0

    gc.disable()
    try:
        k = tg.kernel(body, module="unique")
        k.cycle = k            # only the collector frees it
        name = k.module_name
        del k
        monkeypatch.setattr(options.Module, "__init__", collecting_init)
        t = threading.Thread(target=tg.get_module, args=("tg_grouping_deadlock",), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "get_module deadlocked in a kernel's finalizer"
    finally:
        gc.enable()
    assert name not in options._MODULES   # the dead unique module was forgotten
