"""tg.optax_optimizer: optax steps tapegrad parameters in place, checked against plain optax."""
import numpy as np
import pytest

import tapegrad as tg

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
optax = pytest.importorskip("optax")


def _params(device="cpu"):
    rng = np.random.default_rng(0)
    a = tg.array(rng.normal(size=(5, 3)).astype(np.float32), requires_grad=True, device=device)
    b = tg.array(rng.normal(size=7).astype(np.float32), dtype=tg.float32, requires_grad=True, device=device)
    c = tg.array(rng.normal(size=(4, 2)).astype(np.float32), dtype=tg.vec2, requires_grad=True, device=device)
    return [a, b, c]


def test_matches_plain_optax_over_several_shapes_and_dtypes(device):
    ps = _params(device)
    ref = [jnp.asarray(p.numpy().copy()) for p in ps]
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.05))
    opt = tg.optax_optimizer(tx, ps)
    state = tx.init(ref)
    rng = np.random.default_rng(1)
    for _ in range(5):
        gs = [rng.normal(size=r.shape).astype(np.float32) for r in ref]
        for p, g in zip(ps, gs):
            p.grad.assign(g.reshape(p.grad.numpy().shape))
        tg.synchronize_device(device)
        opt.step()
        updates, state = tx.update([jnp.asarray(g) for g in gs], state, ref)
        ref = optax.apply_updates(ref, updates)
    for i, (p, r) in enumerate(zip(ps, ref)):
        np.testing.assert_allclose(p.numpy(), np.asarray(r), rtol=1e-6, atol=1e-6, err_msg=f"params[{i}]")


def test_traced_once_and_memory_stays_put():
    ps = _params()
    ptrs = [p.ptr for p in ps]
    opt = tg.optax_optimizer(optax.sgd(0.1, momentum=0.9), ps)
    for p in ps:
        p.grad.fill_(1.0)
    for _ in range(4):
        opt.step()
    assert opt._update._cache_size() == 1
    assert [p.ptr for p in ps] == ptrs
    assert isinstance(jax.tree_util.tree_leaves(opt.state)[0], jax.Array)


def test_state_is_updated_in_its_own_buffers(device):
    """Each of optax's state arrays keeps its buffer step after step: XLA writes every moment in
    place (a moment paired with a parameter's output of the same shape makes XLA copy them all)."""
    ps = [tg.array(np.full(n, 0.5, np.float32), requires_grad=True, device=device) for n in (300, 300, 500)]
    for p in ps:
        p.grad.fill_(0.1)
    opt = tg.optax_optimizer(optax.adam(1e-3), ps)

    def buffers():
        return [x.unsafe_buffer_pointer() for x in jax.tree_util.tree_leaves(opt.state)
                if isinstance(x, jax.Array) and x.ndim]

    def scratch():   # where the parameters' new values are written when the views are not donated (CPU)
        return [x.unsafe_buffer_pointer() for x in opt._scratch]

    before, written = buffers(), scratch()
    assert len(before) == 6 and len(written) in (0, 3)
    for _ in range(3):
        opt.step()
        assert buffers() == before
        assert scratch() == written    # no new buffer per step
    tg.synchronize_device(device)
    ref = [jnp.full(n, 0.5, jnp.float32) for n in (300, 300, 500)]
    tx, st = optax.adam(1e-3), None
    st = tx.init(ref)
    for _ in range(3):
        u, st = tx.update([jnp.full(r.shape, 0.1, jnp.float32) for r in ref], st, ref)
        ref = optax.apply_updates(ref, u)
    for p, r in zip(ps, ref):
        np.testing.assert_allclose(p.numpy(), np.asarray(r), rtol=1e-6)


