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
    with pytest.raises(ValueError, match="valid C\\+\\+ identifier"):
        tg.kernel(name="not an identifier")


def test_deterministic_mode_and_build_options(tmp_path):
    assert [m.value for m in tg.DeterministicMode] == [0, 1, 2]
    tg.set_module_options({"deterministic": tg.DeterministicMode.NOT_GUARANTEED}, module="wb_det")
    # RUN_TO_RUN is honoured (serial CPU launches: tests/lang/test_deterministic.py); GPU_TO_GPU is not
    tg.set_module_options({"deterministic": tg.DeterministicMode.RUN_TO_RUN}, module="wb_det")
    tg.set_module_options({"deterministic": None}, module="wb_det")
    with pytest.raises(ValueError, match="deterministic"):
        tg.set_module_options({"deterministic": tg.DeterministicMode.GPU_TO_GPU}, module="wb_det")
    tg.set_module_options({"extra_build_options": tg.ModuleBuildOptions()}, module="wb_det")
    opts = tg.ModuleBuildOptions(extra_cpu_include_dirs=[str(tmp_path)])
    tg.set_module_options({"extra_build_options": opts}, module="wb_det")   # used by builds: test_build_options.py
    assert tg.get_module("wb_det").resolve_options()["extra_cpu_include_dirs"] == (str(tmp_path),)
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

    with pytest.raises(KeyError, match="Referencing undefined symbol: undefined_name_wb"):
        tg.launch(bad_name, dim=1, inputs=[1.0])


def test_func_returning_another_type_raises_warp_codegen_error():
    @tg.func
    def wrong(x: int) -> tg.int16:
        return tg.int8(x)

    @tg.kernel(module="unique")
    def k(x: int):
        _ = wrong(x)

    with pytest.raises(tg.WarpCodegenError, match="The function `wrong` has its return type annotated as `int16` "
                                                  "but the code returns a value of type `int8`"):
        tg.launch(k, dim=1, inputs=[1])


# ------------------------------------------------------------------- item 3: host-side values

def test_vector_values_have_warps_interface():
    v = tg.vec3(1.0, 2.0, 3.0)
    assert isinstance(v, np.ndarray) and type(v).__name__ == "vec3f" and isinstance(v, tg.vec3)
    assert not isinstance(v, tg.vec3d) and not isinstance(np.zeros(3, np.float32), tg.vec3)
    assert (v.x, v.y, v.z) == (1.0, 2.0, 3.0)
    v.y = 5.0
    assert v[1] == 5.0
    assert (v == [1, 5, 3]) is True and (v == (1, 5, 3)) is True and (v != [1, 5, 3]) is False
    assert (v == [1, 5]) is False and (v == "abc") is False and (v == tg.vec3(0.0)) is False
    assert repr(v) == "vec3f([1.0, 5.0, 3.0])" and str(v) == "[1.0, 5.0, 3.0]"
    q = tg.quat(0.0, 0.0, 0.0, 1.0)
    assert q.w == 1.0 and type(q).__name__ == "quatf"


@pytest.mark.parametrize("src", [[1, 2, 3], (1, 2, 3), np.array([1.0, 2.0, 3.0]), "torch"])
def test_values_from_sequences_arrays_and_tensors(src):
    if isinstance(src, str):
        torch = pytest.importorskip("torch")
        src = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    v = tg.vec3d(src)
    assert type(v).__name__ == "vec3d" and v.dtype == np.float64 and v.tolist() == [1.0, 2.0, 3.0]


def test_value_arithmetic_keeps_the_type():
    v = tg.vec3(1.0, 2.0, 3.0)
    for r in (v + v, v - 1.0, 2.0 * v, v * 2.0, v / 2.0, -v):
        assert type(r).__name__ == "vec3f"
    np.testing.assert_array_equal(v / 2.0, [0.5, 1.0, 1.5])
    with pytest.raises(TypeError, match="cw_mul"):
        _ = v * v                        # Warp has no vector product either
    assert type(v[0]) is np.float32 and type(np.sum(v)) is np.float32


