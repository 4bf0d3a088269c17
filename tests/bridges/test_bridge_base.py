"""The framework-neutral bridge base: dtype maps from the table's framework columns, device maps,
stream-handle helpers, and the kernel signature every op wrapper uses (bridges._base, bridges._op)."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad import types as T
from tapegrad.bridges._base import DeviceMap, DtypeMap, cai_typestr
from tapegrad.bridges._op import KernelSignature, Param, config_key, dims_of

SCALARS = list(T.SCALARS.values())


# ------------------------------------------------------------------------------ dtype maps

@pytest.mark.torch
@pytest.mark.parametrize("s", SCALARS, ids=lambda s: s.name)
def test_torch_column_round_trips(s):
    import torch
    m = DtypeMap("torch", torch)
    td = m.to_framework(s)
    assert isinstance(td, torch.dtype) and td is getattr(torch, s.torch_name)
    assert m.from_framework(td) is s


@pytest.mark.jax
@pytest.mark.parametrize("s", SCALARS, ids=lambda s: s.name)
def test_jax_column_round_trips_with_numpy_dtypes(s):
    import jax.numpy as jnp

    def normalize(x):
        try:
            return np.dtype(x)
        except TypeError:
            return None

    m = DtypeMap("jax", jnp, normalize=normalize)
    jd = m.to_framework(s)
    assert m.from_framework(jd) is s
    assert m.from_framework(np.dtype(jd)) is s            # jax arrays report numpy dtypes
    assert np.dtype(jd) == s.np_dtype


@pytest.mark.paddle
@pytest.mark.parametrize("s", [s for s in SCALARS if s.paddle_name], ids=lambda s: s.name)
def test_paddle_column_round_trips(s):
    import paddle
    m = DtypeMap("paddle", paddle)
    assert m.from_framework(m.to_framework(s)) is s


def test_dtype_map_errors_and_components():
    class FakeModule:
        float32 = "f32"
        float64 = "f64"

    m = DtypeMap("fake", FakeModule, column="torch_name")
    assert m.to_framework(tg.float32) == "f32" and m.to_framework(float) == "f32"
    assert m.to_framework(tg.vec3d) == "f64" and m.to_framework(tg.mat22) == "f32"
    assert m.from_framework("f64") is tg.float64 and m.lookup("nope") is None and m.lookup([]) is None
    with pytest.raises(TypeError, match="dtype_to_fake: tapegrad.int8 has no fake dtype"):
        m.to_framework(tg.int8)
    with pytest.raises(TypeError, match="dtype_from_fake: fake dtype 'c64' has no tapegrad equivalent"):
        m.from_framework("c64")

    @tg.struct
    class S:
        x: float

    with pytest.raises(TypeError, match="struct"):
        m.to_framework(S)
    with pytest.raises(TypeError, match="dtype_to_fake"):
        m.to_framework("not a dtype")


def test_bfloat16_travels_as_raw_bits_through_cai():
    assert cai_typestr(tg.bfloat16) == "<u2" and cai_typestr(tg.vec3) == "<f4"


# --------------------------------------------------------------------------------- devices

def _parse(x):
    if not isinstance(x, str):
        raise TypeError(f"device_from_fake: expected a str, got {type(x).__name__}")
    kind, _, idx = x.partition(":")
    return {"gpu": "cuda"}.get(kind, kind), (int(idx) if idx else None), x


def _no_cuda():
    raise RuntimeError("fake sees no CUDA device")


def test_device_map():
    m = DeviceMap("fake", _parse, _no_cuda, "gpu")
    cpu = tg.get_device("cpu")
    assert m.from_framework("cpu") is cpu and m.from_framework("cpu") is cpu    # cached
    assert m.to_framework("cpu") == "cpu" and m.to_framework(cpu) == "cpu"
    with pytest.raises(RuntimeError, match="device_from_fake: unsupported fake device 'xpu:0'"):
        m.from_framework("xpu:0")
    with pytest.raises(TypeError, match="expected a str"):
        m.from_framework(3)
    with pytest.raises(RuntimeError, match="no CUDA"):
        m.from_framework("gpu")
    if not tg.is_cuda_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            m.from_framework("gpu:0")


# ------------------------------------------------------------------------ kernel signature

@tg.kernel
def _axpy(a: float, x: tg.array(dtype=float), y: tg.array(dtype=float), n: tg.array(dtype=int),
          acc: tg.array(dtype=float), out: tg.array(dtype=float)):
    i = tg.tid()
    acc[i] = acc[i] + x[i]
    out[i] = a * x[i] + y[i] + float(n[i])


@tg.kernel
def _vecs(p: tg.array(dtype=tg.vec3), m: tg.array2d(dtype=tg.mat22), out: tg.array(dtype=tg.vec2)):
    i = tg.tid()
    out[i] = tg.vec2(p[i][0], m[i, 0][0, 1])


class _T:
    """Anything with a shape (the signature only reads .shape)."""

    def __init__(self, *shape):
        self.shape = shape


def test_signature_split_in_out_and_differentiable():
    sig = KernelSignature.of(_axpy, 2, in_out_argnames=("acc",), who="w")
    assert [p.name for p in sig.inputs] == ["a", "x", "y", "n"]
    assert [p.name for p in sig.outputs] == ["acc", "out"]
    assert [p.name for p in sig.in_out] == ["acc"] and [p.name for p in sig.pure_outputs] == ["out"]
    assert sig.array_inputs == (1, 2, 3) and sig.differentiable == (1, 2) and sig.first_array() == 1
    assert sig.kernel_name == "_axpy"
    args = (2.0, _T(5), _T(5), _T(5), _T(6))    # the inputs, then the in-out 'acc' (it keeps its shape)
    assert sig.grid(args) == (5,) and sig.output_shapes(args) == [(6,), (5,)]
    assert isinstance(sig.inputs[0], Param) and not sig.inputs[0].is_array


def test_signature_dims_specs():
    sig = KernelSignature.of(_axpy, 2, launch_dims=lambda a, x, y, n: (x.shape[0] - 1,),
                             output_dims={"acc": None, "out": 7}, who="w")
    args = (2.0, _T(5), _T(5), _T(5))
    assert sig.grid(args) == (4,) and sig.output_shapes(args) == [(4,), (7,)]
    left_out = KernelSignature.of(_axpy, 2, output_dims={"out": 7}, who="w")   # a dict names every output
    with pytest.raises(ValueError, match=r"w '.*_axpy': output_dims has no entry for output 'acc'"):
        left_out.output_shapes(args)
    sig = KernelSignature.of(_vecs, 1, who="w")
    assert sig.grid((_T(6, 3), _T(6, 2, 2, 2))) == (6,)
    assert sig.output_shapes((_T(6, 3), _T(6, 2, 2, 2))) == [(6, 2)]
    assert dims_of(3, (), "x", "w") == (3,) and dims_of([2, 3], (), "x", "w") == (2, 3)
    assert config_key(1, {"b": [1, 2]}, None) == config_key(1, {"b": (1, 2)}, None)
    assert config_key(1, {"b": {}.keys}) is not None and config_key([[]], set()) is None


def test_signature_errors_name_the_kernel():
    with pytest.raises(ValueError, match=r"w: num_outputs must be 1..6 for kernel '.*_axpy', got 0"):
        KernelSignature.of(_axpy, 0, who="w")
    with pytest.raises(TypeError, match="output parameter 'n' .* must be an array"):
        KernelSignature.of(_axpy, 6, who="w") if False else KernelSignature.of(_scalar_out, 1, who="w")
    with pytest.raises(ValueError, match=r"output_dims names \['nope'\]"):
        KernelSignature.of(_axpy, 2, output_dims={"nope": 3}, who="w")
    with pytest.raises(ValueError, match="in_out_argnames names 'x', which is an input parameter"):
        KernelSignature.of(_axpy, 2, in_out_argnames=("x",), who="w")
    with pytest.raises(ValueError, match="in_out_argnames names 'zz', which is no parameter"):
        KernelSignature.of(_axpy, 2, in_out_argnames=("zz",), who="w")
    with pytest.raises(ValueError, match="must be the first outputs"):
        KernelSignature.of(_axpy, 2, in_out_argnames=("out",), who="w")
    with pytest.raises(TypeError, match="launch_dims/output_dims must be an int or a tuple"):
        KernelSignature.of(_axpy, 2, output_dims="big", who="w")
    with pytest.raises(TypeError, match="no array input"):
        KernelSignature.of(_no_arrays, 1, who="w").first_array()


@tg.kernel
def _scalar_out(x: tg.array(dtype=float), n: int):
    pass


@tg.kernel
def _no_arrays(a: float, out: tg.array(dtype=float)):
    pass


def test_signature_argument_checks():
    sig = KernelSignature.of(_vecs, 1, who="w")
    p, m = sig.inputs
    sig.check_count((1, 2), "op")
    with pytest.raises(TypeError, match=r"op: expected 2 arguments \(p, m\), got 1"):
        sig.check_count((1,), "op")
    sig.check_array(p, tg.float32, "f32", (4, 3), "op")
    sig.check_array(m, tg.float32, "f32", (4, 5, 2, 2), "op")
    with pytest.raises(TypeError, match="op argument 'p': dtype c64 has no tapegrad equivalent"):
        sig.check_array(p, None, "c64", (4, 3), "op")
    with pytest.raises(tg.BridgeTypeError, match="op argument .p.: cannot view a tensor of f64 as tapegrad"):
        sig.check_array(p, tg.float64, "f64", (4, 3), "op")
    with pytest.raises(TypeError, match="op argument 'm': expected a 4-D tensor .* got 3-D of shape"):
        sig.check_array(m, tg.float32, "f32", (4, 2, 2), "op")
    with pytest.raises(RuntimeError, match="op argument 'p': dtype tapegrad.vec3 needs trailing dimensions"):
        sig.check_array(p, tg.float32, "f32", (4, 4), "op")
    q = KernelSignature.of(_axpy, 2, who="w").inputs[3]     # int32 array: uint32 data aliases
    KernelSignature.of(_axpy, 2, who="w").check_array(q, tg.uint32, "u32", (3,), "op")