def test_converges_on_a_tape_loss():
    @tg.kernel
    def loss(xs: tg.array2d[float], out: tg.array[float]):
        i = tg.tid()
        tg.atomic_add(out, 0, (xs[i, 0] - 1.0) ** 2.0 + (xs[i, 1] + 2.0) ** 2.0)

    xs = tg.array(np.random.default_rng(3).normal(size=(64, 2)).astype(np.float32), requires_grad=True)
    out = tg.zeros(1, dtype=tg.float32, requires_grad=True)
    opt = tg.optax_optimizer(optax.adam(0.05), [xs])
    tape = tg.Tape()
    with tape:
        tg.launch(loss, dim=len(xs), inputs=[xs], outputs=[out])
    for _ in range(300):
        tape.zero()
        tape.backward(loss=out)
        opt.step()
        out.zero_()
        tg.launch(loss, dim=len(xs), inputs=[xs], outputs=[out])
    np.testing.assert_allclose(xs.numpy().mean(axis=0), [1.0, -2.0], atol=0.05)


def test_errors_name_the_argument():
    p = tg.zeros(3, dtype=tg.float32)
    with pytest.raises(TypeError, match="expected an optax GradientTransformation"):
        tg.optax_optimizer(lambda g: g, [p])
    with pytest.raises(TypeError, match="wrap it in a list"):
        tg.optax_optimizer(optax.adam(0.1), p)
    with pytest.raises(ValueError, match="at least one parameter"):
        tg.optax_optimizer(optax.adam(0.1), [])
    with pytest.raises(TypeError, match=r"params\[1\] must be floating point"):
        tg.optax_optimizer(optax.adam(0.1), [p, tg.zeros(3, dtype=tg.int32)])
    with pytest.raises(TypeError, match=r"params\[0\] must be a tapegrad array"):
        tg.optax_optimizer(optax.adam(0.1), [np.zeros(3)])
    with pytest.raises(ValueError, match=r"params\[0\] has no gradient"):
        tg.optax_optimizer(optax.adam(0.1), [p]).step()


# ------------------------------------------------- partial failures and extra arguments (issue 24 item 9)

@pytest.fixture
def x64():
    """A test run with jax_enable_x64 on, restored afterwards (the flag is process-wide)."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old)


def _leaves(state):
    return [np.asarray(x).copy() for x in jax.tree_util.tree_leaves(state)]


def test_float64_parameters_without_x64_are_refused_before_any_state():
    """Without jax_enable_x64, JAX holds float64 as float32: optax's state advanced in float32
    and the write-back then raised (a DLPack dtype error). Now the optimizer is refused up front."""
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        p = tg.array(np.array([1.0, 2.0]), dtype=tg.float64, requires_grad=True)
        with pytest.raises(TypeError, match=r"params\[0\] is tapegrad.float64.*jax_enable_x64"):
            tg.optax_optimizer(optax.adam(0.1), [p])
    finally:
        jax.config.update("jax_enable_x64", old)


def test_a_failing_step_changes_nothing(x64):
    """x64 turned off after the optimizer was built: step raises before optax's state or the
    parameters change; with x64 back on the next step is plain optax's first step, in float64."""
    x0 = np.array([1.0, -2.0, 0.5])
    p = tg.array(x0, dtype=tg.float64, requires_grad=True)
    p.grad.assign(np.array([0.3, -0.1, 2.0]))
    tx = optax.adam(0.1)
    opt = tg.optax_optimizer(tx, [p])
    before = _leaves(opt.state)
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(TypeError, match="jax_enable_x64"):
            opt.step()
    finally:
        jax.config.update("jax_enable_x64", True)
    assert all(np.array_equal(a, b) for a, b in zip(before, _leaves(opt.state)))
    np.testing.assert_array_equal(p.numpy(), x0)
    opt.step()
    ref = [jnp.asarray(x0)]
    updates, _ = tx.update([jnp.asarray([0.3, -0.1, 2.0])], tx.init(ref), ref)
    np.testing.assert_allclose(p.numpy(), np.asarray(optax.apply_updates(ref, updates)[0]), rtol=1e-15)