def test_matrix_products_are_warps():
    # Warp's host `*` of matrices is the matrix product (numpy's would be elementwise)
    a = tg.mat22(1.0, 2.0, 3.0, 4.0)
    b = tg.mat22(0.5, -1.0, 2.0, 0.25)
    ref_a, ref_b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.5, -1.0], [2.0, 0.25]])
    np.testing.assert_array_equal(a * b, ref_a @ ref_b)
    assert type(a * b).__name__ == "mat22f" and type(a @ b).__name__ == "mat22f"
    u = tg.vec2(1.0, -2.0)
    np.testing.assert_array_equal(a * u, ref_a @ [1.0, -2.0])      # M v
    np.testing.assert_array_equal(u * a, np.array([1.0, -2.0]) @ ref_a)   # v^T M
    assert type(a * u).__name__ == "vec2f"


def test_matrix_rows_and_columns():
    m = tg.mat33d(np.arange(9.0))
    assert type(m[1]).__name__ == "vec3d" and m[1].tolist() == [3.0, 4.0, 5.0]
    assert m.get_row(-1).tolist() == [6.0, 7.0, 8.0] and m.get_col(1).tolist() == [1.0, 4.0, 7.0]
    m.set_row(0, tg.vec3d(9.0, 9.0, 9.0))
    m.set_col(2, [-1.0, -2.0, -3.0])
    assert m.tolist() == [[9.0, 9.0, -1.0], [3.0, 4.0, -2.0], [6.0, 7.0, -3.0]]
    with pytest.raises(IndexError, match="Invalid row index"):
        m.get_row(3)
    with pytest.raises(ValueError, match="expected 3 values"):
        m.set_row(0, [1.0, 2.0])
    assert tg.mat22(tg.vec2(1, 2), tg.vec2(3, 4)).tolist() == [[1, 2], [3, 4]]   # rows from vectors


def _qmul_ref(a, b):   # Hamilton product, (x, y, z, w) layout, float64
    av, aw, bv, bw = np.array(a[:3]), a[3], np.array(b[:3]), b[3]
    return np.concatenate([aw * bv + bw * av + np.cross(av, bv), [aw * bw - av @ bv]])


