"""The native helper records the common launch itself (issue 30 item 3: ``fastlaunch.c``'s
``native_record``, the tape's pending records made into ``LaunchRecord``s by ``Tape._drain``).
Property test: any program of launches (plain, in place, aliased, over views, with and without
gradients), host fills and reads of ``tape.gradients`` leaves the same tape (records, live
reads, saves, gradients), the same values and gradients and the same errors whether the helper
records or every launch goes through ``Tape.record`` (the Python reference). Float64 references:
closed forms."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.launch import fastlaunch
from tapegrad.recording import PENDING_FIELD

N = 8


@tg.kernel
def k_sq(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i] + 1.0


@tg.kernel
def k_inplace(x: tg.array(dtype=tg.float64)):
    i = tg.tid()
    x[i] = x[i] * x[i]


@tg.kernel
def k_pair(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64), z: tg.array(dtype=tg.float64)):
    i = tg.tid()
    z[i] = x[i] * y[i]


@tg.kernel
def k_readback(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * 2.0
    y[i] = y[i] * y[i]


KERNELS = {"sq": (k_sq, 1), "inplace": (k_inplace, 0), "pair": (k_pair, 2), "readback": (k_readback, 1)}
ARITY = {"sq": 2, "inplace": 1, "pair": 3, "readback": 2}
POOL = 6     # three arrays, the two halves of a fourth, the fourth (few: programs often reuse one)


def _counting_tape(**kwargs):
    """A tape whose ``Tape.record`` calls (the recorder's path) are listed in the returned list."""
    tape, calls = tg.Tape(**kwargs), []
    record = tape.record
    tape.record = lambda rec: calls.append(rec) or record(rec)
    return tape, calls


def _pool(device, grads):
    arrays = [tg.array(np.linspace(0.5 + k, 1.5 + k, N), dtype=tg.float64, device=device, requires_grad=g)
              for k, g in enumerate(grads[:3])]
    base = tg.array(np.linspace(-1.0, 1.0, 2 * N), dtype=tg.float64, device=device, requires_grad=grads[3])
    return arrays + [base[:N], base[N:], base], arrays + [base]


def _namer(named):
    ids = {id(a): k for k, a in enumerate(named)}
    return lambda a: ids.get(id(a), -1)


def _state(tape, named):
    name = _namer(named)
    return dict(
        records=[(type(r).__name__, getattr(getattr(r, "kernel", None), "key", None), getattr(r, "dim", None),
                  tuple(map(name, getattr(r, "inputs", ()))), tuple(map(name, getattr(r, "outputs", ()))),
                  getattr(r, "device", None), getattr(r, "stream", None), getattr(r, "block_dim", None))
                 for r in tape.launches],
        live=sorted((name(k_a[2]), k_a[0], k_a[1]) for k_a in tape._live.values()),
        roots=sorted(len(v) for v in tape._live_roots.values()),
        saves={i: [(name(s.array), s.before_adjoint) for s in v] for i, v in tape._saves.items()},
        gradients=[name(a) for a in tape.gradients],
        dot=tape.visualize().count("->"))


def _run(device, program, grads, save, strict, native):
    """Runs ``program`` on a new tape; returns (events, tape state, values, gradients)."""
    args, owned = _pool(device, grads)
    named = owned + args[3:5]
    label = _namer(named)
    tape = tg.Tape(save_overwritten=save)
    if not native:
        setattr(tape, PENDING_FIELD, None)     # every launch through Tape.record (the reference)
    events = []
    old = tg.config.strict_tape
    tg.config.strict_tape = strict
    try:
        with tape, warnings.catch_warnings():
            warnings.simplefilter("ignore", tg.TapeWarning)
            for op, which, picks in program:
                try:
                    if op == "launch":
                        kernel, n_in = KERNELS[which]
                        chosen = [args[p] for p in picks[:ARITY[which]]]
                        tg.launch(kernel, N, inputs=chosen[:n_in], outputs=list(chosen[n_in:]), device=device)
                    elif op == "fill":
                        args[picks[0]].fill_(0.25)
                    else:
                        events.append([label(a) for a in tape.gradients])
                    events.append("ok")
                except RuntimeError as e:
                    events.append(f"{type(e).__name__}: {e}")
                    break
        state = _state(tape, named)
        seeds = {a: tg.full(a.shape, 1.0, dtype=tg.float64, device=device) for a in named if a.grad is not None}
        tape.backward(grads=seeds)
    finally:
        tg.config.strict_tape = old
    return events, state, [a.numpy().tobytes() for a in named], \
        [None if a.grad is None else a.grad.numpy().tobytes() for a in named]


_OPS = st.one_of(
    st.tuples(st.just("launch"), st.sampled_from(sorted(KERNELS)), st.lists(st.integers(0, POOL - 1), min_size=3,
                                                                           max_size=3)),
    st.tuples(st.just("fill"), st.just(""), st.lists(st.integers(0, POOL - 1), min_size=1, max_size=1)),
    st.tuples(st.just("gradients"), st.just(""), st.just([])))


@pytest.fixture
def warmed(device):
    """The kernels' modules registered with the helper (a kernel's first launch is a Python one)."""
    args, _ = _pool(device, [True] * 4)
    for _ in range(2):
        tg.launch(k_sq, N, inputs=[args[0]], outputs=[args[1]], device=device)
        tg.launch(k_inplace, N, outputs=[args[0]], device=device)
        tg.launch(k_pair, N, inputs=[args[0], args[1]], outputs=[args[2]], device=device)
        tg.launch(k_readback, N, inputs=[args[0]], outputs=[args[1]], device=device)
    return device


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(_OPS, min_size=1, max_size=7), grads=st.lists(st.booleans(), min_size=4, max_size=4),
       save=st.booleans(), strict=st.booleans())
