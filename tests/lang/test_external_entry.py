"""Kernels with Warp's ``entry_point_abi="external_constant_params"``: a CUDA entry for an outside
launcher (OptiX, a driver-API cuLaunchKernel) that reads its one struct argument from the
module's ``__constant__`` bytes ``params``.

The CPU checks cover the generated unit and every refusal; ``nvcc`` (when installed) compiles the
unit to a cubin and the symbols an outside runtime looks up are checked in it; the CUDA test
loads the kernel, fills ``params`` through ``cuModuleGetGlobal`` and launches the entry with
``cuLaunchKernel`` itself.
"""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import abi


@tg.struct
class ExtParams:
    scale: tg.float32
    out: tg.array(dtype=tg.float32)


@tg.struct
class OtherParams:
    n: tg.int32


@tg.kernel(module="unique", module_options={"strip_hash": True}, name="__raygen__ext_demo", enable_backward=False,
           entry_point_abi="external_constant_params")
def ext_demo(params: ExtParams):
    # every CUDA thread of the outside launcher's grid adds once: the total counts the threads
    tg.atomic_add(params.out, 0, params.scale * 2.0)


@tg.kernel(module="unique", enable_backward=False, entry_point_abi="external_constant_params")
def ext_hashed(p: OtherParams):
    _ = p.n


def _generated(k) -> str:
    src = k.source()
    return src[src.index("// ---- generated"):]


def test_entry_reads_its_struct_from_constant_params():
    name = ext_demo.get_mangled_name()
    assert name == "__raygen__ext_demo"            # strip_hash: the key itself
    src = _generated(ext_demo)
    assert f'extern "C" __global__ void {name}() {{' in src
    assert ('extern "C" {\n__constant__ __align__(alignof(ExtParams)) unsigned char '
            f'{abi.EXTERNAL_PARAMS_SYMBOL}[sizeof(ExtParams)];\n}}') in src
    assert "const ExtParams var_params = *reinterpret_cast<const ExtParams*>(params);" in src
    # no tapegrad entries: no bounds argument, no CPU entry point, no adjoint
    for absent in ("_cuda_forward", "_cpu_forward", "_cuda_backward", "_adj(", "const_cast"):
        assert absent not in src, absent


def test_mangled_name_keeps_the_hash_without_strip_hash():
    assert ext_hashed.get_mangled_name() == ext_hashed.symbol
    assert f'extern "C" __global__ void {ext_hashed.symbol}()' in _generated(ext_hashed)
    assert ext_hashed.entry_point_abi == "external_constant_params"
    assert ext_demo.options["entry_point_abi"] == "external_constant_params"


@pytest.mark.parametrize("dim", [0, 1, (2, 3)])
def test_launch_refuses_external_entries(dim):
    with pytest.raises(RuntimeError, match="cannot be launched with wp.launch"):
        tg.launch(ext_demo, dim=dim, inputs=[ExtParams()])
    with pytest.raises(RuntimeError, match="cannot be launched with wp.launch"):
        tg.launch(ext_demo, dim=dim, inputs=[ExtParams()], record_cmd=True)


def test_cpu_backend_refuses_external_entries():
    with pytest.raises(tg.WarpCodegenError, match="not supported by the CPU backend"):
        ext_demo.module.load("cpu")


def test_decorator_checks():
    with pytest.raises(ValueError, match="requires enable_backward=False"):
        tg.kernel(entry_point_abi="external_constant_params")
    with pytest.raises(ValueError, match="must be 'warp' or 'external_constant_params'"):
        tg.kernel(enable_backward=False, entry_point_abi="optix")
    # Kernel(options=...) too (it took any value: the kernel built, and its launches were refused)
    with pytest.raises(ValueError, match=r"'entry_point_abi' expects one of \['warp', 'external_constant_params'\], "
                                         r"got 'optix'"):
        tg.Kernel(_no_params, options={"entry_point_abi": "optix", "enable_backward": False})


def _no_params():
    return


def _scalar_param(value: tg.uint32):
    _ = value


def _two_params(p: OtherParams, q: OtherParams):
    _ = p.n + q.n


def _uses_tid(p: OtherParams):
    _ = tg.tid()


@pytest.mark.parametrize("fn", [_no_params, _scalar_param, _two_params])
def test_exactly_one_struct_argument(fn):
    k = tg.kernel(fn, module="unique", enable_backward=False, entry_point_abi="external_constant_params")
    with pytest.raises(tg.WarpCodegenTypeError, match="exactly one Warp struct argument"):
        k.source()


def test_tid_is_refused():
    k = tg.kernel(_uses_tid, module="unique", enable_backward=False, entry_point_abi="external_constant_params")
    with pytest.raises(tg.WarpCodegenError, match="cannot use wp.tid"):
        k.source()


def test_one_params_type_per_unit():
    from tapegrad.lang import emit
    seen: set = set()
    parts = ext_demo.cpp_parts(seen) + ext_demo.cpp_parts(seen)   # the same type twice: one declaration
    assert sum(p.count(f"unsigned char {abi.EXTERNAL_PARAMS_SYMBOL}[") for p in parts) == 1
    with pytest.raises(tg.WarpCodegenTypeError, match="already declared params with ExtParams"):
        ext_hashed.cpp_parts(seen)
    assert emit.ExternalEntry("x").name == "x"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (compiles the CUDA unit, no GPU needed)")
def test_nvcc_compiles_the_unit_with_the_symbols(tmp_path):
    cu = tmp_path / "ext.cu"
    cu.write_text(ext_demo.source())
    out = tmp_path / "ext.cubin"
    proc = subprocess.run(["nvcc", "-std=c++17", "-w", "-arch=sm_90", "-cubin", "-o", str(out), str(cu)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = out.read_bytes()
    assert b"__raygen__ext_demo\x00" in data and b"params\x00" in data


@pytest.mark.cuda
def test_driver_launch_of_the_external_entry():
    from cupy.cuda import driver, runtime
    dev = tg.get_device("cuda:0")
    out = tg.zeros(1, dtype=tg.float32, device=dev)
    m = ext_demo.module.load(dev)[ext_demo.key]
    assert m.entry == "__raygen__ext_demo"
    raw = ExtParams(scale=1.5, out=out).__ctype__()
    tg.synchronize()   # the zero fill ran on tapegrad's stream; the launch below uses the legacy one
    with dev.context_guard():
        ptr = driver.moduleGetGlobal(m.handle, abi.EXTERNAL_PARAMS_SYMBOL)
        runtime.memcpy(ptr, ctypes.addressof(raw), ctypes.sizeof(raw), runtime.memcpyHostToDevice)
        blocks, threads = 3, 64
        driver.launchKernel(m.function, blocks, 1, 1, threads, 1, 1, 0, 0, 0, 0)
        runtime.deviceSynchronize()
    np.testing.assert_allclose(out.numpy(), [blocks * threads * 3.0], rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="outside runtime"):
        m.launch(abi.LaunchBounds(), None)


def test_force_load_skips_external_entries_on_the_cpu():
    # the module-level external kernels of this file are live: a CPU force_load must not trip on them
    assert not ext_demo.builds_on(tg.get_device("cpu"))
    tg.force_load(device="cpu", modules=[ext_demo.module])
    tg.load_module(ext_demo.module, device="cpu")
    with pytest.raises(tg.WarpCodegenError, match="CPU backend"):
        ext_demo.module.load("cpu")
