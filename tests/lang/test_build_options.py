"""A module's ``extra_build_options`` (``tg.ModuleBuildOptions``) in real builds, and the module
queries Warp code uses: ``module.resolve_options`` and ``Module.hash_module``.

The CPU tests compile: a ``@func_native`` snippet calls a function declared in a header that
only the preamble includes, from a folder only ``extra_cpu_include_dirs`` names, and the kernel's
results (against float64 NumPy) show which preamble the build used. CUDA twins do the same on a
GPU; ``nvcc`` (when installed) compiles a unit with a CUDA preamble and include folder.
"""
import shutil
import subprocess

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.lang import direct
from tapegrad.lang.kernel import load_kernels


@tg.func_native("return addon_scale(x);")
def addon_call(x: float) -> float: ...


def _addon_kernel():
    @tg.kernel(module="unique", enable_backward=False)
    def addon_kernel(a: tg.array(dtype=float)):
        i = tg.tid()
        a[i] = addon_call(a[i])
    return addon_kernel


@pytest.fixture
def addon_dir(tmp_path):
    # ADDON_FACTOR comes from the preamble, so the header only works behind it
    (tmp_path / "addon.h").write_text("#pragma once\n"
                                      "static TG_FUNC float addon_scale(float x) { return ADDON_FACTOR * x; }\n")
    return tmp_path


def _opts(d, factor, target="cpu", deps=True):
    kw = {f"extra_{target}_include_dirs": [str(d)],
          f"extra_{target}_preamble": f'#define ADDON_FACTOR {factor}f\n#include "addon.h"'}
    if deps:
        kw["extra_build_dependencies"] = [str(d / "addon.h")]
    return tg.ModuleBuildOptions(**kw)


def _run(k, device="cpu"):
    x = np.linspace(-1.0, 2.0, 7)
    a = tg.array(x.astype(np.float32), device=device)
    tg.launch(k, dim=7, inputs=[a], device=device)
    return x, a.numpy().astype(np.float64)


def test_cpu_preamble_and_include_dirs_reach_the_compiler(addon_dir):
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0)
    x, got = _run(k)
    np.testing.assert_allclose(got, 3.0 * x, rtol=1e-6)
    # a new preamble is a new build (the in-process module, the native plan and the cache key)
    k.module.options["extra_build_options"] = _opts(addon_dir, -0.5)
    x, got = _run(k)
    np.testing.assert_allclose(got, -0.5 * x, rtol=1e-6)


def test_without_the_include_dir_the_build_fails(addon_dir):
    k = _addon_kernel()
    k.module.options["extra_build_options"] = tg.ModuleBuildOptions(
        extra_cpu_preamble='#define ADDON_FACTOR 2.0f\n#include "addon.h"')
    with pytest.raises(tg.CompileError):
        _run(k)


def test_preamble_sits_between_runtime_and_generated_code(addon_dir):
    @tg.kernel(module="unique", module_options={"extra_build_options": tg.ModuleBuildOptions(
        extra_cuda_preamble="#define CUDA_ONLY 1", extra_cpu_preamble="#define CPU_ONLY 1\n")})
    def placed(a: tg.array(dtype=float)):
        a[tg.tid()] = 1.0

    src = placed.source()
    runtime_end = src.index("// ---- runtime/array.h")
    generated = src.index("// ---- generated")
    cuda, cpu = src.index("#define CUDA_ONLY 1\n"), src.index("#define CPU_ONLY 1\n")
    assert runtime_end < src.index("#ifdef TG_CUDA\n#define CUDA_ONLY 1\n#else\n#define CPU_ONLY 1\n#endif") < generated
    assert runtime_end < cuda < cpu < generated


def _hash_with(k, opts):
    k.module.options["extra_build_options"] = opts
    return k.module.hash_module()


def test_hash_follows_preambles_include_dirs_and_dependencies(addon_dir, tmp_path_factory):
    k = _addon_kernel()
    base = _hash_with(k, None)
    assert _hash_with(k, tg.ModuleBuildOptions()) == base
    a = _hash_with(k, tg.ModuleBuildOptions(extra_cuda_preamble="#define P 1"))
    assert _hash_with(k, tg.ModuleBuildOptions(extra_cuda_preamble="#define P 1\n")) == a   # normalized newline
    assert _hash_with(k, tg.ModuleBuildOptions(extra_cuda_preamble="#define P 2")) not in (a, base)
    other = tmp_path_factory.mktemp("inc")
    cuda = _hash_with(k, tg.ModuleBuildOptions(extra_cuda_include_dirs=[str(other)]))
    cpu = _hash_with(k, tg.ModuleBuildOptions(extra_cpu_include_dirs=[str(other)]))
    assert len({base, cuda, cpu}) == 3
    # a dependency's contents: read when the options are (re)applied, as Warp's
    dep = _hash_with(k, _opts(addon_dir, 1.0))
    (addon_dir / "addon.h").write_text((addon_dir / "addon.h").read_text() + "// edited\n")
    assert k.module.hash_module() == dep
    assert _hash_with(k, _opts(addon_dir, 1.0)) != dep


