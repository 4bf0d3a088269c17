"""Forward mode and second order: the tangent and tangent-of-adjoint C++ of a kernel (issue 26).

The tangent code is the kernel's forward body and the tangent-of-adjoint code its adjoint body,
emitted a second time (``DualEmitter``, a ``emit.FunctionEmitter``) with every float type
``T`` spelled ``tg::dual<T>`` (value and tangent; ``runtime/dual.h``) and every array a
``tg::darray_t<T>`` (the array and its tangent array). Builtins need no tangent rules of their
own: their C++ definitions are templates over the scalar type (instantiated with duals), and
the few that are not (the scalar math calls) have dual overloads in ``dual.h`` giving value
and derivative. The adjoint templates (``adj_sin``...) instantiated with duals give exact
second derivatives (forward over reverse). Array accesses get their own dual renderings here.

Both are emitted into their own translation unit (``tangent_source``), built on first use
and cached like every build (source digest); the default build of a kernel is unchanged.

Entry points (``S`` the kernel's symbol, ``n`` its parameter count):

* ``S_cpu_tangent(const launch_t*, void** args)``: ``args[0:n]`` the arguments, ``args[n:2n]``
  their tangents (array descriptors for arrays; values of the same type for scalars,
  vectors, matrices and structs, whose array fields are the fields' tangent arrays; ignored
  for ints), ``args[2n]`` an ``int32`` mode (bit 0:
  write the primal outputs too).
* ``S_cpu_tangent_adjoint(const launch_t*, void** args)``: ``args[0:n]``, ``args[n:2n]`` as
  above, ``args[2n:3n]`` the adjoint arrays (gradients, accumulated), ``args[3n:4n]`` their
  tangents (accumulated), ``args[4n]`` the mode (bit 2: the adjoint arrays stand for the
  arrays' ``.grad``: a store's adjoint consumes them unless the array retains its gradient).
  Adjoints of non-array arguments are not returned.
* ``S_cuda_tangent(launch_t, T0 a0..., T0 t0..., int32_t mode)`` and
  ``S_cuda_tangent_adjoint(launch_t, a..., t..., g..., tg..., int32_t mode)``: the same on CUDA.
"""
from __future__ import annotations

import re

from ..abi import entry_name
from ..errors import KernelError
from . import emit
from .builtins_random import DRAWS
from .emit import FunctionEmitter, callee_order, structs_used
from .ir import Assign, walk
from .typeutil import float_based, is_array, is_scalar, is_struct

__all__ = ["DualEmitter", "dualize", "tangent_parts", "tangent_source", "FORWARD_UNSUPPORTED"]

# float type names in rendered C++ (not inside identifiers, nor array_t<...> / from_bits<...>)

# builtins whose forward mode has no exact rule: the tangent of a concurrent minimum or
# exchange depends on which thread won, which the tangent array cannot see atomically
FORWARD_UNSUPPORTED = {"atomic_min", "atomic_max", "atomic_exch", "atomic_cas"}
_ARRAY_OPS = {"load", "store", "atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_exch", "atomic_cas",
              "atomic_and", "atomic_or", "atomic_xor"}


def dualize(text: str) -> str:
    """``text`` (rendered C++) with every float scalar type name ``T`` replaced by ``tg::dual<T>``,
    except inside array descriptors (``tg::array_t<T>``) and bit-pattern helpers."""
    out, i = [], 0
    for m in re.finditer(r"tg::array_t<[^<>]*(?:<[^<>]*>[^<>]*)*>|tg::from_bits<double>", text):
        out.append(_dualize_plain(text[i:m.start()]))
        out.append(m.group(0))
        i = m.end()
    out.append(_dualize_plain(text[i:]))
    return "".join(out)


def _dualize_plain(text):
    return re.sub(r"(?<![\w:])(double|float|half|tg::bfloat16_t)(?!\w)", lambda m: f"tg::dual<{m.group(1)}>", text)


def dual_ctype(t) -> str:
    """The C++ type of a value of tapegrad type ``t`` in dual code."""
    if is_array(t):
        return f"tg::darray_t<{t.dtype.cname}>"
    if is_struct(t):
        return dual_struct_name(t)
    if float_based(t):
        return dualize(t.cname)
    return t.cname


def dual_struct_name(st) -> str:
    return f"{st.cname}__dual"


