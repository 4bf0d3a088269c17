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


# ------------------------------------------------------------------- type_repr (Warp's messages)

def test_type_repr_matches_warp():
    import typing
    r = tgt.type_repr
    # Warp 1.19's wp.types.type_repr of the same types
    assert [r(t) for t in (tg.float32, tg.vec3, tg.vec2d, tg.mat22, tg.quatd, tg.transformh, tg.vec4ub)] == \
        ["float32", "vec3f", "vec2d", "mat22f", "quatd", "transformh", "vec4ub"]
    assert r(tg.spatial_vector) == "vector(length=6, dtype=float32)"
    assert r(tg.spatial_matrixd) == "matrix(shape=(6, 6), dtype=float64)"
    assert r(tg.array(dtype=tg.vec3)) == "array(ndim=1, dtype=vec3f)"
    assert r(tg.array2d(dtype=float)) == "array(ndim=2, dtype=float32)"
    assert (r(typing.Any), r(float), r(int)) == ("Any", "float", "int")


# ------------------------------------------------------- item 5: integer requires_grad, host data

def test_integer_arrays_take_requires_grad_without_a_gradient():
    idx = tg.array([2, 0, 1], dtype=tg.int32, requires_grad=True)
    assert idx.requires_grad and idx.grad is None
    like = tg.zeros_like(idx)
    assert like.requires_grad and like.grad is None
    x = tg.array([1.0, 2.0, 3.0], dtype=tg.float64, requires_grad=True)
    y = tg.zeros(3, dtype=tg.float64, requires_grad=True)

    @tg.kernel
    def gather_sq(x: tg.array(dtype=tg.float64), idx: tg.array(dtype=tg.int32), y: tg.array(dtype=tg.float64)):
        i = tg.tid()
        y[i] = x[idx[i]] * x[idx[i]]

    tape = tg.Tape()
    with tape:
        tg.launch(gather_sq, dim=3, inputs=[x, idx, y])
    tape.backward(grads={y: tg.array(np.ones(3), dtype=tg.float64)})
    np.testing.assert_array_equal(y.numpy(), [9.0, 1.0, 4.0])
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])   # d/dx x^2 once per use
    assert idx.grad is None


def test_integer_array_flag_shares_no_gradient_with_torch():
    torch = pytest.importorskip("torch")
    t = tg.to_torch(tg.zeros(3, dtype=tg.int32, requires_grad=True))
    assert t.dtype == torch.int32 and not t.requires_grad


@pytest.mark.parametrize("data,dtype,shape", [
    ([1.0, 2.0, 3.0], tg.vec3, (1,)),                 # one value's components: one element
    (np.arange(6.0), tg.vec3, (2,)),                  # a flat last dim groups by the component count
    ([1, 2, 3, 4, 5, 6, 7], tg.transform, (1,)),
    ([[1.0, 2.0], [3.0, 4.0]], tg.mat22, (1,)),
    (np.arange(8.0).reshape(2, 4), tg.mat22, (2,)),   # a row of 4 is one mat22
    (np.arange(12.0).reshape(2, 6, 1), tg.vec3, (2, 2)),   # trailing 1-dims dropped
])
def test_host_data_groups_components_as_warp(data, dtype, shape):
    a = tg.array(data, dtype=dtype)
    assert a.shape == shape
    np.testing.assert_array_equal(a.numpy().reshape(-1), np.asarray(data, dtype=np.float64).reshape(-1))


def test_host_data_that_cannot_group_still_raises():
    with pytest.raises(RuntimeError, match=r"vec3 needs trailing dimensions \(3,\), got shape \(4, 2\)"):
        tg.array(np.zeros((4, 2), np.float32), dtype=tg.vec3)


# ------------------------------------------------------------- item 4: Warp's exception classes

def test_warp_codegen_error_classes_are_kernel_errors_and_warps_builtins():
    pairs = [(tg.WarpCodegenError, RuntimeError), (tg.WarpCodegenTypeError, TypeError),
             (tg.WarpCodegenAttributeError, AttributeError), (tg.WarpCodegenValueError, ValueError),
             (tg.WarpCodegenIndexError, IndexError), (tg.WarpCodegenKeyError, KeyError)]
    for cls, builtin in pairs:
        assert issubclass(cls, tg.KernelError) and issubclass(cls, builtin)
    assert str(tg.WarpCodegenKeyError("undefined symbol x")) == "undefined symbol x"   # not quoted


def test_kernel_returning_a_value_raises_warp_codegen_type_error():
    @tg.kernel(module="unique")
    def returns_value(x: float):
        return x

    with pytest.raises(tg.WarpCodegenTypeError, match=r"kernels cannot return values\. Write results to output"):
        tg.launch(returns_value, dim=1, inputs=[1.0])

    @tg.kernel(module="unique")
    def annotated(x: float) -> float:
        return

    with pytest.raises(tg.WarpCodegenTypeError, match="omit the return annotation"):
        tg.launch(annotated, dim=1, inputs=[1.0])

    @tg.kernel(module="unique")
    def none_annotation(x: float) -> None:
        return

    tg.launch(none_annotation, dim=1, inputs=[1.0])


@tg.struct
class WbFoo:
    a: float


def test_unknown_attribute_and_name_raise_warp_classes():
    @tg.kernel(module="unique")
    def bad_field(foo: WbFoo):
        _ = foo.nonexisting

    with pytest.raises(tg.WarpCodegenAttributeError, match="no field 'nonexisting'"):
        tg.launch(bad_field, dim=1, inputs=[WbFoo()])

    @tg.kernel(module="unique")
    def bad_module_attr(x: float):
        _ = tg.no_such_builtin_here(x)

    with pytest.raises(AttributeError, match="no attribute 'no_such_builtin_here'"):
        tg.launch(bad_module_attr, dim=1, inputs=[1.0])

    @tg.kernel(module="unique")
    def bad_name(x: float):
        _ = undefined_name_wb + x  # noqa: F821

    with pytest.raises(KeyError, match="name 'undefined_name_wb' is not defined"):
        tg.launch(bad_name, dim=1, inputs=[1.0])


def test_func_returning_another_type_raises_warp_codegen_error():
    @tg.func
    def wrong(x: int) -> tg.int16:
        return tg.int8(x)

    @tg.kernel(module="unique")
    def k(x: int):
        _ = wrong(x)

    with pytest.raises(tg.WarpCodegenError, match="returns int8 but the function returns int16"):
        tg.launch(k, dim=1, inputs=[1])