def test_direct_cache_key_follows_build_inputs(addon_dir):
    k = _addon_kernel()
    plain = direct.key_of(k)
    k.module.options["extra_build_options"] = _opts(addon_dir, 1.0)
    with_opts = direct.key_of(k)
    assert plain is not None and with_opts is not None and plain != with_opts
    (addon_dir / "addon.h").write_text("// changed\n")
    k.module.options["extra_build_options"] = _opts(addon_dir, 1.0)
    assert direct.key_of(k) != with_opts


def test_resolve_options(addon_dir):
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 1.0)
    r = k.module.resolve_options(tg.config)
    assert r["mode"] == tg.config.mode and "extra_build_options" not in r
    assert r["extra_cpu_include_dirs"] == (str(addon_dir),) and r["extra_cuda_include_dirs"] == ()
    assert r["extra_cpu_preamble"].endswith('#include "addon.h"\n') and r["extra_cuda_preamble"] == ""
    (path, digest), = r["extra_build_dependencies"]
    assert path == str(addon_dir / "addon.h") and len(digest) == 64
    assert k.module.resolve_options(block_dim=64)["block_dim"] == 64
    k.module.options["mode"] = "debug"
    assert k.module.resolve_options()["mode"] == "debug"
    assert tg.get_module(k.module.name).resolve_options() == k.module.resolve_options()
    with pytest.raises(ValueError, match="block_dim"):
        k.module.resolve_options(block_dim=0)


def test_vanished_dependency_is_named(tmp_path):
    dep = tmp_path / "dep.h"
    dep.write_text("// x\n")
    k = _addon_kernel()
    opts = tg.ModuleBuildOptions(extra_build_dependencies=[str(dep)])
    dep.unlink()
    k.module.options["extra_build_options"] = opts
    with pytest.raises(ValueError, match="dep.h"):
        k.module.resolve_options()


def test_merged_keeps_first_paths_and_joins_preambles(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    x = tg.ModuleBuildOptions(extra_cpu_include_dirs=[str(a), str(b)], extra_cpu_preamble="#define X 1")
    y = tg.ModuleBuildOptions(extra_cpu_include_dirs=[str(b), str(a)], extra_cpu_preamble="#define Y 1")
    m = x.merged(y)
    assert m.extra_cpu_include_dirs == [str(a), str(b)]
    assert m.extra_cpu_preamble == "#define X 1\n#define Y 1"
    assert x.extra_cpu_preamble == "#define X 1"   # inputs unchanged
    with pytest.raises(TypeError, match="merged"):
        x.merged({"extra_cpu_preamble": ""})


def test_one_unit_needs_one_set_of_build_inputs(addon_dir):
    k1, k2 = _addon_kernel(), _addon_kernel()
    k1.module.options["extra_build_options"] = _opts(addon_dir, 1.0)
    with pytest.raises(ValueError, match="different extra_build_options"):
        load_kernels([k1, k2], tg.get_device("cpu"))


# ------------------------------------------------------------------------- Module.hash_module

def _struct_kernel(field_type):
    @tg.struct
    class HashedStruct:
        i: field_type

    @tg.kernel(module="hash_module_demo")
    def hashed_kernel(a: tg.array(dtype=HashedStruct)):
        _ = tg.tid()
    return hashed_kernel


def test_hash_module_is_a_content_hash():
    keep = [_struct_kernel(tg.int32)]                 # kept alive: its redefinition replaces it
    h0 = tg.get_module("hash_module_demo").hash_module()
    keep.append(_struct_kernel(tg.int32))             # same content, new objects, another line
    assert tg.get_module("hash_module_demo").hash_module() == h0
    keep.append(_struct_kernel(tg.float32))           # a field's type changed
    h2 = tg.get_module("hash_module_demo").hash_module()
    assert h2 != h0 and len(h2) == 32
    assert keep[-1].module.hash_module() == h2 and keep[-1].__module__ == __name__


# ------------------------------------------------------------------------------- CUDA twins

@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (compiles the CUDA unit, no GPU needed)")
def test_nvcc_compiles_a_unit_with_a_cuda_preamble(addon_dir, tmp_path):
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 2.0, target="cuda")
    build = tmp_path / "build"   # not the header's folder: "addon.h" is not found beside the unit
    build.mkdir()
    cu = build / "unit.cu"
    cu.write_text(k.source())
    out = build / "unit.cubin"
    cmd = ["nvcc", "-std=c++17", "-w", "-arch=sm_90", "-cubin", f"-I{addon_dir}", "-o", str(out), str(cu)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    bad = subprocess.run(cmd[:-4] + ["-o", str(out), str(cu)], capture_output=True, text=True)
    assert bad.returncode != 0 and "addon.h" in bad.stderr   # the folder is what finds the header


@pytest.mark.cuda
def test_cuda_preamble_and_include_dirs_reach_nvrtc(addon_dir):
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0, target="cuda")
    x, got = _run(k, "cuda:0")
    np.testing.assert_allclose(got, 3.0 * x, rtol=1e-6)
    k.module.options["extra_build_options"] = _opts(addon_dir, -0.5, target="cuda")
    x, got = _run(k, "cuda:0")
    np.testing.assert_allclose(got, -0.5 * x, rtol=1e-6)