class DualEmitter(FunctionEmitter):
    """Emits a function's forward or adjoint body with dual numbers (see the module docstring)."""

    def __init__(self, fn, kernel_label, want_forward, structs=()):
        super().__init__(fn, None)
        self.kernel_label = kernel_label
        self.want_forward = want_forward     # the tangent code (not only the tangent of the adjoint)
        # struct names in rendered C++ (constructors, field updates) name their dual twins
        self._struct_re = re.compile(r"\b(" + "|".join(re.escape(st.cname) for st in structs) + r")\b") \
            if structs else None

    def dualize(self, text) -> str:
        text = dualize(text)
        if self._struct_re is not None:
            text = self._struct_re.sub(lambda m: m.group(1) + "__dual", text)
        return text

    def ctype(self, t) -> str:
        return dual_ctype(t)

    def adjoint_ctype(self, t) -> str:
        if is_array(t):
            return f"const {dual_ctype(t)}&"
        return f"{dual_ctype(t)}&"

    def _unsupported(self, s, what):
        loc = getattr(s, "loc", None) or self.fn.loc
        where = f"{loc.file}:{loc.line}" if loc is not None else "?"
        raise KernelError(f"{where}: kernel '{self.kernel_label}': {what} has no forward-mode (tangent) rule, so "
                          f"tangent=True launches, Tape.jvp and Tape.hvp cannot run this kernel")

    def op_text(self, s, args, replay) -> str:
        op = s.op
        name = op.name
        if name == "load_cell" and s.args and is_array(s.args[0].type):   # a load the compiler added
            idx = ", ".join(args[1:])
            return (f"(tg::cell_in_bounds({args[0]}.p, {idx}) ? tg::dload({args[0]}, {idx}) : "
                    f"typename tg::dual_of<{s.args[0].type.dtype.cname}>::type())")
        if name in _ARRAY_OPS and s.args and is_array(s.args[0].type):
            a, rest = args[0], args[1:]
            if name == "load":
                return f"tg::dload({', '.join([a] + rest)})"
            nv = 2 if name == "atomic_cas" else 1
            idx, vals = rest[:-nv], rest[-nv:]
            if replay and op.replay is not None and op.replay != "skip":   # an atomic in the replay: a read
                return f"tg::dload({', '.join([a] + idx)})"
            if name not in ("store", "atomic_add", "atomic_sub"):
                if float_based(s.args[0].type.dtype):
                    self._unsupported(s, f"{name}() on a float array")
                at = f"tg::addr({a}.p.data, {a}.p, {', '.join(idx)})"
                return f"(({a}.mode & 1) ? tg::{name}_({', '.join([at] + vals)}) : *{at})"
            idx, v = rest[:-1], rest[-1]
            if name == "store":
                return f"tg::dstore_({', '.join([a, v] + idx)});"
            if name == "atomic_add":
                return f"tg::datomic_add_({', '.join([a, v] + idx)})"
            if name == "atomic_sub":
                return f"tg::datomic_add_({', '.join([a, f'tg::neg({v})'] + idx)})"
        if name == "bit_cast":
            return self._bit_cast(s, args)
        if name in DRAWS:
            # a random draw's parameters (poisson's lam) take no tangent: the draw is a constant
            # (its C++ takes plain floats: a dual argument failed to compile)
            args = [f"tg::primal({t})" if k and is_scalar(a.type) and float_based(a.type) else t
                    for k, (a, t) in enumerate(zip(s.args, args))]
        text = super().op_text(s, args, replay)
        if op.callee is not None:
            n = op.callee.name
            return text.replace(f"{n}_fwd(", f"{n}_tan(").replace(f"{n}_rep(", f"{n}_tanrep(")
        if name in ("tid",) and "tid64" in text:
            self._unsupported(s, "a launch of more than 2^31 - 1 threads")
        if name == "grad":
            # tg.grad(f)(x) runs f's adjoint: on duals its tangent twin, whose tangent part is the
            # second derivative along x's tangent (the _adj of the plain unit does not exist here:
            # the tangent build failed to compile)
            text = _USER_ADJ_CALL.sub(r"\1_tadj(", text)
        return self.dualize(text)

    def _bit_cast(self, s, args) -> str:
        """``tg.cast(a, T)`` on duals: the bits of the value; a float result has a zero tangent (a
        bit pattern has no derivative, as the adjoint has none). The dual's own bits (value and
        tangent) failed tg.cast's size check at compile time."""
        src, out = s.args[0].type, s.out.type
        if is_struct(src) or is_struct(out):
            self._unsupported(s, "tg.cast of a struct")
        v = f"tg::dual_of<{src.cname}>::val({args[0]})" if float_based(src) else args[0]
        text = f"tg::wx_bit_cast<{out.cname}>({v})"
        return f"tg::dual_of<{out.cname}>::make({text}, {out.cname}())" if float_based(out) else text

    def adj_text(self, s, args, adjs, g) -> str:
        op = s.op
        name = op.name
        if name == "load_cell" and s.args and is_array(s.args[0].type):
            idx = args[1:]
            return (f"if (tg::nonzero({g}) && tg::cell_in_bounds({args[0]}.p, {', '.join(idx)})) "
                    f"tg::dgrad_add_({', '.join([adjs[0], g] + idx)});")
        if name in _ARRAY_OPS and s.args and is_array(s.args[0].type):
            aa, idx = adjs[0], args[1:]
            if name == "load":
                return f"if (tg::nonzero({g})) tg::dgrad_add_({', '.join([aa, g] + idx)});"
            idx, av = args[1:-1], adjs[-1]
            get = f"tg::dgrad_get_({', '.join([aa] + idx)})"
            if name == "store":
                return f"tg::accum({av}, {get}); tg::dgrad_consume_({', '.join([aa] + idx)});"
            # the value an atomic returns sends its gradient to the slot's previous content
            old = f" tg::dgrad_add_({', '.join([aa, g] + idx)});" if g else ""
            if name == "atomic_add":
                return f"tg::accum({av}, {get});{old}"
            if name == "atomic_sub":
                return f"tg::accum({av}, tg::neg({get}));{old}"
            self._unsupported(s, f"the adjoint of {name}()")
        text = super().adj_text(s, args, adjs, g)
        if op.callee is not None:
            n = op.callee.name
            return text.replace(f"{n}_adj(", f"{n}_tadj(")
        return self.dualize(text)

    def const_text(self, s) -> str:
        return self.dualize(super().const_text(s))


