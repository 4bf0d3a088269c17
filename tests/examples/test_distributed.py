"""Several processes / devices on the CPU: a tg.torch_op model under DistributedDataParallel
(gloo, two processes) and a jax_kernel training step under shard_map / jax.distributed (two
processes, gloo) equal single-process training; the two-GPU run skips with a message."""
import subprocess
import sys

import numpy as np
import pytest


@pytest.mark.torch
def test_ddp_gloo_matches_single_process():
    from optim_examples import ddp_torch
    w = ddp_torch.main(steps=60, cpu=True)
    ref = ddp_torch.reference(steps=60)
    np.testing.assert_allclose(w, ref, rtol=1e-6, atol=1e-6)
    assert abs(w[0] - 1.5) < 0.2   # it trained


@pytest.mark.torch
def test_two_gpu_example_says_why_it_skips():
    import torch
    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs present: the example runs instead")
    r = subprocess.run([sys.executable, "-m", "optim_examples.ddp_torch", "--steps", "5"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "needs 2 CUDA GPUs" in r.stdout


@pytest.mark.jax
def test_jax_shard_map_training_matches_plain_jax():
    """jax_kernel forward + adjoint inside shard_map, replicated parameters next to sharded data."""
    from optim_examples import jax_shard_map
    w, loss = jax_shard_map.train(steps=60)
    ref, ref_loss = jax_shard_map.reference(steps=60)
    np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-6)
    assert abs(loss - ref_loss) < 1e-5


@pytest.mark.jax
def test_jax_distributed_two_processes_match_plain_jax():
    """Two processes under jax.distributed (CPU, gloo collectives), one device each."""
    import ast

    from optim_examples import jax_shard_map
    outs = jax_shard_map.run_processes(2, steps=60)
    ref, _ = jax_shard_map.reference(steps=60)
    assert len(outs) == 2
    for out in outs:
        line = [ln for ln in out.splitlines() if ln.startswith("process ")][-1]
        assert "2 devices" in line
        np.testing.assert_allclose(ast.literal_eval(line.split("w = ")[1]), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.jax
def test_jax_two_gpu_example_says_why_it_skips():
    import jax
    try:
        n = len(jax.devices("gpu"))
    except RuntimeError:
        n = 0
    if n >= 2:
        pytest.skip("two GPUs present: the example runs instead")
    r = subprocess.run([sys.executable, "-m", "optim_examples.jax_shard_map", "--gpus", "2", "--steps", "5"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "needs 2 GPUs" in r.stdout