def test_quaternion_and_transform_products():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=4), rng.normal(size=4)
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    np.testing.assert_allclose(tg.quatd(a) * tg.quatd(b), _qmul_ref(a, b), rtol=1e-14)
    p1, p2 = rng.normal(size=3), rng.normal(size=3)
    t = tg.transformd(p1, a) * tg.transformd(p2, b)
    # reference: compose as 4x4 matrices from scipy-free rotation matrices
    def rot(q):
        x, y, z, w = q
        return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                         [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                         [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
    np.testing.assert_allclose(t.p, rot(a) @ p2 + p1, rtol=1e-13)
    np.testing.assert_allclose(t.q, _qmul_ref(a, b), rtol=1e-13)
    assert type(t.p).__name__ == "vec3d" and type(t.q).__name__ == "quatd"
    t.p = (1.0, 2.0, 3.0)
    assert t.tolist()[:3] == [1.0, 2.0, 3.0]
    assert tg.transform(p=(1, 2, 3)).tolist() == [1, 2, 3, 0, 0, 0, 1]


def test_values_pass_to_kernels_unchanged():
    @tg.kernel
    def k(v: tg.vec3, m: tg.mat22, q: tg.quat, out: tg.array(dtype=float)):
        out[0] = v.x + v.z + m[1, 0] + q.w

    out = tg.zeros(1, dtype=float)
    tg.launch(k, dim=1, inputs=[tg.vec3(1.0, 2.0, 3.0), tg.mat22(1.0, 2.0, 3.0, 4.0), tg.quat(0.0, 0.0, 0.0, 1.0),
                                 out])
    assert out.numpy()[0] == 8.0


def test_value_captured_as_kernel_constant_keeps_its_type():
    q0 = tg.constant(tg.quat(0.0, 0.0, 0.70710677, 0.70710677))

    @tg.kernel
    def k(out: tg.array(dtype=tg.vec3)):
        out[0] = tg.quat_rotate(q0, tg.vec3(1.0, 0.0, 0.0))    # needs q0 typed as a quat

    out = tg.zeros(1, dtype=tg.vec3)
    tg.launch(k, dim=1, inputs=[out])
    np.testing.assert_allclose(out.numpy()[0], [0.0, 1.0, 0.0], atol=1e-6)


def test_values_pickle_with_their_type():
    import pickle
    v = pickle.loads(pickle.dumps(tg.mat22d(1.0, 2.0, 3.0, 4.0)))
    assert type(v).__name__ == "mat22d" and v.tolist() == [[1.0, 2.0], [3.0, 4.0]]


# ---------------------------------------------------------------- item 5: arrays of structs

@tg.struct
class WbRecord:
    a: float
    v: tg.vec3
    data: tg.array(dtype=float)


@tg.kernel
def _read_records(s: tg.array(dtype=WbRecord), out: tg.array(dtype=float)):
    i = tg.tid()
    out[i] = s[i].a + s[i].v.y + s[i].data[1]


def test_array_of_structs_built_on_the_host():
    d0, d1 = tg.array([0.0, 10.0, 0.0], dtype=float), tg.array([0.0, 20.0, 0.0], dtype=float)
    recs = tg.array([WbRecord(a=1.0, v=tg.vec3(1.0, 2.0, 3.0), data=d0), WbRecord(a=2.0, data=d1)], dtype=WbRecord)
    assert recs.shape == (2,) and recs.dtype is WbRecord._tg_struct
    np.testing.assert_array_equal(recs.numpy()["v"], [[1, 2, 3], [0, 0, 0]])
    out = tg.zeros(2, dtype=float)
    tg.launch(_read_records, dim=2, inputs=[recs, out])
    np.testing.assert_array_equal(out.numpy(), [13.0, 22.0])
    assert tg.array([[WbRecord(), WbRecord()]], dtype=WbRecord).shape == (1, 2)
    assert WbRecord.cls is WbRecord   # Warp's struct objects name their class .cls
    with pytest.raises(TypeError, match="expected WbRecord instances, got float"):
        tg.array([1.0], dtype=WbRecord)


def test_matrix_value_prints_a_row_per_line():
    assert str(tg.mat22(1.0, 2.0, 3.0, 4.0)) == "[[1.0, 2.0],\n [3.0, 4.0]]"   # Warp's str


# ----------------------------------------------------- Tape.backward inside its with-block (Warp)

@tg.kernel
def _wb_square_sum(x: tg.array(dtype=tg.float64), loss: tg.array(dtype=tg.float64)):
    i = tg.tid()
    tg.atomic_add(loss, 0, x[i] * x[i])


def test_backward_inside_the_with_block_as_warp():
    x = tg.array([1.0, 2.0, 3.0], dtype=tg.float64, requires_grad=True)
    loss = tg.zeros(1, dtype=tg.float64, requires_grad=True)
    with tg.Tape() as tape:
        tg.launch(_wb_square_sum, dim=3, inputs=[x, loss])
        tape.backward(loss)
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0, 6.0])
        n = len(tape.launches)
        tg.launch(_wb_square_sum, dim=3, inputs=[x, loss])   # recording resumed after backward
        assert len(tape.launches) == n + 1
    # the backward pass recorded nothing: a second backward gives the same gradient again
    tape.zero()
    loss.grad.zero_()
    tape.backward(grads={loss: tg.array([1.0], dtype=tg.float64)})
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0, 12.0])   # two recorded launches


# ------------------------------------------------------------ item 7: more of Warp's builtins

