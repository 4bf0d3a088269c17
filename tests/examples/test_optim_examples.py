"""The showcase and every example run and converge (the README's first command runs them)."""
import dataclasses
import subprocess
import sys
import types

import numpy as np
import pytest

from optim_examples import matrix
from optim_examples.__main__ import EXAMPLES


def test_fit_curve_recovers_the_parameters():
    from optim_examples import fit_curve
    loss, params = fit_curve.main(steps=200, device="cpu")
    assert loss < 1e-3
    assert abs(params[0] - 1.5) < 0.05 and abs(params[1] - 2.0) < 0.05 and abs(params[2] - 0.3) < 0.05


# example -> markers; each minimises the mean Rosenbrock of 64 points from ~ 100
ROSENBROCK = {
    "native_adam": (), "torch_adam": ("torch",), "torch_params": ("torch",),
    "rosenbrock_function": ("torch",), "torch_compile": ("torch",), "paddle_adam": ("paddle",),
    "paddle_params": ("paddle",), "paddle_layer": ("paddle",), "optax_adam": ("jax",), "jax_grad": ("jax",),
}


def test_every_example_has_a_test():
    assert set(EXAMPLES) == set(ROSENBROCK) | {"matrix", "fit_curve"}


@pytest.mark.slow   # training runs (the showcase's table: test_showcase_table_and_plot_message)
@pytest.mark.parametrize("name", [pytest.param(n, marks=[getattr(pytest.mark, m) for m in ms])
                                  for n, ms in ROSENBROCK.items()])
def test_example_descends(name):
    import importlib
    first, last = importlib.import_module(f"optim_examples.{name}").main(steps=300, device="cpu")
    assert last < 0.05 * first, (first, last)


PAIRS = [pytest.param(d, o, marks=[getattr(pytest.mark, m) for m in sorted(set(matrix.NEEDS[d] + matrix.NEEDS[o]))
                                   if m != "optax"], id=f"{d}-x-{o}")
         for d in matrix.DECLARERS for o in matrix.OPTIMIZERS]


@pytest.mark.slow   # training runs (the showcase's table: test_showcase_table_and_plot_message)
@pytest.mark.parametrize("declared_in, optimizer", PAIRS)
def test_matrix_pair_converges(declared_in, optimizer):
    r = matrix.run_pair(declared_in, optimizer, steps=300)
    assert r.converged, r.final_loss
    assert r.final_loss < 1e-3 * r.first_loss
    assert r.zero_copy == (declared_in != "jax")


@pytest.mark.torch
def test_declared_memory_is_what_the_optimizer_steps():
    """torch- and paddle-declared parameters are trained in their own memory (no copy anywhere)."""
    init = matrix.initial_values()
    native, param = matrix.declare("torch", init)
    assert param.ptr == native.data_ptr()
    matrix.make_step("tapegrad", param)
    param.grad.fill_(1.0)


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown declarer 'numpy'"):
        matrix.declare("numpy", matrix.initial_values())
    with pytest.raises(ValueError, match="unknown optimizer 'lbfgs'"):
        matrix.make_step("lbfgs", None)


@pytest.mark.slow   # child processes (python -m optim_examples)
def test_module_entry_point_lists_and_runs():
    r = subprocess.run([sys.executable, "-m", "optim_examples", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "native_adam" in r.stdout and "matrix" in r.stdout
    r = subprocess.run([sys.executable, "-m", "optim_examples", "native_adam", "--steps", "50"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "[run] native_adam" in r.stdout


def test_showcase_table_and_plot_message(tmp_path):
    results = [matrix.run_pair("tapegrad", "tapegrad", steps=50)]
    text = matrix.table(results)
    assert "tg.optim.Adam" in text and "yes" in text
    assert np.isfinite(results[0].steps_per_second)
    written = matrix.plot(results, str(tmp_path / "p.png"))
    assert written is None or (tmp_path / "p.png").exists()


def test_showcase_figure_one_panel_per_optimizer_and_a_speed_panel():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    results = [matrix.run_pair("tapegrad", opt, steps=30) for opt in ("tapegrad",)]
    results += [dataclasses.replace(results[0], declared_in=d, steps_per_second=100.0 * k)
                for k, d in enumerate(("torch", "paddle", "jax"), 1)]
    fig = matrix.figure(results)
    try:
        curves, speed = fig.axes[:len(matrix.OPTIMIZERS)], fig.axes[len(matrix.OPTIMIZERS)]
        assert len(fig.axes) == len(matrix.OPTIMIZERS) + 1
        assert [a.get_title() for a in curves] == [f"stepped by {matrix.OPTIMIZER_NAMES[o]}"
                                                   for o in matrix.OPTIMIZERS]
        lines = curves[matrix.OPTIMIZERS.index("tapegrad")].lines
        assert len(lines) == 4 and len({(ln.get_linestyle(), ln.get_color()) for ln in lines}) == 4
        np.testing.assert_array_equal(lines[0].get_ydata(), results[0].history)
        heights = sorted(p.get_height() for p in speed.patches)
        assert heights == sorted(r.steps_per_second for r in results)
        texts = " ".join(t.get_text() for a in curves for t in a.texts)
        assert "the 4 curves are identical" in texts
    finally:
        plt.close(fig)


def test_steps_per_second_leave_out_the_warm_up(monkeypatch):
    """The first steps (kernel compiles, optax's jit) are not timed: steps/s counts the others."""
    ticks = iter(range(10_000))
    monkeypatch.setattr(matrix, "time", types.SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    r = matrix.run_pair("tapegrad", "tapegrad", steps=matrix.WARMUP + 10)
    # one clock read before the loop, one at the warm-up boundary, one after: 10 steps in 1 tick
    assert r.steps_per_second == 10.0, r.steps_per_second


def test_showcase_output_is_free_of_third_party_chatter():
    code = ("from optim_examples.common import quiet_third_party; quiet_third_party()\n"
            "import importlib.util\n"
            "if importlib.util.find_spec('paddle'): import paddle\n"
            "if importlib.util.find_spec('jax'): import jax; jax.devices()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ccache" not in r.stderr and "xla_bridge" not in r.stderr and "libtpu" not in r.stderr, r.stderr
