"""Exported programs in a fresh process (B20, issue 24 item 7): ``torch.export`` binds each
tapegrad op by a stable name (two kernels named ``f`` built in either order), ``jax.export``
programs run the kernel the new process defines, or refuse with an error naming it; nothing
crashes. Each program runs in its own subprocess (a crash is an exit status, not a lost run)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapegrad as tg

_KMODS = {"kmod_a": "sin", "kmod_b": "cos"}
_HEAD = """
import sys, numpy as np
import tapegrad as tg
"""


@pytest.fixture
def kdir(tmp_path):
    """A folder with modules kmod_a and kmod_b, each defining a kernel ``f`` (sin and cos)."""
    for mod, fn in _KMODS.items():
        (tmp_path / f"{mod}.py").write_text(textwrap.dedent(f"""
            import tapegrad as tg

            @tg.kernel
            def f(x: tg.array[tg.float64], y: tg.array[tg.float64]):
                i = tg.tid()
                y[i] = tg.{fn}(x[i])

            def make(scale):
                @tg.kernel
                def g(x: tg.array[tg.float64], y: tg.array[tg.float64]):
                    i = tg.tid()
                    y[i] = x[i] * scale
                return g
            """))
    return tmp_path


def _run(kdir, *parts, args=()):
    """Run the program made of ``parts`` (each dedented) in a subprocess with ``kdir`` importable."""
    env = dict(os.environ, PYTHONPATH=str(kdir) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    prog = "\n".join(textwrap.dedent(p) for p in (_HEAD,) + parts)
    p = subprocess.run([sys.executable, "-c", prog, str(kdir), *args], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"exit {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return p.stdout + p.stderr


# ------------------------------------------------------------------------------- names

def test_stable_name_depends_on_what_the_op_computes_not_on_the_process(kdir):
    body = """
        sys.path.insert(0, sys.argv[1])
        from tapegrad.bridges.export_names import stable_name, describe
        import {first}, {second}
        import kmod_a, kmod_b
        print(stable_name(kmod_a.f, 1, None, None), stable_name(kmod_b.f, 1, None, None),
              stable_name(kmod_a.make(2.0)), stable_name(kmod_a.make(3.0)), stable_name(kmod_a.f, 2, None, None),
              describe(stable_name(kmod_a.f)))
    """
    one = _run(kdir, body.format(first="kmod_b", second="kmod_a")).split()
    two = _run(kdir, body.format(first="kmod_a", second="kmod_b")).split()
    assert one == two                                   # no counter, address or order in the names
    a, b, g2, g3, a2 = one[:5]
    assert len({a, b, g2, g3, a2}) == 5                 # module, closure value and options all count
    assert a.startswith("kmod_a__f__") and b.startswith("kmod_b__f__")
    assert " ".join(one[5:]) == "('kmod_a', 'f')"


# ------------------------------------------------------------------------------- torch.export

_TORCH_EXPORT = """
    import torch
    import kmod_b, kmod_a                       # b first
    op_b, op_a = tg.torch_op(kmod_b.f), tg.torch_op(kmod_a.f)

    class M(torch.nn.Module):
        def forward(self, x):
            return op_a(x) * 2.0 + op_b(x)
    ep = torch.export.export(M(), (torch.linspace(0, 1, 8, dtype=torch.float64),))
    torch.export.save(ep, sys.argv[1] + "/m.pt2")
