"""Tape.record's common-case path (``Tape._record_plain_launch``: a different plain array per
array parameter, no struct, nothing overwritten that a differentiable record needs) leaves the
tape in the same state as the general path, which takes every other launch; recorded launches
are made natively; a TapeWarning names the user's line.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.recording import PENDING_FIELD
from tests.core.test_fast_launch import Params, counted, native_helper  # noqa: F401

N = 8


@tg.kernel
def k_sq(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = x[i] * x[i] + 1.0


@tg.kernel
def k_inplace(x: tg.array(dtype=float)):
    i = tg.tid()
    x[i] = x[i] * x[i]


@tg.kernel
def k_pair(x: tg.array(dtype=float), y: tg.array(dtype=float), z: tg.array(dtype=float)):
    i = tg.tid()
    z[i] = x[i] * y[i]


@tg.kernel
def k_struct(x: tg.array(dtype=float), y: tg.array(dtype=float), p: Params):
    i = tg.tid()
    y[i] = x[i] * x[i] * p.scale


def _arr(device, grad=True, n=N):
    return tg.array(np.linspace(0.5, 1.5, n), dtype=float, device=device, requires_grad=grad)


def chain(device):
    x, y, z = _arr(device), _arr(device), _arr(device)
    return [(k_sq, [x], [y]), (k_sq, [y], [z])], [x, y, z], z


def inplace(device):
    x, y = _arr(device), _arr(device)
    return [(k_sq, [x], [y]), (k_inplace, [], [y]), (k_sq, [y], [x])], [x, y], x


def inplace_steps(device):
    x, v = _arr(device), _arr(device)
    return [(k_sq, [v], [x]), (k_inplace, [], [x]), (k_inplace, [], [x]), (k_pair, [x, v], [v])], [x, v], v


def overwrite_read(device):
    x, y, z = _arr(device), _arr(device), _arr(device)
    return [(k_sq, [x], [y]), (k_sq, [z], [x])], [x, y, z], y     # x read, then overwritten


def views(device):
    base = _arr(device, n=2 * N)
    lo, hi = base[:N], base[N:]
    out = _arr(device)
    return [(k_sq, [lo], [out]), (k_sq, [out], [hi]), (k_sq, [hi], [lo])], [base, out], out


def aliased(device):
    x, z = _arr(device), _arr(device)
    return [(k_pair, [x, x], [z])], [x, z], z


def no_grads(device):
    x, y, z = _arr(device, False), _arr(device, False), _arr(device)
    return [(k_sq, [x], [y]), (k_sq, [z], [x])], [x, y, z], None


def structs(device):
    x, y = _arr(device), _arr(device)
    p = Params()
    p.scale = 1.5
    return [(k_struct, [x], [y, p])], [x, y], y


SCENARIOS = [chain, inplace, inplace_steps, overwrite_read, views, aliased, no_grads, structs]


def _state(tape, arrays):
    ids = {id(a): k for k, a in enumerate(arrays)}

    def name(a):
        return str(ids.get(id(a), ("view", a.shape, a.strides) if isinstance(a, tg.array) else type(a).__name__))
    return dict(
        records=[(r.kernel.key, r.dim) for r in tape.records],
        live=sorted((name(e[2]), e[0], e[1]) for e in tape._live.values()),
        roots=sorted(len(v) for v in tape._live_roots.values()),
        saves={i: [(name(s.array), s.before_adjoint) for s in v] for i, v in tape._saves.items()},
        gradients=sorted(name(a) for a in tape.gradients))


def _run(make, device, general, save=True, native=True):
    """The launches recorded on a new tape: through the general path alone (``general``), else
    through the common-case paths where they apply (the native helper's record unless
    ``native`` is False, and ``_record_plain_launch``); ``plain`` says per launch whether a
    common-case path took it."""
    launches, arrays, out = make(device)
    tape = tg.Tape(save_overwritten=save)
    plain = []
    if general or not native:
        setattr(tape, PENDING_FIELD, None)     # the native helper records through Tape.record
    if general:
        tape._record_plain_launch = lambda rec, index: False
    else:
        taken = tape._record_plain_launch
        tape._record_plain_launch = lambda rec, index: plain.append(taken(rec, index)) or plain[-1]
    with tape, warnings.catch_warnings():
        warnings.simplefilter("ignore", tg.TapeWarning)   # save=False: the general path warns
        for k, ins, outs in launches:
            n, pending = len(plain), len(tape._pending)
            tg.launch(k, N, inputs=ins, outputs=outs)
            if len(plain) == n:                 # recorded natively: one more pending record
                plain.append(len(tape._pending) == pending + 1)
    state = _state(tape, arrays)
    if out is not None:
        tape.backward(grads={out: tg.full(N, 1.0, dtype=float, device=device)})
    grads = [None if a.grad is None else a.grad.numpy().tobytes() for a in arrays]
    return state, grads, [a.numpy().tobytes() for a in arrays], plain


@pytest.mark.parametrize("make", SCENARIOS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_the_common_case_path_leaves_the_general_paths_state(device, make, native):
    _run(make, device, True)     # compiles and registers the modules
    fast = _run(make, device, False, native=native)
    slow = _run(make, device, True)
    assert fast[:3] == slow[:3]
    # inplace: y is saved, then x, read by the first launch, is overwritten (general path);
    # inplace_steps: x saved before each step, then v (read before) overwritten; views: the second
    # launch writes into an allocation with a live read of another view (the general path checks
    # whether the two overlap)
    expect_plain = {"chain": [True, True], "inplace": [True, True, False],
                    "inplace_steps": [True, True, True, False], "overwrite_read": [True, False],
                    "views": [True, False, False], "aliased": [False], "no_grads": [True, True],
                    "structs": [False]}[make.__name__]
    assert fast[3] == expect_plain


@pytest.mark.parametrize("make", [inplace, inplace_steps], ids=lambda f: f.__name__)
def test_a_tape_saving_nothing_leaves_in_place_launches_to_the_general_path(device, make):
    _run(make, device, True, save=False)
    fast = _run(make, device, False, save=False)
    slow = _run(make, device, True, save=False)
    assert fast[:3] == slow[:3]
    assert fast[3] == {"inplace": [True, False, False], "inplace_steps": [True, False, False, False]}[make.__name__]


def test_recorded_launches_are_native_and_backward_is_exact(device):
    launches, arrays, out = chain(device)
    with tg.Tape() as tape:
        for k, ins, outs in launches:
            tg.launch(k, N, inputs=ins, outputs=outs)      # the modules register here
    x0 = arrays[0].numpy().copy()
    launches, arrays, out = chain(device)
    with counted(fast=2), tg.Tape() as tape:
        for k, ins, outs in launches:
            tg.launch(k, N, inputs=ins, outputs=outs)
    with counted(fast=2, adjoint=True):
        tape.backward(grads={out: tg.full(N, 1.0, dtype=float, device=device)})
    y = x0 * x0 + 1.0
    np.testing.assert_allclose(arrays[0].grad.numpy(), 2 * y * 2 * x0, rtol=1e-6)


def test_a_tape_warning_names_the_users_line(device):
    x, y = _arr(device), _arr(device)
    tg.launch(k_inplace, N, outputs=[y])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tg.Tape(save_overwritten=False):
            tg.launch(k_sq, N, inputs=[x], outputs=[y])
            tg.launch(k_inplace, N, outputs=[y])     # in place, not saved: warns
    tape_warnings = [w for w in caught if issubclass(w.category, tg.TapeWarning)]
    assert tape_warnings and all(w.filename == __file__ for w in tape_warnings), \
        [(w.filename, w.lineno) for w in tape_warnings]