@tg.kernel
def _wb_special(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64), out: tg.array2d(dtype=tg.float64)):
    i = tg.tid()
    out[i, 0] = tg.erf(x[i])
    out[i, 1] = tg.erfc(x[i])
    out[i, 2] = tg.erfinv(y[i])
    out[i, 3] = tg.copysign(x[i], -y[i])
    out[i, 4] = tg.frac(x[i] * 3.0)
    out[i, 5] = tg.rint(x[i] * 3.0)


def test_special_functions_match_references(device):
    import math
    x = np.array([-2.5, -0.7, 0.0, 0.3, 1.9, 2.5 / 3.0])
    y = np.array([-0.999, -0.5, 0.0, 0.25, 0.9, 0.999999])
    out = tg.zeros((6, 6), dtype=tg.float64, device=device)
    tg.launch(_wb_special, dim=6, inputs=[tg.array(x, dtype=tg.float64, device=device),
                                          tg.array(y, dtype=tg.float64, device=device), out], device=device)
    o = out.numpy()
    np.testing.assert_allclose(o[:, 0], [math.erf(v) for v in x], rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(o[:, 1], [math.erfc(v) for v in x], rtol=1e-14)
    np.testing.assert_allclose([math.erf(v) for v in o[:, 2]], y, rtol=1e-14, atol=1e-15)   # erf(erfinv(y)) = y
    np.testing.assert_array_equal(o[:, 3], np.copysign(x, -y))
    np.testing.assert_allclose(o[:, 4], x * 3.0 - np.trunc(x * 3.0), rtol=1e-15, atol=1e-15)
    np.testing.assert_array_equal(o[:, 5], np.rint(x * 3.0))     # 2.5 -> 2 (halfway to even)
    # the same functions in Python scope
    assert tg.erf(0.5) == math.erf(0.5) and abs(math.erf(tg.erfinv(0.3)) - 0.3) < 1e-15
    assert tg.copysign(2.0, -0.0) == -2.0 and tg.rint(2.5) == 2.0 and tg.frac(-1.25) == -0.25


@tg.kernel
def _wb_vec_builtins(v: tg.array(dtype=tg.vec3d), w: tg.array(dtype=tg.vec3d), cr: tg.array(dtype=tg.vec3d),
                     idx: tg.array2d(dtype=tg.uint32)):
    i = tg.tid()
    cr[i] = tg.skew(v[i]) * w[i]
    idx[i, 0] = tg.argmin(v[i])
    idx[i, 1] = tg.argmax(v[i])


def test_skew_argmin_argmax(device):
    rng = np.random.default_rng(0)
    v, w = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    v[2] = [np.nan, 1.0, -1.0]   # NaNs skipped
    cr = tg.zeros(5, dtype=tg.vec3d, device=device)
    idx = tg.zeros((5, 2), dtype=tg.uint32, device=device)
    tg.launch(_wb_vec_builtins, dim=5, inputs=[tg.array(v, dtype=tg.vec3d, device=device),
                                               tg.array(w, dtype=tg.vec3d, device=device), cr, idx], device=device)
    ok = [0, 1, 3, 4]
    np.testing.assert_allclose(cr.numpy()[ok], np.cross(v, w)[ok], rtol=1e-14)
    np.testing.assert_array_equal(idx.numpy()[:, 0], np.nanargmin(v, axis=1))
    np.testing.assert_array_equal(idx.numpy()[:, 1], np.nanargmax(v, axis=1))
    assert tg.skew(tg.vec3d(1.0, 2.0, 3.0)).tolist() == [[0, -3, 2], [3, 0, -1], [-2, 1, 0]]
    assert tg.argmax(tg.vec3(1.0, 5.0, 2.0)) == 1 and tg.argmin(tg.vec3(np.nan, 5.0, 2.0)) == 2


# ------------------------------------------------------------ interop details Warp's tests pin

def _wb_staged(a: tg.array(dtype=float), b: tg.array(dtype=float)):
    pass


def test_jax_names_warp_tests_use():
    pytest.importorskip("jax")
    assert [m.name for m in tg.JaxModulePreloadMode] == ["NONE", "CURRENT_DEVICE", "ALL_DEVICES"]
    assert "JaxModulePreloadMode" not in tg.__all__ and "JaxModulePreloadMode" in dir(tg)
    c = tg.jax_callable(_wb_staged, stage_in_argnames=["a"], stage_out_argnames=["b"])
    assert c.stage_in_argnames == {"a"} and c.stage_out_argnames == {"b"}
    plain = tg.jax_callable(_wb_staged, module_preload_mode=tg.JaxModulePreloadMode.NONE)
    assert plain.stage_in_argnames is None and plain.stage_out_argnames is None


def test_value_errors_are_warps():
    v = tg.vec3i(1, 2, 3)
    with pytest.raises(KeyError, match="Invalid key 1.5, expected int or slice"):
        v[1.5]
    with pytest.raises(KeyError, match="Invalid key None, expected int or slice"):
        v[None]                         # Warp's KeyError; a None inside a tuple (numpy's new axis) passes
    assert v[None, :].shape == (1, 3) and np.stack([v, v]).shape == (2, 3)
    with pytest.raises(TypeError, match="Expected to assign a `int32` value but got `str` instead"):
        v[0] = "123.0"
    with pytest.raises(TypeError, match="a sequence of `int32` values but got `vec3i` instead"):
        v[:1] = (v,)
    with pytest.raises(ValueError, match="Can only assign sequence of same size"):
        v[:1] = (1, 2)
    with pytest.raises(ValueError, match="vector constructor, expected 3 elements, got 2"):
        tg.vec3(1, 2)
    with pytest.raises(TypeError, match=r"expected row of length 2, got \(1, 2, 3\)"):
        tg.mat22((1, 2, 3), (3, 4, 5))
    m = tg.mat22(1, 2, 3, 4)
    with pytest.raises(KeyError, match="expected one or two indices, got 3"):
        m[0, 1, 2]
    with pytest.raises(IndexError, match="Invalid row index"):
        m.set_row(2, (0, 0))
    # numpy's own helpers still index values with masks
    w = tg.vec3(1.0, np.nan, 3.0)
    np.testing.assert_array_equal(w, [1.0, np.nan, 3.0])
    assert np.allclose(w, [1.0, np.nan, 3.0], equal_nan=True)


def _wb_no_params():
    return


def test_kernel_hints_and_entry_point_abi():
    @tg.kernel(module="unique", grid_stride=True, cuda_max_registers=64, enable_cuda_smem_spilling=True,
               cluster_dim=(2, 1, 1))
    def hinted(a: tg.array(dtype=float)):
        a[tg.tid()] = 1.0

    assert hinted.options == {"grid_stride": True, "cuda_max_registers": 64, "enable_cuda_smem_spilling": True,
                              "cluster_dim": (2, 1, 1)}
    a = tg.zeros(3, dtype=float)
    tg.launch(hinted, dim=3, inputs=[a])
    assert a.numpy().tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="cannot be specified together"):
        tg.kernel(cuda_max_registers=32, launch_bounds=128)
    with pytest.raises(ValueError, match="must be 'warp' or 'external_constant_params'"):
        tg.kernel(enable_backward=False, entry_point_abi="external")
    with pytest.raises(ValueError, match="requires enable_backward=False"):
        tg.kernel(entry_point_abi="external_constant_params")
    ext = tg.kernel(enable_backward=False, entry_point_abi="external_constant_params")(_wb_no_params)
    assert ext.options == {"enable_backward": False, "entry_point_abi": "external_constant_params"}
    with pytest.raises(TypeError, match="name must be a str"):
        tg.kernel(name=3)


