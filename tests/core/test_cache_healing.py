"""The kernel cache heals itself and refuses unsafe directories (issue 14, fault 3).

Each kind of cached CPU binary (a kernel, the DLPack helper ``tg_dlpack``, the host-ops helper
``tg_hostops``, the native launch helper ``tg_fastlaunch``, the JAX FFI handler) is truncated or
altered in a cache directory, then a fresh process uses it: it must work, warn naming the file,
and leave a rebuilt entry whose checksum matches again. CUDA images go through the same
verified-entry code (``build.cached_entry``);
its CPU-testable part (verify, reject, and no NVRTC on a hit) is checked here too.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest

import tapegrad as tg
from tapegrad import build

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions and record locks")

_CHILD = textwrap.dedent('''
    import sys
    import numpy as np
    import tapegrad as tg

    @tg.kernel(key="cache_healing.heal")
    def heal(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = 3.0 * x[i] + 1.0

    @tg.kernel(key="cache_healing.twice")
    def twice(x: tg.array(dtype=tg.float32), y: tg.array(dtype=tg.float32)):
        i = tg.tid()
        y[i] = 2.0 * x[i]

    def kernel():
        x = tg.array(np.arange(64, dtype=np.float32))
        for k, want in ((heal, 3 * np.arange(64) + 1), (twice, 2 * np.arange(64))):
            y = tg.zeros(64, dtype=tg.float32)
            tg.launch(k, 64, inputs=[x, y])
            assert np.array_equal(y.numpy(), want), (k.key, y.numpy())

    def dlpack():
        from tapegrad.dlpack import capsules
        assert capsules.backend().name == "native", capsules.backend().name
        a = tg.array(np.arange(5.0))
        n = np.from_dlpack(a)
        assert n.ctypes.data == a.ptr and n.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]

    def hostops():
        from tapegrad import memory_ops
        assert memory_ops.load_zero_many()
        a, b = np.ones(16), np.ones(3)
        memory_ops.ZeroPlan([(a.ctypes.data, a.nbytes), (b.ctypes.data, b.nbytes)]).run()
        assert not a.any() and not b.any()

    def jax():
        from tapegrad.bridges.jax import ffi
        ffi.handler_library()
        assert ffi.function_address("tgx_kernel_cpu")

    def fastlaunch():
        from tapegrad.launch import fastlaunch
        x = tg.array(np.arange(8, dtype=np.float32))
        for _ in range(3):
            y = tg.zeros(8, dtype=tg.float32)
            tg.launch(twice, 8, inputs=[x, y])
            assert np.array_equal(y.numpy(), 2 * np.arange(8))
        # loaded and consulted (stats are (0, 0) while the helper is not loaded)
        assert fastlaunch.error() is None and sum(fastlaunch.stats()) > 0, (fastlaunch.error(), fastlaunch.stats())

    {"kernel": kernel, "dlpack": dlpack, "hostops": hostops, "jax": jax, "fastlaunch": fastlaunch}[sys.argv[1]]()
    print("CHILD OK")
''')

# kind -> glob of its library in the cache
_KINDS = {"kernel": "tgk_heal_*.so", "dlpack": "tg_dlpack_*.so", "hostops": "tg_hostops_*.so",
          "fastlaunch": "tg_fastlaunch_*.so", "jax": "tapegrad_xla_ffi_*.so"}


def _run(script, kind, cache, check=True):
    # the helpers' libraries built at install are ignored: their kernel-cache entries are under test
    env = dict(os.environ, TAPEGRAD_CACHE=str(cache), PYTHONWARNINGS="default", TAPEGRAD_PREBUILT_HELPERS="0")
    p = subprocess.run([sys.executable, str(script), kind], env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0 and "CHILD OK" in p.stdout, f"rc {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A cache directory per kind holding that kind's entry, built once by a child process."""
    root = tmp_path_factory.mktemp("healing")
    script = root / "child.py"
    script.write_text(_CHILD)
    caches = {}

    def get(kind):
        if kind not in caches:
            cache = root / f"cache_{kind}"
            cache.mkdir(mode=0o700, exist_ok=True)
            _run(script, kind, cache)
            caches[kind] = cache
        return script, caches[kind]
    return get


def _entry(cache, kind):
    found = sorted(cache.glob(_KINDS[kind]))
    assert len(found) == 1, (kind, [p.name for p in cache.iterdir()])
    return found[0]


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 3)


def _flip(path):
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    for i in range(mid, mid + 256):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))    # same size, other bytes


def _kinds():
    return [pytest.param(k, marks=pytest.mark.jax) if k == "jax" else k for k in _KINDS]


