"""Every JAX autodiff transform of a differentiable jax_kernel (issue 27, SPEC B17): jvp, vjp,
jacfwd, jacrev, hessian (mixed partials), check_grads to order 2 in both modes, vmap of each,
jit, lax.scan, remat; float64 references written in jax.numpy. A kernel without a backward,
and third derivatives, raise naming the kernel. CPU tests and CUDA twins (marked cuda)."""
import numpy as np
import pytest

import tapegrad as tg

pytestmark = pytest.mark.jax

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax.test_util import check_grads  # noqa: E402


@pytest.fixture(autouse=True)
def x64():
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", False)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def dev(request):
    """JAX's device for the test (the cuda twin skips where JAX has no GPU backend)."""
    platform = "gpu" if request.param == "cuda" else "cpu"
    devs = [d for d in jax.devices() if d.platform == platform] if platform == "cpu" else \
        [d for d in jax.devices() if d.platform == "gpu"]
    if not devs:
        pytest.skip(f"JAX has no {platform} device")
    with jax.default_device(devs[0]):
        yield devs[0]


@tg.kernel
def springs(x: tg.array[tg.float64], k: tg.array[tg.float64], e: tg.array[tg.float64]):
    i = tg.tid()
    d = x[i + 1] - x[i] - 1.0
    tg.atomic_add(e, 0, 0.5 * k[i] * d * d + 0.1 * tg.cos(x[i]) * x[i + 1])