@tg.kernel
def _wb_typed_quats(inp: tg.array(dtype=tg.float64), qh: tg.array(dtype=tg.quath), qd: tg.array(dtype=tg.quatd),
                    td: tg.array(dtype=tg.transformd)):
    q = tg.types.quaternion(inp[0], inp[1], inp[2], inp[3])       # dtype from the components
    qd[0] = q
    qh[0] = tg.types.quaternion(q, dtype=tg.float16)             # a conversion
    td[0] = tg.types.transformation(tg.vec3d(1.0, 2.0, 3.0), q, dtype=tg.float64)


def test_quaternion_and_transformation_inside_kernels():
    vals = [0.125, 0.25, 0.5, 0.75]
    qh, qd, td = tg.zeros(1, dtype=tg.quath), tg.zeros(1, dtype=tg.quatd), tg.zeros(1, dtype=tg.transformd)
    tg.launch(_wb_typed_quats, dim=1, inputs=[tg.array(vals, dtype=tg.float64), qh, qd, td])
    assert qd.numpy()[0].tolist() == vals and qh.numpy()[0].tolist() == vals
    assert td.numpy()[0].tolist() == [1.0, 2.0, 3.0] + vals


@tg.kernel
def _wb_quat_parts(v: tg.array(dtype=tg.vec3d), w: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.quatd)):
    i = tg.tid()
    out[i] = tg.quatd(v[i], w[i])        # Warp's quaternion from its vector and scalar parts