_HEADER_SCRIPT = r"""
import sys, numpy as np, tapegrad as tg

@tg.func_native("return addon_scale(x);")
def addon_call(x: float) -> float: ...

@tg.kernel(enable_backward=False)
def addon_kernel(a: tg.array(dtype=float)):
    i = tg.tid()
    a[i] = addon_call(a[i])

d = sys.argv[1]
# the header is in an include folder and not a listed dependency
tg.set_module_options({"extra_build_options": tg.ModuleBuildOptions(
    extra_cpu_include_dirs=[d], extra_cpu_preamble='#include "addon.h"')})
a = tg.array(np.ones(5, np.float32), device="cpu")
tg.launch(addon_kernel, dim=5, inputs=[a], device="cpu")
print("factor", a.numpy()[0])
if len(sys.argv) > 2:     # edit the header in this process, re-apply the options, launch again
    open(d + "/addon.h", "w").write("static TG_FUNC float addon_scale(float x) { return %s * x; }\n" % sys.argv[2])
    tg.set_module_options({"extra_build_options": tg.ModuleBuildOptions(
        extra_cpu_include_dirs=[d], extra_cpu_preamble='#include "addon.h"')})
    a = tg.array(np.ones(5, np.float32), device="cpu")
    tg.launch(addon_kernel, dim=5, inputs=[a], device="cpu")
    print("factor", a.numpy()[0])
"""


