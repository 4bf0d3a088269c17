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
