"""jax_kernel inside shard_map and pmap over several host devices, and clean interpreter exit
with live JAX views of tapegrad memory (each in a fresh subprocess: the device count is fixed
when JAX starts)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.jax


def _run(code, tmp_path, devices=4, timeout=300):
    script = tmp_path / "script.py"          # kernels need a source file
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=timeout)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    return r.stdout


PRELUDE = """
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
import tapegrad as tg

@tg.kernel
def times_two(a: tg.array[float], out: tg.array[float]):
    i = tg.tid()
    out[i] = a[i] * 2.0

@tg.kernel
def local_sum(a: tg.array[float], s: tg.array[float]):
    i = tg.tid()
    tg.atomic_add(s, 0, a[i])

assert len(jax.devices()) == 4
mesh = Mesh(np.array(jax.devices()), "x")
"""


def test_shard_map(tmp_path):
    out = _run(PRELUDE + """
k = tg.jax_kernel(times_two)
f = jax.jit(shard_map(lambda a: k(a)[0], mesh=mesh, in_specs=(P("x"),), out_specs=P("x")))
n = 64 * 4
r = f(jnp.arange(n, dtype=jnp.float32))
assert np.allclose(np.asarray(r), 2.0 * np.arange(n))
# a per-shard reduction: each device sums its own shard
ks = tg.jax_kernel(local_sum, output_dims=1)
g = jax.jit(shard_map(lambda a: ks(a)[0], mesh=mesh, in_specs=(P("x"),), out_specs=P("x")))
s = np.asarray(g(jnp.arange(n, dtype=jnp.float32)))
assert np.allclose(s, np.arange(n).reshape(4, -1).sum(axis=1)), s
# with a gradient
kb = tg.jax_kernel(times_two, enable_backward=True)
h = jax.jit(jax.grad(lambda a: jnp.sum(shard_map(lambda a: kb(a)[0] ** 2, mesh=mesh, in_specs=(P("x"),),
                                                 out_specs=P("x"))(a))))
gr = h(jnp.arange(n, dtype=jnp.float32))
assert np.allclose(np.asarray(gr), 8.0 * np.arange(n))
print("ok")
""", tmp_path)
    assert "ok" in out


def test_pmap(tmp_path):
    out = _run(PRELUDE + """
k = tg.jax_kernel(times_two)
x = jnp.arange(4 * 8, dtype=jnp.float32).reshape(4, 8)
r = jax.pmap(lambda a: k(a)[0])(x)
assert np.allclose(np.asarray(r), 2.0 * np.asarray(x))
ks = tg.jax_kernel(local_sum, output_dims=1)
s = jax.pmap(lambda a: ks(a)[0])(x)
assert np.allclose(np.asarray(s).ravel(), np.asarray(x).sum(axis=1))
print("ok")
""", tmp_path)
    assert "ok" in out


def test_callable_under_pmap(tmp_path):
    out = _run(PRELUDE + """
def call(a: tg.array[float], out: tg.array[float]):
    tg.launch(times_two, dim=a.shape, inputs=[a], outputs=[out])
fn = tg.jax_callable(call)
x = jnp.arange(4 * 8, dtype=jnp.float32).reshape(4, 8)
r = jax.pmap(lambda a: fn(a)[0])(x)
assert np.allclose(np.asarray(r), 2.0 * np.asarray(x))
print("ok")
""", tmp_path)
    assert "ok" in out


def test_clean_exit_with_live_views(tmp_path):
    out = _run("""
import numpy as np, jax, jax.numpy as jnp
import tapegrad as tg
a = tg.array(np.arange(1000, dtype=np.float32))
j = tg.to_jax(a)                      # JAX view of tapegrad memory, alive at exit
w = tg.from_jax(jnp.ones(100))        # tapegrad view of JAX memory, alive at exit
@tg.kernel
def inc(x: tg.array[float], y: tg.array[float]):
    i = tg.tid()
    y[i] = x[i] + 1.0
f = jax.jit(lambda x: tg.jax_kernel(inc)(x)[0])
keep = f(j)
print(float(keep[999]), float(jnp.sum(j)))
del a
""", tmp_path, devices=1)
    assert "1000.0" in out
