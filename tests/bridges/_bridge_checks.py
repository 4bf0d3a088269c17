"""Behaviour every tensor bridge must have, written once and run by each framework's tests
(``test_torch.py``, ``test_paddle.py``) through a small ``Framework`` description."""
from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.launch import ArrayCtype

from ._bridge_kernels import outer, rosenbrock, sincos


@dataclass(frozen=True)
class Framework:
    """How the checks make and read one framework's tensors.

    Attributes:
        name: the module name ("torch", "paddle").
        float32: the framework's float32 dtype.
        from_, to: ``tg.from_<name>``, ``tg.to_<name>``.
        tensor: ``f(numpy array) -> tensor`` (a copy, no gradient).
        requiring_grad: ``f(tensor) -> tensor``, the tensor as a leaf that requires grad.
        strides: ``f(tensor) -> element strides``.
        numpy: ``f(tensor) -> numpy array`` (a copy or a view).
        fill: ``f(tensor, value)`` in place.
        transpose: ``f(2-D tensor) -> its transposed view``.
        grad_leaf_code: Python source making ``t``, a 100-element leaf requiring grad (for
            the interpreter-exit check, which runs in a subprocess).
        stderr_ok: ``f(stderr) -> what is left that must not be there``.
    """

    name: str
    float32: Any
    from_: Callable
    to: Callable
    tensor: Callable
    requiring_grad: Callable
    strides: Callable
    numpy: Callable
    fill: Callable
    transpose: Callable
    grad_leaf_code: str
    stderr_ok: Callable = staticmethod(lambda err: err)


def round_trip_is_zero_copy(fw: Framework) -> None:
    w = tg.array([1.0, 2.0, 3.0], dtype=float, device="cpu")
    t = fw.to(w)
    assert t.data_ptr() == w.ptr and t.dtype == fw.float32
    t[1] = 7.0
    assert w.numpy()[1] == 7.0
    w2 = fw.from_(t)
    assert w2.ptr == w.ptr and w2.shape == (3,) and w2.dtype is tg.float32
    w2.numpy()[0] = -1.0
    assert float(fw.numpy(t)[0]) == -1.0


def owners_stay_alive_both_ways(fw: Framework) -> None:
    w = tg.zeros(1000)
    t = fw.to(w)
    ref = weakref.ref(w)
    del w
    gc.collect()
    assert ref() is not None and fw.numpy(t).sum() == 0.0
    del t
    gc.collect()
    assert ref() is None

    x = fw.tensor(np.ones(1000, np.float32))
    a = fw.from_(x)
    tref = weakref.ref(x)
    del x
    gc.collect()
    assert tref() is not None and a.numpy().sum() == 1000
    del a
    gc.collect()
    assert tref() is None


def grad_views_keep_their_buffers_alive(fw: Framework) -> None:
    p = tg.zeros(8, requires_grad=True)
    g = p.grad
    gref = weakref.ref(g)
    tp = fw.to(p)
    del p, g
    gc.collect()
    assert gref() is not None
    fw.fill(tp.grad, 2.0)
    assert gref().numpy().sum() == 16.0


def return_ctype_keeps_tensor_and_grad_alive(fw: Framework) -> None:
    x = fw.requiring_grad(fw.tensor(np.zeros(6, np.float32)))
    d = fw.from_(x, return_ctype=True)
    assert isinstance(d, ArrayCtype)
    assert d.data == x.data_ptr() and d.grad == x.grad.data_ptr()
    assert d.ndim == 1 and d.shape[0] == 6 and d.strides[0] == 4 and d.flags == 0
    assert d.tg_dtype is tg.float32 and d.tg_device is tg.get_device("cpu")
    # watch the gradient object the descriptor holds (paddle makes a new wrapper per `.grad` read)
    xref, gref = weakref.ref(x), weakref.ref(d.tg_refs[1])
    assert d.tg_refs[1].data_ptr() == x.grad.data_ptr()
    del x
    gc.collect()
    assert xref() is not None and gref() is not None
    del d
    gc.collect()
    assert xref() is None and gref() is None


