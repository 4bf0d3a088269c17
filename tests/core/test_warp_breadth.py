"""Issue 28: the Warp surface Warp's own tests lean on — dtype names and constructors, kernel and
module options, Warp's exception classes, the star import."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.types as tgt

# ------------------------------------------------------------------ item 1: dtype names

# Warp 1.19's class names (``wp.vec3.__name__`` etc.), read off warp-lang 1.19.0
WARP_NAMES = {
    "float32": "float32", "float64": "float64", "float16": "float16", "int8": "int8", "uint64": "uint64",
    "bool": "bool", "vec3": "vec3f", "vec2d": "vec2d", "vec4h": "vec4h", "vec3i": "vec3i", "vec4ub": "vec4ub",
    "vec2ul": "vec2ul", "mat22": "mat22f", "mat33d": "mat33d", "mat44h": "mat44h", "quat": "quatf",
    "quatd": "quatd", "transform": "transformf", "transformh": "transformh", "spatial_vector": "spatial_vectorf",
    "spatial_matrixd": "spatial_matrixd",
}


@pytest.mark.parametrize("attr", sorted(WARP_NAMES))
def test_dtype_names_are_warps(attr):
    assert getattr(tg, attr).__name__ == WARP_NAMES[attr]


def test_dtype_names_are_unique_per_named_type():
    # Warp code names tests after dtype.__name__: two different types must not share a name
    seen = {}
    for n in tgt.NAMED_TYPES:
        t = getattr(tgt, n)
        assert seen.setdefault(t.__name__, t) is t, (n, t.__name__)


def test_type_classes_keep_their_own_name():
    # the instance property must not hide the class's name (error messages print it)
    assert tgt.ScalarType.__name__ == "ScalarType" and tgt.VectorType.__name__ == "VectorType"
    assert tgt.MatrixType.__name__ == "MatrixType"


@pytest.mark.parametrize("dtype,quat,xform", [(tg.float16, "quath", "transformh"), (tg.float32, "quat", "transform"),
                                               (tg.float64, "quatd", "transformd")])
def test_quaternion_and_transformation_constructors(dtype, quat, xform):
    assert tgt.quaternion(dtype) is getattr(tg, quat)
    assert tgt.quaternion(dtype=dtype) is getattr(tg, quat)
    assert tgt.transformation(dtype=dtype) is getattr(tg, xform)


def test_quaternion_of_float_is_quat_and_ints_raise():
    assert tgt.quaternion(float) is tg.quat
    with pytest.raises(TypeError, match="quaternion.*float16, float32 or float64.*int32"):
        tgt.quaternion(tg.int32)
    with pytest.raises(TypeError, match="transformation"):
        tgt.transformation(tg.vec3)


def test_quaternion_type_runs_in_a_kernel():
    q64 = tgt.quaternion(tg.float64)

    @tg.kernel
    def k(out: tg.array(dtype=q64)):
        out[0] = q64(0.0, 0.0, 0.0, 1.0) * q64(1.0, 2.0, 3.0, 4.0)

    out = tg.zeros(1, dtype=q64)
    tg.launch(k, dim=1, inputs=[out])
    np.testing.assert_array_equal(out.numpy()[0], [1.0, 2.0, 3.0, 4.0])


# ------------------------------------------------------------- item 2: kernel / module options

def _write_one(a: tg.array(dtype=float)):
    a[tg.tid()] = 1.0


def test_kernel_object_takes_key_options_module():
    k = tg.Kernel(func=_write_one, key="wb_write_one", options={"enable_backward": False})
    assert k.options == {"enable_backward": False} and k.enable_backward is False
    assert k.key == "wb_write_one" and k.module.name == __name__
    # the module option stays the module's (the kernel option overrides it for this kernel only)
    assert k.module.options["enable_backward"] is True
    a = tg.zeros(4, dtype=float)
    tg.launch(k, dim=4, inputs=[a])
    np.testing.assert_array_equal(a.numpy(), np.ones(4))


def test_kernel_object_reads_module_enable_backward():
    tg.set_module_options({"enable_backward": False}, module="wb_options_mod")
    k = tg.Kernel(_write_one, module="wb_options_mod")
    assert k.enable_backward is False and k.module.name == "wb_options_mod"
    assert tg.get_module("wb_options_mod").options["enable_backward"] is False
    tg.set_module_options({"enable_backward": True}, module="wb_options_mod")


def test_kernel_options_are_checked():
    with pytest.raises(ValueError, match="unknown option.*'no_such'"):
        tg.Kernel(_write_one, options={"no_such": 1})
    with pytest.raises(TypeError, match="'enable_backward' expects a bool"):
        tg.Kernel(_write_one, options={"enable_backward": "yes"})
    with pytest.raises(ValueError, match="launch_bounds"):
        tg.kernel(launch_bounds=(0, 1))(_write_one)
    with pytest.raises(ValueError, match='module_options requires module="unique"'):
        tg.kernel(module_options={"enable_backward": False})(_write_one)


def test_unique_module_options():
    @tg.kernel(module="unique", module_options={"enable_backward": False, "mode": "release"})
    def k(a: tg.array(dtype=float)):
        a[tg.tid()] = 2.0

    @tg.kernel(module="unique")
    def k2(a: tg.array(dtype=float)):
        a[tg.tid()] = 3.0

    assert k.enable_backward is False and k.module.options["mode"] == "release"
    assert k.module.name != k2.module.name and k2.enable_backward is True
    assert k2.module.options["mode"] is None          # a unique module starts from the defaults
    assert tg.get_module_options(__name__)["mode"] is None   # the Python module's are untouched
    a = tg.zeros(3, dtype=float)
    tg.launch(k, dim=3, inputs=[a])
    np.testing.assert_array_equal(a.numpy(), [2.0, 2.0, 2.0])


def test_module_options_item_assignment_writes_through():
    @tg.kernel(module="unique")
    def k(a: tg.array(dtype=float)):
        a[tg.tid()] = 2.0

    k.module.options["mode"] = "debug"
    assert k.mode() == "debug" and k.module.options["mode"] == "debug"
    with pytest.raises(ValueError, match="mode"):
        k.module.options["mode"] = "fastest"


def test_kernel_name_and_launch_bounds():
    @tg.kernel(name="wb_named_kernel", launch_bounds=(256, 1))
    def k(a: tg.array(dtype=float)):
        a[tg.tid()] = 5.0

    assert k.key == "wb_named_kernel" and k.options == {"launch_bounds": (256, 1)}
    with pytest.raises(ValueError, match="C\\+\\+ identifier"):
        tg.kernel(name="not an identifier")


def test_deterministic_mode_and_build_options(tmp_path):
    assert [m.value for m in tg.DeterministicMode] == [0, 1, 2]
    tg.set_module_options({"deterministic": tg.DeterministicMode.NOT_GUARANTEED}, module="wb_det")
    with pytest.raises(ValueError, match="deterministic"):
        tg.set_module_options({"deterministic": tg.DeterministicMode.RUN_TO_RUN}, module="wb_det")
    tg.set_module_options({"extra_build_options": tg.ModuleBuildOptions()}, module="wb_det")
    opts = tg.ModuleBuildOptions(extra_cpu_include_dirs=[str(tmp_path)])
    with pytest.raises(ValueError, match="extra_build_options.*not supported"):
        tg.set_module_options({"extra_build_options": opts}, module="wb_det")
    with pytest.raises(TypeError, match="extra_cuda_preamble"):
        tg.ModuleBuildOptions(extra_cuda_preamble=1)
    with pytest.raises(ValueError, match="absolute paths"):
        tg.ModuleBuildOptions(extra_build_dependencies=["relative.h"])
    both = opts.merged(tg.ModuleBuildOptions(extra_cpu_preamble="#define A 1"))
    assert both.extra_cpu_include_dirs == [str(tmp_path)] and both.extra_cpu_preamble == "#define A 1"
    assert not tg.ModuleBuildOptions().merged(tg.ModuleBuildOptions()).extra_cpu_preamble


# ------------------------------------------------------------------------ item 6: star import

def test_star_import_imports_no_framework():
    code = ("import sys\n"
            "from tapegrad import *\n"
            "loaded = [m for m in ('torch', 'paddle', 'jax', 'cupy') if m in sys.modules]\n"
            "assert not loaded, loaded\n"
            "assert kernel is not None and vec3.__name__ == 'vec3f'\n"
            "import tapegrad\n"
            "assert 'from_torch' in dir(tapegrad) and 'from_torch' not in tapegrad.__all__\n"
            "assert not [m for m in ('torch', 'paddle', 'jax') if m in sys.modules]\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_lazy_names_still_resolve_as_attributes():
    pytest.importorskip("torch")
    assert callable(tg.from_torch) and "from_torch" not in tg.__all__