def test_an_update_that_raises_leaves_the_state_usable(x64):
    """optax.lbfgs without its extra arguments raises inside tx.update: the state (donated to
    the update) is still intact, and a step with the arguments then works."""
    p = tg.array(np.array([1.0, 2.0]), dtype=tg.float64, requires_grad=True)
    p.grad.assign(np.array([2.0, 4.0]))
    opt = tg.optax_optimizer(optax.lbfgs(), [p])
    before = _leaves(opt.state)
    with pytest.raises(TypeError):
        opt.step()
    assert all(np.array_equal(a, b) for a, b in zip(before, _leaves(opt.state)))
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])
    def value_fn(ps):
        return jnp.sum(ps[0] ** 2)

    opt.step(value=5.0, grad=[p.grad], value_fn=value_fn)
    ref, g = [jnp.asarray([1.0, 2.0])], [jnp.asarray([2.0, 4.0])]
    tx = optax.lbfgs()
    updates, _ = tx.update(g, tx.init(ref), ref, value=5.0, grad=g, value_fn=value_fn)
    np.testing.assert_allclose(p.numpy(), np.asarray(optax.apply_updates(ref, updates)[0]), rtol=1e-15)
    assert value_fn([jnp.asarray(p.numpy())]) < 5.0


@tg.kernel
def _weighted_sq(x: tg.array[tg.float64], c: tg.array[tg.float64], w: tg.array[tg.float64],
                 f: tg.array[tg.float64]):
    i = tg.tid()
    d = x[i] - c[i]
    tg.atomic_add(f, 0, w[i] * d * d)


