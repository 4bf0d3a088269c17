"""A model whose forward runs a tapegrad kernel (``tg.torch_op``), trained with
``torch.nn.parallel.DistributedDataParallel``: DDP all-reduces the kernel's gradients like any
native op's, and the result equals single-process training on the global batch.

    python -m optim_examples.ddp_torch               # two GPUs, NCCL (exits with a message otherwise)
    python -m optim_examples.ddp_torch --cpu         # two CPU processes, gloo

Each process trains on its half of every global batch; ``main`` returns rank 0's parameters
after training, and ``reference`` trains the same model in one process on the whole batches.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile

import numpy as np
import torch

import tapegrad as tg

WORLD = 2


@tg.kernel
def wave(x: tg.array[float], w: tg.array[float], y: tg.array[float]):
    """y = w0 * sin(w1 * x) + w2: a three-parameter model evaluated by a kernel."""
    i = tg.tid()
    y[i] = w[0] * tg.sin(w[1] * x[i]) + w[2]


wave_op = tg.torch_op(wave, launch_dims=lambda x, w: x.shape[0])


class Wave(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([1.0, 1.8, 0.0]))

    def forward(self, x):
        return wave_op(x, self.w)


def batches(steps: int, n: int = 256):
    """The global batches: ``(x, y)`` pairs of a noisy y = 1.5 sin(2 x) + 0.3."""
    rng = np.random.default_rng(0)
    for _ in range(steps):
        x = rng.uniform(-3, 3, size=n).astype(np.float32)
        y = (1.5 * np.sin(2.0 * x) + 0.3 + 0.01 * rng.normal(size=n)).astype(np.float32)
        yield torch.from_numpy(x), torch.from_numpy(y)


def train(model, device, steps, rank=0, world=1):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in batches(steps):
        part = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
        x, y = x[part].to(device), y[part].to(device)
        opt.zero_grad()
        loss = torch.mean((model(x) - y) ** 2)
        loss.backward()
        opt.step()
    return loss.detach()


def _worker(rank, backend, port, steps, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group(backend, rank=rank, world_size=WORLD)
    try:
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        model = Wave().to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if device.type == "cuda" else None)
        loss = train(ddp, device, steps, rank, WORLD)
        if rank == 0:
            np.save(out, model.w.detach().cpu().numpy())
            print(f"  rank 0: final loss on its half {float(loss):.5f}, w = {model.w.detach().cpu().numpy()}")
        # both ranks tear down together: a rank that destroys the group while the other still
        # talks to it made gloo abort a process at exit ("terminate called without an active
        # exception"), about one run in four
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(steps: int = 200, cpu: bool = False):
    """Train with DDP over two processes; returns rank 0's parameters (None when skipped)."""
    backend = "gloo" if cpu else "nccl"
    if not cpu and torch.cuda.device_count() < WORLD:
        print(f"ddp_torch: needs {WORLD} CUDA GPUs for NCCL, found {torch.cuda.device_count()} "
              "(run with --cpu for two gloo processes on the CPU)")
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "w.npy")
        torch.multiprocessing.spawn(_worker, args=(backend, _free_port(), steps, out), nprocs=WORLD, join=True)
        return np.load(out)


def reference(steps: int = 200, device: str = "cpu"):
    """The same training in one process on the whole global batches."""
    model = Wave().to(device)
    train(model, device, steps)
    return model.w.detach().cpu().numpy()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="two CPU processes with gloo instead of two GPUs with NCCL")
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    w = main(args.steps, args.cpu)
    if w is not None:
        ref = reference(args.steps)
        print(f"  single process on the global batch: w = {ref}; max difference {np.abs(w - ref).max():.2e}")
    sys.exit(0)
