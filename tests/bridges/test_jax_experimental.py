"""tapegrad.jax_experimental: Warp's deprecated warp.jax_experimental namespace (Warp 1.10-1.17)
as tapegrad's JAX bridge under the old names, with a DeprecationWarning on import."""
import importlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytestmark = pytest.mark.jax

PACKAGE = "tapegrad.jax_experimental"


@tg.kernel
def _triple(x: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = 3.0 * x[i]


def _fresh_import(name):
    """Import ``name`` anew (the warning comes once per import), returning (module, warnings)."""
    for m in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[m]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, [w for w in seen if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("name", [PACKAGE, PACKAGE + ".ffi"])
def test_deprecated_namespace_is_the_bridge(name):
    module, seen = _fresh_import(name)
    texts = [str(w.message) for w in seen]
    assert any(f"`{name}` namespace is deprecated" in t and "tg.jax_kernel" in t for t in texts), texts
    assert module.jax_kernel is tg.jax_kernel and module.jax_callable is tg.jax_callable
    assert module.GraphMode is tg.JaxCallableGraphMode and module.JaxCallableGraphMode is tg.JaxCallableGraphMode
    assert module.ModulePreloadMode is tg.JaxModulePreloadMode is module.JaxModulePreloadMode
    assert module.from_jax is tg.from_jax and module.dtype_to_jax is tg.dtype_to_jax
    assert not hasattr(module, "register_ffi_callback")        # no tapegrad counterpart
    # Warp 1.17 code through the old name runs as through the new one
    x = jnp.arange(5, dtype=jnp.float32)
    (y,) = jax.jit(module.jax_kernel(_triple))(x)
    np.testing.assert_array_equal(np.asarray(y), 3.0 * np.arange(5, dtype=np.float64))


def test_import_tapegrad_does_not_import_it():
    code = f"import sys, tapegrad; assert '{PACKAGE}' not in sys.modules and 'jax' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