"""


@pytest.mark.torch
def test_torch_export_binds_each_kernel_in_a_fresh_process_built_in_another_order(kdir):
    _run(kdir, _TORCH_EXPORT)
    out = _run(kdir, """
        import torch
        import kmod_a, kmod_b
        op_a, op_b = tg.torch_op(kmod_a.f), tg.torch_op(kmod_b.f)    # the other order
        x = torch.linspace(0, 1, 8, dtype=torch.float64)
        y = torch.export.load(sys.argv[1] + "/m.pt2").module()(x)
        ref = 2.0 * np.sin(x.numpy()) + np.cos(x.numpy())
        print("max error", float(np.abs(y.numpy() - ref).max()))
    """)
    err = float(out.split("max error")[1].split()[0])
    assert err < 1e-14, out


@pytest.mark.torch
def test_torch_export_of_an_undefined_op_names_the_kernel_and_what_to_import(kdir):
    _run(kdir, _TORCH_EXPORT)
    out = _run(kdir, """
        import torch
        import kmod_b
        tg.torch_op(kmod_b.f)                          # kmod_a's op is not built here
        try:
            torch.export.load(sys.argv[1] + "/m.pt2")
        except RuntimeError as e:
            print("refused:", e)
        else:
            print("loaded?!")
    """)
    assert "refused:" in out and "loaded?!" not in out
    # torch logs the deserializer's error (ours) and raises its own generic one
    assert "tapegrad: the program calls op tapegrad::kmod_a__f__" in out, out
    assert "import kmod_a" in out and "tg.torch_op(kmod_a.f" in out, out


@pytest.mark.torch
def test_torch_op_default_name_is_shared_by_an_equal_kernel_rebuilt(tmp_path):
    import importlib.util

    import torch
    path = tmp_path / "tg_test_rebuilt.py"
    path.write_text(textwrap.dedent("""
        import tapegrad as tg

        @tg.kernel
        def twice(x: tg.array[tg.float64], y: tg.array[tg.float64]):
            i = tg.tid()
            y[i] = 2.0 * x[i]
        """))
    ops = []
    for _ in range(2):   # the module executed twice: two kernel objects, one computation, one op name
        spec = importlib.util.spec_from_file_location("tg_test_rebuilt", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        ops.append(tg.torch_op(mod.twice))
    assert ops[0] is ops[1]   # registering the name twice would raise in torch.library
    x = torch.arange(4, dtype=torch.float64)
    assert torch.equal(ops[1](x), 2 * x)


@pytest.mark.torch
def test_torch_op_names_follow_helper_closures_and_module_globals(tmp_path):
    """Two kernels of one source whose @tg.func helper closes over another constant, and a module
    executed again with another global constant, got the same name: tg.torch_op returned the first
    op, silently computing with the old constant ([2, 2, 2] for a scale of 3)."""
    import importlib.util

    import torch
    path = tmp_path / "tg_test_consts.py"
    src = """
        import tapegrad as tg

        SCALE = tg.constant({c})

        @tg.kernel
        def scaled(x: tg.array[tg.float64], y: tg.array[tg.float64]):
            i = tg.tid()
            y[i] = x[i] * SCALE

        def make(c):
            @tg.func
            def f(v: tg.float64):
                return v * c

            @tg.kernel
            def via_func(x: tg.array[tg.float64], y: tg.array[tg.float64]):
                i = tg.tid()
                y[i] = f(x[i])
            return via_func
        """
    x = torch.ones(3, dtype=torch.float64)
    for c in (2.0, 3.0):   # the module executed again with another global constant
        path.write_text(textwrap.dedent(src.format(c=c)))
        spec = importlib.util.spec_from_file_location("tg_test_consts", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        assert tg.torch_op(mod.scaled)(x).tolist() == [c] * 3
    for c in (4.0, 5.0):   # one source, helpers closing over other constants
        assert tg.torch_op(mod.make(c))(x).tolist() == [c] * 3
    assert tg.torch_op(mod.make(4.0)) is tg.torch_op(mod.make(4.0))   # equal computations: one op


# ------------------------------------------------------------------------------- jax.export

_JAX_HEAD = """
    import os, jax, jax.numpy as jnp
    if os.environ.get("TG_TEST_PLATFORM") == "cpu":
        jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_enable_x64", True)
    from jax import export
    CHECKS = [export.DisabledSafetyCheck.custom_call("tapegrad_kernel"),
              export.DisabledSafetyCheck.custom_call("tapegrad_callable"),
              export.DisabledSafetyCheck.custom_call("tapegrad_callable_graphable")]
"""

_JAX_EXPORT = textwrap.dedent(_JAX_HEAD) + textwrap.dedent("""
    import kmod_b, kmod_a                       # b first
    kb, ka = tg.jax_kernel(kmod_b.f), tg.jax_kernel(kmod_a.f, enable_backward=True)
    spec = jax.ShapeDtypeStruct((8,), jnp.float64)
    fwd = export.export(jax.jit(lambda x: ka(x)[0] * 2.0 + kb(x)[0]), disabled_checks=CHECKS)(spec)
    grad = export.export(jax.jit(jax.grad(lambda x: ka(x)[0].sum())), disabled_checks=CHECKS)(spec)
    open(sys.argv[1] + "/fwd.jax", "wb").write(fwd.serialize())
    open(sys.argv[1] + "/grad.jax", "wb").write(grad.serialize())
    print("platforms", *fwd.platforms)
