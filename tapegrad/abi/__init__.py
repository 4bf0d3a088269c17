"""The kernel ABI: one table of what crosses from the host into a compiled kernel.

Every fact a C or C++ side must agree on with Python is declared here once:

* the argument structs, as frozen dataclasses of fields (``BOUNDS``: the launch grid every entry
  point takes first; ``ARRAY``: the array descriptor; ``DEBUG_SLOT``: a debug build's error
  slot), with their ctypes classes (``LaunchBounds``, ``ArrayDesc``, ``DebugSlot``) built from
  them. The tangent code's dual arrays (``tg::darray_t``) are assembled inside the kernel from
  two descriptors and a mode, so they are not an ABI struct;
* the parameter kinds the native launch helper and the XLA handler pack (``KINDS``): ``py``,
  ``array`` and one per scalar type, derived from the scalar table of ``tapegrad.types``
  (which registers its rows here, ``register_scalars``: this module sits below it), with their
  sizes and integer ranges;
* the entry-point symbol names (``entry_name``), the launch grid formula (``grid_blocks``) and
  the thread caps (``MAX_BLOCK_DIM``, ``DEFAULT_BLOCK_DIM``, ``threads_cap``).

The C side includes one header generated from this table, ``tapegrad/include/tg_abi.h``
(checked in; ``python -m tapegrad.abi --write`` writes it, ``--check`` fails when it is stale;
``tests/core/test_abi.py`` checks both the text and the compiled layout). Sources compiled from
text (kernels, the native helpers' fallback builds, the XLA handler) get it inlined by
``inline_header``.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass

__all__ = ["Field", "Struct", "Kind", "BOUNDS", "ARRAY", "DEBUG_SLOT", "STRUCTS", "LaunchBounds", "ArrayDesc",
           "DebugSlot", "XLA_SLOT", "XLA_PLAN", "XlaSlot", "XlaPlan", "XLA_MAX_DEVICES", "XLA_SLOT_DIMS",
           "XLA_PLAN_MAGIC", "XLA_SLOT_KINDS", "MAX_DIMS", "ARRAY_FLAG_READONLY", "ARRAY_FLAG_RETAIN_GRAD",
           "MAX_BLOCK_DIM", "DEFAULT_BLOCK_DIM", "MAX_GRID_BLOCKS", "MAX_NARROW_THREADS", "CAP_THREADS_PER_SM",
           "CAP_WAVES", "TARGETS", "ENTRIES", "CUDA_DEBUG_SLOT", "ENTRY_POINT_ABIS", "EXTERNAL_PARAMS_SYMBOL",
           "entry_name", "external_entry_name", "grid_blocks", "threads_cap",
           "register_scalars", "kinds", "kind_code", "int_range", "HEADER_NAME", "HEADER_PATH", "header_text",
           "generate_header", "inline_header", "main"]

MAX_DIMS = 4                 # array and grid dimensions
ARRAY_FLAG_READONLY = 1      # kernels may not write the data
ARRAY_FLAG_RETAIN_GRAD = 2   # write adjoints leave the gradient in place (array.retain_grad)

MAX_BLOCK_DIM = 1024         # CUDA threads per block
DEFAULT_BLOCK_DIM = 256      # block_dim 0 means this
MAX_GRID_BLOCKS = 2 ** 31 - 1
MAX_NARROW_THREADS = 2 ** 31 - 1   # launches up to this size run the default build (its tid() is int32)
# Default grid cap (max_blocks=0): enough resident threads to fill every SM several times over,
# then the entries' grid-stride loop. Measured on an H200 for a 2^28 saxpy: one thread per
# element gives 2.8 TB/s, this cap 3.6-3.7 TB/s (torch's add_: 4.3).
CAP_THREADS_PER_SM = 2048
CAP_WAVES = 4

# ---------------------------------------------------------------------------- the structs

# field type -> (C type, ctypes type); every size equals its alignment on the targets tapegrad builds for
_CTYPES = {"ptr": ("void *", ctypes.c_void_p), "cstr": ("const char *", ctypes.c_char_p),
           "int32": ("int32_t", ctypes.c_int32), "uint32": ("uint32_t", ctypes.c_uint32),
           "int64": ("int64_t", ctypes.c_int64)}


@dataclass(frozen=True)
class Field:
    """One field of an ABI struct.

    Attributes:
        name: the field name (the same in C and ctypes). type: ``ptr``, ``cstr`` (a C string),
        ``int32``, ``uint32``, ``int64``, or a ``Struct`` (nested). count: array length (1: a
        plain field). doc: what it holds (a header comment). c: a pointer's C type where C
        needs a typed one (``ctypes`` holds it as ``c_void_p``).
    """

    name: str
    type: object
    count: int = 1
    doc: str = ""
    c: str = ""

    def _ctype(self):
        return _STRUCT_CTYPES[self.type] if isinstance(self.type, Struct) else _CTYPES[self.type][1]

    @property
    def size(self) -> int:
        return ctypes.sizeof(self._ctype()) * self.count

    @property
    def align(self) -> int:
        return ctypes.alignment(self._ctype())

    @property
    def ctype_c(self) -> str:
        """The field's C type."""
        if isinstance(self.type, Struct):
            return self.type.cname
        return self.c or _CTYPES[self.type][0]