# a user function's adjoint call as tg.grad renders it (funcs: ``tgf_<name>_<hash>_adj(``)
_USER_ADJ_CALL = re.compile(r"\b(tgf_\w+)_adj\(")


def _check_supported(fn, label):
    """Reject what the dual code cannot represent, before any C++ is generated."""
    for s in walk(fn.body):
        if isinstance(s, Assign) and s.op.name == "tid" and "tid64" in s.op.fwd([]):
            raise KernelError(f"kernel '{label}': forward mode runs launches of at most 2^31 - 1 threads")
    for f in callee_order(fn):
        # a @func_native's body is the user's C++ on plain values: it has no dual (tangent)
        # twin, and an empty one would return garbage
        if getattr(f, "native", None) is not None:
            who = f.loc.func if f.loc is not None else f.name
            raise KernelError(f"kernel '{label}': forward mode (tangent=True) has no rule for the @func_native "
                              f"'{who}' it calls (its C++ body works on plain values); launch without "
                              f"tangent=True or write the function in Python")


def emit_dual_struct(st) -> str:
    """The dual twin of a struct (fields in dual types) and its adjoint helpers, plus
    ``NAME__dual_const(s)``: the twin of a primal value, with zero tangents."""
    name = dual_struct_name(st)
    fields = [f"    {dual_ctype(t)} {n};" for n, t in st.fields]
    acc = [f"tg::accum(a.{n}, b.{n});" for n, t in st.fields if not is_array(t)]
    conv = []
    for n, t in st.fields:
        if is_array(t):
            conv.append(f"r.{n} = tg::make_darray(s.{n}, tg::array_t<{t.dtype.cname}>(), mode);")
        elif is_struct(t):
            conv.append(f"r.{n} = {dual_struct_name(t)}_const(s.{n}, mode);")
        elif float_based(t):
            conv.append(f"r.{n} = tg::dual_of<{t.cname}>::make(s.{n}, {t.cname}());")
        else:
            conv.append(f"r.{n} = s.{n};")
    make = []
    for n, t in st.fields:
        if is_array(t):
            make.append(f"r.{n} = tg::make_darray(s.{n}, t.{n}, mode);")
        elif is_struct(t):
            make.append(f"r.{n} = {dual_struct_name(t)}_make(s.{n}, t.{n}, mode);")
        elif float_based(t):
            make.append(f"r.{n} = tg::dual_of<{t.cname}>::make(s.{n}, t.{n});")
        else:
            make.append(f"r.{n} = s.{n};")
    body = " ".join(conv)
    lines = [f"struct {name} {{"] + fields + ["};",
             f"static TG_FUNC {name} {name}_const(const {st.cname}& s, int32_t mode) {{ {name} r; {body} return r; }}",
             f"static TG_FUNC {name} {name}_make(const {st.cname}& s, const {st.cname}& t, int32_t mode) {{ {name} r; "
             f"{' '.join(make)} return r; }}",
             "namespace tg {",
             f"TG_FUNC void accum({name}& a, const {name}& b) {{ {' '.join(acc)} }}",
             f"TG_FUNC void zero({name}& a) {{ a = {name}(); }}",
             f"TG_FUNC bool nonzero(const {name}&) {{ return true; }}"] + [
             f"TG_FUNC {name} setf_{n}({name} s, const {dual_ctype(t)}& v) {{ s.{n} = v; return s; }}"
             for n, t in st.fields] + ["}  // namespace tg"]
    return "\n".join(lines)


