"""The kernel ABI table (issue 25, item 1): the checked-in header is the one the table gives,
the C side compiles to the Python layout, and the C and Python twins of the grid formula, the
kinds and the entry names agree."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad import abi, build, types
from tapegrad.lang import emit


def test_the_checked_in_header_is_the_generated_one():
    assert abi.header_text() == abi.generate_header(), "run: python -m tapegrad.abi --write"
    assert abi.main(["--check"]) == 0


def test_check_fails_on_a_stale_header(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "tg_abi.h"
    stale.write_text(abi.generate_header().replace("#define TG_MAX_DIMS 4", "#define TG_MAX_DIMS 5"))
    monkeypatch.setattr(abi, "HEADER_PATH", str(stale))
    assert abi.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
    assert abi.main(["--write"]) == 0
    assert stale.read_text() == abi.generate_header()


def test_inline_header_replaces_the_include_line_only():
    src = '#include <stdint.h>\n#include "tg_abi.h"   /* why */\n  # include "../include/tg_abi.h"\nint x;'
    out = abi.inline_header(src).split("\n")
    assert out[0] == "#include <stdint.h>" and out[-1] == "int x;"
    assert "#include \"" not in "\n".join(out[1:-1]) and "\n".join(out).count("#define TG_ABI_H") == 2
    assert abi.inline_header("int y;") == "int y;"


def test_the_generated_header_is_deterministic():
    assert abi.generate_header() == abi.generate_header()


def _probe_source() -> str:
    """A C++ unit exporting the compiled header's sizes, offsets and functions."""
    lines = ["#define TG_ABI_XLA 1", '#include "tg_abi.h"', "#include <stddef.h>",
             '#define X __attribute__((visibility("default")))', 'extern "C" {']
    for s in abi.STRUCTS:
        lines.append(f"X long long probe_size_{s.cname}(void) "
                     f"{{ return (long long)sizeof({s.cname}); }}")
        for f in s.fields:
            lines.append(f"X long long probe_off_{s.cname}_{f.name}(void) "
                         f"{{ return (long long)offsetof({s.cname}, {f.name}); }}")
    lines += ['X long long probe_grid(long long t, long long bd, long long l, '
              "long long mb, long long cap) { return tg_grid_blocks(t, bd, l, mb, cap); }",
              'X long long probe_cap(long long sms) { return tg_threads_cap(sms); }',
              'X int probe_size(int k) { return tg_kind_size(k); }',
              'X int probe_float(int k) { return tg_kind_is_float(k); }',
              'X long long probe_min(int k) { return tg_kind_min(k); }',
              'X unsigned long long probe_max(int k) { return tg_kind_max(k); }',
              'X int probe_kind_count(void) { return TG_KIND_COUNT; }',
              'X const char* probe_entry(void) { return TG_ENTRY_CPU_FORWARD; }',
              "}"]
    return abi.inline_header("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def probe():
    lib = build.load_cpu(_probe_source(), "tg_abi_probe")
    for name in ("probe_grid", "probe_cap", "probe_min"):
        getattr(lib, name).restype = ctypes.c_longlong
    lib.probe_grid.argtypes = [ctypes.c_longlong] * 5
    lib.probe_cap.argtypes = [ctypes.c_longlong]
    lib.probe_max.restype = ctypes.c_ulonglong
    lib.probe_entry.restype = ctypes.c_char_p
    return lib


def test_the_c_structs_have_the_python_layout(probe):
    pyclass = {"tg_bounds_t": abi.LaunchBounds, "tg_array_desc_t": abi.ArrayDesc, "tg_debug_slot_t": abi.DebugSlot,
               "tg_xla_slot_t": abi.XlaSlot, "tg_xla_plan_t": abi.XlaPlan}
    for s in abi.STRUCTS:
        fn = getattr(probe, f"probe_size_{s.cname}")
        fn.restype = ctypes.c_longlong
        assert fn() == s.size == ctypes.sizeof(pyclass[s.cname]), s.cname
        for f in s.fields:
            off = getattr(probe, f"probe_off_{s.cname}_{f.name}")
            off.restype = ctypes.c_longlong
            assert off() == s.offsets()[f.name] == getattr(pyclass[s.cname], f.name).offset, (s.cname, f.name)
    # the layout every consumer has relied on (a change here is an ABI break: rebuild everything)
    assert (abi.BOUNDS.size, abi.ARRAY.size, abi.DEBUG_SLOT.size) == (48, 88, 80)
    assert [s.cname for s in abi.STRUCTS] == list(pyclass)
    assert types.ArrayDesc is abi.ArrayDesc and types.LaunchBounds is abi.LaunchBounds


@settings(max_examples=300, deadline=None)
@given(threads=st.integers(-5, 2 ** 40), block_dim=st.integers(0, 1024), lanes=st.integers(0, 8),
       max_blocks=st.integers(0, 2 ** 20), cap=st.sampled_from([0, 1, 255, 132 * 2048 * 4, 2 ** 33]))
def test_the_c_grid_is_the_python_grid(probe, threads, block_dim, lanes, max_blocks, cap):
    assert probe.probe_grid(threads, block_dim, lanes, max_blocks, cap) == \
        abi.grid_blocks(threads, block_dim, lanes, max_blocks, cap)


def test_the_grid_rule():
    # an elementwise entry (lanes 4) is uncapped, one CUDA thread per 4 launch threads
    assert abi.grid_blocks(2 ** 28, 256, 4, 0, abi.threads_cap(132)) == 2 ** 28 // 4 // 256
    # a grid-stride entry is capped at the device's threads, unless max_blocks is given
    assert abi.grid_blocks(2 ** 28, 256, 1, 0, abi.threads_cap(132)) == 132 * 2048 * 4 // 256
    assert abi.grid_blocks(2 ** 28, 256, 1, 7, abi.threads_cap(132)) == 7
    assert abi.grid_blocks(1000, 0) == 4 and abi.grid_blocks(0, 256) == 0
    assert abi.grid_blocks(2 ** 50, 1) == abi.MAX_GRID_BLOCKS


def test_the_thread_cap(probe):
    for sms in (0, 1, 132):
        assert probe.probe_cap(sms) == abi.threads_cap(sms)


def test_kinds_are_the_scalar_table(probe):
    ks = abi.kinds()
    assert [k.name for k in ks] == ["py", "array"] + list(types.SCALARS)
    assert probe.probe_kind_count() == len(ks)
    for k in ks:
        assert k.code == abi.kind_code(k.name)
        s = types.SCALARS.get(k.name)
        assert probe.probe_size(k.code) == (s.size if s else 0)
        assert probe.probe_float(k.code) == (1 if s is not None and s.kind == "float" else 0)
        if s is not None and s.kind in ("int", "uint"):
            info = np.iinfo(s.np_dtype)
            assert (probe.probe_min(k.code), probe.probe_max(k.code)) == (int(info.min), int(info.max))
    with pytest.raises(KeyError, match="no parameter kind named 'complex64'"):
        abi.kind_code("complex64")


def test_entry_names(probe):
    assert probe.probe_entry() == abi.entry_name("", "cpu", "forward").encode()

    @tg.kernel
    def k_abi_entries(x: tg.array(dtype=float)):
        i = tg.tid()
        x[i] = x[i] * 2.0

    lib = k_abi_entries.module_for(tg.get_device("cpu")).lib
    for entry in ("forward", "backward"):
        assert hasattr(lib, abi.entry_name(k_abi_entries.symbol, "cpu", entry))
    assert abi.entry_name("k", "cuda", "dbg_slot") == "tg_dbg_slot"
    with open(os.path.join(os.path.dirname(emit.__file__), "runtime", "debug.h")) as f:   # its definition
        assert f"__device__ tg::dbg_slot_t {abi.CUDA_DEBUG_SLOT};" in f.read()
    with pytest.raises(ValueError, match="entry_name: expected a target"):
        abi.entry_name("k", "metal", "forward")


def test_a_runtime_that_drifts_from_the_header_does_not_compile():
    """array_t<T> in the kernel runtime is asserted against the header: a kernel built over a
    header whose descriptor layout differs fails to compile instead of reading wrong fields."""
    @tg.kernel
    def k_abi_drift(x: tg.array(dtype=float)):
        x[tg.tid()] = 1.0

    source = emit.module_source(k_abi_drift.cpp_parts())
    assert "#define TG_OFFSETOF_ARRAY_DESC_NDIM 80" in source
    build.load_cpu(source, "tg_abi_nodrift")    # the real header compiles
    drifted = source.replace("#define TG_OFFSETOF_ARRAY_DESC_NDIM 80", "#define TG_OFFSETOF_ARRAY_DESC_NDIM 76")
    with pytest.raises(tg.CompileError, match="kernel ABI's field offsets"):
        build.load_cpu(drifted, "tg_abi_drift")
    drifted = source.replace("#define TG_SIZEOF_ARRAY_DESC 88", "#define TG_SIZEOF_ARRAY_DESC 96")
    with pytest.raises(tg.CompileError, match="kernel ABI's size"):
        build.load_cpu(drifted, "tg_abi_drift")


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_the_header_compiles_cleanly_as_c_and_cpp(tmp_path, lang):
    cc = shutil.which("cc" if lang == "c" else "c++")
    if cc is None:
        pytest.skip(f"no {lang} compiler")
    src = tmp_path / ("t.c" if lang == "c" else "t.cpp")
    src.write_text('#include "tg_abi.h"\nint main(void) { tg_array_desc_t d; d.ndim = 1; '
                   "return (int)tg_grid_blocks(d.ndim, 0, 1, 0, 0) - 1; }\n")
    std = "-std=c11" if lang == "c" else "-std=c++17"
    r = subprocess.run([cc, std, "-Wall", "-Wextra", "-Werror", f"-I{abi.HEADER_PATH.rsplit('/', 1)[0]}",
                        str(src), "-o", str(tmp_path / "t")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert subprocess.run([str(tmp_path / "t")]).returncode == 0
