"""Data-parallel training with a tapegrad kernel inside ``shard_map``: the parameters are
replicated, each device runs ``tg.jax_kernel`` (forward and its generated adjoint) on its shard
of the batch, the loss is averaged over the mesh with ``jax.lax.pmean`` (so the gradient of the
replicated parameters is reduced by JAX), and optax steps the result — the same numbers as one
device on the whole batch.

    python -m optim_examples.jax_shard_map                 # every local device (GPUs, or 1 CPU)
    python -m optim_examples.jax_shard_map --gpus 2        # the two-GPU run (a message when fewer)
    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu python -m optim_examples.jax_shard_map
    python -m optim_examples.jax_shard_map --processes 2   # jax.distributed: 2 processes on the CPU

With ``--processes N`` the example starts N processes itself, each calling
``jax.distributed.initialize(coordinator, N, rank)`` with one CPU device (collectives over
gloo); on a cluster, launch one process per GPU instead (``mpirun -np 2 python -m
optim_examples.jax_shard_map --distributed``, where ``jax.distributed.initialize()`` reads the
MPI environment).
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys

import numpy as np

import tapegrad as tg


@tg.kernel
def residual(x: tg.array[float], y: tg.array[float], w: tg.array[float], r: tg.array[float]):
    """r = w0 * sin(w1 * x) + w2 - y, one element per thread."""
    i = tg.tid()
    r[i] = w[0] * tg.sin(w[1] * x[i]) + w[2] - y[i]


def data(n: int):
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=n).astype(np.float32)
    y = (1.5 * np.sin(2.0 * x) + 0.3 + 0.01 * rng.normal(size=n)).astype(np.float32)
    return x, y


def train(steps: int = 200, n: int = 1024, devices=None):
    """Train on ``devices`` (default: all of them); returns the final parameters (numpy)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:           # older JAX
        from jax.experimental.shard_map import shard_map

    devices = list(devices if devices is not None else jax.devices())
    mesh = Mesh(np.array(devices), "batch")
    res = tg.jax_kernel(residual, enable_backward=True)

    def local_loss(w, x, y):
        r = res(x, y, w)
        return jnp.mean((r[0] if isinstance(r, (tuple, list)) else r) ** 2)

    def local_grad(w, x, y):
        # the mean over every shard; the gradient of the replicated w is summed over the mesh
        # by JAX itself (w enters the kernel's custom_vjp cast to varying)
        return jax.value_and_grad(lambda w: jax.lax.pmean(local_loss(w, x, y), "batch"))(w)

    grad = shard_map(local_grad, mesh=mesh, in_specs=(P(), P("batch"), P("batch")), out_specs=(P(), P()))
    tx = optax.sgd(0.05)

    @jax.jit
    def step(w, state, x, y):
        loss, g = grad(w, x, y)
        updates, state = tx.update(g, state, w)
        return optax.apply_updates(w, updates), state, loss

    x, y = data(n)
    shard = NamedSharding(mesh, P("batch"))
    x = jax.make_array_from_callback(x.shape, shard, lambda idx: x[idx])
    y = jax.make_array_from_callback(y.shape, shard, lambda idx: y[idx])
    w = jax.device_put(jnp.asarray([1.0, 1.8, 0.0], jnp.float32), NamedSharding(mesh, P()))
    state = tx.init(w)
    for _ in range(steps):
        w, state, loss = step(w, state, x, y)
    return np.asarray(jax.device_get(w.addressable_data(0))), float(loss)


def reference(steps: int = 200, n: int = 1024):
    """The same training in plain ``jax.numpy`` on one device (what every run must match)."""
    import jax
    import jax.numpy as jnp
    import optax
    tx = optax.sgd(0.05)
    x, y = data(n)

    @jax.jit
    def step(w, state):
        loss, g = jax.value_and_grad(lambda w: jnp.mean((w[0] * jnp.sin(w[1] * x) + w[2] - y) ** 2))(w)
        updates, state = tx.update(g, state, w)
        return optax.apply_updates(w, updates), state, loss

    w = jnp.asarray([1.0, 1.8, 0.0], jnp.float32)
    state = tx.init(w)
    for _ in range(steps):
        w, state, loss = step(w, state)
    return np.asarray(w), float(loss)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(count: int, steps: int) -> list:
    """Start ``count`` processes of this example under ``jax.distributed`` on the CPU; returns
    their outputs (each prints its final parameters)."""
    port = _free_port()
    procs = []
    for rank in range(count):
        env = dict(os.environ, JAX_PLATFORMS="cpu", TG_COORD=f"127.0.0.1:{port}", TG_NPROC=str(count),
                   TG_RANK=str(rank))
        env.pop("XLA_FLAGS", None)
        procs.append(subprocess.Popen([sys.executable, "-m", "optim_examples.jax_shard_map", "--worker",
                                       "--steps", str(steps)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            raise RuntimeError(f"jax_shard_map worker failed ({p.returncode}):\n{err[-3000:]}")
        outs.append(out)
    return outs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--processes", type=int, default=0, help="start this many jax.distributed processes (CPU)")
    ap.add_argument("--distributed", action="store_true",
                    help="call jax.distributed.initialize() from the environment (mpirun, SLURM...)")
    ap.add_argument("--gpus", type=int, default=0,
                    help="the two-GPU run: need this many GPUs (exits with a message when fewer are present)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.processes:
        for out in run_processes(args.processes, args.steps):
            print(out.strip())
        return 0
    import jax
    if args.worker:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(os.environ["TG_COORD"], int(os.environ["TG_NPROC"]), int(os.environ["TG_RANK"]))
    elif args.distributed:
        jax.distributed.initialize()
    devices = None
    if args.gpus:
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if len(gpus) < args.gpus:
            print(f"jax_shard_map: needs {args.gpus} GPUs, found {len(gpus)} (without --gpus it runs on every "
                  "local device, CPU included)")
            return 0
        devices = gpus[:args.gpus]
    w, loss = train(args.steps, devices=devices)
    print(f"process {jax.process_index()}/{jax.process_count()}, {len(jax.devices())} devices: "
          f"loss {loss:.5f}, w = {np.round(w, 4).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
