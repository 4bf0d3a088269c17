"""Warp's private ``_<field>_grad`` of a struct instance (the gradient Warp's struct keeps alive for
an array field): in tapegrad the field's array keeps its own gradient, and the name reads it, so
it follows the field as it is replaced (Warp's test_struct checks the keepalive is dropped)."""
import gc
import weakref

import tapegrad as tg


@tg.struct
class WithArray:
    data: tg.array(dtype=float)
    scale: float


def test_field_grad_reads_the_arrays_gradient_and_follows_replacement():
    s = WithArray()
    assert s._data_grad is None                    # no array yet
    a = tg.array([1.0, 2.0, 3.0], dtype=float, requires_grad=True)
    grad = weakref.ref(a.grad)
    s.data = a
    assert s._data_grad is a.grad is grad()
    del a
    gc.collect()
    assert grad() is not None                      # the field's array keeps it
    s.data = tg.array([4.0, 5.0, 6.0], dtype=float)   # no gradient
    gc.collect()
    assert s._data_grad is None and grad() is None  # nothing keeps the old gradient
    s.data = None
    assert s._data_grad is None
    # only array fields have one
    assert not hasattr(s, "_scale_grad")