def _dual_func(f, label, structs) -> str:
    """The dual twins of a ``@func`` specialization: ``_tan``, ``_tanrep``, ``_tadj``."""
    e = DualEmitter(f, label, True, structs)
    parts = [e.forward_function(f"{f.name}_tan")]
    if f.side_effects:
        parts.append(e.forward_function(f"{f.name}_tanrep", replay=True))
    grad = f.grad_ir
    parts.append((DualEmitter(grad, label, False, structs) if grad is not None else e).adjoint_function(
        f"{f.name}_tadj"))
    return "\n\n".join(parts)


def _arg_decls(fn, second_order, cuda):
    """C++ turning the entry point's raw arguments into the dual body's arguments."""
    n = len(fn.params)
    out = []
    for i, p in enumerate(fn.params):
        t = p.type
        src = (lambda k: f"a{k}") if cuda else (lambda k: f"*reinterpret_cast<const {t.cname}*>(tg_args[{k}])")
        pv, tv = src(i), src(n + i)
        if is_array(t):
            out.append(f"    const tg::darray_t<{t.dtype.cname}> d{i} = tg::make_darray({pv}, {tv}, tg_mode & 1);")
            if second_order:
                gv, gt = src(2 * n + i), src(3 * n + i)
                out.append(f"    const {t.cname} g{i}_ = {gv};")
                consume = f"((tg_mode & 4) || (void*)g{i}_.data == (void*)d{i}.p.grad) && !(d{i}.p.flags & 2u)"
                out.append(f"    const tg::darray_t<{t.dtype.cname}> g{i} = tg::make_darray(g{i}_, {gt}, "
                           f"{consume} ? 2 : 0);")
        elif is_struct(t):
            out.append(f"    const {dual_struct_name(t)} d{i} = {dual_struct_name(t)}_make({pv}, {tv}, tg_mode & 1);")
            if second_order:
                gv, gt = src(2 * n + i), src(3 * n + i)
                out.append(f"    const {dual_struct_name(t)} g{i}_0 = {dual_struct_name(t)}_make({gv}, {gt}, "
                           f"(tg_mode & 4) ? 2 : 0);")
        elif float_based(t):
            out.append(f"    const {dual_ctype(t)} d{i} = tg::dual_of<{t.cname}>::make({pv}, {tv});")
        else:
            out.append(f"    const {t.cname} d{i} = {pv};")
    return out