def test_native_record_matches_the_python_record(warmed, program, grads, save, strict):
    native = _run(warmed, program, grads, save, strict, True)
    python = _run(warmed, program, grads, save, strict, False)
    assert native[0] == python[0]
    assert native[1] == python[1]
    assert native[2] == python[2]
    assert native[3] == python[3]


def test_a_chain_is_recorded_natively_and_backward_is_exact(warmed):
    """A chain of plain launches: recorded without Tape.record (pending, made LaunchRecords when
    read), and the gradient is the closed form's."""
    device = warmed
    x0 = np.linspace(0.1, 0.9, N)
    x = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
    y = tg.zeros(N, dtype=tg.float64, device=device, requires_grad=True)
    z = tg.zeros(N, dtype=tg.float64, device=device, requires_grad=True)
    tape, calls = _counting_tape()
    with tape:
        tg.launch(k_sq, N, inputs=[x], outputs=[y], device=device)
        tg.launch(k_sq, N, inputs=(y,), outputs=(z,), device=device)
    if fastlaunch.error() is None:
        assert calls == [] and len(tape._pending) == 2          # recorded natively
    recs = tape.launches
    assert [r.kernel for r in recs] == [k_sq, k_sq] and tape._pending == []
    assert recs[0].inputs == (x,) and recs[0].outputs == (y,) and recs[1].inputs[0] is y
    assert recs[0].dim == (N,) and recs[0].device == tg.get_device(device)
    tape.backward(grads={z: tg.full(N, 1.0, dtype=tg.float64, device=device)})
    yv = x0 * x0 + 1.0
    np.testing.assert_allclose(x.grad.numpy(), 2 * yv * 2 * x0, rtol=1e-13)


@tg.kernel
def k_drift(x: tg.array(dtype=tg.float64), v: tg.array(dtype=tg.float64), dt: tg.float64):
    i = tg.tid()
    x[i] = x[i] + dt * v[i] * x[i]