@pytest.mark.parametrize("damage", [_truncate, _flip], ids=["truncated", "altered"])
@pytest.mark.parametrize("kind", _kinds())
def test_a_damaged_binary_is_rebuilt_by_the_next_process(built, tmp_path, kind, damage):
    script, original = built(kind)
    cache = tmp_path / "cache"
    shutil.copytree(original, cache, copy_function=shutil.copy2)
    entry = _entry(cache, kind)
    good_size = entry.stat().st_size
    damage(entry)
    assert build.read_entry(str(entry))[1] is not None     # the check sees the damage
    p = _run(script, kind, cache)
    assert "CacheWarning" in p.stderr and str(entry) in p.stderr, p.stderr[-3000:]
    data, problem = build.read_entry(str(entry))
    assert problem is None and len(data) == entry.stat().st_size and abs(len(data) - good_size) < 4096
    again = _run(script, kind, cache)       # healed: the next process loads it without a word
    assert "CacheWarning" not in again.stderr, again.stderr[-3000:]


def test_an_entry_without_checksum_is_rebuilt_quietly(built, tmp_path):
    """An entry from before checksums (no ``.sum``) is not trusted: it is rebuilt, without a
    warning (it is not known to be damaged), and has a checksum afterwards."""
    script, original = built("kernel")
    cache = tmp_path / "cache"
    shutil.copytree(original, cache, copy_function=shutil.copy2)
    entry = _entry(cache, "kernel")
    os.unlink(str(entry) + ".sum")
    before = entry.stat().st_ino
    p = _run(script, "kernel", cache)
    assert "CacheWarning" not in p.stderr, p.stderr[-3000:]
    assert build.read_entry(str(entry))[1] is None and entry.stat().st_ino != before


@pytest.mark.parametrize("how", ["group-writable", "foreign-owned", "altered record"])
def test_an_unsafe_file_counts_as_damaged(built, tmp_path, how):
    if how == "foreign-owned" and os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    script, original = built("kernel")
    cache = tmp_path / "cache"
    shutil.copytree(original, cache, copy_function=shutil.copy2)
    entry = _entry(cache, "kernel")
    if how == "group-writable":
        os.chmod(entry, 0o770)
    elif how == "foreign-owned":
        os.chown(entry, 4242, -1)
    else:
        record = (cache / (entry.name + ".sum"))
        record.write_text(record.read_text().replace("sha256 ", "sha256 0"))
    p = _run(script, "kernel", cache)
    assert "CacheWarning" in p.stderr and str(entry) in p.stderr, p.stderr[-3000:]
    st = entry.stat()
    assert build.read_entry(str(entry))[1] is None and st.st_uid == os.getuid() and not st.st_mode & 0o022


def test_a_library_dlopen_refuses_is_rebuilt_and_loaded(tmp_path, monkeypatch):
    """An entry whose checksum matches but which ``dlopen`` refuses (an OSError) is rebuilt once."""
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))
    source = ('#include <cstdint>\n'
              'extern "C" __attribute__((visibility("default"))) int tg_heal_probe() { return 42; }\n')
    path = build.build_cpu(source, "tg_heal_probe")
    build.write_entry(path, b"\x7fELF but not a library at all" * 64)    # verifies, but is no ELF
    with pytest.warns(tg.CacheWarning, match="cannot be loaded") as w:
        lib = build.load_cpu(source, "tg_heal_probe")
    assert path in str(w[0].message)
    assert lib.tg_heal_probe() == 42 and build.read_entry(path)[1] is None


