"""IR -> C++ source, one translation unit for both targets.

The generated file is the runtime headers (inlined, so NVRTC needs no include path), the
struct definitions, every ``@func`` as ``NAME_fwd`` / ``NAME_rep`` (replay: no side effects)
/ ``NAME_adj``, every kernel as ``KEY_fwd`` / ``KEY_adj`` per-thread bodies, and thin entry
points: ``KEY_cpu_forward/backward(const launch_t*, void**)`` (OpenMP over the grid) and
``KEY_cuda_forward/backward(launch_t, args...)`` (grid-stride loop), selected by ``TG_CUDA``.
Statements carry ``// @file:line`` comments so compiler errors map back to Python lines.

Variants (``Variant``): the default build is what release launches of at most 2^31 - 1
threads run; the *wide* variant (``tid()``, ``len()``, ``a.shape[k]`` int64, 64-bit grid loops)
serves larger launches and the *debug* variant guards every array access with a bounds check
(``runtime/debug.h``; the sites table maps each check back to its array and Python line). The
runtime headers a variant needs are inlined only into its units, so default builds are
byte-identical to what they were before variants existed.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from .. import abi
from ..errors import WarpCodegenTypeError
from ..types import MatrixType, ScalarType, VectorType, float32, float64, int32
from .adjoint import active
from .elementwise import cuda_forward_entry, vector_plan, window_function
from .ir import AdjAccum, Assign, Const, If, Loop, Print, Read, SetFlag, Var, Write, c_identifier, walk
from .structs import is_tuple_struct
from .typeutil import float_based, is_array, is_bool, is_float, is_int, is_mat, is_struct, is_vec

_RUNTIME_DIR = os.path.join(os.path.dirname(__file__), "runtime")
_RUNTIME_FILES = ("core.h", "scalar.h", "vec.h", "mathx.h", "atomic.h", "array.h")
# headers inlined only into units whose generated code names them (compile time of the rest)
_OPTIONAL_RUNTIME = (("random.h", ("tg::rng_",)), ("spatial.h", ("tg::sp_",)),
                     ("wide.h", ("tg::tid64", "tg::shape64")), ("debug.h", ("tg::dbg_",)),
                     ("vector.h", ("tg::window_t",)), ("dual.h", ("tg::dual<", "tg::darray_t<")),
                     ("warpx.h", ("tg::wx_",)), ("linalg.h", ("tg::la_",)))
# headers inlined only into units that name all their markers (after the ones above)
_OPTIONAL_RUNTIME_ALL = (("dualx.h", ("tg::dual<", "tg::wx_")), ("linalgd.h", ("tg::dual<", "tg::la_")))
_runtime_text = None
_optional_text: dict = {}

OMP_GRAIN = 1024    # the fewest grid threads of an OpenMP chunk on the CPU (a kernel's cpu_grain)
OMP_MIN_CHUNKS = 4  # launches of fewer grains than this stay on one thread (a parallel region costs µs)
OMP_MIN = OMP_MIN_CHUNKS * OMP_GRAIN


def runtime_source() -> str:
    """The runtime headers concatenated (``#pragma once`` stripped: they are inlined)."""
    global _runtime_text
    if _runtime_text is None:
        # the kernel ABI's structs first (the runtime's launch_t, array_t, dbg_slot_t match them)
        parts = ["// ---- include/tg_abi.h\n" + abi.header_text()]
        for f in _RUNTIME_FILES:
            with open(os.path.join(_RUNTIME_DIR, f)) as fh:
                parts.append(f"// ---- runtime/{f}\n" + fh.read().replace("#pragma once\n", ""))
        _runtime_text = "\n".join(parts)
    return _runtime_text


@dataclass(frozen=True)
class Variant:
    """Which build of a kernel: ``wide`` (64-bit thread index), ``debug`` (bounds checks) and
    ``serial`` (CPU entries run the grid on the calling thread in grid order, for
    ``DeterministicMode.RUN_TO_RUN``: floating-point atomics then accumulate in the same order
    on every run)."""

    wide: bool = False
    debug: bool = False
    serial: bool = False

    @property
    def suffix(self) -> str:
        """What the variant adds to a module's file name ("" for the default build)."""
        return ("_w" if self.wide else "") + ("_dbg" if self.debug else "") + ("_ser" if self.serial else "")


DEFAULT = Variant()


@dataclass(frozen=True)
class DebugSite:
    """One bounds-checked array access of a debug build.

    Attributes:
        function: the kernel's key or the ``@func``'s Python name.
        array: the array's name in the source (a parameter's name, else "an array").
        location: ``file:line`` of the statement.
        access: "read", "write", "atomic_add"..., or "adjoint of ..." in the backward pass.
    """

    function: str
    array: str
    location: str
    access: str


@dataclass
class DebugSites:
    """The table of ``DebugSite`` of one translation unit (the C++ checks carry the index)."""

    sites: list = field(default_factory=list)
    _ids: dict = field(default_factory=dict)

    def site(self, key, make) -> int:
        """The id of the site ``key`` (a statement and pass), made by ``make()`` when new."""
        k = self._ids.get(key)
        if k is None:
            k = self._ids[key] = len(self.sites)
            self.sites.append(make())
        return k


# the array-access ops and how many trailing value operands follow the indices
_ACCESS_VALUES = {"load": 0, "store": 1, "atomic_add": 1, "atomic_sub": 1, "atomic_min": 1, "atomic_max": 1,
                  "atomic_exch": 1, "atomic_cas": 2, "atomic_and": 1, "atomic_or": 1, "atomic_xor": 1,
                  "index_map": 0}     # an indexed array's index lookup (lang/indexed.py) reads its index array


def adjoint_path(t, path) -> str:
    """The C++ accessor of ``path`` (struct field names, constant component indices) below a
    value of type ``t`` (``AdjAccum.path``)."""
    out = []
    k = 0
    while k < len(path):
        step = path[k]
        if isinstance(step, str):
            out.append(f".{step}")
            t = dict(t.fields)[step]
            k += 1
        elif is_mat(t):
            out.append(f".data[{path[k]}][{path[k + 1]}]")
            t = t.scalar
            k += 2
        else:
            out.append(f".c[{step}]")
            t = t.scalar
            k += 1
    return "".join(out)


def adj_name(v) -> str:
    if getattr(v, "kind", None) == "typearg":
        return ""
    return "adj_" + v.name


# ------------------------------------------------------------------------------ literals

def float_literal(v: float, s) -> str:
    """C++ source for the float constant ``v`` of scalar type ``s`` (NaN/inf as bit patterns)."""
    if math.isnan(v):
        return "tg::bits_float(0x7fc00000u)" if s is not float64 else "tg::from_bits<double>(0x7ff8000000000000ull)"
    if math.isinf(v):
        sign = "-" if v < 0 else ""
        if s is float64:
            return f"{sign}tg::from_bits<double>(0x7ff0000000000000ull)"
        return f"{sign}tg::bits_float(0x7f800000u)"
    if s is float64:
        return repr(float(v))
    text = repr(float(np.float32(v))) + "f"
    if "e" not in text and "." not in text:
        text = text[:-1] + ".0f"
    return text if s is float32 else f"{s.cname}({text})"   # half(...), tg::bfloat16_t(...)


def literal(value, t) -> str:
    """C++ source for a constant of tapegrad type ``t`` (``value`` as ``typeutil.constant_value``
    returns it, or anything that converts the same way)."""
    if isinstance(t, ScalarType):
        if t.kind == "bool":
            return "true" if bool(value) else "false"
        if t.kind == "float":
            return float_literal(float(value), t)
        v = int(value)
        if t.kind == "uint":
            v &= (1 << t.bits) - 1
            return f"{t.cname}({v}ull)"
        if t.bits == 64 and v == -(1 << 63):
            return "int64_t(-9223372036854775807ll - 1)"
        return f"{t.cname}({v}ll)"
    if isinstance(t, VectorType):
        flat = np.asarray(value).reshape(-1)
        return f"tg::make_vec<{t.length_}, {t.scalar.cname}>({', '.join(literal(x, t.scalar) for x in flat)})"
    if isinstance(t, MatrixType):
        flat = np.asarray(value).reshape(-1)
        return f"tg::make_mat<{t.rows}, {t.cols}, {t.scalar.cname}>({', '.join(literal(x, t.scalar) for x in flat)})"
    raise TypeError(f"no constant literal for {t!r}")


def c_string(s: str) -> str:
    """Escape ``s`` for a C string literal."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out)


def print_format(t):
    """(printf conversion, argument expression templates) printing a value of type ``t``."""
    if is_float(t):
        return "%g", ["double({})"]
    if is_bool(t):
        return "%d", ["int({})"]
    if is_int(t):
        return ("%llu" if t.kind == "uint" else "%lld"), ["(long long)({})"]
    if is_vec(t) and is_float(t.scalar):
        return "[" + " ".join(["%g"] * t.length_) + "]", [f"double({{}}.c[{k}])" for k in range(t.length_)]
    if is_mat(t) and is_float(t.scalar):
        rows = ["[" + " ".join(["%g"] * t.cols) + "]" for _ in range(t.rows)]
        return "[" + " ".join(rows) + "]", [f"double({{}}.data[{i}][{j}])"
                                            for i in range(t.rows) for j in range(t.cols)]
    raise TypeError(f"cannot print a {t!r}")


def print_call(s) -> tuple:
    """(C format string, argument expressions) of a ``Print`` statement."""
    if s.fmt is not None:   # printf(fmt, ...): floats promoted to double as C varargs need
        return c_string(s.fmt), [f"double({v.name})" if is_float(v.type) else v.name for v in s.items]
    parts, vals = [], []
    for item in s.items:
        if isinstance(item, str):
            parts.append(c_string(item).replace("%", "%%"))
            continue
        fmt, exprs = print_format(item.type)
        parts.append(fmt)
        vals += [e.format(item.name) for e in exprs]
    return " ".join(parts) + "\\n", vals


def param_adjoint_type(t):
    """The C++ type of a parameter's adjoint argument (arrays: a descriptor by value)."""
    if is_array(t):
        return f"const {t.cname}&"
    return f"{t.cname}&"


class FunctionEmitter:
    """Emits the forward, replay and adjoint C++ functions of one ``FunctionIR``."""

    def __init__(self, fn, sites=None):
        self.fn = fn
        self.sites = sites          # a DebugSites in debug builds: every array access is checked
        self._last_loc = None
        self.adjoints = False       # whether the function being emitted declares adjoint variables

    # -------------------------------------------------------------- hooks (lang/tangent.py overrides them)
    def ctype(self, t) -> str:
        """The C++ type of a value of type ``t``."""
        return t.cname

    def adjoint_ctype(self, t) -> str:
        """The C++ type of a parameter's adjoint argument."""
        return param_adjoint_type(t)

    def op_text(self, s, args, replay) -> str:
        """The forward (or ``replay``) C++ of the Assign ``s`` with argument names ``args``."""
        op = s.op
        render = op.replay if replay and op.replay is not None else op.fwd
        return render(args)

    def adj_text(self, s, args, adjs, g) -> str:
        """The adjoint C++ of the active Assign ``s``."""
        return s.op.adj(args, adjs, g)

    def const_text(self, s) -> str:
        """The C++ literal of the Const ``s``."""
        return literal(s.value, s.out.type)

    # -------------------------------------------------------------- debug checks
    def check(self, s, reverse=False):
        """The bounds-check condition guarding statement ``s`` in a debug build (None: no check);
        for an int32 ``len(a)``/``a.shape[k]``, the check that ``a``'s extents fit an int32."""
        if self.sites is None or not isinstance(s, Assign) or not s.args:
            return None
        if s.op.name in ("extract", "assign") and (is_vec(s.args[0].type) or is_mat(s.args[0].type)):
            return self.component_check(s, reverse)
        if not is_array(s.args[0].type):
            return None
        extent = s.op.name in ("len", "shape") and s.out is not None and s.out.type is int32
        nv = 0 if extent else _ACCESS_VALUES.get(s.op.name)
        if nv is None:
            return None
        arr = s.args[0]
        idx = s.args[1:len(s.args) - nv]
        loc = getattr(s, "loc", None) or self._last_loc or self.fn.loc
        access = "extent" if extent else {"load": "read", "store": "write", "index_map": "index-array read"}.get(
            s.op.name, s.op.name)

        def make():
            who = self.fn.loc.func if self.fn.kind != "kernel" and self.fn.loc is not None else self.fn.name
            where = f"{loc.file}:{loc.line}" if loc is not None else "?"
            name = arr.label if arr.kind == "param" and arr.label else "an array"
            return DebugSite(who, name, where, f"adjoint of {access}" if reverse else access)
        site = self.sites.site((id(s), reverse), make)
        if extent:
            return f"tg::dbg_narrow({arr.name}, {site})"
        ok = f"tg::dbg_ok({', '.join([arr.name, str(site)] + [a.name for a in idx])})"
        if s.op.name == "index_map":     # a null index array (a dimension not indexed) reads nothing
            return f"(!{arr.name}.data || {ok})"
        return ok

    def component_check(self, s, reverse):
        """A debug build's check of a runtime vector/matrix component index (``v[i]``, ``m[i, j]``,
        reads and local updates): constant indices were checked when the kernel was lowered."""
        t, op = s.args[0].type, s.op.name
        idx = s.args[1:len(s.args) - (1 if op == "assign" else 0)]
        extents = (t.length_,) if is_vec(t) else (t.rows, t.cols)
        if all(isinstance(getattr(v, "const", None), int) for v in idx):
            return None
        loc = getattr(s, "loc", None) or self._last_loc or self.fn.loc
        v = s.args[0]
        access = "component read" if op == "extract" else "component write"

        def make():
            who = self.fn.loc.func if self.fn.kind != "kernel" and self.fn.loc is not None else self.fn.name
            where = f"{loc.file}:{loc.line}" if loc is not None else "?"
            name = f"'{v.label}' ({t!r})" if v.kind in ("local", "param") else f"a {t!r} value"
            return DebugSite(who, name, where, f"adjoint of {access}" if reverse else access)
        site = self.sites.site((id(s), reverse), make)
        pairs = [f"{n}, {i.name}" for n, i in zip(extents, idx)]
        return f"tg::dbg_comp({site}, {', '.join(pairs)})"

    # -------------------------------------------------------------- forward statements
    def fwd(self, stmts, lines, ind, replay=False):
        pad = "    " * ind
        for s in stmts:
            loc = getattr(s, "loc", None)
            if loc is not None and loc != self._last_loc:
                lines.append(f"{pad}// @{loc.file}:{loc.line}")
                self._last_loc = loc
            if isinstance(s, Assign):
                op = s.op
                args = [a.name for a in s.args]
                if replay and op.replay == "skip":
                    continue
                text = self.op_text(s, args, replay)
                guard = self.check(s)
                if guard is not None and guard.startswith("tg::dbg_narrow"):
                    lines.append(f"{pad}{s.out.name} = ({guard}, {text});")
                elif guard is not None:
                    if s.out is not None and op.name == "assign":   # a skipped update leaves the value as it was
                        lines.append(f"{pad}{s.out.name} = {guard} ? ({text}) : {args[0]};")
                    elif s.out is not None:
                        lines.append(f"{pad}{s.out.name} = {guard} ? ({text}) : {s.out.type.cname}{{}};")
                    else:
                        lines.append(f"{pad}if ({guard}) {{ {text if text.rstrip().endswith(';') else text + ';'} }}")
                elif s.out is not None:
                    lines.append(f"{pad}{s.out.name} = {text};")
                    if replay and op.array_adj is not None and self.adjoints:   # not in a _rep function
                        lines.append(f"{pad}{adj_name(s.out)} = {op.array_adj(args, [adj_name(a) for a in s.args])};")
                else:
                    lines.append(pad + (text if text.rstrip().endswith(";") else text + ";"))
            elif isinstance(s, Const):
                lines.append(f"{pad}{s.out.name} = {self.const_text(s)};")
            elif isinstance(s, Read):
                lines.append(f"{pad}{s.out.name} = {s.var.name};")
            elif isinstance(s, Write):
                lines.append(f"{pad}{s.var.name} = {s.src.name};")
            elif isinstance(s, SetFlag):
                lines.append(f"{pad}{s.var.name} = {s.value};")
            elif isinstance(s, If):
                lines.append(f"{pad}if ({s.cond.name}) {{")
                self.fwd(s.body, lines, ind + 1, replay)
                if s.orelse:
                    lines.append(f"{pad}}} else {{")
                    self.fwd(s.orelse, lines, ind + 1, replay)
                lines.append(pad + "}")
            elif isinstance(s, Loop):
                self.loop(s, lines, ind, replay)
            elif isinstance(s, AdjAccum):
                lines.append(f"{pad}tg::accum({adj_name(s.param)}{adjoint_path(s.param.type, s.path)}, {s.src.name});")
            elif isinstance(s, Print):
                if replay:
                    continue
                text, vals = print_call(s)
                tail = "".join(", " + x for x in vals)
                lines.append(f'{pad}printf("{text}"{tail});')
                lines.append("#ifndef TG_CUDA")
                lines.append(f"{pad}fflush(stdout);")
                lines.append("#endif")
            else:
                raise TypeError(f"unknown IR statement {s!r}")

    def loop(self, s, lines, ind, replay):
        pad = "    " * ind
        inner = "    " * (ind + 1)
        if replay and s.mode == "prefix":
            for v, snap in s.carried:
                lines.append(f"{pad}{snap.name} = {v.name};")
        lines.append(f"{pad}{s.cnt.name} = 0;")
        stop = [f.name for f in (s.brk, self.fn.ret_flag) if f is not None]
        if s.kind == "range":
            k = f"{s.cnt.name}_i"
            lines.append(f"{pad}for (int64_t {k} = 0; {k} < {s.count.name}; ++{k}) {{")
            lines.append(f"{inner}{s.cnt.name} = {k} + 1;")
            lines.append(f"{inner}{s.brk.name} = false; {s.cont.name} = false;")
            lines.append(f"{inner}{s.var.name} = {self.ctype(s.var.type)}({s.start.name} + {k} * {s.step.name});")
        else:
            lines.append(f"{pad}while (true) {{")
            self.fwd(s.header, lines, ind + 1, replay)
            lines.append(f"{inner}if (!({s.cond.name})) break;")
            lines.append(f"{inner}++{s.cnt.name};")
            lines.append(f"{inner}{s.brk.name} = false; {s.cont.name} = false;")
        self.fwd(s.body, lines, ind + 1, replay)
        lines.append(f"{inner}if ({' || '.join(stop)}) break;")
        lines.append(pad + "}")

    # -------------------------------------------------------------- declarations
    def decls(self, adjoint):
        out = []
        for v in self.fn.vars:
            if v.type is None:
                continue
            out.append(f"    {self.ctype(v.type)} {v.name}{{}};")
            if adjoint and v.kind in ("temp", "local"):
                out.append(f"    {self.ctype(v.type)} {adj_name(v)}{{}};")
        return out

    def params(self, with_bounds):
        ps = [f"{self.ctype(p.type)} {p.name}" for p in self.fn.params]
        if with_bounds:
            ps = ["const tg::launch_t& tg_bounds", "int64_t tg_tid"] + ps
        return ps

    def adj_params(self):
        return [f"{self.adjoint_ctype(p.type)} {adj_name(p)}" for p in self.fn.params]

    # -------------------------------------------------------------- functions
    def forward_function(self, name, replay=False):
        fn = self.fn
        kernel = fn.kind == "kernel"
        ret = self.ctype(fn.ret_type) if fn.ret_type is not None else "void"
        lines = [f"static TG_FUNC {ret} {name}({', '.join(self.params(kernel))}) {{"]
        lines += self.decls(False)
        self.adjoints = False   # no adjoint variables declared here
        self._last_loc = None
        self.fwd(fn.body, lines, 1, replay)
        if fn.ret_var is not None:
            lines.append(f"    return {fn.ret_var.name};")
        lines.append("}")
        return "\n".join(lines)

    def native_functions(self) -> str:
        """A ``@func_native``'s functions: the user's C++ bodies under the parameters' own names
        (``a``, ``adj_a``, ``adj_ret``)."""
        fn = self.fn
        body, adj, replay = fn.native
        ret = self.ctype(fn.ret_type) if fn.ret_type is not None else "void"
        ps = ", ".join(self.params(False))
        parts = [f"static TG_FUNC {ret} {fn.name}_fwd({ps}) {{\n{body}\n}}"]
        if fn.side_effects:
            parts.append(f"static TG_FUNC {ret} {fn.name}_rep({ps}) {{\n{replay if replay is not None else body}\n}}")
        aps = self.params(False) + self.adj_params()
        if fn.ret_type is not None:
            aps.append(f"{self.ctype(fn.ret_type)} adj_ret")
        parts.append(f"static TG_FUNC void {fn.name}_adj({', '.join(aps)}) {{\n{adj or ''}\n}}")
        return "\n\n".join(parts)

    def adjoint_function(self, name):
        fn = self.fn
        kernel = fn.kind == "kernel"
        ps = self.params(kernel) + self.adj_params()
        if fn.kind == "grad":
            # a user adjoint: its last parameter is adj_ret, its body accumulates tg.adjoint[...]
            rt = fn.adj_ret_type
            fields = list(rt.fields) if is_tuple_struct(rt) else None
            if fields is not None:
                # a function returning a tuple: callers pass the adjoint of the tuple struct; the
                # user's adj_ret0, adj_ret1... are its members
                n = len(fields)
                ps = self.params(False)[:-n] + self.adj_params()[:-n] + [f"{rt.cname} tg_adj_ret"]
                lines = [f"static TG_FUNC void {name}({', '.join(ps)}) {{"]
                lines += [f"    {self.ctype(p.type)} {p.name} = tg_adj_ret.{f};"
                          for p, (f, _) in zip(fn.params[-n:], fields)]
            elif rt is None:   # a function without a result: its adjoint gets no adj_ret
                ps = self.params(False) + self.adj_params()
                lines = [f"static TG_FUNC void {name}({', '.join(ps)}) {{"]
            else:
                last = fn.params[-1]
                ps = self.params(False)[:-1] + self.adj_params()[:-1] + [f"{self.ctype(last.type)} {last.name}"]
                lines = [f"static TG_FUNC void {name}({', '.join(ps)}) {{"]
            lines += self.decls(False)
            self._last_loc = None
            self.fwd(fn.body, lines, 1, False)
            lines.append("}")
            return "\n".join(lines)
        if fn.ret_var is not None:
            ps.append(f"{self.ctype(fn.ret_type)} adj_ret")
        lines = [f"static TG_FUNC void {name}({', '.join(ps)}) {{"]
        lines += self.decls(True)
        self.adjoints = True
        self._last_loc = None
        self.fwd(fn.body, lines, 1, True)
        if fn.ret_var is not None:
            lines.append(f"    tg::accum({adj_name(fn.ret_var)}, adj_ret);")
        lines.append("    // reverse")
        self.reverse(fn.body, lines, 1)
        lines.append("}")
        return "\n".join(lines)

    # -------------------------------------------------------------- reverse sweep
    def reverse(self, stmts, lines, ind):
        """The reverse sweep of ``stmts``: each active statement's adjoint, last to first."""
        for s in reversed(stmts):
            self.reverse_stmt(s, lines, ind)

    def reverse_stmt(self, s, lines, ind):
        pad = "    " * ind
        if isinstance(s, Assign):
            if not active(s):
                return
            args = [a.name for a in s.args]
            adjs = [adj_name(a) for a in s.args]
            g = adj_name(s.out) if s.out is not None else None
            guard = self.check(s, reverse=True)
            text = self.adj_text(s, args, adjs, g)
            lines.append(pad + (text if guard is None else f"if ({guard}) {{ {text} }}"))
        elif isinstance(s, Read):
            if float_based(s.out.type) and not is_array(s.out.type):
                lines.append(f"{pad}tg::accum({adj_name(s.var)}, {adj_name(s.out)});")
        elif isinstance(s, Write):
            if float_based(s.var.type) and not is_array(s.var.type):
                lines.append(f"{pad}tg::accum({adj_name(s.src)}, {adj_name(s.var)}); tg::zero({adj_name(s.var)});")
        elif isinstance(s, If):
            body, orelse = [], []
            self.reverse(s.body, body, ind + 1)
            self.reverse(s.orelse, orelse, ind + 1)
            if body or orelse:
                lines.append(f"{pad}if ({s.cond.name}) {{")
                lines.extend(body)
                if orelse:
                    lines.append(f"{pad}}} else {{")
                    lines.extend(orelse)
                lines.append(pad + "}")
        elif isinstance(s, Loop):
            self.reverse_loop(s, lines, ind)

    def reverse_loop(self, s, lines, ind):
        """A dynamic loop backwards: for each iteration, last first, replay it (``prefix`` mode:
        after re-running the iterations before it from the loop-carried snapshots), then sweep it."""
        pad = "    " * ind
        rev = []
        self.reverse(s.body, rev, ind + 2)
        if not rev:
            return      # nothing differentiable inside
        k = f"{s.cnt.name}_k"
        lines.append(f"{pad}for (int64_t {k} = {s.cnt.name} - 1; {k} >= 0; --{k}) {{")
        inner = "    " * (ind + 1)
        if s.mode == "prefix":
            for v, snap in s.carried:
                lines.append(f"{inner}{v.name} = {snap.name};")
            j = f"{s.cnt.name}_j"
            lines.append(f"{inner}for (int64_t {j} = 0; {j} < {k}; ++{j}) {{")
            self.iteration(s, j, lines, ind + 2)
            lines.append(inner + "}")
        self.iteration(s, k, lines, ind + 1)
        for v in _body_temps(s):
            lines.append(f"{inner}tg::zero({adj_name(v)});")
        lines.extend(rev)
        lines.append(pad + "}")

    def iteration(self, s, k, lines, ind):
        """Forward replay of iteration ``k`` of loop ``s`` (flags reset, loop variable set)."""
        pad = "    " * ind
        for f in (s.brk, s.cont, self.fn.ret_flag):   # every iteration that ran started with them clear
            if f is not None:
                lines.append(f"{pad}{f.name} = false;")
        if s.kind == "range":
            lines.append(f"{pad}{s.var.name} = {self.ctype(s.var.type)}({s.start.name} + {k} * {s.step.name});")
        self.fwd(s.header, lines, ind, True)
        self.fwd(s.body, lines, ind, True)


def _body_temps(loop):
    """The non-array temps a loop defines: their adjoints are zeroed before each iteration's sweep."""
    out = []
    for s in walk(loop.header + loop.body):
        v = getattr(s, "out", None)
        if isinstance(v, Var) and v.kind == "temp" and not is_array(v.type) and v.type is not None:
            out.append(v)
    return out


def emit_func(fn, grad=None, sites=None) -> str:
    """C++ for a ``@func`` specialization: ``_fwd``, ``_rep`` when it has side effects, and
    ``_adj`` (generated, or the user's ``@func_grad`` when ``grad`` is given); ``sites``: the
    debug build's table of bounds checks (None: no checks)."""
    e = FunctionEmitter(fn, sites)
    if fn.native is not None:
        return e.native_functions()
    parts = [e.forward_function(f"{fn.name}_fwd")]
    if fn.replay_ir is not None:   # the user's @func_replay body, run as it is
        parts.append(FunctionEmitter(fn.replay_ir, sites).forward_function(f"{fn.name}_rep"))
    elif fn.side_effects:
        parts.append(e.forward_function(f"{fn.name}_rep", replay=True))
    if grad is not None:
        parts.append(FunctionEmitter(grad, sites).adjoint_function(f"{fn.name}_adj"))
    else:
        parts.append(e.adjoint_function(f"{fn.name}_adj"))
    return "\n\n".join(parts)


def serial_first(region: list, indent: str, omp_min: str = "TG_OMP_MIN") -> list:
    """``region`` (an OpenMP parallel region's lines) preceded by its serial copy for launches
    under ``TG_OMP_MIN`` threads: ``#pragma omp parallel if (false)`` still enters libgomp, which
    allocates a team and takes its locks (~0.2 us of a small CPU launch), so a small launch
    runs the loop without any pragma and returns."""
    return [f"{indent}if (tg_bounds.size < {omp_min}) {{", *serial_only(region), f"{indent}    return;", f"{indent}}}",
            *region]


def serial_only(region: list) -> list:
    """``region`` (an OpenMP parallel region's lines) without its OpenMP lines: the same loop
    on the calling thread, in grid order (a ``serial`` build, ``Variant``)."""
    return [line for line in region if "#pragma omp" not in line and "tg_chunk =" not in line and "tg_fp" not in line]


def omp_team(clauses: str, body: list, indent: str = "    ") -> list:
    """An OpenMP parallel region (``#pragma omp parallel <clauses>``) running ``body``, whose
    threads each run under the launching thread's floating-point mode (``tg::fp_scope_t``:
    the pool's threads are shared with other libraries, which may leave flush-to-zero set on
    them) and get their own back at its end."""
    return [f"{indent}const tg::fp_mode_t tg_fp = tg::fp_mode();", f"{indent}#pragma omp parallel {clauses}",
            f"{indent}{{", f"{indent}    const tg::fp_scope_t tg_fp_scope(tg_fp);", *body, f"{indent}}}"]


def _cpu_forward_loops(fn, sym, ts, wide=False, grain=None, serial=False) -> tuple:
    """The forward grid loop of the CPU entry point: ``(helper lines, entry body lines)``.

    When every array argument is dense in its innermost dimension (the common case), the loop
    runs in ``KEY_dense(bounds, lo, hi, args...)``, a function of its own that works on copies
    of the arguments whose innermost strides are the compile-time element size, with a 32-bit
    thread index (``tid()`` is 32-bit anyway): the compiler vectorizes its plain loop over
    ``[lo, hi)`` (with its own run-time overlap checks, so behaviour is identical). A launch
    under ``TG_OMP_MIN`` threads calls it once, without entering OpenMP; a larger one asks for a
    team of at most one thread per chunk (``tg::omp_plan_t``: about 32 chunks per thread, at
    least 1024 grid threads each), whose threads each drain a contiguous block of chunks of
    their own and then help the others (``tg::omp_walk_t``): the same thread touches the same
    memory launch after launch (it stays in that core's caches, as with a static schedule),
    and when another process shares a core the other threads take over its work (a static
    schedule halves on 2 cores). The helper's loop counts ``k`` from 0 and indexes ``lo + k``:
    a loop from a run-time start (``for (t = lo; ...)``, or libgomp's chunks of an ``omp for``)
    left GCC 12 unable to see the index is not negative, so each access kept
    ``tg::wrap_index``'s branch and no loop was vectorized (tg.optim.SGD on one core, 10^6
    float32: 1032 -> 413 us a step). Otherwise (strided views, ``None`` arrays, grids past
    2^31) the generic loop runs. The wide variant (``wide``: launches past 2^31 - 1
    threads) keeps the dense copy with a 64-bit index. ``grain`` (the kernel's ``cpu_grain``;
    None: ``OMP_GRAIN``) is the fewest grid threads of a chunk; launches under ``4 grain``
    threads run serially (``TG_OMP_MIN`` by default). ``serial``: the plain loop over the grid
    in order on the calling thread, nothing else (``Variant.serial``).
    """
    g = OMP_GRAIN if grain is None else int(grain)
    omp_min = "TG_OMP_MIN" if grain is None else str(OMP_MIN_CHUNKS * g)
    n = len(fn.params)
    if serial:
        return [], [f"    for (int64_t tg_t = 0; tg_t < tg_bounds.size; ++tg_t) "
                    f"{sym}_fwd({', '.join(['tg_bounds', 'tg_t'] + [f'a{i}' for i in range(n)])});"]
    arrays = [i for i, p in enumerate(fn.params) if is_array(p.type)]
    generic = omp_team(f"if (tg_bounds.size >= {omp_min})", [
        f"        const int64_t tg_chunk = tg::omp_chunk(tg_bounds.size, {g});",
        "        #pragma omp for schedule(dynamic, tg_chunk)",
        f"        for (int64_t tg_t = 0; tg_t < tg_bounds.size; ++tg_t) "
        f"{sym}_fwd({', '.join(['tg_bounds', 'tg_t'] + [f'a{i}' for i in range(n)])});"])
    generic = serial_first(generic, "    ", omp_min)
    if not arrays:
        return [], generic
    ti = "int64_t" if wide else "int32_t"
    params = ", ".join(["const tg::launch_t& tg_bounds", f"{ti} tg_lo", f"{ti} tg_hi"]
                       + [f"const {t}& a{i}" for i, t in enumerate(ts)])
    # noinline: one copy serves the serial call and the team's chunks
    helper = [f"static __attribute__((noinline)) void {sym}_dense({params}) {{"]
    for i, t in enumerate(ts):
        # every argument copied to a local: a scalar read through a reference could alias the
        # arrays' stores, which would keep it from being hoisted out of the loop
        helper.append(f"    {t} d{i} = a{i};")
        if i in arrays:
            helper[-1] += f" d{i}.strides[{fn.params[i].type.ndim - 1}] = int64_t(sizeof(*d{i}.data));"
    # the thread index as lo + k, k counted from 0, lo checked non-negative: the compiler then
    # sees every index is >= 0 and drops tg::wrap_index's negative branch (with `for (t = lo;
    # t < hi; ++t)` GCC 12 keeps it, and a loop with a branch is never vectorized)
    helper += ["    if (tg_lo < 0) return;",
               f"    const {ti} tg_m = tg_hi - tg_lo;",
               f"    for ({ti} tg_k = 0; tg_k < tg_m; ++tg_k) {{",
               f"        const {ti} tg_t = tg_lo + tg_k;",
               f"        {sym}_fwd({', '.join(['tg_bounds', 'tg_t'] + [f'd{i}' for i in range(n)])});", "    }", "}"]
    args = ", ".join(f"a{i}" for i in range(n))
    dense = " && ".join(f"a{i}.strides[{fn.params[i].type.ndim - 1}] == int64_t(sizeof(*a{i}.data))" for i in arrays)
    fast = [f"    if ({dense}) {{" if wide else f"    if (tg_bounds.size <= 0x7fffffff && {dense}) {{",
            f"        const {ti} tg_n = {ti}(tg_bounds.size);",
            f"        if (tg_n < {omp_min}) {{", f"            {sym}_dense(tg_bounds, 0, tg_n, {args});",
            "            return;", "        }",
            f"        tg::omp_plan_t tg_plan(tg_n, {g});",
            "        if (tg_plan.blocks == 1) {   // one thread (OMP_NUM_THREADS=1, or one chunk): no region",
            f"            {sym}_dense(tg_bounds, 0, tg_n, {args});", "            return;", "        }",
            *omp_team("num_threads(tg_plan.blocks)", [
                "            tg::omp_walk_t tg_walk(tg_plan);",
                "            for (int64_t tg_c = tg_walk.next(); tg_c >= 0; tg_c = tg_walk.next()) {",
                f"                const {ti} tg_lo = {ti}(tg_c * tg_plan.chunk);",
                f"                const {ti} tg_hi = "
                f"tg_n - tg_lo < tg_plan.chunk ? tg_n : {ti}(tg_lo + tg_plan.chunk);",
                f"                {sym}_dense(tg_bounds, tg_lo, tg_hi, {args});",
                "            }"], "        "),
            "        return;", "    }"]
    return helper, fast + generic


@dataclass(frozen=True)
class ExternalEntry:
    """A kernel with Warp's ``external_constant_params`` entry point ABI (``abi.ENTRY_POINT_ABIS``):
    its CUDA forward entry is ``extern "C" __global__ void <name>()`` reading the kernel's one
    struct argument from the unit's ``__constant__`` array ``abi.EXTERNAL_PARAMS_SYMBOL``; the
    unit has no CPU entry and no adjoint for it.

    Attributes:
        name: the entry's symbol (``abi.external_entry_name``).
    """

    name: str


def _external_cuda_entry(fn, sym, ext) -> list:
    """The CUDA lines of an ``external_constant_params`` entry (``ExternalEntry``). The body
    runs once per CUDA thread of whatever grid the outside launcher picks: ``tid()`` is refused
    before emission (``Kernel.cpp_parts``), so the bounds the per-thread body takes are unused."""
    p = fn.params[0]
    t = p.type.cname
    local = f"var_{c_identifier(p.label)}"   # the parameter's Python name, as Warp's entries spell it
    return [f'extern "C" __global__ void {ext.name}() {{',
            f"    const {t} {local} = *reinterpret_cast<const {t}*>({abi.EXTERNAL_PARAMS_SYMBOL});",
            "    const tg::launch_t tg_bounds{};",
            f"    {sym}_fwd(tg_bounds, 0, {local});",
            "}"]


def external_params_decl(t) -> str:
    """The unit's ``__constant__`` bytes of an external entry's struct argument of type ``t``
    (one per unit: every external entry of a unit reads the same symbol)."""
    return (f'#ifdef TG_CUDA\nextern "C" {{\n__constant__ __align__(alignof({t.cname})) unsigned char '
            f"{abi.EXTERNAL_PARAMS_SYMBOL}[sizeof({t.cname})];\n}}\n#endif")


def emit_kernel(fn, sym, enable_backward, variant=DEFAULT, sites=None, external=None, cpu_grain=None) -> str:
    """C++ for a kernel: per-thread bodies and the CPU/CUDA entry points (of ``variant``; a
    debug variant's checks are numbered in ``sites`` and its CPU unit exports
    ``KEY_cpu_dbg_slot()``, the address of the error slot). ``external``: an ``ExternalEntry``
    (the kernel's only entry is that CUDA one)."""
    e = FunctionEmitter(fn, sites)
    parts = [e.forward_function(f"{sym}_fwd")]
    if external is not None:
        cuda = _external_cuda_entry(fn, sym, external)
        parts.append("#ifdef TG_CUDA\n" + "\n".join(cuda) + "\n#endif  // no CPU entry: an external CUDA entry only")
        return "\n\n".join(parts)
    if enable_backward:
        parts.append(e.adjoint_function(f"{sym}_adj"))
    n = len(fn.params)
    ts = [p.type.cname for p in fn.params]
    names = [f"a{i}" for i in range(n)]
    call = ", ".join(["tg_bounds", "tg_t"] + names)
    cpu_fwd, cpu_bwd, cpu_dbg, cuda_fwd, cuda_bwd = (abi.entry_name(sym, t, e) for t, e in (
        ("cpu", "forward"), ("cpu", "backward"), ("cpu", "dbg_slot"), ("cuda", "forward"), ("cuda", "backward")))
    # CPU
    helper, loops = _cpu_forward_loops(fn, sym, ts, variant.wide, cpu_grain, variant.serial)
    cpu = helper + [f'extern "C" TG_EXPORT void {cpu_fwd}(const tg::launch_t* tg_b, void** tg_args) {{',
                    "    const tg::launch_t tg_bounds = *tg_b;"]
    cpu += [f"    const {t} a{i} = *reinterpret_cast<const {t}*>(tg_args[{i}]);" for i, t in enumerate(ts)]
    cpu += loops + ["}"]
    if variant.debug:
        cpu.append(f'extern "C" TG_EXPORT void* {cpu_dbg}() {{ return &tg_dbg_slot; }}')
    if enable_backward:
        cpu += [f'extern "C" TG_EXPORT void {cpu_bwd}(const tg::launch_t* tg_b, void** tg_args) {{',
                "    const tg::launch_t tg_bounds = *tg_b;"]
        cpu += [f"    const {t} a{i} = *reinterpret_cast<const {t}*>(tg_args[{i}]);" for i, t in enumerate(ts)]
        acc_decls, flushes, body_decls, posts = [], [], [], []
        for i, p in enumerate(fn.params):
            t = ts[i]
            if is_array(p.type):
                cpu.append(f"    const {t} g{i} = *reinterpret_cast<const {t}*>(tg_args[{n + i}]);")
                continue
            cpu.append(f"    {t}* g{i}_out = reinterpret_cast<{t}*>(tg_args[{n + i}]);")
            body_decls.append(f"{t} g{i}{{}};")
            if float_based(p.type) and not is_struct(p.type):
                # one atomic per thread, not per element
                acc_decls.append(f"        {t} g{i}_acc{{}};")
                posts.append(f"tg::accum(g{i}_acc, g{i});")
                flushes.append(f"        if (g{i}_out && tg::nonzero(g{i}_acc)) tg::atomic_add_(g{i}_out, g{i}_acc);")
        gcall = ", ".join(["tg_bounds", "tg_t"] + names + [f"g{i}" for i in range(n)])
        region = omp_team("if (tg_bounds.size >= TG_OMP_MIN)", [
            *acc_decls, "        #pragma omp for schedule(static)",
            "        for (int64_t tg_t = 0; tg_t < tg_bounds.size; ++tg_t) {",
            "            " + " ".join(body_decls),
            f"            {sym}_adj({gcall});",
            "            " + " ".join(posts),
            "        }", *flushes])
        cpu += (serial_only(region) if variant.serial else serial_first(region, "    ")) + ["}"]
    # CUDA
    kparams = ", ".join(["tg::launch_t tg_bounds"] + [f"{t} a{i}" for i, t in enumerate(ts)])
    grid = ("    for (int64_t tg_t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; tg_t < tg_bounds.size; "
            "tg_t += int64_t(blockDim.x) * gridDim.x)")
    vec = vector_plan(fn) if variant == DEFAULT else None
    wfn = window_function(vec, parts[0], f"{sym}_fwd", f"{sym}_fwdv", [p.name for p in fn.params]) if vec else None
    if wfn is not None:   # elementwise: 16-byte loads and stores (lang/elementwise.py)
        cuda = [wfn] + cuda_forward_entry(vec, sym, kparams, n, f"{sym}_fwd", f"{sym}_fwdv")
    else:
        cuda = [f'extern "C" __global__ void {cuda_fwd}({kparams}) {{', grid, f"        {sym}_fwd({call});",
                "}"]
    if enable_backward:
        bparams = kparams + "".join(f", {t} g{i}_in" for i, t in enumerate(ts))
        cuda += [f'extern "C" __global__ void {cuda_bwd}({bparams}) {{', grid + " {"]
        gargs = []
        for i, p in enumerate(fn.params):
            if is_array(p.type):
                gargs.append(f"g{i}_in")
            else:
                cuda.append(f"        {ts[i]} g{i}{{}};   // scalar adjoints are not returned on CUDA")
                gargs.append(f"g{i}")
        cuda += [f"        {sym}_adj({', '.join(['tg_bounds', 'tg_t'] + names + gargs)});", "    }", "}"]
    parts.append("#ifdef TG_CUDA\n" + "\n".join(cuda) + "\n#else\n" + "\n".join(cpu) + "\n#endif")
    return "\n\n".join(parts)


def callee_order(fn) -> list:
    """Every ``@func`` specialization ``fn`` calls, directly or not, callees before callers."""
    order, seen = [], set()

    def visit(f):
        for c in f.callees:
            if c.name not in seen:
                seen.add(c.name)
                visit(c)
                if c.grad_ir is not None:
                    visit(c.grad_ir)
                if c.replay_ir is not None:
                    visit(c.replay_ir)
                order.append(c)
    visit(fn)
    return order


def kernel_parts(fn, symbol, enable_backward, seen, variant=DEFAULT, sites=None, external=None,
                 cpu_grain=None) -> list:
    """The C++ parts of one kernel for a translation unit: the structs and functions it uses
    that ``seen`` (a set, updated) does not hold yet, then the kernel itself (its ``variant``;
    ``sites``: the unit's ``DebugSites`` for a debug variant; ``external``: its
    ``ExternalEntry``, whose struct's ``__constant__`` bytes the unit declares once;
    ``cpu_grain``: the kernel's option, the fewest grid threads of a CPU OpenMP chunk).

    Raises:
        WarpCodegenTypeError: ``external`` and the unit already holds another external entry
            whose struct argument is of another type (one ``params`` symbol per unit).
    """
    fns = callee_order(fn)
    parts = []
    for st in structs_used([fn] + fns):
        if ("struct", st.name) not in seen:
            seen.add(("struct", st.name))
            parts.append(emit_struct(st))
    if external is not None:
        t = fn.params[0].type
        held = [k[1] for k in seen if k[0] == "external_params"]
        if held and held[0] != t.cname:
            raise WarpCodegenTypeError(f"kernel '{fn.name}' uses constant params type {t.cname}, but this module "
                                       f"already declared params with {held[0]}")
        if not held:
            seen.add(("external_params", t.cname))
            parts.append(external_params_decl(t))
    for f in fns:
        if ("func", f.name) not in seen:
            seen.add(("func", f.name))
            parts.append(emit_func(f, f.grad_ir, sites))
    parts.append(emit_kernel(fn, symbol, enable_backward, variant, sites, external, cpu_grain))
    return parts


def emit_struct(st) -> str:
    """The C++ definition of a ``@tg.struct`` (layout checked against ctypes) and its adjoint
    helpers (accumulate, zero) used by the generated code."""
    fields = [f"    {t.cname} {n};" for n, t in st.fields]
    acc = [f"tg::accum(a.{n}, b.{n});" for n, t in st.fields if not is_array(t)]
    # adjoints of struct array elements accumulate field by field (no 16-byte atomics)
    atom = [f"tg::atomic_add_(&p->{n}, v.{n});" for n, t in st.fields if not is_array(t) and float_based(t)]
    lines = [f"struct {st.cname} {{"] + fields + ["};",
             f'static_assert(sizeof({st.cname}) == {st.size}, '
             f'"struct {st.name}: layout differs from its ctypes twin");',
             "namespace tg {",
             f"TG_FUNC void accum({st.cname}& a, const {st.cname}& b) {{ {' '.join(acc)} }}",
             f"TG_FUNC void zero({st.cname}& a) {{ a = {st.cname}(); }}",
             f"TG_FUNC bool nonzero(const {st.cname}&) {{ return true; }}",
             f"TG_FUNC {st.cname} atomic_add_({st.cname}* p, const {st.cname}& v) {{ {' '.join(atom)} return *p; }}",
             ] + [f"TG_FUNC {st.cname} setf_{n}({st.cname} s, const {t.cname}& v) {{ s.{n} = v; return s; }}"
                  for n, t in st.fields] + [
             "}  // namespace tg"]
    return "\n".join(lines)


def structs_used(fns) -> list:
    """Every struct type reachable from the functions' variables and parameters, dependencies first."""
    seen, order = set(), []

    def visit(t):
        if is_array(t):
            return visit(t.dtype)
        if is_struct(t) and t.name not in seen:
            seen.add(t.name)
            for _, ft in t.fields:
                visit(ft)
            order.append(t)

    for fn in fns:
        for p in fn.params:
            visit(p.type)
        for v in fn.vars:
            if v.type is not None and not isinstance(v.type, type):
                visit(v.type)
    return order


PRELUDE = f"""// generated by tapegrad: do not edit
#define TG_OMP_MIN {OMP_MIN}
"""


def _optional_runtime(name) -> str:
    text = _optional_text.get(name)
    if text is None:
        with open(os.path.join(_RUNTIME_DIR, name)) as fh:
            text = _optional_text[name] = f"// ---- runtime/{name}\n" + fh.read().replace("#pragma once\n", "")
    return text


def module_source(parts, preamble: str = "") -> str:
    """Join the runtime and generated parts into one translation unit (optional runtime headers
    only when the generated code uses them); ``preamble`` (a module's ``BuildInputs.unit_text()``)
    goes after the runtime headers and before the generated code."""
    body = "\n\n".join(parts)
    extra = "".join(_optional_runtime(f) + "\n" for f, markers in _OPTIONAL_RUNTIME
                    if any(m in body for m in markers))
    extra += "".join(_optional_runtime(f) + "\n" for f, markers in _OPTIONAL_RUNTIME_ALL
                     if all(m in body for m in markers))
    return PRELUDE + runtime_source() + "\n" + extra + preamble + "// ---- generated\n" + body + "\n"