def test_in_place_steps_are_recorded_natively_with_their_saves(warmed):
    """A loop of in-place steps: recorded without Tape.record, each step's old x saved before
    it ran (issue 30: the in-place record's cost), and both gradients are the closed form's;
    with saving off the recorder takes the steps (it warns that d/dv may be wrong)."""
    device = warmed
    x0, v0, dt, steps = np.linspace(0.5, 1.5, N), np.linspace(-1.0, 1.0, N), 0.01, 20
    w = tg.zeros(N, dtype=tg.float64, device=device)
    for _ in range(2):      # a kernel's first launch is a Python one
        tg.launch(k_drift, N, inputs=[w, w, dt], device=device)
    for save in (True, False):
        x = tg.array(x0, dtype=tg.float64, device=device, requires_grad=True)
        v = tg.array(v0, dtype=tg.float64, device=device, requires_grad=True)
        tape, calls = _counting_tape(save_overwritten=save)
        with tape, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", tg.TapeWarning)
            for _ in range(steps):
                tg.launch(k_drift, N, inputs=[x, v, dt], device=device)
        if not save:
            assert len(calls) == steps and tape._saves == {}
            assert any(issubclass(w.category, tg.TapeWarning) for w in caught)
            continue
        assert not caught
        if fastlaunch.error() is None:
            assert calls == [] and len(tape._pending) == steps           # recorded natively
        assert sorted(tape._saves) == list(range(steps))                 # one save per step, by index
        assert len(tape.launches) == steps and tape._pending == []
        tape.backward(grads={x: tg.full(N, 1.0, dtype=tg.float64, device=device)})
        np.testing.assert_allclose(x.grad.numpy(), (1 + dt * v0) ** steps, rtol=1e-13)
        np.testing.assert_allclose(v.grad.numpy(), x0 * steps * dt * (1 + dt * v0) ** (steps - 1), rtol=1e-13)


def test_a_dropped_tape_with_saves_is_freed_at_once(warmed):
    """The native state holds the saver as a module function, not a bound method: a tape that
    saved in-place steps is freed when its last reference goes (its arena with it), not when
    the cycle collector next runs."""
    import gc
    import weakref
    device = warmed
    x = tg.array(np.ones(N), dtype=tg.float64, device=device, requires_grad=True)
    v = tg.array(np.ones(N), dtype=tg.float64, device=device, requires_grad=True)
    gc.disable()
    try:
        tape = tg.Tape()
        with tape:
            for _ in range(3):
                tg.launch(k_drift, N, inputs=[x, v, 0.01], device=device)
        assert tape._saves
        ref = weakref.ref(tape)
        del tape
        assert ref() is None
    finally:
        gc.enable()


def test_the_inputs_list_changed_after_the_launch_leaves_the_record(warmed):
    """The record holds the arguments as launched (tuples), not the caller's lists."""
    device = warmed
    x, y, w = (tg.full(N, 1.0, dtype=tg.float64, device=device, requires_grad=True) for _ in range(3))
    ins, outs = [x], [y]
    with tg.Tape() as tape:
        tg.launch(k_sq, N, inputs=ins, outputs=outs, device=device)
    ins[0], outs[0] = w, w
    assert tape.launches[0].inputs == (x,) and tape.launches[0].outputs == (y,)


def test_array_fields_are_read_from_the_instance_dict_only_where_that_is_getattr():
    """The helper reads a plain array's fields from its instance dict only when the class keeps
    them as plain class attributes (None, version 0) and no class makes one a descriptor."""
    fields = (tg.array.DESCRIPTOR_CACHE, tg.array.GRAD_FIELD, tg.array.LINK_FIELD, tg.array.OWNER_FIELD)
    assert fastlaunch._dict_fields_ok(tg.array, fields)

    class Versioned(tg.array):
        @property
        def version(self):
            return 7

    class Defaulted(tg.array):
        _grad = 0

    class Hooked(tg.array):
        def __getattr__(self, name):
            return None

    for cls in (Versioned, Defaulted, Hooked):
        assert not fastlaunch._dict_fields_ok(cls, fields), cls


def test_versions_bump_once_per_native_launch(warmed):
    """A written array's version goes up by one per launch (its dict field, or the class's 0
    before the first write); a read one keeps its version."""
    device = warmed
    x = tg.array(np.full(N, 2.0), dtype=tg.float64, device=device)
    y = tg.array(np.zeros(N), dtype=tg.float64, device=device)
    x0 = x.version
    assert y.version == 0 and "version" not in vars(y)
    for k in range(3):
        tg.launch(k_sq, N, inputs=[x], outputs=[y], device=device)
        assert (x.version, y.version) == (x0, k + 1)
    np.testing.assert_array_equal(y.numpy(), np.full(N, 5.0))


