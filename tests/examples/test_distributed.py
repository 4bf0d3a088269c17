"""Several processes / devices on the CPU: a tg.torch_op model under DistributedDataParallel
(gloo, two processes) equals single-process training; the two-GPU run skips with a message."""
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.torch


def test_ddp_gloo_matches_single_process():
    from optim_examples import ddp_torch
    w = ddp_torch.main(steps=60, cpu=True)
    ref = ddp_torch.reference(steps=60)
    np.testing.assert_allclose(w, ref, rtol=1e-6, atol=1e-6)
    assert abs(w[0] - 1.5) < 0.2   # it trained


def test_two_gpu_example_says_why_it_skips():
    import torch
    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs present: the example runs instead")
    r = subprocess.run([sys.executable, "-m", "optim_examples.ddp_torch", "--steps", "5"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "needs 2 CUDA GPUs" in r.stdout
