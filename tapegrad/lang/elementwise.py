"""Which kernels are elementwise, so their CUDA entry can use 16-byte loads and stores.

A kernel is *elementwise* when it is launched over a 1-D grid and touches each of its arrays
only at index ``tid()``: every access is ``a[i]`` (a load or a store) or ``len(a)``, with ``i``
a value that only ever holds ``tid()``, and the arrays go nowhere else (no atomics, no calls,
no views). Then thread ``t`` reads and writes element ``t`` of each array and nothing else, so
a CUDA thread may run ``L`` consecutive threads of the launch (``L * sizeof(element)`` <= 16
bytes): load each array's ``L`` elements with one vector load, run the ``L`` bodies on those
registers, store them back with one vector store. A strided, misaligned or aliased launch
falls back to the per-element loop inside the same entry point (``emit.emit_kernel``).

An array that the kernel writes but never reads is stored without being loaded when every
store to it is unconditional (at the top level of the body): all ``L`` lanes are then written.
Otherwise it is loaded first, so lanes the body leaves alone are written back unchanged.

Measured on an H200 for ``y[i] = a * x[i] + y[i]`` over 2^28 float32: 4.33 TB/s with one
16-byte load per array per thread, against 3.6 TB/s for the best per-element grid loop
(torch's ``add_``: 4.33).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..abi import entry_name
from .ir import Assign, If, Loop, Read, Write, walk
from .typeutil import is_array

__all__ = ["VectorArray", "VectorPlan", "vector_plan"]

_VECTOR_BYTES = 16


@dataclass(frozen=True)
class VectorArray:
    """One array parameter of an elementwise kernel.

    Attributes:
        index: the parameter's position. cname: its element C++ type. size: element bytes.
        load: whether its window is loaded before the bodies run. store: whether it is
        written back after them.
    """

    index: int
    cname: str
    size: int
    load: bool
    store: bool


@dataclass(frozen=True)
class VectorPlan:
    """How the CUDA entry of an elementwise kernel vectorizes: ``lanes`` launch threads per
    CUDA thread, and what happens to each array parameter."""

    lanes: int
    arrays: tuple


def _tid_values(fn) -> set:
    """Names of the temps and locals that only ever hold ``tid()`` (1-D)."""
    stmts = list(walk(fn.body))
    vals = {s.out.name for s in stmts if isinstance(s, Assign) and s.op.name == "tid" and not s.args
            and s.out is not None}
    writes: dict = {}
    for s in stmts:
        if isinstance(s, Write):
            writes.setdefault(s.var.name, []).append(s.src.name)
    changed = True
    while changed:
        changed = False
        for name, srcs in writes.items():
            if name not in vals and all(src in vals for src in srcs):
                vals.add(name)
                changed = True
        for s in stmts:
            if isinstance(s, Read) and s.var.name in vals and s.out.name not in vals:
                vals.add(s.out.name)
                changed = True
    return vals


def vector_plan(fn):
    """The ``VectorPlan`` of kernel IR ``fn``, or None when it is not elementwise (or has no
    array a vector access would help)."""
    if fn.kind != "kernel" or fn.tid_ndim > 1:
        return None
    arrays = {p.name: k for k, p in enumerate(fn.params) if is_array(p.type)}
    if not arrays or any(fn.params[k].type.ndim != 1 for k in arrays.values()):
        return None
    tids = _tid_values(fn)
    if not tids:
        return None
    top_stores = {s.args[0].name for s in fn.body if isinstance(s, Assign) and s.op.name == "store"}
    nested_stores: set = set()
    loaded: set = set()
    stores: set = set()

    def uses(s):
        if isinstance(s, Assign):
            return s.args
        if isinstance(s, (Read, Write)):
            return [s.var, getattr(s, "src", None), getattr(s, "out", None)]
        if isinstance(s, If):
            return [s.cond]
        if isinstance(s, Loop):
            return [s.count, s.start, s.step, s.var, s.cond]
        return list(getattr(s, "items", ())) + [getattr(s, "param", None), getattr(s, "src", None)]

    for s in walk(fn.body):
        named = [v for v in uses(s) if v is not None and getattr(v, "name", None) in arrays]
        if not named:
            continue
        if not isinstance(s, Assign) or s.op.callee is not None:
            return None
        name = s.op.name
        if name in ("load", "store") and len(s.args) >= 2 and s.args[0].name in arrays \
                and s.args[1].name in tids and all(v is s.args[0] for v in named):
            if name == "load":
                loaded.add(s.args[0].name)
            else:
                stores.add(s.args[0].name)
            continue
        if name == "len" and len(s.args) == 1:
            continue
        return None
    nested_stores = stores - top_stores
    used = loaded | stores
    if not used:
        return None
    sizes = {n: fn.params[arrays[n]].type.dtype.size for n in used}
    if any(_VECTOR_BYTES % sz for sz in sizes.values()):
        return None
    lanes = _VECTOR_BYTES // max(sizes.values())
    if lanes < 2 or any(lanes * sz < 2 for sz in sizes.values()):
        return None
    plan = tuple(VectorArray(arrays[n], fn.params[arrays[n]].type.dtype.cname, sizes[n],
                             load=n in loaded or n in nested_stores, store=n in stores)
                 for n in sorted(used, key=arrays.get))
    return VectorPlan(lanes, plan)


def window_function(plan: VectorPlan, fwd_text: str, name: str, vname: str, param_names: list):
    """The per-thread forward body ``name`` (C++ text) rewritten as ``vname``, taking windows
    (by reference) instead of array descriptors for the plan's arrays; None when a parameter
    is not rendered as expected (the kernel then keeps the per-element entry). Only the
    signature changes: the body reaches those arrays through ``tg::addr``/``tg::len`` alone,
    which have window overloads (``runtime/vector.h``)."""
    head, sep, body = fwd_text.partition("\n")
    # forced inline: a window passed by reference to a call that stays a call lives in local
    # memory (measured on an H200: 1.7 TB/s for saxpy instead of the registers' 4.3)
    head = head.replace("static TG_FUNC ", "static __device__ __forceinline__ ", 1)
    head = head.replace(f" {name}(", f" {vname}(", 1)
    for a in plan.arrays:
        name_ = param_names[a.index]
        for end in (", ", ")"):     # the delimiter keeps p_x from matching p_xs
            old = f"tg::array_t<{a.cname}> {name_}{end}"
            if head.count(old) == 1:
                head = head.replace(old, f"tg::window_t<{a.cname}, {plan.lanes}>& {name_}{end}")
                break
        else:
            return None
    return head + sep + body


def cuda_forward_entry(plan: VectorPlan, sym: str, kparams: str, n: int, fwd: str, vfwd: str) -> list:
    """Lines of the CUDA forward entry of an elementwise kernel: the windowed loop when every
    planned array can be windowed and no written one shares its data pointer with another
    (then the launch order of aliasing writes would be visible), else the per-element loop."""
    L = plan.lanes
    names = [f"a{i}" for i in range(n)]
    ok = [f"tg::window_ok<{L}>(a{a.index})" for a in plan.arrays]
    written = [a for a in plan.arrays if a.store]
    for w in written:
        ok += [f"(void*)a{w.index}.data != (void*)a{o.index}.data" for o in plan.arrays if o.index != w.index]
    fits = " && ".join(["tg_b + " + str(L) + " <= tg_bounds.size"] +
                       [f"tg_b + {L} <= a{a.index}.shape[0]" for a in plan.arrays])
    vargs = list(names)
    for a in plan.arrays:
        vargs[a.index] = f"w{a.index}"
    lines = [f'extern "C" __global__ void {entry_name(sym, "cuda", "forward")}({kparams}) {{',
             "    const int64_t tg_g0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;",
             "    const int64_t tg_gs = int64_t(blockDim.x) * gridDim.x;",
             f"    if ({' && '.join(ok)}) {{",
             f"        const int64_t tg_ng = (tg_bounds.size + {L - 1}) / {L};",
             "        for (int64_t tg_g = tg_g0; tg_g < tg_ng; tg_g += tg_gs) {",
             f"            const int64_t tg_b = tg_g * {L};",
             f"            if ({fits}) {{"]
    for a in plan.arrays:
        w = f"w{a.index}"
        lines.append(f"                tg::window_t<{a.cname}, {L}> {w}; {w}.origin = tg_b; "
                     f"{w}.shape[0] = a{a.index}.shape[0];" + (f" {w}.load(a{a.index});" if a.load else ""))
    lines += ["                #pragma unroll",
              f"                for (int tg_k = 0; tg_k < {L}; ++tg_k) "
              f"{vfwd}({', '.join(['tg_bounds', 'tg_b + tg_k'] + vargs)});"]
    lines += [f"                w{a.index}.store(a{a.index});" for a in written]
    lines += ["            } else {",
              f"                for (int64_t tg_t = tg_b; tg_t < tg_b + {L} && tg_t < tg_bounds.size; ++tg_t) "
              f"{fwd}({', '.join(['tg_bounds', 'tg_t'] + names)});",
              "            }", "        }", "        return;", "    }",
              "    for (int64_t tg_t = tg_g0; tg_t < tg_bounds.size; tg_t += tg_gs)",
              f"        {fwd}({', '.join(['tg_bounds', 'tg_t'] + names)});", "}"]
    return lines
