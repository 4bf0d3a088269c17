"""Issue 28, item 5: tape details Warp's own test_tape.py pins — ``tape.gradients[struct]`` after
``reset()``, ``tape.launches`` as the list scope markers index, ``visualize(simplify_graph=True)``
collapsing repeated launches, array tooltips. Expected values follow Warp 1.19."""
from __future__ import annotations

import numpy as np

import tapegrad as tg


@tg.struct
class Pair:
    x: tg.array(dtype=float)
    y: tg.array(dtype=float)


@tg.kernel
def pair_product(p: Pair, z: tg.array(dtype=float)):
    i = tg.tid()
    z[i] = p.x[i] * p.y[i]


@tg.kernel
def dot_product(x: tg.array(dtype=float), y: tg.array(dtype=float), z: tg.array(dtype=float)):
    i = tg.tid()
    tg.atomic_add(z, 0, x[i] * y[i])


def _arr(v):
    return tg.array(np.asarray(v, np.float32), requires_grad=True)


def test_struct_gradients_survive_reset_zeroed():
    p = Pair()
    p.x = _arr([1.0, 2.0, 3.0])
    p.y = _arr([4.0, 5.0, 6.0])
    z = tg.zeros(3, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tg.launch(pair_product, dim=3, inputs=[p], outputs=[z])
    tape.backward(grads={z: tg.ones_like(z)})
    np.testing.assert_array_equal(tape.gradients[p].x.numpy(), [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(tape.gradients[p].y.numpy(), [1.0, 2.0, 3.0])
    tape.reset()
    assert not tape.launches and tape.scopes == []
    np.testing.assert_array_equal(tape.gradients[p].x.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(tape.gradients[z].numpy(), [0.0, 0.0, 0.0])
    # the tape records again after the reset, and the kept entries are zeroed by zero()
    with tape:
        tg.launch(pair_product, dim=3, inputs=[p], outputs=[z])
    tape.backward(grads={z: tg.ones_like(z)})
    np.testing.assert_array_equal(p.x.grad.numpy(), [4.0, 5.0, 6.0])
    tape.zero()
    np.testing.assert_array_equal(tape.gradients[p].y.numpy(), [0.0, 0.0, 0.0])


def test_launches_is_the_list_scope_markers_index():
    tape = tg.Tape()
    assert tape.launches is tape.records
    tape.record_scope_begin("outer")
    tape.record_scope_begin("inner")
    tape.launches.append(object())
    tape.record_scope_end()
    tape.record_scope_end()
    assert tape.scopes == [(0, "outer", {}), (0, "inner", {}), (1, None, None), (1, None, None)]
    x = _arr([1.0])
    with tape:
        tg.launch(dot_product, dim=1, inputs=[x, x], outputs=[tg.zeros(1, requires_grad=True)])
    assert len(tape.launches) == 2 and tape.launches[1].kernel is dot_product


def _repeated_tape(n, split_at=None):
    x, y = _arr(np.ones(8)), _arr(np.ones(8) * 2.0)
    z = tg.zeros(1, requires_grad=True)
    tape = tg.Tape()
    with tape:
        tape.record_scope_begin("my loop")
        for k in range(n):
            if k == split_at:
                tape.record_scope_begin("second half")
            tg.launch(dot_product, dim=8, inputs=[x, y], outputs=[z])
        if split_at is not None:
            tape.record_scope_end()
        tape.record_scope_end()
    return tape, (x, y, z)


def test_visualize_simplify_collapses_repeated_launches():
    tape, (x, y, z) = _repeated_tape(16)
    text = tape.visualize(simplify_graph=True)
    assert "repeated 16x" in text and "my loop" in text
    assert text.count("dot_product") == 1
    assert text.count(f"a{id(x)} -> r0;") == 1 and text.count(f"r0 -> a{id(z)};") == 1
    full = tape.visualize(simplify_graph=False)
    assert full.count("dot_product") == 16 and "repeated" not in full
    # a run never crosses a scope boundary: 5 in the outer scope, 11 in the inner one
    tape, _ = _repeated_tape(16, split_at=5)
    text = tape.visualize(simplify_graph=True)
    assert "repeated 5x" in text and "repeated 11x" in text and text.count("dot_product") == 2
    # other arrays: not the same launch, not collapsed
    x2 = _arr(np.ones(8))
    with tape:
        tg.launch(dot_product, dim=8, inputs=[x2, x2], outputs=[tg.zeros(1, requires_grad=True)])
    assert tape.visualize().count("dot_product") == 3


def test_visualize_array_tooltips():
    tape, (x, _, _) = _repeated_tape(1)
    text = tape.visualize()
    assert f'a{id(x)} [label="x\\n' in text
    assert 'tooltip="array: dtype=float32, shape=(8,)"' in text