def test_quaternion_from_vector_and_scalar_parts():
    out = tg.zeros(1, dtype=tg.quatd)
    tg.launch(_wb_quat_parts, dim=1, inputs=[tg.array([[1.0, 2.0, 3.0]], dtype=tg.vec3d),
                                              tg.array([4.0], dtype=tg.float64), out])
    assert out.numpy()[0].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert tg.quat(tg.vec3(1.0, 2.0, 3.0), 4.0).tolist() == [1.0, 2.0, 3.0, 4.0]   # Python scope too


def test_quaternion_builtins_in_python_scope():
    assert repr(tg.quat_identity()) == "quatf([0.0, 0.0, 0.0, 1.0])"
    assert type(tg.quat_identity(dtype=tg.float64)).__name__ == "quatd"
    assert tg.quat_inverse(tg.quatd(1.0, 2.0, 3.0, 4.0)).tolist() == [-1.0, -2.0, -3.0, 4.0]
    h = np.sqrt(0.5)
    r = tg.quat_rotate(tg.quatd(0.0, 0.0, h, h), tg.vec3d(1.0, 0.0, 0.0))     # 90 degrees about z
    assert type(r).__name__ == "vec3d"
    np.testing.assert_allclose(r, [0.0, 1.0, 0.0], atol=1e-15)


@tg.kernel
def _wb_erf_all(x: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.float64)):
    i = tg.tid()
    if i == 0:
        out[i] = tg.erf(x[i])
    elif i == 1:
        out[i] = tg.erfc(x[i])
    elif i == 2:
        out[i] = tg.erfinv(x[i])
    else:
        out[i] = tg.erfcinv(x[i])


def test_error_functions_and_their_gradients_at_one_point(device):
    # Warp's test point (0.123): values and derivatives from the closed forms, float64
    import math
    x = tg.full(4, 0.123, dtype=tg.float64, requires_grad=True, device=device)
    out = tg.zeros(4, dtype=tg.float64, requires_grad=True, device=device)
    with tg.Tape() as tape:
        tg.launch(_wb_erf_all, dim=4, inputs=[x, out], device=device)
    out.grad = tg.ones_like(out)
    tape.backward()
    yi, yc = tg.erfinv(0.123), tg.erfcinv(0.123)
    assert abs(math.erfc(yc) - 0.123) < 1e-15
    np.testing.assert_allclose(out.numpy(), [math.erf(0.123), math.erfc(0.123), yi, yc], rtol=1e-13)
    d = 2.0 / math.sqrt(math.pi) * math.exp(-0.123 ** 2)
    np.testing.assert_allclose(x.grad.numpy(), [d, -d, 1.0 / (2.0 / math.sqrt(math.pi) * math.exp(-yi * yi)),
                                                -1.0 / (2.0 / math.sqrt(math.pi) * math.exp(-yc * yc))], rtol=1e-12)