@tg.kernel
def wave(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * x[i] * x[i] + tg.exp(0.3 * x[i])


@tg.kernel
def gather_mix(table: tg.array[tg.float64], idx: tg.array[tg.int32], w: tg.array[tg.float64], s: tg.float64,
               out: tg.array[tg.float64]):
    i = tg.tid()
    t = table[idx[i]]
    out[i] = s * tg.sin(t) * w[i] * w[i] + t * w[i]


@tg.kernel
def plain_square(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def two_outputs(x: tg.array[tg.float64], y: tg.array[tg.float64], z: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.exp(x[i])
    tg.atomic_add(z, 0, x[i] * x[i] * x[i])


N = 9
energy_k = tg.jax_kernel(springs, launch_dims=N - 1, output_dims=1, enable_backward=True)
wave_k = tg.jax_kernel(wave, enable_backward=True)
gather_k = tg.jax_kernel(gather_mix, launch_dims=lambda t, i, w, s: i.shape[0], enable_backward=True)
two_k = tg.jax_kernel(two_outputs, num_outputs=2, output_dims={"y": None, "z": 1}, enable_backward=True)


def energy(x, k):
    return energy_k(x, k)[0][0]


def energy_ref(x, k):
    d = x[1:] - x[:-1] - 1.0
    return jnp.sum(0.5 * k * d * d + 0.1 * jnp.cos(x[:-1]) * x[1:])


def wave_fn(x):
    return wave_k(x)[0]


def wave_ref(x):
    return jnp.sin(x) * x * x + jnp.exp(0.3 * x)


IDX = np.array([2, 0, 4, 4, 1, 3], dtype=np.int32)


def gather_fn(table, w):
    return gather_k(table, jnp.asarray(IDX), w, 0.7)[0]


def gather_ref(table, w):
    t = table[jnp.asarray(IDX)]
    return 0.7 * jnp.sin(t) * w * w + t * w


def two_fn(x):
    y, z = two_k(x)
    return jnp.sum(y * y) + z[0] ** 2


def two_ref(x):
    return jnp.sum(jnp.exp(x) ** 2) + jnp.sum(x ** 3) ** 2


def _data():
    rng = np.random.default_rng(0)
    x = jnp.asarray(np.cumsum(rng.uniform(0.5, 1.5, N)))
    k = jnp.asarray(rng.uniform(1.0, 3.0, N - 1))
    v = jnp.asarray(rng.normal(size=N))
    return rng, x, k, v


def close(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (what, a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9, err_msg=what)


def test_value_and_jvp(dev):
    _, x, k, v = _data()
    close(energy(x, k), energy_ref(x, k))
    p, t = jax.jvp(lambda x: energy(x, k), (x,), (v,))
    pr, tr = jax.jvp(lambda x: energy_ref(x, k), (x,), (v,))
    close(p, pr)
    close(t, tr)
    # both arguments perturbed at once
    _, t2 = jax.jvp(energy, (x, k), (v, k * 0.3))
    close(t2, jax.jvp(energy_ref, (x, k), (v, k * 0.3))[1])
    _, tw = jax.jit(lambda x, v: jax.jvp(wave_fn, (x,), (v,)))(x, v)
    close(tw, jax.jvp(wave_ref, (x,), (v,))[1])


def test_jacfwd_jacrev_linearize(dev):
    _, x, k, v = _data()
    close(jax.jit(jax.jacfwd(wave_fn))(x), jax.jacfwd(wave_ref)(x))
    close(jax.jit(jax.jacrev(wave_fn))(x), jax.jacrev(wave_ref)(x))
    y, f_lin = jax.linearize(wave_fn, x)
    close(f_lin(v), jax.jvp(wave_ref, (x,), (v,))[1])
    close(jax.grad(energy, argnums=1)(x, k), jax.grad(energy_ref, argnums=1)(x, k))


def test_hessian_mixed_partials(dev):
    _, x, k, _ = _data()
    close(jax.jit(jax.hessian(energy))(x, k), jax.hessian(energy_ref)(x, k))
    H = jax.jit(jax.hessian(energy, argnums=(0, 1)))(x, k)
    Href = jax.hessian(energy_ref, argnums=(0, 1))(x, k)
    for r in range(2):
        for c in range(2):
            close(H[r][c], Href[r][c], f"block {r}{c}")
    # reverse over reverse and forward over forward give the same Hessian
    close(jax.jacrev(jax.jacrev(energy))(x, k), Href[0][0])
    close(jax.jacfwd(jax.jacfwd(energy))(x, k), Href[0][0])
    # a vector-valued kernel: the Hessian of every output (forward over forward and reverse)
    close(jax.jacfwd(jax.jacfwd(wave_fn))(x), jax.hessian(wave_ref)(x))
    close(jax.hessian(wave_fn)(x), jax.hessian(wave_ref)(x))


def test_check_grads_order2(dev):
    _, x, k, _ = _data()
    check_grads(energy, (x, k), order=2, modes=("fwd", "rev"))
    check_grads(wave_fn, (x,), order=2, modes=("fwd", "rev"))


def test_int_input_and_static_scalar(dev):
    rng = np.random.default_rng(1)
    table = jnp.asarray(rng.normal(size=5))
    w = jnp.asarray(rng.normal(size=6))
    close(gather_fn(table, w), gather_ref(table, w))
    for argnums in (0, 1, (0, 1)):
        got = jax.jacfwd(gather_fn, argnums=argnums)(table, w)
        close_tree(got, jax.jacfwd(gather_ref, argnums=argnums)(table, w))
        close_tree(jax.jacrev(gather_fn, argnums=argnums)(table, w), got)
    f = lambda t, w: jnp.sum(gather_fn(t, w) ** 2)   # noqa: E731
    g = lambda t, w: jnp.sum(gather_ref(t, w) ** 2)  # noqa: E731
    close_tree(jax.hessian(f, argnums=(0, 1))(table, w), jax.hessian(g, argnums=(0, 1))(table, w))
    check_grads(gather_fn, (table, w), order=2, modes=("fwd", "rev"))


def test_two_outputs(dev):
    _, x, _, v = _data()
    x = x * 0.2
    close(two_fn(x), two_ref(x))
    close(jax.grad(two_fn)(x), jax.grad(two_ref)(x))
    close(jax.hessian(two_fn)(x), jax.hessian(two_ref)(x))
    close(jax.jvp(jax.grad(two_fn), (x,), (v,))[1], jax.jvp(jax.grad(two_ref), (x,), (v,))[1])
    check_grads(two_fn, (x,), order=2, modes=("fwd", "rev"))


def close_tree(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for p, q in zip(la, lb):
        close(p, q)


def hvp(f, x, v):
    return jax.jvp(jax.grad(f), (x,), (v,))[1]


def test_vmap_of_every_transform(dev):
    rng, x, k, v = _data()
    V = jnp.asarray(rng.normal(size=(4, N)))
    X = jnp.stack([x, x * 1.1, x * 0.9, x + 0.2])
    e = lambda x: energy(x, k)        # noqa: E731
    er = lambda x: energy_ref(x, k)   # noqa: E731
    close(jax.jit(jax.vmap(lambda v: hvp(e, x, v)))(V), jax.vmap(lambda v: hvp(er, x, v))(V), "vmap(hvp)")
    close(jax.vmap(lambda x, v: hvp(e, x, v))(X, V), jax.vmap(lambda x, v: hvp(er, x, v))(X, V), "vmap(hvp) both")
    close(jax.vmap(jax.grad(e))(X), jax.vmap(jax.grad(er))(X), "vmap(grad)")
    close(jax.vmap(lambda x, v: jax.jvp(wave_fn, (x,), (v,))[1])(X, V),
          jax.vmap(lambda x, v: jax.jvp(wave_ref, (x,), (v,))[1])(X, V), "vmap(jvp)")
    close(jax.vmap(jax.jacfwd(wave_fn))(X), jax.vmap(jax.jacfwd(wave_ref))(X), "vmap(jacfwd)")
    close(jax.vmap(jax.jacrev(wave_fn))(X), jax.vmap(jax.jacrev(wave_ref))(X), "vmap(jacrev)")
    close(jax.jit(jax.vmap(jax.hessian(e)))(X), jax.vmap(jax.hessian(er))(X), "vmap(hessian)")
    # nested vmaps (two batch dims) over the tangent of the adjoint
    XX = jnp.stack([X, X * 1.05])
    close(jax.vmap(jax.vmap(lambda x, v: hvp(e, x, v)), in_axes=(0, None))(XX, V),
          jax.vmap(jax.vmap(lambda x, v: hvp(er, x, v)), in_axes=(0, None))(XX, V), "vmap(vmap(hvp))")
    # a batched primal inside a gradient (grad of vmap)
    close(jax.grad(lambda X: jnp.sum(jax.vmap(e)(X) ** 2))(X), jax.grad(lambda X: jnp.sum(jax.vmap(er)(X) ** 2))(X))
    # an unbatched argument next to batched ones receives the sum over the batch (transpose of a broadcast)
    gk = jax.grad(lambda k: jnp.sum(jax.vmap(lambda x: energy(x, k))(X) ** 2))(k)
    close(gk, jax.grad(lambda k: jnp.sum(jax.vmap(lambda x: energy_ref(x, k))(X) ** 2))(k))
    Hk = jax.hessian(lambda k: jnp.sum(jax.vmap(lambda x: energy(x, k))(X) ** 2))(k)
    close(Hk, jax.hessian(lambda k: jnp.sum(jax.vmap(lambda x: energy_ref(x, k))(X) ** 2))(k))


def test_scan_and_remat(dev):
    _, x, k, v = _data()

    def rollout(f, x0):
        def step(c, _):
            c = c - 0.01 * jax.grad(f)(c)
            return c, f(c)
        c, es = jax.lax.scan(step, x0, None, length=3)
        return jnp.sum(es) + jnp.sum(c ** 2)

    e = lambda x: energy(x, k)        # noqa: E731
    er = lambda x: energy_ref(x, k)   # noqa: E731
    close(jax.jit(rollout, static_argnums=0)(e, x), rollout(er, x))
    # reverse through the scan (the scan body has a gradient: second order)
    close(jax.jit(jax.grad(lambda x: rollout(e, x)))(x), jax.grad(lambda x: rollout(er, x))(x))
    close(jax.jvp(lambda x: rollout(e, x), (x,), (v,))[1], jax.jvp(lambda x: rollout(er, x), (x,), (v,))[1])
    rem = jax.checkpoint(lambda x: jnp.sum(wave_fn(x) ** 2))
    ref = lambda x: jnp.sum(wave_ref(x) ** 2)   # noqa: E731
    close(jax.jit(jax.grad(rem))(x), jax.grad(ref)(x))
    close(jax.hessian(rem)(x), jax.hessian(ref)(x))


def test_no_backward_names_the_kernel(dev):
    """A kernel built without enable_backward: every derivative transform raises, naming it."""
    k = tg.jax_kernel(plain_square)
    x = jnp.arange(1.0, 4.0)
    close(k(x)[0], x * x)
    close(jax.jit(jax.vmap(lambda x: k(x)[0]))(jnp.stack([x, x])), jnp.stack([x * x, x * x]))
    f = lambda x: jnp.sum(k(x)[0])   # noqa: E731
    transforms = {
        "grad": lambda: jax.grad(f)(x),
        "jit(grad)": lambda: jax.jit(jax.grad(f))(x),
        "vjp": lambda: jax.vjp(lambda x: k(x)[0], x)[1](x),
        "jvp": lambda: jax.jvp(f, (x,), (x,)),
        "jacfwd": lambda: jax.jacfwd(lambda x: k(x)[0])(x),
        "jacrev": lambda: jax.jacrev(lambda x: k(x)[0])(x),
        "hessian": lambda: jax.hessian(f)(x),
        "linearize": lambda: jax.linearize(f, x),
        "vmap(grad)": lambda: jax.vmap(jax.grad(f))(jnp.stack([x, x])),
    }
    for name, run in transforms.items():
        with pytest.raises(ValueError, match=r"plain_square.*cannot differentiate.*enable_backward=True.*hessian"):
            run()
            pytest.fail(f"{name} did not raise")


def test_third_order_raises(dev):
    _, x, k, v = _data()
    third = jax.jacfwd(jax.hessian(lambda x: energy(x, k)))
    with pytest.raises(NotImplementedError, match=r"springs.*third and higher derivatives"):
        third(x)


def test_tangent_plan_keys_resolve():
    """The tangent and tangent-of-adjoint calls carry stable keys (jax.export) that rebuild
    the same plan; the forward's and adjoint's keys have no 'tangent' entry."""
    from tapegrad.bridges.jax import entry
    _, x, k, v = _data()
    jax.jit(lambda x, v: hvp(lambda x: energy(x, k), x, v)).lower(x, v)
    specs = [s for s in list(entry._by_spec) if s.kernel is springs]
    kinds = {(s.adjoint, s.tangent) for s in specs}
    assert {(False, 0), (False, 1), (True, 0), (True, 2)} <= kinds, kinds
    for s in specs:
        key = entry.plan_key(s)
        assert ('"tangent"' in key) == bool(s.tangent)
        assert entry.register(entry._spec_of_key(key)) is entry.register(s)


def test_export_round_trip_of_hvp(dev):
    from jax import export
    _, x, k, v = _data()
    f = jax.jit(lambda x, v: hvp(lambda x: energy(x, k), x, v))
    checks = [export.DisabledSafetyCheck.custom_call("tapegrad_kernel")]
    exp = export.deserialize(export.export(f, disabled_checks=checks)(x, v).serialize())
    close(exp.call(x, v), hvp(lambda x: energy_ref(x, k), x, v))


@tg.kernel
def max_square(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    tg.atomic_max(y, 0, x[i] * x[i])


def test_no_forward_rule_keeps_reverse_mode(dev):
    """atomic_max on floats has no tangent rule: jax.grad still works (the tangent primitive is
    only staged and transposed), forward mode raises the tangent build's error naming it."""
    k = tg.jax_kernel(max_square, output_dims=1, enable_backward=True)
    x = jnp.array([1.0, -3.0, 2.0])
    f = lambda x: k(x)[0][0]   # noqa: E731
    close(jax.jit(jax.grad(f))(x), jax.grad(lambda x: jnp.max(x * x))(x))
    with pytest.raises(tg.KernelError, match=r"max_square.*atomic_max\(\) on a float array has no forward-mode"):
        jax.jvp(f, (x,), (x,))


def _squares(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    tg.launch(plain_square, dim=x.shape, inputs=[x], outputs=[y])


def test_jax_callable_every_transform_raises(dev):
    """jax_callable has no derivative: every transform raises naming it (never a zero)."""
    fn = tg.jax_callable(_squares)
    x = jnp.arange(1.0, 4.0)
    f = lambda x: jnp.sum(fn(x)[0])   # noqa: E731
    close(jax.jit(f)(x), jnp.sum(x * x))
    for run in (lambda: jax.grad(f)(x), lambda: jax.jvp(f, (x,), (x,)), lambda: jax.jacfwd(f)(x),
                lambda: jax.jacrev(f)(x), lambda: jax.hessian(f)(x)):
        with pytest.raises(ValueError, match=r"jax_callable.*has no derivative"):
            run()


def test_forward_over_forward_size_limit(dev):
    """Forward over forward costs a launch per output element: past the limit it raises naming
    the kernel and forward over reverse; forward over reverse works at that size."""
    from tapegrad.bridges.jax.kernel_ad import FORWARD_OVER_FORWARD_MAX
    n = FORWARD_OVER_FORWARD_MAX + 1
    x = jnp.linspace(-1.0, 1.0, n)
    v = jnp.cos(x)
    with pytest.raises(NotImplementedError, match=r"wave.*one tangent-of-adjoint launch per output element.*"
                                                  r"jax.jvp\(jax.grad"):
        jax.jvp(lambda x: jax.jvp(wave_fn, (x,), (v,))[1], (x,), (v,))
    f = lambda x: jnp.sum(wave_fn(x))   # noqa: E731
    close(hvp(f, x, v), hvp(lambda x: jnp.sum(wave_ref(x)), x, v))


@tg.kernel
def gather_cube(x: tg.array[tg.float64], idx: tg.array[tg.int32], y: tg.array[tg.float64]):
    i = tg.tid()
    v = x[idx[i]]
    y[i] = v * v * v


def test_debug_mode_batched_and_second_order():
    """Debug mode (checked launches through a host callback) under vmap(grad) and hessian."""
    prev = tg.config.mode
    tg.config.mode = "debug"
    try:
        k = tg.jax_kernel(gather_cube, enable_backward=True)
        idx = jnp.array([3, 2, 1, 0], dtype=jnp.int32)
        X = jnp.stack([jnp.arange(4.0), jnp.arange(4.0) + 1.0])
        f = lambda x: jnp.sum(k(x, idx)[0])   # noqa: E731
        close(jax.vmap(jax.grad(f))(X), 3.0 * X ** 2)
        close(jax.hessian(f)(X[1]), jnp.diag(6.0 * X[1]))
        with pytest.raises(Exception, match="KernelIndexError"):
            bad = jnp.array([0, 1, 2, 9], dtype=jnp.int32)
            jax.block_until_ready(jax.vmap(jax.grad(lambda x: jnp.sum(k(x, bad)[0])))(X))
    finally:
        tg.config.mode = prev


_EXPORT_KMOD = '''
import tapegrad as tg

@tg.kernel
def wave2(x: tg.array[tg.float64], y: tg.array[tg.float64]):
    i = tg.tid()
    y[i] = tg.sin(x[i]) * x[i] * x[i]
'''
_EXPORT_HEAD = '''
import sys, jax, jax.numpy as jnp, numpy as np
jax.config.update("jax_enable_x64", True)
import tapegrad as tg
from jax import export
sys.path.insert(0, sys.argv[1])
from kmod_ad import wave2
k = tg.jax_kernel(wave2, enable_backward=True)
x = jnp.linspace(0, 1, 5); v = jnp.ones(5)
'''


def test_exported_hvp_runs_in_another_process(tmp_path):
    """A serialized program holding the tangent-of-adjoint call runs in a fresh process (its
    plan found by the stable key, which names the entry)."""
    import os
    import subprocess
    import sys
    (tmp_path / "kmod_ad.py").write_text(_EXPORT_KMOD)

    def run(body):
        p = subprocess.run([sys.executable, "-c", _EXPORT_HEAD + body, str(tmp_path)], capture_output=True,
                           text=True, timeout=600, env=dict(os.environ))
        assert p.returncode == 0, p.stderr[-3000:]
        return p.stdout

    run('''
f = lambda x: jnp.sum(k(x)[0])
hv = jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])
checks = [export.DisabledSafetyCheck.custom_call("tapegrad_kernel")]
open(sys.argv[1] + "/hvp.jax", "wb").write(export.export(hv, disabled_checks=checks)(x, v).serialize())
''')
    out = run('''
exp = export.deserialize(bytearray(open(sys.argv[1] + "/hvp.jax", "rb").read()))
want = (2 - x * x) * jnp.sin(x) + 4 * x * jnp.cos(x)
np.testing.assert_allclose(np.asarray(exp.call(x, v)), np.asarray(want), rtol=1e-12, atol=1e-12)
print("ok")
''')
    assert "ok" in out