""")

# the CUDA twin runs the same programs with JAX's default (GPU) backend: the CUDA handler
# resolves the foreign call and loads the kernel on the device
_JAX_PLATFORMS = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]


@pytest.mark.jax
@pytest.mark.parametrize("platform", _JAX_PLATFORMS)
def test_jax_export_runs_in_a_fresh_process_that_defines_the_kernels(kdir, monkeypatch, platform):
    pytest.importorskip("flatbuffers")   # jax.export's serializer needs it
    monkeypatch.setenv("TG_TEST_PLATFORM", platform)
    assert f"platforms {platform}" in _run(kdir, _JAX_EXPORT)
    out = _run(kdir, _JAX_HEAD, """
        import kmod_a, kmod_b
        tg.jax_kernel(kmod_a.f, enable_backward=True); tg.jax_kernel(kmod_b.f)    # the other order
        x = jnp.linspace(0, 1, 8, dtype=jnp.float64)
        fwd = export.deserialize(bytearray(open(sys.argv[1] + "/fwd.jax", "rb").read()))
        grad = export.deserialize(bytearray(open(sys.argv[1] + "/grad.jax", "rb").read()))
        xs = np.linspace(0, 1, 8)
        for _ in range(2):                         # the second call finds the resolved plan
            e1 = np.abs(np.asarray(fwd.call(x)) - (2 * np.sin(xs) + np.cos(xs))).max()
            e2 = np.abs(np.asarray(grad.call(x)) - np.cos(xs)).max()
            print("errors", e1, e2)
    """)
    errs = [float(v) for line in out.splitlines() if line.startswith("errors") for v in line.split()[1:]]
    assert len(errs) == 4 and max(errs) < 1e-14, out


@pytest.mark.jax
@pytest.mark.parametrize("platform", _JAX_PLATFORMS)
def test_jax_export_of_an_undefined_kernel_is_a_clear_error_not_a_crash(kdir, monkeypatch, platform):
    pytest.importorskip("flatbuffers")
    monkeypatch.setenv("TG_TEST_PLATFORM", platform)
    assert f"platforms {platform}" in _run(kdir, _JAX_EXPORT)
    out = _run(kdir, _JAX_HEAD, """
        import kmod_b
        tg.jax_kernel(kmod_b.f)                    # kmod_a.f is not defined here
        fwd = export.deserialize(bytearray(open(sys.argv[1] + "/fwd.jax", "rb").read()))
        for _ in range(2):                         # refused every time, and the process stays usable
            try:
                np.asarray(fwd.call(jnp.linspace(0, 1, 8, dtype=jnp.float64)))   # GPU errors come when read
            except Exception as e:
                print("refused:", str(e).splitlines()[0])
        y = tg.jax_kernel(kmod_b.f)(jnp.zeros(4, dtype=jnp.float64))[0]
        print("after", np.asarray(y).tolist())
    """)
    lines = [line for line in out.splitlines() if line.startswith("refused:")]
    assert len(lines) == 2, out
    assert "tapegrad" in lines[0] and "kernel 'kmod_a.f'" in lines[0] and "import kmod_a" in lines[0], lines[0]
    assert "after [1.0, 1.0, 1.0, 1.0]" in out


@pytest.mark.jax
@pytest.mark.parametrize("platform", _JAX_PLATFORMS)
def test_jax_export_of_a_jax_callable_is_refused_in_another_process(kdir, monkeypatch, platform):
    pytest.importorskip("flatbuffers")
    monkeypatch.setenv("TG_TEST_PLATFORM", platform)
    body = """
        import kmod_a
        k = kmod_a.f

        def call_f(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
            tg.launch(k, dim=x.shape, inputs=[x], outputs=[y])
        c = tg.jax_callable(call_f)
        x = jnp.linspace(0, 1, 8, dtype=jnp.float64)
        if sys.argv[2] == "export":
            exp = export.export(jax.jit(lambda x: c(x)[0]), disabled_checks=CHECKS)(
                jax.ShapeDtypeStruct((8,), jnp.float64))
            open(sys.argv[1] + "/c.jax", "wb").write(exp.serialize())
            # the same process may run what it exported
            same = export.deserialize(bytearray(exp.serialize()))
            print("same process error", float(np.abs(np.asarray(same.call(x)) - np.sin(np.asarray(x))).max()))
        else:
            exp = export.deserialize(bytearray(open(sys.argv[1] + "/c.jax", "rb").read()))
            try:
                np.asarray(exp.call(x))
            except Exception as e:
                print("refused:", str(e).splitlines()[0])
    """
    out = _run(kdir, _JAX_HEAD, body, args=("export",))
    assert float(out.split("same process error")[1].split()[0]) < 1e-14
    out = _run(kdir, _JAX_HEAD, body, args=("load",))
    line = next(line for line in out.splitlines() if line.startswith("refused:"))
    assert "tapegrad jax_callable 'call_f'" in line and "another process" in line, line


@pytest.mark.jax
def test_jax_kernel_calls_carry_a_stable_key_and_this_process_id():
    import jax
    import jax.numpy as jnp

    from tapegrad.bridges.jax.ffi import process_id

    @tg.kernel
    def triple(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = 3.0 * x[i]

    k = tg.jax_kernel(triple)
    text = jax.jit(lambda x: k(x)[0]).lower(jnp.ones(5, jnp.float32)).as_text()
    assert f"tapegrad_process = {process_id()}" in text
    assert "tapegrad_key = \"tapegrad-plan 1;" in text and "__triple__" in text
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda x: k(x)[0])(jnp.ones(5, jnp.float32))), 3.0)
