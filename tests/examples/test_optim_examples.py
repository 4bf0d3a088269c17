"""The showcases run and converge (they are what the README's first command runs)."""
import subprocess
import sys

import pytest


def test_fit_curve_recovers_the_parameters():
    from optim_examples import fit_curve
    loss, params = fit_curve.main(steps=200, device="cpu")
    assert loss < 1e-3
    assert abs(params[0] - 1.5) < 0.05 and abs(params[1] - 2.0) < 0.05 and abs(params[2] - 0.3) < 0.05


def test_torch_adam_descends():
    pytest.importorskip("torch")
    from optim_examples import torch_adam
    first, last = torch_adam.main(steps=300, device="cpu")
    assert last < 0.05 * first


def test_module_entry_point_runs():
    r = subprocess.run([sys.executable, "-m", "optim_examples"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "[run] fit_curve" in r.stdout