def test_processes_sharing_an_empty_cache(tmp_path):
    """Four processes started together on one empty cache compile and launch the same new
    kernels: all succeed with the right results, and the cache holds one intact entry per
    kernel and no temporary files."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    cache = tmp_path / "cache"
    # the helpers' libraries built at install are ignored: their kernel-cache entries are under test
    env = dict(os.environ, TAPEGRAD_CACHE=str(cache), PYTHONWARNINGS="default", TAPEGRAD_PREBUILT_HELPERS="0")
    procs = [subprocess.Popen([sys.executable, str(script), "kernel"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "CHILD OK" in out, err[-3000:]
        assert "CacheWarning" not in err, err[-3000:]
    names = sorted(p.name for p in cache.iterdir())
    sos = [n for n in names if n.endswith(".so")]
    assert len([n for n in sos if n.startswith("tgk_heal_")]) == 1
    assert len([n for n in sos if n.startswith("tgk_twice_")]) == 1
    for n in sos:
        assert build.read_entry(str(cache / n))[1] is None, n
    assert not [n for n in names if n.startswith(".") and n != ".tapegrad.lock"], names


# ------------------------------------------------------------------------------ the directory

@pytest.mark.parametrize("mode,word", [(0o770, "group-writable"), (0o777, "world-writable")])
def test_a_cache_dir_others_can_write_is_refused(tmp_path, monkeypatch, mode, word):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, mode)
    monkeypatch.setenv("TAPEGRAD_CACHE", str(d))
    with pytest.raises(tg.CacheDirError, match=word) as e:
        build.cache_dir()
    assert str(d) in str(e.value) and f"chmod go-w {d}" in str(e.value)


def test_the_dir_is_checked_again_when_tapegrad_cache_changes(tmp_path, monkeypatch):
    good, bad = tmp_path / "good", tmp_path / "bad"
    monkeypatch.setenv("TAPEGRAD_CACHE", str(good))
    assert build.cache_dir() == str(good)
    bad.mkdir()
    os.chmod(bad, 0o775)
    monkeypatch.setenv("TAPEGRAD_CACHE", str(bad))
    with pytest.raises(tg.CacheDirError, match="group-writable"):
        build.cache_dir()
    monkeypatch.setenv("TAPEGRAD_CACHE", str(good))
    assert build.cache_dir() == str(good)
    os.chmod(good, 0o770)             # made unsafe after it was checked...
    monkeypatch.setenv("TAPEGRAD_CACHE", str(bad))
    os.chmod(bad, 0o700)
    assert build.cache_dir() == str(bad)
    monkeypatch.setenv("TAPEGRAD_CACHE", str(good))
    with pytest.raises(tg.CacheDirError, match=str(good)):   # ...is refused when it comes back
        build.cache_dir()


def test_a_kernel_build_refuses_an_unsafe_dir(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o770)
    monkeypatch.setenv("TAPEGRAD_CACHE", str(d))

    @tg.kernel(key="cache_healing.refused")
    def refused(y: tg.array(dtype=tg.float32)):
        y[tg.tid()] = 1.0

    with pytest.raises(tg.CacheDirError, match="group-writable"):
        refused.module_for(tg.get_device("cpu"))   # (a launch would also try the process-wide helpers here)
    assert not list(d.iterdir())


# ------------------------------------------------------------------------------ CUDA images

_CUDA_SOURCE = 'extern "C" __global__ void tg_heal_probe(float* x) { x[0] = 1.0f; }\n'


def _nvrtc_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("cupy_backends") is not None


def test_cuda_image_hit_is_verified_and_loads_no_nvrtc(tmp_path, monkeypatch):
    """A cached image is read, checked and returned without NVRTC (here CuPy is not even
    installed, so a compile would fail); an altered one is refused (CacheWarning) and rebuilt."""
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path))
    base = build.cuda_image_base(build.source_digest(_CUDA_SOURCE), "tg_heal_probe", 90)
    image = b"\x7fELF a cubin as NVRTC would write it" * 100
    build.write_entry(base + ".cubin", image)
    modules_before = set(sys.modules)
    assert build.build_cuda(_CUDA_SOURCE, "tg_heal_probe", 90) == (image, "cubin")
    assert not [m for m in set(sys.modules) - modules_before if m.startswith(("cupy", "cupy_backends"))]
    _flip(__import__("pathlib").Path(base + ".cubin"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        if _nvrtc_available():
            data, kind = build.build_cuda(_CUDA_SOURCE, "tg_heal_probe", 90)
            assert data != image and build.read_entry(f"{base}.{kind}")[1] is None
        else:
            with pytest.raises(ImportError):     # the rebuild needs NVRTC: it was really attempted
                build.build_cuda(_CUDA_SOURCE, "tg_heal_probe", 90)
    assert any(issubclass(x.category, tg.CacheWarning) and base + ".cubin" in str(x.message) for x in w)


def test_nvrtc_identity_follows_the_nvrtc_on_disk(tmp_path, monkeypatch):
    """The CUDA cache key changes whenever the NVRTC a compile would load changes (another
    file, another size or mtime, another order on the search path), found without loading it."""
    lib_a, lib_b = tmp_path / "a", tmp_path / "b"
    lib_a.mkdir()
    lib_b.mkdir()
    (lib_a / "libnvrtc.so.12").write_bytes(b"nvrtc 12.4")
    monkeypatch.setattr(build, "nvrtc_search_dirs", lambda: [str(lib_a), str(lib_b)])
    monkeypatch.setenv("TAPEGRAD_CACHE", str(tmp_path / "cache"))

    def key():
        build.nvrtc_identity(refresh=True)
        return build.cuda_image_base(build.source_digest(_CUDA_SOURCE), "tg_heal_probe", 90)

    k1 = key()
    assert key() == k1                                   # stable while nothing changes
    (lib_a / "libnvrtc.so.12").write_bytes(b"nvrtc 12.8!")  # upgraded in place
    k2 = key()
    assert k2 != k1
    (lib_b / "libnvrtc.so.13").write_bytes(b"nvrtc 13.0")  # another toolkit appears
    k3 = key()
    assert k3 not in (k1, k2)
    monkeypatch.setattr(build, "nvrtc_search_dirs", lambda: [str(lib_b), str(lib_a)])   # search order
    assert key() not in (k1, k2, k3)


def test_nvrtc_search_dirs_follow_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{tmp_path / 'x'}:{tmp_path / 'y'}")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda"))
    dirs = build.nvrtc_search_dirs()
    assert dirs[:2] == [str(tmp_path / "x"), str(tmp_path / "y")]
    assert str(tmp_path / "cuda" / "lib64") in dirs