def test_the_device_stream_field_is_what_the_property_returns():
    """A CUDA launch reads ``Device.STREAM_FIELD`` directly only where ``Device.stream``
    returns that field whenever it is set (no descriptor of that name, plain attribute access)."""
    from tapegrad.device import Device
    assert fastlaunch._plain_fields(Device, (Device.STREAM_FIELD,))
    assert "stream" not in vars(Device(alias="cuda:9", ordinal=9)) and Device.STREAM_FIELD == "_stream"

    class Odd(Device):
        _stream = property(lambda self: None)

    assert not fastlaunch._plain_fields(Odd, (Device.STREAM_FIELD,))


def test_a_tape_records_only_its_own_threads_launches(warmed):
    """The helper reads the recording tape from the thread-local active_tape() reads: a launch
    on another thread, while this thread's tape records, is not recorded."""
    import threading
    device = warmed
    x, y, z = (tg.full(N, 1.5, dtype=tg.float64, device=device, requires_grad=True) for _ in range(3))
    with tg.Tape() as tape:
        tg.launch(k_sq, N, inputs=[x], outputs=[y], device=device)
        t = threading.Thread(target=lambda: tg.launch(k_sq, N, inputs=[x], outputs=[z], device=device))
        t.start()
        t.join()
    assert [r.outputs[0] for r in tape.launches] == [y]
    np.testing.assert_array_equal(z.numpy(), np.full(N, 1.5 * 1.5 + 1.0))


class _ArraySubclass(tg.array):
    pass


def test_memory_roots_match_tape_saves_for_every_owner_kind(warmed):
    """The native record's memory root of each array it reads (the key of the tape's pending
    roots) is ``tape_saves.memory_root``'s, whatever owns the memory: tapegrad's own buffer, a
    view, a view of a view, numpy memory wrapped zero-copy, an array whose owner the helper met
    before (remembered as not an array); an owner that is an array subclass leaves the launch to
    ``Tape.record``."""
    from tapegrad.tape_saves import memory_root
    device = warmed
    base = tg.array(np.linspace(0.1, 0.9, 4 * N), dtype=tg.float64, device=device, requires_grad=True)
    host = np.linspace(1.0, 2.0, N)
    sources = {
        "own": tg.array(np.linspace(0.1, 0.9, N), dtype=tg.float64, device=device, requires_grad=True),
        "view": base[N:2 * N],
        "view of a view": base[N:][N:2 * N],
    }
    if device == "cpu":
        wrapped = tg.from_numpy(host)
        wrapped.requires_grad = True
        sources["numpy memory"] = wrapped
    for _ in range(2):   # the second round meets every owner type again (remembered)
        for what, x in sources.items():
            y = tg.zeros(N, dtype=tg.float64, device=device, requires_grad=True)
            tape, calls = _counting_tape()
            with tape:
                tg.launch(k_sq, N, inputs=[x], outputs=[y], device=device)
            if fastlaunch.error() is None:
                assert calls == [], what                                     # recorded natively
                assert list(tape._pending_roots) == [id(memory_root(x))], what
            x.grad.zero_()
            tape.backward(grads={y: tg.full(N, 1.0, dtype=tg.float64, device=device)})
            np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-13, err_msg=what)
    sub = _ArraySubclass(np.linspace(0.1, 0.9, 2 * N), dtype=tg.float64, device=device)
    view = sub[:N]
    assert type(view) is tg.array and type(view.owner) is _ArraySubclass
    y = tg.zeros(N, dtype=tg.float64, device=device, requires_grad=True)
    tape, calls = _counting_tape()
    with tape:
        tg.launch(k_sq, N, inputs=[view], outputs=[y], device=device)
    if fastlaunch.error() is None:
        assert len(calls) == 1                                             # left to Tape.record
    np.testing.assert_allclose(y.numpy(), view.numpy() ** 2 + 1.0)