def return_ctype_vectors_and_no_grad(fw: Framework) -> None:
    v = fw.tensor(np.zeros((5, 2, 2), np.float32))
    d = fw.from_(v, dtype=tg.mat22, return_ctype=True)
    assert d.ndim == 1 and d.shape[0] == 5 and d.strides[0] == 16 and d.grad in (None, 0)
    assert d.tg_dtype is tg.mat22
    g = tg.zeros(5, dtype=tg.mat22)
    assert fw.from_(v, dtype=tg.mat22, grad=g, return_ctype=True).grad == g.ptr


def layout_cache_is_not_keyed_by_pointer(fw: Framework) -> None:
    """R19: tensors that reuse freed memory with another shape/dtype convert correctly."""
    shapes = [(4,), (2, 2), (4, 1), (1, 4), (3,), (2, 3)]
    for k in range(60):
        shape = shapes[k % len(shapes)]
        dtype = ("float32", "int32", "float64")[k % 3]
        t = fw.tensor(np.arange(int(np.prod(shape))).reshape(shape).astype(dtype))
        if k % 2 and len(shape) == 2:
            t = fw.transpose(t)
        a = fw.from_(t)
        assert a.ptr == t.data_ptr() and a.shape == tuple(t.shape)
        assert a.strides == tuple(s * t.element_size() for s in fw.strides(t))
        assert np.array_equal(a.numpy(), fw.numpy(t))
        d = fw.from_(t, return_ctype=True)
        assert d.data == t.data_ptr() and tuple(d.shape[:d.ndim]) == tuple(t.shape)
        del t, a, d


def import_tapegrad_does_not_import(fw: Framework) -> None:
    code = f"import sys, tapegrad; assert {fw.name!r} not in sys.modules; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def clean_exit_with_live_views(fw: Framework) -> None:
    """B8: views in both directions alive at interpreter shutdown exit cleanly, stderr empty."""
    make = fw.grad_leaf_code.replace("\n", "\n    ")
    code = f"""
import numpy as np, {fw.name}, tapegrad as tg
keep = []
for i in range(20):
    w = tg.zeros(100, requires_grad=True, device="cpu")
    keep.append(tg.to_{fw.name}(w))                 # framework views of tapegrad memory
    {make}
    keep.append(tg.from_{fw.name}(t))               # and tapegrad views of framework memory
    keep.append(tg.from_{fw.name}(t, return_ctype=True))
keep.append(keep)   # a cycle, collected (or not) at shutdown
print("done")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    assert fw.stderr_ok(r.stderr).strip() == "", r.stderr


def op_construction_errors(make_op) -> None:
    """``tg.<framework>_op`` refuses bad configurations, naming what is wrong."""
    with pytest.raises(ValueError, match="num_outputs"):
        make_op(rosenbrock, num_outputs=0)
    with pytest.raises(ValueError, match="num_outputs"):
        make_op(rosenbrock, num_outputs=3)
    with pytest.raises(TypeError, match="must be an array"):
        make_op(sincos, num_outputs=3)
    with pytest.raises(ValueError, match=r"output_dims names \['nope'\]"):
        make_op(outer, output_dims={"nope": 3})

    @tg.struct
    class P:
        k: float

    @tg.kernel
    def with_struct(p: P, out: tg.array[float]):
        out[tg.tid()] = p.k

    with pytest.raises(TypeError, match="struct"):
        make_op(with_struct)

    @tg.kernel
    def no_inputs(out: tg.array[float]):
        out[tg.tid()] = 1.0

    with pytest.raises(TypeError, match="no array input"):
        make_op(no_inputs)


ALL = (round_trip_is_zero_copy, owners_stay_alive_both_ways, grad_views_keep_their_buffers_alive,
       return_ctype_keeps_tensor_and_grad_alive, return_ctype_vectors_and_no_grad,
       layout_cache_is_not_keyed_by_pointer, import_tapegrad_does_not_import, clean_exit_with_live_views)