@dataclass(frozen=True)
class Struct:
    """An ABI struct: its C name, the fields in order, the C++ runtime type that must match it.

    Attributes:
        cname: the generated header's type name. fields: ``Field`` tuple. doc: a one-line
        description. runtime: the kernel runtime's twin (``tg::array_t<T>``...), for messages.
    """

    cname: str
    fields: tuple
    doc: str
    runtime: str = ""

    def offsets(self) -> dict:
        """Field name -> byte offset, with C's alignment rules."""
        out, off = {}, 0
        for f in self.fields:
            off = -(-off // f.align) * f.align
            out[f.name] = off
            off += f.size
        return out

    @property
    def align(self) -> int:
        return max(f.align for f in self.fields)

    @property
    def size(self) -> int:
        last = self.fields[-1]
        end = self.offsets()[last.name] + last.size
        return -(-end // self.align) * self.align

    def ctypes_fields(self) -> list:
        """``_fields_`` of the ctypes twin."""
        return [(f.name, f._ctype() * f.count if f.count > 1 else f._ctype()) for f in self.fields]


BOUNDS = Struct("tg_bounds_t", (
    Field("shape", "int64", MAX_DIMS, "grid dims, row-major; dims past ndim are 1"),
    Field("ndim", "int32"),
    Field("pad", "int32"),
    Field("size", "int64", doc="the product of the dims: threads launched"),
), "the launch grid, the first argument of every entry point", "tg::launch_t")

ARRAY = Struct("tg_array_desc_t", (
    Field("data", "ptr"),
    Field("grad", "ptr", doc="NULL: none; shares strides with data"),
    Field("shape", "int64", MAX_DIMS),
    Field("strides", "int64", MAX_DIMS, "bytes"),
    Field("ndim", "int32"),
    Field("flags", "uint32", doc="TG_ARRAY_FLAG_* bits"),
), "the array descriptor every kernel receives per array (identical on CPU and CUDA)", "tg::array_t<T>")

DEBUG_SLOT = Struct("tg_debug_slot_t", (
    Field("flag", "int32", doc="0: no violation yet; 1: the fields below describe the first one"),
    Field("site", "int32", doc="which access (the host's table of sites of the module)"),
    Field("ndim", "int32", doc="number of indices"),
    Field("count", "int32", doc="violations seen (saturates)"),
    Field("index", "int64", MAX_DIMS),
    Field("shape", "int64", MAX_DIMS),
), "a debug build's error slot: the first out-of-range access of a launch", "tg::dbg_slot_t")

_STRUCT_CTYPES: dict = {}   # Struct -> its ctypes class (nested struct fields)


def _ctype_class(s: Struct, name: str, doc: str):
    cls = _STRUCT_CTYPES[s] = type(name, (ctypes.Structure,), {"_fields_": s.ctypes_fields(), "__doc__": doc,
                                                                "__module__": __name__})
    return cls


LaunchBounds = _ctype_class(BOUNDS, "LaunchBounds",
                            "Launch grid (``BOUNDS``): up to 4 dims, row-major; ``size`` is their product.")
ArrayDesc = _ctype_class(ARRAY, "ArrayDesc",
                         "The array descriptor every kernel receives (``ARRAY``); ``strides`` are in bytes, "
                         "``grad`` may be NULL.")
DebugSlot = _ctype_class(DEBUG_SLOT, "DebugSlot", "A debug build's error slot (``DEBUG_SLOT``).")

# The jax_kernel plan (bridges/jax/plan.py builds it at trace time, the XLA handler
# bridges/jax/ffi_handler.cpp reads it per execution; declared in the header under TG_ABI_XLA).
XLA_MAX_DEVICES = 16
XLA_SLOT_DIMS = MAX_DIMS + 2         # an array's dims and a matrix's two component dims
XLA_PLAN_MAGIC = 0x7467786A61786B31  # "tgxjaxk1": an attribute that is a plan's address
# slot kinds, by code: an array read from operand `arg`; written to result `ret` (zeroed first);
# operand `arg` aliased to (or copied into) result `ret`; a static value packed in the plan's
# values; an array slot with no buffer (no gradient wanted); a scalar adjoint slot (NULL on the
# CPU, zero bytes on CUDA)
XLA_SLOT_KINDS = ("in", "out", "inout", "value", "null_array", "null_value")

XLA_SLOT = Struct("tg_xla_slot_t", (
    Field("kind", "int32", doc="TG_XLA_IN, _OUT, _INOUT, _VALUE, _NULL_ARRAY, _NULL_VALUE"),
    Field("arg", "int32", doc="call-frame operand (-1: none)"),
    Field("ret", "int32", doc="call-frame result (-1: none)"),
    Field("ndim", "int32", doc="tapegrad array ndim"),
    Field("rank", "int32", doc="XLA rank of one unbatched buffer (ndim + vector/matrix inner dims)"),
    Field("dtype", "int32", doc="expected XLA_FFI_DataType"),
    Field("dims", "int64", XLA_SLOT_DIMS, "expected unbatched XLA dims"),
    Field("elem_size", "int64", doc="bytes of one tapegrad element (vec3: 12)"),
    Field("value_offset", "int64"),
    Field("value_size", "int64"),
    Field("name", "cstr", doc="the parameter's name, for messages"),
), "one kernel parameter of a jax_kernel call", "bridges/jax/plan.py Slot")

XLA_PLAN = Struct("tg_xla_plan_t", (
    Field("magic", "int64", doc="TG_XLA_PLAN_MAGIC"),
    Field("nslots", "int32"),
    Field("nargs", "int32"),
    Field("nrets", "int32"),
    Field("adjoint", "int32"),
    Field("bounds", BOUNDS),
    Field("cpu_entry", "ptr", doc="void (*)(const tg_bounds_t*, void**)"),
    Field("cuda_fn", "ptr", XLA_MAX_DEVICES, "CUfunction per device ordinal"),
    Field("cuda_threads_cap", "int64", XLA_MAX_DEVICES, "the device's grid cap in threads (0: none)"),
    Field("cuda_lanes", "int32", XLA_MAX_DEVICES, "the entry's launch threads per CUDA thread"),
    Field("block_dim", "int32"),
    Field("pad", "int32"),
    Field("loader", "ptr", doc="loads a missing entry point (Python, first call only)", c="tg_xla_loader_t"),
    Field("kernel", "cstr", doc="the kernel's key, for messages"),
    Field("slots", "ptr", c="tg_xla_slot_t *"),
    Field("values", "ptr", doc="the packed static values", c="unsigned char *"),
    Field("cpu_error", "ptr", doc="the CPU entry's library error code (int32[2]: modules.ErrorSlot)",
          c="int32_t *"),
), "the static facts of one jax_kernel call (its address is the call's tapegrad_plan attribute)",
    "bridges/jax/plan.py Plan")

XlaSlot = _ctype_class(XLA_SLOT, "XlaSlot", "A jax_kernel plan's slot (``XLA_SLOT``).")
XlaPlan = _ctype_class(XLA_PLAN, "XlaPlan", "A jax_kernel plan (``XLA_PLAN``).")

STRUCTS = (BOUNDS, ARRAY, DEBUG_SLOT, XLA_SLOT, XLA_PLAN)

# ------------------------------------------------------------------------ entry points

TARGETS = ("cpu", "cuda")
# forward, adjoint, forward mode (lang/tangent.py), the tangent of the adjoint; dbg_slot: a debug
# build's error slot (CPU: an exported getter of its address; CUDA: the module's __device__
# variable, one per module, defined by runtime/debug.h: no release build names it)
ENTRIES = ("forward", "backward", "tangent", "tangent_adjoint", "dbg_slot")
CUDA_DEBUG_SLOT = "tg_dbg_slot"
# how a kernel's CUDA forward entry receives its arguments (Warp's ``entry_point_abi``):
# "warp": tapegrad's entries above (bounds, then the arguments); "external_constant_params": a
# no-argument ``extern "C" __global__`` entry, for launchers outside tapegrad (OptiX programs,
# a driver-API cuLaunchKernel), reading its one struct argument from the module's
# ``__constant__`` byte array EXTERNAL_PARAMS_SYMBOL (sized and aligned as the struct), which
# the launcher fills (cuModuleGetGlobal + a copy) before launching
ENTRY_POINT_ABIS = ("warp", "external_constant_params")
EXTERNAL_PARAMS_SYMBOL = "params"


def entry_name(symbol: str, target: str, entry: str) -> str:
    """The exported symbol of a kernel's entry point: ``<symbol>_<target>_<entry>`` (a CUDA
    module's debug slot: ``tg_dbg_slot``).

    Args:
        symbol: the kernel's symbol (``Kernel.symbol``). target: ``cpu`` or ``cuda``.
        entry: one of ``ENTRIES``.
    Raises:
        ValueError: an unknown target or entry.
    """
    if target not in TARGETS or entry not in ENTRIES:
        raise ValueError(f"entry_name: expected a target in {TARGETS} and an entry in {ENTRIES}, "
                         f"got {target!r}, {entry!r}")
    if target == "cuda" and entry == "dbg_slot":
        return CUDA_DEBUG_SLOT
    return f"{symbol}_{target}_{entry}"


def external_entry_name(mangled_name: str) -> str:
    """The symbol of an ``external_constant_params`` kernel's CUDA entry: the kernel's mangled
    name as it is (``Kernel.get_mangled_name()``: its key with the module option
    ``strip_hash``), with no target or entry suffix, so an outside runtime can name it.

    Raises:
        ValueError: ``mangled_name`` is not a C identifier.
    """
    if not (isinstance(mangled_name, str) and mangled_name.isidentifier() and mangled_name.isascii()):
        raise ValueError(f"external_entry_name: expected a C identifier, got {mangled_name!r}")
    return mangled_name

# ------------------------------------------------------------------------------ the grid


def threads_cap(sm_count: int) -> int:
    """The default grid cap of a device in threads (0: none, when the SM count is unknown)."""
    return sm_count * CAP_THREADS_PER_SM * CAP_WAVES if sm_count else 0


def grid_blocks(threads: int, block_dim: int = 0, lanes: int = 1, max_blocks: int = 0, cap: int = 0) -> int:
    """CUDA blocks of a launch of ``threads`` launch threads (C twin: ``tg_grid_blocks``).

    An elementwise forward entry runs ``lanes`` launch threads per CUDA thread and gets one
    CUDA thread per group, uncapped (measured on an H200 for a 2^28 saxpy: 4.33 TB/s uncapped
    against 4.12 under the cap); other entries are grid-stride loops capped at ``cap``
    threads unless ``max_blocks`` is given.

    Args:
        threads: the grid's size. block_dim: threads per block (0: ``DEFAULT_BLOCK_DIM``).
        lanes: launch threads per CUDA thread. max_blocks: the caller's cap on blocks (0: none).
        cap: the device's cap in threads (``threads_cap``; 0: none).
    Returns:
        The block count (0 for an empty grid).
    """
    if threads <= 0:
        return 0
    bd = block_dim if block_dim > 0 else DEFAULT_BLOCK_DIM
    lanes = max(1, lanes)
    nb = ((threads + lanes - 1) // lanes + bd - 1) // bd
    if max_blocks > 0:
        nb = min(nb, max_blocks)
    elif cap and lanes == 1:
        nb = min(nb, max(1, cap // bd))
    return min(nb, MAX_GRID_BLOCKS)

# ------------------------------------------------------------------------------ the kinds


@dataclass(frozen=True)
class Kind:
    """A parameter kind: how a launch packs one kernel argument.

    Attributes:
        code: the value of the C enum (``TG_KIND_<NAME>``). name: ``py``, ``array`` or a scalar
        type's name. size: a scalar's bytes (0 otherwise). kind: the scalar's class (``bool``,
        ``int``, ``uint``, ``float``; ``""`` otherwise).
    """

    code: int
    name: str
    size: int = 0
    kind: str = ""


_KINDS: list = [Kind(0, "py"), Kind(1, "array")]


def register_scalars(scalars) -> None:
    """Derive one kind per scalar type, in the order given (``tapegrad.types`` calls it once
    with its scalar table; each object has ``name``, ``kind`` and ``bits``)."""
    del _KINDS[2:]
    for s in scalars:
        _KINDS.append(Kind(len(_KINDS), s.name, s.bits // 8, s.kind))


def kinds() -> tuple:
    """Every parameter kind, by code.

    Raises:
        RuntimeError: no scalar table was registered (``tapegrad.types`` not imported).
    """
    if len(_KINDS) == 2:
        raise RuntimeError("tapegrad.abi: no scalar table registered (import tapegrad.types first)")
    return tuple(_KINDS)


def kind_code(name: str) -> int:
    """The kind code of ``name`` (``py``, ``array`` or a scalar type's name).

    Raises:
        KeyError: no such kind.
    """
    for k in kinds():
        if k.name == name:
            return k.code
    raise KeyError(f"tapegrad.abi: no parameter kind named {name!r}")


def int_range(kind: str, bits: int) -> tuple:
    """``(lo, hi)`` of an integer scalar class (``int``/``uint``) of ``bits`` bits."""
    if kind == "uint":
        return 0, 2 ** bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

# ----------------------------------------------------------------------------- the header


HEADER_NAME = "tg_abi.h"
HEADER_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include", HEADER_NAME)


def _c_struct(s: Struct) -> list:
    lines = [f"/* {s.doc} (twin: {s.runtime}) */", f"typedef struct {s.cname} {{"]
    for f in s.fields:
        t = f.ctype_c
        decl = f"{t}{'' if t.endswith('*') else ' '}{f.name}" + (f"[{f.count}]" if f.count > 1 else "")
        lines.append(f"    {decl};" + (f"  /* {f.doc} */" if f.doc else ""))
    lines.append(f"}} {s.cname};")
    up = s.cname[3:-2].upper()
    lines.append(f"#define TG_SIZEOF_{up} {s.size}")
    lines += [f"#define TG_OFFSETOF_{up}_{f.name.upper()} {off}" for f, off in zip(s.fields, s.offsets().values())]
    return lines


def _c_switch(fn: str, ret: str, cases: list, default: str) -> list:
    lines = [f"static inline {ret} {fn}(int kind) {{", "    switch (kind) {"]
    lines += [f"    case {k}: return {v};" for k, v in cases]
    return lines + [f"    default: return {default};", "    }", "}"]


def generate_header() -> str:
    """The text of ``tg_abi.h`` as this table gives it (deterministic)."""
    ks = kinds()
    out = ["/* tapegrad's kernel ABI. Generated by `python -m tapegrad.abi --write` from tapegrad/abi.py:",
           "   do not edit (tests/core/test_abi.py fails when this file differs from the table).",
           "   Valid C, C++ and CUDA (NVRTC); the host functions are left out of device compiles. */",
           "#ifndef TG_ABI_H", "#define TG_ABI_H", "",
           "#if defined(__CUDACC_RTC__)",
           "/* NVRTC has no <stdint.h> (the kernel runtime's core.h repeats these typedefs) */",
           "typedef int int32_t;", "typedef unsigned int uint32_t;", "typedef long long int64_t;",
           "#else", "#include <stdint.h>", "#endif", "",
           f"#define TG_MAX_DIMS {MAX_DIMS}",
           f"#define TG_ARRAY_FLAG_READONLY {ARRAY_FLAG_READONLY}",
           f"#define TG_ARRAY_FLAG_RETAIN_GRAD {ARRAY_FLAG_RETAIN_GRAD}",
           f"#define TG_MAX_BLOCK_DIM {MAX_BLOCK_DIM}",
           f"#define TG_DEFAULT_BLOCK_DIM {DEFAULT_BLOCK_DIM}",
           f"#define TG_MAX_GRID_BLOCKS {MAX_GRID_BLOCKS}LL",
           f"#define TG_MAX_NARROW_THREADS {MAX_NARROW_THREADS}LL",
           f"#define TG_CAP_THREADS_PER_SM {CAP_THREADS_PER_SM}",
           f"#define TG_CAP_WAVES {CAP_WAVES}", ""]
    for s in (BOUNDS, ARRAY, DEBUG_SLOT):
        out += _c_struct(s) + [""]
    out += ["/* the jax_kernel plan: only the XLA handler (bridges/jax/ffi_handler.cpp) defines TG_ABI_XLA */",
            "#ifdef TG_ABI_XLA", f"#define TG_XLA_MAX_DEVICES {XLA_MAX_DEVICES}",
            f"#define TG_XLA_PLAN_MAGIC 0x{XLA_PLAN_MAGIC:X}LL", ""]
    out += ["enum {"] + [f"    TG_XLA_{k.upper()} = {i}," for i, k in enumerate(XLA_SLOT_KINDS)] + ["};", ""]
    out += _c_struct(XLA_SLOT) + ["", "struct tg_xla_plan_t;",
                                  "typedef int32_t (*tg_xla_loader_t)(struct tg_xla_plan_t *plan, int32_t platform, "
                                  "int32_t ordinal, char *msg, int64_t msglen);"]
    out += _c_struct(XLA_PLAN) + ["#endif  /* TG_ABI_XLA */", ""]
    out.append("/* entry points: <symbol><suffix> */")
    out += [f'#define TG_ENTRY_{t.upper()}_{e.upper()} "{entry_name("", t, e)}"' for t in TARGETS for e in ENTRIES
            if not (t == "cuda" and e == "dbg_slot")]
    out += ["", "/* parameter kinds (tapegrad.abi.kinds(): py, array, then the scalar table's order) */", "enum {"]
    out += [f"    TG_KIND_{k.name.upper()} = {k.code}," for k in ks]
    out += [f"    TG_KIND_COUNT = {len(ks)}", "};", "", "#ifndef __CUDACC_RTC__"]
    scal = [k for k in ks if k.size]
    out += ["/* bytes of a scalar kind (0: py, array) */"]
    out += _c_switch("tg_kind_size", "int", [(f"TG_KIND_{k.name.upper()}", k.size) for k in scal], "0")
    out += ["/* 1 for a float kind (float16 and bfloat16 travel as raw bits) */"]
    out += _c_switch("tg_kind_is_float", "int", [(f"TG_KIND_{k.name.upper()}", 1) for k in scal if k.kind == "float"],
                     "0")
    ints = [k for k in scal if k.kind in ("int", "uint")]
    out += ["/* the range of an integer kind (others: 0) */"]
    out += _c_switch("tg_kind_min", "long long",
                     [(f"TG_KIND_{k.name.upper()}", _c_int(int_range(k.kind, k.size * 8)[0])) for k in ints], "0")
    out += _c_switch("tg_kind_max", "unsigned long long",
                     [(f"TG_KIND_{k.name.upper()}", f"{int_range(k.kind, k.size * 8)[1]}ULL") for k in ints], "0")
    out += ["", "/* default grid cap of a device in threads (tapegrad.abi.threads_cap) */",
            "static inline int64_t tg_threads_cap(int64_t sm_count) {",
            "    return sm_count > 0 ? sm_count * TG_CAP_THREADS_PER_SM * TG_CAP_WAVES : 0;", "}", "",
            "/* CUDA blocks of a launch of `threads` threads (tapegrad.abi.grid_blocks): `lanes` launch threads",
            "   per CUDA thread (an elementwise forward entry: uncapped), else capped at `cap` threads unless",
            "   max_blocks > 0 caps it */",
            "static inline int64_t tg_grid_blocks(int64_t threads, int64_t block_dim, int64_t lanes,",
            "                                     int64_t max_blocks, int64_t cap) {",
            "    if (threads <= 0) return 0;",
            "    int64_t bd = block_dim > 0 ? block_dim : TG_DEFAULT_BLOCK_DIM;",
            "    if (lanes < 1) lanes = 1;",
            "    int64_t nb = ((threads + lanes - 1) / lanes + bd - 1) / bd;",
            "    if (max_blocks > 0) { if (nb > max_blocks) nb = max_blocks; }",
            "    else if (cap > 0 && lanes == 1) { int64_t c = cap / bd; if (c < 1) c = 1; if (nb > c) nb = c; }",
            "    return nb > TG_MAX_GRID_BLOCKS ? TG_MAX_GRID_BLOCKS : nb;", "}",
            "#endif  /* !__CUDACC_RTC__ */", "", "#endif  /* TG_ABI_H */", ""]
    return "\n".join(out)


def _c_int(v: int) -> str:
    # the most negative long long has no literal of its own
    return f"(-{-v - 1}LL - 1)" if v == -(2 ** 63) else f"{v}LL"


def header_text() -> str:
    """The checked-in header's text (what C sources include)."""
    with open(HEADER_PATH) as f:
        return f.read()


_INCLUDE = re.compile(r'\s*#\s*include\s+"(?:[^"]*/)?' + re.escape(HEADER_NAME) + '"')


def inline_header(source: str) -> str:
    """``source`` with its ``#include "...tg_abi.h"`` line replaced by the header's text, for
    sources compiled from text where no include path reaches ``tapegrad/include`` (and so a
    build cache keyed by the text sees the header's changes)."""
    out = []
    for line in source.split("\n"):
        if _INCLUDE.match(line):
            out.append(header_text().rstrip("\n"))
        else:
            out.append(line)
    return "\n".join(out)


def main(argv=None) -> int:
    """``python -m tapegrad.abi --write | --check``: write the header, or exit 1 when it is stale."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args not in (["--write"], ["--check"]):
        print("usage: python -m tapegrad.abi --write | --check", file=sys.stderr)
        return 2
    text = generate_header()
    if args == ["--write"]:
        os.makedirs(os.path.dirname(HEADER_PATH), exist_ok=True)
        with open(HEADER_PATH, "w") as f:
            f.write(text)
        print(f"wrote {HEADER_PATH}")
        return 0
    try:
        current = header_text()
    except FileNotFoundError:
        current = None
    if current != text:
        print(f"{HEADER_PATH} is stale: run python -m tapegrad.abi --write", file=sys.stderr)
        return 1
    print(f"{HEADER_PATH} is current")
    return 0