def test_edited_header_in_an_include_folder_rebuilds(tmp_path):
    """A header the preamble includes from an include folder, not listed as a dependency: an
    edit reaches the next process's build (and the same process's after set_module_options),
    from the disk cache and the direct cache alike; an edit back finds the first binary again.
    The unit's text only names the folder: the binary built from the old header was loaded."""
    import os
    import sys
    inc = tmp_path / "inc"
    inc.mkdir()
    script = tmp_path / "header_user.py"
    script.write_text(_HEADER_SCRIPT)
    env = {**os.environ, "TAPEGRAD_CACHE": str(tmp_path / "cache")}

    def run(factor, *extra):
        (inc / "addon.h").write_text("static TG_FUNC float addon_scale(float x) { return %s * x; }\n" % factor)
        r = subprocess.run([sys.executable, str(script), str(inc), *extra], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        return [float(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("factor")]

    assert run("2.0f") == [2.0]
    assert run("2.0f") == [2.0]          # cached
    assert run("3.0f") == [3.0]          # fresh process, edited header: rebuilt
    assert run("2.0f") == [2.0]
    assert run("5.0f", "7.0f") == [5.0, 7.0]   # in process, after the options are applied again
    (inc / "addon.h").unlink()           # a header the last build read is gone: a compile error, not the old binary
    r = subprocess.run([sys.executable, str(script), str(inc)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "addon.h" in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("kw, match", [
    (dict(extra_cpu_include_dirs=5), r"extra_cpu_include_dirs=\.\.\.\): expected a sequence of paths, got int"),
    (dict(extra_cuda_include_dirs=[None]), r"extra_cuda_include_dirs=\.\.\.\): expected paths .* got NoneType"),
    (dict(extra_build_dependencies=[3]), r"extra_build_dependencies=\.\.\.\): expected paths .* got int 3"),
])
def test_bad_paths_name_the_argument(kw, match):
    with pytest.raises(TypeError, match=match):
        tg.ModuleBuildOptions(**kw)


def test_bytes_and_pathlike_paths_become_text(tmp_path):
    """A bytes folder reached the compiler as ``-Ib'/path'`` (and the unit as its repr)."""
    o = tg.ModuleBuildOptions(extra_cpu_include_dirs=[bytes(tmp_path)], extra_cuda_include_dirs=[tmp_path])
    assert o.extra_cpu_include_dirs == [str(tmp_path)] and o.extra_cuda_include_dirs == [str(tmp_path)]


@pytest.mark.parametrize("attr, value, error, match", [
    ("extra_cpu_preamble", 5, TypeError, r"extra_cpu_preamble=\.\.\.\): expected a str, got int"),
    ("extra_cpu_include_dirs", "/tmp", TypeError, "got a single str"),
    ("extra_build_dependencies", ["rel.h"], ValueError, "expected absolute paths of existing entries, got 'rel.h'"),
])
def test_an_instance_edited_in_place_is_checked_when_applied(attr, value, error, match):
    """Warp's instances are edited and applied again (``set_module_options``): the edited
    attribute skipped the constructor's checks (a str folder reached the compiler one
    character a folder, a non-str preamble failed at the next launch with Python's words)."""
    k = _addon_kernel()
    o = tg.ModuleBuildOptions()
    setattr(o, attr, value)
    with pytest.raises(error, match=match):
        k.module.options["extra_build_options"] = o
    with pytest.raises(error, match=match):
        tg.set_module_options({"extra_build_options": o}, module=k.module)


def test_options_changed_while_resolving_are_not_hidden(addon_dir, monkeypatch):
    """``set_module_options`` on another thread while a launch resolves the old options: the
    old inputs were stored after the change had dropped them, and every later build of the
    module used the old preamble (until the options changed again)."""
    from tapegrad.lang import options
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 2.0)
    real = options._resolve_inputs

    def racing(opts):
        bi = real(opts)
        monkeypatch.setattr(options, "_resolve_inputs", real)
        k.module.options["extra_build_options"] = _opts(addon_dir, 5.0)   # the other thread's change
        return bi

    monkeypatch.setattr(options, "_resolve_inputs", racing)
    assert "ADDON_FACTOR 2.0f" in k.build_inputs().cpu_preamble    # this resolution: the options it read
    assert "ADDON_FACTOR 5.0f" in k.build_inputs().cpu_preamble    # the next: the current ones
    x, got = _run(k)
    np.testing.assert_allclose(got, 5.0 * x, rtol=1e-6)


def _edit(path, text):
    import os
    st = os.stat(path)
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))   # a later time, on any clock


def test_cuda_include_folder_files_join_the_unit(addon_dir):
    """NVRTC reports no headers: a file edited in a CUDA include folder (not a listed
    dependency) changes the unit's text, hence the CUDA cache key and the direct cache's key,
    once the options are resolved again (a new process, or set_module_options); it left the
    unit as it was, and the CUDA build loaded the binary of the old header."""
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0, target="cuda", deps=False)
    before, key = k.build_inputs().unit_text(), direct.key_of(k)
    assert "cuda include folders' files:" in before
    _edit(addon_dir / "addon.h", "static TG_FUNC float addon_scale(float x) { return 7.0f * x; }\n")
    assert k.build_inputs().unit_text() == before   # resolved once per change of the options, as Warp
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0, target="cuda", deps=False)
    assert k.build_inputs().unit_text() != before and direct.key_of(k) != key
    (addon_dir / "sub").mkdir()
    after = k.build_inputs().unit_text()
    (addon_dir / "sub" / "more.h").write_text("// new\n")
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0, target="cuda", deps=False)
    assert k.build_inputs().unit_text() != after   # a new file in a subfolder too


@pytest.mark.cuda
def test_cuda_edited_header_in_an_include_folder_rebuilds(addon_dir):
    k = _addon_kernel()
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0, target="cuda", deps=False)
    x, got = _run(k, "cuda:0")
    np.testing.assert_allclose(got, 3.0 * x, rtol=1e-6)
    _edit(addon_dir / "addon.h", "#pragma once\nstatic TG_FUNC float addon_scale(float x) { return -2.0f * x; }\n")
    k.module.options["extra_build_options"] = _opts(addon_dir, 3.0, target="cuda", deps=False)
    x, got = _run(k, "cuda:0")
    np.testing.assert_allclose(got, -2.0 * x, rtol=1e-6)