def _entry(fn, sym, second_order, cuda, serial=False) -> list:
    n = len(fn.params)
    kind = "tangent_adjoint" if second_order else "tangent"
    body = "tadj" if second_order else "tan"
    ts = [p.type.cname for p in fn.params]
    nslots = 4 if second_order else 2
    locals_, gargs = [], []
    for i, p in enumerate(fn.params):
        if is_array(p.type):
            gargs.append(f"g{i}")
        elif is_struct(p.type):     # its arrays' gradients (and their tangents): built once, copied per thread
            locals_.append(f"{dual_ctype(p.type)} g{i} = g{i}_0;")
            gargs.append(f"g{i}")
        else:
            locals_.append(f"{dual_ctype(p.type)} g{i}{{}};")
            gargs.append(f"g{i}")
    call_args = ["tg_bounds", "tg_t"] + [f"d{i}" for i in range(n)] + (gargs if second_order else [])
    call = f"{sym}_{body}({', '.join(call_args)});"
    inner = (" ".join(locals_) + " " if second_order and locals_ else "") + call
    if cuda:
        ps = ["tg::launch_t tg_bounds"] + [f"{ts[i % n]} a{i}" for i in range(nslots * n)] + ["int32_t tg_mode"]
        lines = [f'extern "C" __global__ void {entry_name(sym, "cuda", kind)}({", ".join(ps)}) {{']
        lines += _arg_decls(fn, second_order, True)
        lines += ["    for (int64_t tg_t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; tg_t < tg_bounds.size; "
                  "tg_t += int64_t(blockDim.x) * gridDim.x) {", f"        {inner}", "    }", "}"]
        return lines
    lines = [f'extern "C" TG_EXPORT void {entry_name(sym, "cpu", kind)}(const tg::launch_t* tg_b, void** tg_args) {{',
             "    const tg::launch_t tg_bounds = *tg_b;",
             f"    const int32_t tg_mode = *reinterpret_cast<const int32_t*>(tg_args[{nslots * n}]);"]
    lines += _arg_decls(fn, second_order, False)
    # serial: a deterministic kernel's build runs the grid on the calling thread, in order
    run = emit.serial_only if serial else (lambda region: emit.serial_first(region, "    "))
    if second_order:   # as the adjoint's entry
        lines += run(emit.omp_team("if (tg_bounds.size >= TG_OMP_MIN)", [
            "        #pragma omp for schedule(static)",
            "        for (int64_t tg_t = 0; tg_t < tg_bounds.size; ++tg_t) {", f"            {inner}",
            "        }"])) + ["}"]
        return lines
    # as the forward's entry: dynamic chunks, so a thread whose core is shared hands work over
    region = emit.omp_team("if (tg_bounds.size >= TG_OMP_MIN)", [
        "        const int64_t tg_chunk = tg::omp_chunk(tg_bounds.size);",
        "        #pragma omp for schedule(dynamic, tg_chunk)",
        "        for (int64_t tg_t = 0; tg_t < tg_bounds.size; ++tg_t) {", f"            {inner}", "        }"])
    lines += run(region) + ["}"]
    return lines


def tangent_parts(fn, sym, label, second_order, seen, serial=False) -> list:
    """The C++ parts of one kernel's tangent code for a translation unit (structs and functions
    that ``seen``, a set updated here, does not hold yet, then the kernel's bodies and entries);
    ``serial``: CPU entries that run the grid on the calling thread in order (``emit.Variant``).

    Raises:
        KernelError: a construct without a forward-mode rule, naming it and its line.
    """
    _check_supported(fn, label)
    fns = callee_order(fn)
    parts = []
    structs = structs_used([fn] + fns)
    for st in structs:
        if ("struct", st.name) not in seen:
            seen.add(("struct", st.name))
            parts.append(emit.emit_struct(st))
            parts.append(emit_dual_struct(st))
    for f in fns:
        if ("func", f.name) not in seen:
            seen.add(("func", f.name))
            parts.append(_dual_func(f, label, structs))
    e = DualEmitter(fn, label, True, structs)
    parts.append(e.forward_function(f"{sym}_tan"))
    if second_order:
        parts.append(DualEmitter(fn, label, False, structs).adjoint_function(f"{sym}_tadj"))
    cuda = _entry(fn, sym, False, True) + (_entry(fn, sym, True, True) if second_order else [])
    cpu = _entry(fn, sym, False, False, serial) + (_entry(fn, sym, True, False, serial) if second_order else [])
    parts.append("#ifdef TG_CUDA\n" + "\n".join(cuda) + "\n#else\n" + "\n".join(cpu) + "\n#endif")
    return parts


def tangent_source(fn, sym, label, second_order) -> str:
    """The translation unit of a kernel's tangent code (``second_order``: and its
    tangent-of-adjoint code), see the module docstring for the entry points.

    Raises:
        KernelError: a construct without a forward-mode rule, naming it and its line.
    """
    return emit.module_source(tangent_parts(fn, sym, label, second_order, set()))


def tangent_float_types(fn) -> bool:
    """Whether ``fn`` has any float data (a kernel without any has zero tangents)."""
    return any(float_based(p.type) or (is_array(p.type) and float_based(p.type.dtype)) for p in fn.params)