def test_lbfgs_with_value_grad_and_value_fn_converges_on_a_tape_loss(x64):
    """optax.lbfgs needs value, grad and value_fn: step() passes them to tx.update. The tape
    computes the loss and its gradient; the iterates match plain optax's lbfgs step for step
    (float64) and reach the minimum of an ill-conditioned quadratic."""
    rng = np.random.default_rng(0)
    cn, wn = rng.normal(size=6), rng.uniform(0.5, 30.0, size=6)
    x = tg.zeros(6, dtype=tg.float64, requires_grad=True)
    c, w = tg.array(cn, dtype=tg.float64), tg.array(wn, dtype=tg.float64)
    f = tg.zeros(1, dtype=tg.float64, requires_grad=True)

    def value_fn(ps):
        return jnp.sum(jnp.asarray(wn) * (ps[0] - jnp.asarray(cn)) ** 2)

    tx = optax.lbfgs()
    opt = tg.optax_optimizer(tx, [x])
    ref = [jnp.zeros(6)]
    state = tx.init(ref)
    ref_update = jax.jit(lambda g, st, ps, v: tx.update(g, st, ps, value=v, grad=g, value_fn=value_fn))
    for _ in range(20):
        f.zero_()
        x.grad.zero_()
        tape = tg.Tape()
        with tape:
            tg.launch(_weighted_sq, dim=6, inputs=[x, c, w], outputs=[f])
        tape.backward(loss=f)
        opt.step(value=float(f.numpy()[0]), grad=[x.grad], value_fn=value_fn)   # a tapegrad array: viewed
        v, g = jax.value_and_grad(value_fn)(ref)
        updates, state = ref_update(g, state, ref, v)
        ref = optax.apply_updates(ref, updates)
        np.testing.assert_allclose(x.numpy(), np.asarray(ref[0]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(x.numpy(), cn, rtol=0, atol=1e-8)
    assert len(opt._updates_with) == 1              # one compiled update for the one value_fn


# ------------------------------------------------- per-step cost (issue 30 item 1)

def _reference_steps(tx, x0s, grads_per_step):
    ref = [jnp.asarray(x) for x in x0s]
    state = tx.init(ref)
    for gs in grads_per_step:
        updates, state = tx.update([jnp.asarray(g) for g in gs], state, ref)
        ref = optax.apply_updates(ref, updates)
    return [np.asarray(r) for r in ref]


def test_views_are_made_once_and_gradients_are_read_fresh(device, monkeypatch):
    """The JAX views of parameters and gradients are made at the first step and reused (no
    to_jax call per step; on CUDA without the FFI handler one, the ordering token), yet every step reads the
    gradient values written since, and a parameter whose .grad became another array is viewed
    anew."""
    import tapegrad.bridges.optax as bridge
    ps = _params(device)
    x0s = [p.numpy().copy() for p in ps]
    tx = optax.adam(0.05)
    opt = tg.optax_optimizer(tx, ps)
    calls = []
    real = bridge.to_jax
    monkeypatch.setattr(bridge, "to_jax", lambda a: calls.append(a) or real(a))
    rng = np.random.default_rng(2)
    history = []
    for k in range(4):
        gs = [rng.normal(size=x.shape).astype(np.float32) for x in x0s]
        if k == 2:   # a new gradient array for params[1] (the tape may replace .grad)
            ps[1].grad = tg.zeros_like(ps[1])
        for p, g in zip(ps, gs):
            p.grad.assign(g.reshape(p.grad.numpy().shape))
        calls.clear()
        opt.step()
        history.append(gs)
        per_step = 1 if opt._token is not None else 0   # CUDA without the FFI handler: the ordering token
        expected = per_step + (3 if k == 0 else 1 if k == 2 else 0)
        assert len(calls) == expected, f"step {k}: {len(calls)} to_jax calls"
    for i, (p, r) in enumerate(zip(ps, _reference_steps(tx, x0s, history))):
        np.testing.assert_allclose(p.numpy(), r.reshape(p.numpy().shape), rtol=1e-6, atol=1e-6, err_msg=f"{i}")


def test_parameters_jax_cannot_alias_are_still_stepped():
    """A parameter at a misaligned address (JAX's CPU view of it is a copy) and a transposed one
    (a non-contiguous write-back) follow plain optax step for step."""
    device = "cpu"
    base = tg.array(np.random.default_rng(4).normal(size=9).astype(np.float32), device=device)
    shifted = base[1:]                       # 4 bytes past a 64-byte boundary
    shifted.requires_grad = True
    mat = tg.array(np.random.default_rng(5).normal(size=(3, 4)).astype(np.float32), device=device)
    turned = mat.transpose()
    turned.requires_grad = True
    ps = [shifted, turned]
    x0s = [p.numpy().copy() for p in ps]
    tx = optax.adam(0.1)
    opt = tg.optax_optimizer(tx, ps)
    if not tg.get_device(device).is_cuda:    # JAX's CUDA import takes the 4-byte aligned address as is
        assert opt._copied == [0]            # the path under test: JAX copied the shifted parameter
    rng = np.random.default_rng(6)
    history = []
    for _ in range(3):
        gs = [rng.normal(size=x.shape).astype(np.float32) for x in x0s]
        for p, g in zip(ps, gs):
            p.grad.assign(g)
        opt.step()
        history.append(gs)
    for i, (p, r) in enumerate(zip(ps, _reference_steps(tx, x0s, history))):
        np.testing.assert_allclose(p.numpy(), r, rtol=1e-6, atol=1e-6, err_msg=f"params[{i}]")
    np.testing.assert_array_equal(base.numpy()[0], np.random.default_rng(4).normal(size=9).astype(np.float32)[0])


def test_strided_parameters_and_gradients_are_stepped():
    """A column of a matrix as a parameter, and a strided gradient, raised JAX's 'trivial (compact)
    striding' error from to_jax; they follow plain optax, and the other columns stay."""
    rng = np.random.default_rng(7)
    m0 = rng.normal(size=(4, 3))
    mat = tg.array(m0, dtype=tg.float64)
    col = mat[:, 1]
    col.requires_grad = True
    gbase = tg.zeros(8, dtype=tg.float64)
    col.grad = gbase[::2]
    tx = optax.sgd(0.1, momentum=0.9)
    with jax.enable_x64(True):
        opt = tg.optax_optimizer(tx, [col])
        history = []
        for _ in range(3):
            g = rng.normal(size=4)
            gbase.numpy()[::2] = g
            opt.step()
            history.append([g])
        (ref,) = _reference_steps(tx, [m0[:, 1].copy()], history)
    np.testing.assert_allclose(mat.numpy()[:, 1], ref, rtol=1e-12)
    np.testing.assert_array_equal(mat.numpy()[:, [0, 2]], m0[:, [0, 2]])


def test_a_parameter_given_twice_or_overlapping_is_refused():
    """[p, p] and two overlapping slices of one array were accepted: each step wrote both back, so
    one update was lost silently (p moved by one SGD step, not two). Disjoint views still work."""
    p = tg.array(np.ones(6), dtype=tg.float32, requires_grad=True)
    with pytest.raises(ValueError, match=r"params\[0\] and params\[1\] are the same memory"):
        tg.optax_optimizer(optax.sgd(0.1), [p, p])
    with pytest.raises(ValueError, match=r"params\[0\] and params\[1\] overlap in memory"):
        tg.optax_optimizer(optax.sgd(0.1), [p[0:4], p[2:6]])
    halves = [p[0:3], p[3:6]]
    for h in halves:
        h.requires_grad = True
    opt = tg.optax_optimizer(optax.sgd(0.5), halves)
    p.grad.fill_(1.0)
    opt.step()
    np.testing.assert_allclose(p.numpy(), 0.5)
    evens, odds = p[0::2], p[1::2]                  # interleaved, disjoint: not refused
    tg.optax_optimizer(optax.sgd(0.5), [evens, odds])


@tg.kernel
def _fill_grad(g: tg.array[tg.float32], k: tg.float32):
    i = tg.tid()
    g[i] = tg.sin(tg.float32(i) * 0.001 + k)


@tg.kernel
def _snapshot(p: tg.array[tg.float32], out: tg.array[tg.float32]):
    i = tg.tid()
    out[i] = p[i]


@pytest.mark.cuda
def test_cuda_steps_are_ordered_with_tapegrad_kernels_without_a_sync():
    """No synchronization anywhere: each gradient is written by a tapegrad kernel just before
    step() (the ordering token makes the update wait for it) and each new parameter is read by
    a tapegrad kernel just after (the output handshake makes tapegrad's stream wait for the
    update); the snapshots match plain optax step for step."""
    n, steps = 1 << 20, 4
    x0 = np.random.default_rng(11).normal(size=n).astype(np.float32)
    p = tg.array(x0, dtype=tg.float32, requires_grad=True, device="cuda:0")
    snaps = [tg.zeros(n, dtype=tg.float32, device="cuda:0") for _ in range(steps)]
    tx = optax.adam(0.01)
    opt = tg.optax_optimizer(tx, [p])
    for k in range(steps):
        tg.launch(_fill_grad, dim=n, inputs=[p.grad, float(k)], device="cuda:0")
        opt.step()
        tg.launch(_snapshot, dim=n, inputs=[p, snaps[k]], device="cuda:0")
    ref, state = [jnp.asarray(x0)], None
    state = tx.init(ref)
    idx = np.arange(n, dtype=np.float32)
    for k in range(steps):
        g = np.sin(idx * np.float32(0.001) + np.float32(k)).astype(np.float32)
        updates, state = tx.update([jnp.asarray(g)], state, ref)
        ref = optax.apply_updates(ref, updates)
        np.testing.assert_allclose(snaps[k].numpy(), np.asarray(ref[0]), rtol=1e-5, atol=1e-5, err_msg=f"step {k}")


@tg.kernel
def _slow_fill_grad(g: tg.array[tg.float32], busy: tg.array[tg.float32], k: tg.float32, spins: int):
    # spins first (milliseconds of GPU time), then writes: an update not ordered after this
    # kernel reads the previous step's gradient
    i = tg.tid()
    acc = float(0.0)
    for _j in range(spins):
        acc = acc * 0.999 + 1.0
    busy[i] = acc
    g[i] = tg.sin(tg.float32(i) * 0.001 + k)


@tg.kernel
def _halve(p: tg.array[tg.float32]):
    i = tg.tid()
    p[i] = p[i] * 0.5


@pytest.mark.cuda
def test_cuda_update_writes_the_parameters_in_place_after_tapegrad_writes_them():
    """On CUDA the parameters' views are donated: XLA writes each new value into the tapegrad
    array's own memory (no copy back), ordered after a tapegrad kernel that rewrote the
    parameter itself just before step() (a projection) and before the kernel that reads it
    after; optax's state stays right once the optimizer and its JAX buffers are gone."""
    import gc
    n, steps = 1 << 20, 5
    rng = np.random.default_rng(12)
    x0s = [rng.normal(size=k).astype(np.float32) for k in (n, 1000, n)]   # two of one shape
    ps = [tg.array(x, dtype=tg.float32, requires_grad=True, device="cuda:0") for x in x0s]
    snaps = [[tg.zeros(p.shape[0], dtype=tg.float32, device="cuda:0") for p in ps] for _ in range(steps)]
    busy = tg.zeros(n, dtype=tg.float32, device="cuda:0")
    tx = optax.adam(0.01)
    opt = tg.optax_optimizer(tx, ps)
    for k in range(steps):
        for p in ps:
            tg.launch(_halve, dim=p.shape[0], inputs=[p], device="cuda:0")
            tg.launch(_slow_fill_grad, dim=p.shape[0], inputs=[p.grad, busy, float(k), 20000], device="cuda:0")
        opt.step()
        for p, s in zip(ps, snaps[k]):
            tg.launch(_snapshot, dim=p.shape[0], inputs=[p, s], device="cuda:0")
    if opt._donate:
        assert [v.unsafe_buffer_pointer() for v in opt._pviews] == [p.ptr for p in ps]
    ref = [jnp.asarray(x) for x in x0s]
    state = tx.init(ref)
    for k in range(steps):
        ref = [r * 0.5 for r in ref]
        gs = [jnp.asarray(np.sin(np.arange(r.shape[0], dtype=np.float32) * np.float32(0.001) + np.float32(k)))
              for r in ref]
        updates, state = tx.update(gs, state, ref)
        ref = optax.apply_updates(ref, updates)
        for i, (s, r) in enumerate(zip(snaps[k], ref)):
            np.testing.assert_allclose(s.numpy(), np.asarray(r), rtol=1e-5, atol=1e-5, err_msg=f"step {k} params[{i}]")
    final = [p.numpy().copy() for p in ps]
    del opt
    gc.collect()
    churn = [jnp.full((n,), float(i), jnp.float32) for i in range(20)]   # JAX reuses freed memory
    jax.block_until_ready(churn)
    for p, f in zip(ps, final):
        np.testing.assert_array_equal(p.numpy(), f)


@pytest.mark.cuda
def test_cuda_parameters_declared_in_jax_are_stepped_in_place_and_stay_usable():
    """Parameters that are tg.from_jax views of the user's JAX arrays: stepped in place (the
    JAX arrays see the new values, as before), and the user's arrays are never deleted by the
    donation of the optimizer's own views."""
    rng = np.random.default_rng(13)
    x0s = [rng.normal(size=k).astype(np.float32) for k in (64, 33)]
    held = [jax.device_put(x, jax.devices("gpu")[0]) for x in x0s]
    ps = [tg.from_jax(h) for h in held]
    for p in ps:
        p.requires_grad = True
    tx = optax.sgd(0.5)
    opt = tg.optax_optimizer(tx, ps)
    for k in range(3):
        for p in ps:
            p.grad.fill_(1.0)
        opt.step()
    tg.synchronize_device("cuda:0")
    for h, p, x in zip(held, ps, x0s):
        assert not h.is_deleted()
        np.testing.assert_allclose(p.numpy(), x - 1.5, rtol=1e-6)
        # (np.asarray(h) would be a host copy JAX caches; a fresh view reads the memory)
        np.testing.assert_allclose(np.asarray(tg.to_jax(tg.from_jax(h))), x - 1.5, rtol=1e-6)
