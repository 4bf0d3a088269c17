"""DLPack lifetime (B8): clean interpreter exit with foreign views alive, deleters that run after
``Py_Finalize``, and no leaks over 100,000 export/import cycles."""
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

EXIT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import tapegrad as tg
    mods = {}
    for name in ("torch", "jax", "paddle"):
        try:
            mods[name] = __import__(name)
        except ImportError:
            pass
    keep = []
    for i in range(10):
        a = tg.array(np.arange(64, dtype=np.float32) + i, device="cpu")
        keep.append(np.from_dlpack(a))
        keep.append(tg.to_dlpack(a))                       # never consumed
        keep.append(a.__dlpack__(max_version=(1, 0)))      # never consumed
        keep.append(tg.from_dlpack(np.arange(8.0)))
        if "torch" in mods:
            import torch, torch.utils.dlpack
            keep.append(torch.from_dlpack(a))
            keep.append(torch.utils.dlpack.from_dlpack(tg.to_dlpack(a)))
            keep.append(tg.from_dlpack(torch.arange(8.0)))
            c = [torch.from_dlpack(a)]
            c.append(c)                                    # a cycle holding a view
        if "jax" in mods:
            import jax.dlpack, jax.numpy as jnp
            keep.append(jax.dlpack.from_dlpack(a))
            keep.append(tg.from_dlpack(jnp.arange(8.0)))
        if "paddle" in mods:
            import paddle, paddle.utils.dlpack
            keep.append(paddle.from_dlpack(a))
            keep.append(paddle.utils.dlpack.from_dlpack(tg.to_dlpack(a)))
            keep.append(tg.from_dlpack(paddle.arange(8, dtype="float32")))
        del a
    import sys
    sys.keep_late = keep[-3:]                              # released very late in finalisation
    g = tg.zeros(4, device="cpu")
    n = np.from_dlpack(g)                                  # module globals: views outlive the array
    del g
""")


def _env(**extra):
    env = dict(os.environ)
    env.update(JAX_PLATFORMS="cpu", PYTHONWARNINGS="ignore", TF_CPP_MIN_LOG_LEVEL="3",
               GLOG_minloglevel="3", FLAGS_call_stack_level="0")
    env.update(extra)
    return env


def _run(script, env, timeout=120):
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
    return r.returncode, r.stderr


def _runs(n, env, workers=4):
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(lambda _: _run(EXIT_SCRIPT, env), range(n)))


@pytest.mark.slow
def test_exit_with_views_alive_20_runs():
    """20 runs, 4 at a time: exit status 0 and nothing on stderr, every time. (~40 s on an idle
    2-core machine, more under load: marked slow; the quick variant below runs by default too.)"""
    results = _runs(20, _env())
    bad = [(rc, err[-2000:]) for rc, err in results if rc != 0 or err.strip()]
    assert not bad, bad


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "ctypes"])
def test_exit_with_views_alive_quick(native):
    results = _runs(2, _env(TAPEGRAD_DLPACK_NATIVE=native), workers=2)
    bad = [(rc, err[-2000:]) for rc, err in results if rc != 0 or err.strip()]
    assert not bad, bad


HOLDER_C = r"""
#include <stdlib.h>
typedef void (*deleter_t)(void *);
static void *held[64]; static int offs[64]; static int n = 0;
static void release_all(void) {          /* runs from C exit(), after Py_Finalize */
    for (int i = 0; i < n; i++) {
        deleter_t d = *(deleter_t *)((char *)held[i] + offs[i]);
        if (d) d(held[i]);
    }
}
void hold(void *m, int versioned) {
    if (n == 0) atexit(release_all);
    if (n < 64) { held[n] = m; offs[n] = versioned ? 16 : 56; n++; }
}
"""

HOLDER_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import tapegrad as tg
    P = ctypes.PYFUNCTYPE
    api = ctypes.pythonapi
    get_name = P(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", api))
    get_ptr = P(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", api))
    set_name = P(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", api))
    lib = ctypes.CDLL(sys.argv[1])
    USED = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}
    for i in range(4):
        a = tg.array(np.arange(8, dtype=np.float32), device="cpu")
        cap = tg.to_dlpack(a) if i % 2 else a.__dlpack__(max_version=(1, 0))
        name = get_name(cap)
        p = get_ptr(cap, name)
        set_name(cap, USED[name])                      # a C consumer takes ownership...
        lib.hold(ctypes.c_void_p(p), int(name == b"dltensor_versioned"))
    # ...and calls the deleters from a C atexit handler, after the interpreter is gone
""")


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "ctypes"])
def test_deleter_after_interpreter_teardown(tmp_path, native):
    """A consumer that frees its view after Py_Finalize (Warp 1.19's deleter segfaults here)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None or sys.platform == "win32":
        pytest.skip("needs a C compiler")
    src = tmp_path / "holder.c"
    src.write_text(HOLDER_C)
    lib = tmp_path / "holder.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    r = subprocess.run([sys.executable, "-c", HOLDER_SCRIPT, str(lib)], capture_output=True, text=True,
                       timeout=120, env=_env(TAPEGRAD_DLPACK_NATIVE=native))
    assert r.returncode == 0 and not r.stderr.strip(), (r.returncode, r.stderr[-2000:])


LEAK_SCRIPT = textwrap.dedent("""
    import gc, sys
    import numpy as np
    import tapegrad as tg
    from tapegrad.dlpack import capsules

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    a = tg.array(np.arange(16, dtype=np.float32), device="cpu")
    n = np.arange(16, dtype=np.float32)
    torch = None
    if sys.argv[1] == "torch":
        import torch
        t = torch.arange(16, dtype=torch.float32)

    def cycle():
        np.from_dlpack(a)                               # export, versioned
        tg.from_dlpack(n)                               # import, versioned
        tg.from_dlpack(tg.to_dlpack(a))                 # legacy capsule both ways
        a.__dlpack__(max_version=(1, 0))                # dropped unconsumed
        if torch is not None:
            torch.from_dlpack(a)
            tg.from_dlpack(t)

    for _ in range(5000):
        cycle()
    gc.collect()
    r0, o0 = rss(), len(gc.get_objects())
    for _ in range(100000):
        cycle()
    gc.collect()
    r1, o1 = rss(), len(gc.get_objects())
    print(r0, r1, o0, o1, capsules.backend().name)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.parametrize("consumer,native", [("numpy", "1"), ("numpy", "0"),
                                             pytest.param("torch", "1", marks=pytest.mark.torch)])
def test_no_leak_100k_cycles(consumer, native):
    r = subprocess.run([sys.executable, "-c", LEAK_SCRIPT, consumer], capture_output=True, text=True,
                       timeout=600, env=_env(TAPEGRAD_DLPACK_NATIVE=native))
    assert r.returncode == 0, r.stderr[-2000:]
    r0, r1, o0, o1, name = r.stdout.split()
    r0, r1, o0, o1 = int(r0), int(r1), int(o0), int(o1)
    assert name == ("native" if native == "1" else "ctypes")
    assert r1 <= r0 * 1.05, f"RSS grew from {r0 / 2**20:.1f} MiB to {r1 / 2**20:.1f} MiB"
    assert o1 - o0 < 100, f"Python objects grew from {o0} to {o1}"