@tg.kernel
def _wb_norms(vs: tg.array(dtype=tg.vec3d), out: tg.array2d(dtype=tg.float64), sn: tg.array(dtype=tg.vec3d)):
    i = tg.tid()
    out[i, 0] = tg.norm_l1(vs[i])
    out[i, 1] = tg.norm_l2(vs[i])
    out[i, 2] = tg.norm_huber(vs[i])
    out[i, 3] = tg.norm_pseudo_huber(vs[i])
    out[i, 4] = tg.norm_huber(vs[i], 2.0)
    sn[i] = tg.smooth_normalize(vs[i], 0.5)


def test_vector_norms_match_their_definitions(device):
    v = np.array([[-2.0, -1.0, -3.0], [0.3, 0.2, -0.1], [0.0, 0.0, 0.0]])
    out = tg.zeros((3, 5), dtype=tg.float64, device=device)
    sn = tg.zeros(3, dtype=tg.vec3d, device=device)
    tg.launch(_wb_norms, dim=3, inputs=[tg.array(v, dtype=tg.vec3d, device=device), out, sn], device=device)
    n = np.linalg.norm(v, axis=1)

    def huber(x, d):
        return np.where(x <= d, 0.5 * x * x, d * (x - 0.5 * d))

    ref = np.stack([np.abs(v).sum(1), n, huber(n, 1.0), np.sqrt(1.0 + n * n), huber(n, 2.0)], axis=1)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-14)
    np.testing.assert_allclose(sn.numpy(), v / (0.5 * np.sqrt(1.0 + n * n / 0.25))[:, None], rtol=1e-14)
    assert tg.norm_l1(tg.vec3(1.0, -2.0, 3.0)) == 6.0
    assert type(tg.smooth_normalize(tg.vec3(1.0, 0, 0))).__name__ == "vec3f"


@tg.kernel
def _wb_mat_points(m: tg.array(dtype=tg.mat44d), p: tg.array(dtype=tg.vec3d), a: tg.array(dtype=tg.vec3d),
                   b: tg.array(dtype=tg.vec3d)):
    i = tg.tid()
    a[i] = tg.transform_point(m[i], p[i])
    b[i] = tg.transform_vector(m[i], p[i])


def test_transform_point_and_vector_of_a_4x4_matrix(device):
    rng = np.random.default_rng(5)
    m, p = rng.normal(size=(4, 4, 4)), rng.normal(size=(4, 3))
    a, b = tg.zeros(4, dtype=tg.vec3d, device=device), tg.zeros(4, dtype=tg.vec3d, device=device)
    tg.launch(_wb_mat_points, dim=4, inputs=[tg.array(m, dtype=tg.mat44d, device=device),
                                             tg.array(p, dtype=tg.vec3d, device=device), a, b], device=device)
    hom = np.concatenate([p, np.ones((4, 1))], axis=1)
    np.testing.assert_allclose(a.numpy(), np.einsum("nij,nj->ni", m, hom)[:, :3], rtol=1e-13)   # no divide
    np.testing.assert_allclose(b.numpy(), np.einsum("nij,nj->ni", m[:, :, :3], p)[:, :3], rtol=1e-13)


@tg.kernel
def _wb_typed_identity(q: tg.array(dtype=tg.quath), t: tg.array(dtype=tg.transformd)):
    q[0] = tg.quat_identity(dtype=tg.float16)
    t[0] = tg.transform_identity(dtype=tg.float64)


def test_typed_identities_inside_kernels(device):
    q, t = tg.zeros(1, dtype=tg.quath, device=device), tg.zeros(1, dtype=tg.transformd, device=device)
    tg.launch(_wb_typed_identity, dim=1, inputs=[q, t], device=device)
    assert q.numpy()[0].tolist() == [0, 0, 0, 1] and t.numpy()[0].tolist() == [0, 0, 0, 0, 0, 0, 1]


_M23D, _M32D = tg.matrix((2, 3), tg.float64), tg.matrix((3, 2), tg.float64)


@tg.kernel
def _wb_from_vectors(a: tg.array(dtype=tg.vec3d), b: tg.array(dtype=tg.vec3d), r: tg.array(dtype=_M23D),
                     c: tg.array(dtype=_M32D)):
    i = tg.tid()
    r[i] = tg.matrix_from_rows(a[i], b[i])
    c[i] = tg.matrix_from_cols(a[i], b[i])


def test_matrix_from_rows_and_cols(device):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    r = tg.zeros(3, dtype=tg.matrix((2, 3), tg.float64), device=device)
    c = tg.zeros(3, dtype=tg.matrix((3, 2), tg.float64), device=device)
    tg.launch(_wb_from_vectors, dim=3, inputs=[tg.array(a, dtype=tg.vec3d, device=device),
                                               tg.array(b, dtype=tg.vec3d, device=device), r, c], device=device)
    np.testing.assert_array_equal(r.numpy(), np.stack([a, b], axis=1))
    np.testing.assert_array_equal(c.numpy(), np.stack([a, b], axis=2))
    assert tg.matrix_from_cols(tg.vec2(1.0, 2.0), tg.vec2(3.0, 4.0)).tolist() == [[1.0, 3.0], [2.0, 4.0]]


@tg.kernel
def _wb_nonzero(x: tg.array(dtype=tg.float16), y: tg.array(dtype=tg.int32), fx: tg.array(dtype=tg.float16),
                fy: tg.array(dtype=tg.int32)):
    i = tg.tid()
    fx[i] = tg.nonzero(x[i])
    fy[i] = tg.nonzero(y[i])


def test_nonzero(device):
    x, y = np.array([-2.0, 0.0, -0.0, 0.5], np.float16), np.array([-2, 0, 0, 7], np.int32)
    fx, fy = tg.zeros(4, dtype=tg.float16, device=device), tg.zeros(4, dtype=tg.int32, device=device)
    tg.launch(_wb_nonzero, dim=4, inputs=[tg.array(x, device=device), tg.array(y, device=device), fx, fy],
              device=device)
    assert fx.numpy().tolist() == [1.0, 0.0, 0.0, 1.0] and fy.numpy().tolist() == [1, 0, 0, 1]
    assert tg.nonzero(-3) == 1 and tg.nonzero(0.0) == 0.0


@tg.kernel
def _wb_expect_near(x: tg.array(dtype=tg.float32), v: tg.array(dtype=tg.vec3)):
    tg.expect_near(x[0], 1.0005, tolerance=0.01)          # within: silent
    tg.expect_near(x[0], 1.5)                             # default tolerance 1e-6: prints
    tg.expect_near(v[0], tg.vec3(1.0, 2.0, 3.5), 0.25)    # a component off by 0.5: prints


def test_expect_near_prints_only_when_far(capfd):
    tg.launch(_wb_expect_near, dim=1, inputs=[tg.array([1.0], dtype=tg.float32),
                                              tg.array([[1.0, 2.0, 3.0]], dtype=tg.vec3)])
    tg.synchronize()
    out = capfd.readouterr().out
    assert out.count("expect_near() failed") == 2 and "Tolerance: 0.25" in out


@tg.kernel
def _wb_anon_transform(inp: tg.array(dtype=tg.float64), out: tg.array(dtype=tg.transformd)):
    out[0] = tg.transformation(tg.vector(inp[0], inp[1], inp[2]), tg.quaternion(inp[3], inp[4], inp[5], inp[6]))


def test_anonymous_transform_inside_kernels():
    vals = [1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 1.0]
    out = tg.zeros(1, dtype=tg.transformd)
    tg.launch(_wb_anon_transform, dim=1, inputs=[tg.array(vals, dtype=tg.float64), out])
    assert out.numpy()[0].tolist() == vals
