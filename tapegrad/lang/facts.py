"""Facts about a kernel's body that the layers above ``lang/`` read, as registered rules over the IR.

Each fact is a rule ``rule(kernel, ir) -> JSON value`` registered with ``direct.register_fact``:
computed from the IR when the kernel is lowered and stored in the direct cache's manifest, so a
kernel whose binary is cached answers in a fresh process without lowering (``Kernel.fact``).
Nothing here reads generated C++: the rules walk the IR statements.

``null_unsafe``: the array parameters whose elements the kernel loads, stores or updates and
whose truth value it never tests (``if a:``, ``not a``): ``None`` (Warp's null array, no memory)
passed for one of them would make the kernel dereference a null pointer, so the launch refuses it.
Each entry is ``[index, field, ...]``: the parameter, then the struct fields down to the array
(``s.a[0]`` of a struct parameter ``s``: ``[0, "a"]``; an indexed array reads its ``data`` field;
``"[]"`` stands for the elements of an array of structs: ``xs[i].a[0]`` is ``[0, "[]", "a"]``).

``tid_accesses``: the array accesses every thread of the kernel makes, indexed directly by a
``tid()`` component (before any ``if``, loop or early return, so no guard can skip them). A
grid with more values of that component than the array has elements in that dimension makes
threads read or write past the array's end: ``launch``, ``torch_op``, ``paddle_op`` and
``jax_kernel`` refuse such grids (``check_grid_fits``) before anything runs::

    for a in tid_accesses(kernel):          # TidAccess(param, dim, component, components)
        if tid_extent(a.component, a.components, grid) > shape_of_param[a.param][a.dim]: refuse
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

from ..types import StructType
from .direct import register_fact

__all__ = ["TidAccess", "TID_ACCESSES", "tid_accesses", "tid_extent", "grid_overrun", "overrun_message",
           "check_grid_fits", "NULL_UNSAFE", "null_unsafe", "null_unsafe_fields", "null_unsafe_paths", "ELEMENT",
           "WRITTEN_FIELDS", "written_fields"]

TID_ACCESSES = "tid_accesses"


@dataclass(frozen=True)
class TidAccess:
    """An array access the kernel makes on every thread, indexed directly by a ``tid()`` component.

    Attributes:
        param: the kernel parameter index of the array.
        dim: the array dimension the component indexes.
        component, components: ``k`` and ``n`` of the ``k``-th of ``tid()``'s ``n`` values.
    """

    param: int
    dim: int
    component: int
    components: int


def _tid_access_rule(kernel, ir) -> list:
    """The fact ``tid_accesses``: ``[[param, dim, component, components], ...]``.

    Loads, stores and atomics on array parameters at the kernel body's top level before any
    control flow, whose index is a ``tid()`` value (directly or through a local assigned once
    from it); for an indexed-array parameter, ``dim`` is a dimension of its indexed shape (the
    index array's length, or the data's extent where not indexed). Conservative: what it cannot
    see (other struct fields, helper functions, arithmetic on the index) is left out, so a grid
    it accepts may still be wrong, never the other way round.
    """
    from .ir import Assign, Const, Read, Write
    params = {id(p): i for i, p in enumerate(ir.params)}
    writes: dict = {}
    for s in ir.body:
        if isinstance(s, Write):
            writes[id(s.var)] = writes.get(id(s.var), 0) + 1
    tid_of: dict = {}            # id(temp or local) -> (k, n)
    field_of: dict = {}          # id(temp) -> (param, field): a field of an (indexed array) parameter
    param_of = dict(params)      # struct parameters through the locals holding them (set once)
    found = []
    for s in ir.body:
        if isinstance(s, Assign) and s.op.tid is not None:
            tid_of[id(s.out)] = tuple(s.op.tid)
        elif isinstance(s, Write):
            if id(s.src) in tid_of and writes.get(id(s.var)) == 1:
                tid_of[id(s.var)] = tid_of[id(s.src)]
            if id(s.src) in param_of and writes.get(id(s.var)) == 1:
                param_of[id(s.var)] = param_of[id(s.src)]
        elif isinstance(s, Read):
            if id(s.var) in tid_of:
                tid_of[id(s.out)] = tid_of[id(s.var)]
            if id(s.var) in param_of:
                param_of[id(s.out)] = param_of[id(s.var)]
        elif isinstance(s, Assign):
            if s.op.field is not None and s.args and id(s.args[0]) in param_of and s.out is not None:
                field_of[id(s.out)] = (param_of[id(s.args[0])], s.op.field)
                continue
            if s.op.name == "index_map" and id(s.args[0]) in field_of and id(s.args[1]) in tid_of:
                # an indexed array's a[..., i, ...]: i runs through index array k (null: data's
                # dimension k), so the indexed shape's dimension k bounds it
                p, f = field_of[id(s.args[0])]
                if f.startswith("index"):
                    acc = [p, int(f[len("index"):]), *tid_of[id(s.args[1])]]
                    if acc not in found:
                        found.append(acc)
                continue
            if s.op.bounds_checked:
                continue         # checked against the shape: no grid can make it run past the array
            if (0 in s.op.reads or 0 in s.op.writes) and s.args and id(s.args[0]) in params:
                ndim = s.args[0].type.ndim
                for d, v in enumerate(s.args[1:1 + ndim]):
                    if id(v) in tid_of:
                        acc = [params[id(s.args[0])], d, *tid_of[id(v)]]
                        if acc not in found:
                            found.append(acc)
        elif not isinstance(s, Const):
            break                # control flow: what follows may be guarded
    return found


register_fact(TID_ACCESSES, _tid_access_rule)

NULL_UNSAFE = "null_unsafe"
ELEMENT = "[]"     # in a null_unsafe path: the elements of an array of structs
_TRUTH_OPS = ("array_nonnull", "logical_not")   # ``if a:`` / ``while a:`` and ``not a`` of an array


def _null_use(fn, origin: dict, depth: int = 0, forigin: dict = None, written: set = None):
    """(accessed, tested, always): the parameter paths (``origin``: id(var) -> (index, field,
    ...)) whose elements ``fn`` accesses, whose truth value it tests, and whose elements it
    accesses unconditionally (a statement of the body's top level, outside every branch and
    loop: statements after a possible ``return`` sit in a branch on its flag; through the
    functions called there); through locals, views, struct fields (of parameters, and of
    structs the kernel builds holding them: ``forigin``, id(var) -> {field: path}) and the user
    functions it passes them to. A test anywhere guards the other, conditional accesses.
    ``written`` (when given) collects the paths whose elements are stored or updated."""
    from .ir import Assign, Read, Write, walk
    alias = dict(origin)
    fields = dict(forigin or {})     # structs built in the function: which fields hold which arrays
    accessed, tested, always = set(), set(), set()
    top = {id(s) for s in fn.body}
    for s in walk(fn.body):
        if isinstance(s, (Write, Read)):
            src, dst = (s.src, s.var) if isinstance(s, Write) else (s.var, s.out)
            if id(src) in alias:
                alias[id(dst)] = alias[id(src)]
            if id(src) in fields:
                fields[id(dst)] = fields[id(src)]
        elif isinstance(s, Assign) and s.args:
            op = s.op
            if op.name in _TRUTH_OPS and id(s.args[0]) in alias:
                tested.add(alias[id(s.args[0])])
            if op.view is not None and id(s.args[0]) in alias and s.out is not None:
                alias[id(s.out)] = alias[id(s.args[0])]    # a view aliases its array
            if op.field is not None and s.out is not None:
                if id(s.args[0]) in alias:
                    alias[id(s.out)] = alias[id(s.args[0])] + (op.field,)   # a struct's (array) field
                elif op.field in fields.get(id(s.args[0]), {}):
                    alias[id(s.out)] = fields[id(s.args[0])][op.field]
            if op.name == "load" and id(s.args[0]) in alias and s.out is not None and \
                    isinstance(s.out.type, StructType):
                alias[id(s.out)] = alias[id(s.args[0])] + (ELEMENT,)   # a struct element of an array
            if op.name in ("struct_new", "struct_set") and s.out is not None:
                _struct_fields(s, alias, fields)
            for pos in (*op.reads, *op.writes):
                if pos < len(s.args) and id(s.args[pos]) in alias:
                    accessed.add(alias[id(s.args[pos])])
                    if id(s) in top:
                        always.add(alias[id(s.args[pos])])
                    if written is not None and pos in op.writes:
                        written.add(alias[id(s.args[pos])])
            if op.callee is not None and depth < 16:
                pairs = list(zip(op.callee.params, s.args))
                sub = {id(p): alias[id(a)] for p, a in pairs if id(a) in alias}
                fsub = {id(p): fields[id(a)] for p, a in pairs if id(a) in fields}
                if sub or fsub:
                    a, t, u = _null_use(op.callee, sub, depth + 1, fsub, written)
                    accessed |= a
                    tested |= t
                    if id(s) in top:
                        always |= u
    return accessed, tested, always


def _struct_fields(s, alias: dict, fields: dict) -> None:
    """For ``S(a=x, ...)`` / ``s.a = x`` (``struct_new`` / ``struct_set``): record which fields
    of the new struct value hold arrays that came from parameters."""
    first = s.args[0]
    if s.op.name == "struct_new":
        names = getattr(getattr(first, "t", None), "names", ())
        got = {n: alias[id(v)] for n, v in zip(names, s.args[1:]) if id(v) in alias}
    else:
        name = getattr(getattr(s.args[1], "t", None), "name", None) if len(s.args) == 3 else None
        got = dict(fields.get(id(first), {}))
        if name is not None:
            if id(s.args[2]) in alias:
                got[name] = alias[id(s.args[2])]
            else:
                got.pop(name, None)
    if got:
        fields[id(s.out)] = got


def _null_unsafe_rule(kernel, ir) -> list:
    """The fact ``null_unsafe``: ``[[index, field, ...], ...]`` (see the module docstring)."""
    accessed, tested, always = _null_use(ir, {id(p): (i,) for i, p in enumerate(ir.params)})
    return [list(path) for path in sorted((accessed - tested) | always, key=lambda p: (p[0], p[1:]))]


register_fact(NULL_UNSAFE, _null_unsafe_rule)

WRITTEN_FIELDS = "written_fields"


def _written_fields_rule(kernel, ir) -> list:
    """The fact ``written_fields``: ``[[index, field, ...], ...]``, the arrays held in struct (and
    indexed-array) parameters, or in the struct elements of array parameters, whose elements
    the kernel stores or updates (a launch refuses a read-only one there, as for a parameter)."""
    written: set = set()
    _null_use(ir, {id(p): (i,) for i, p in enumerate(ir.params)}, written=written)
    return [list(p) for p in sorted((p for p in written if len(p) > 1), key=lambda p: (p[0], p[1:]))]


register_fact(WRITTEN_FIELDS, _written_fields_rule)


def written_fields(kernel, index: int) -> tuple:
    """The field paths (tuples of names; ``ELEMENT`` for an array's struct elements) of
    parameter ``index`` whose arrays ``kernel`` writes (fact ``written_fields``).

    Raises:
        KernelError: the kernel does not type-check.
    """
    return tuple(tuple(p[1:]) for p in kernel.fact(WRITTEN_FIELDS) or () if int(p[0]) == index)


def null_unsafe(kernel) -> frozenset:
    """The ``null_unsafe`` parameter indices of ``kernel`` (a concrete ``Kernel``): from the direct
    cache's manifest when its binary is cached, else from the IR (callers keep the answer).

    Raises:
        KernelError: the kernel does not type-check.
    """
    return frozenset(int(p[0]) for p in null_unsafe_paths(kernel) if len(p) == 1)


def null_unsafe_fields(kernel, index: int) -> tuple:
    """The struct field paths (tuples of field names) of parameter ``index`` of ``kernel`` whose
    arrays the kernel loads, stores or updates without testing them (``null_unsafe``).

    Raises:
        KernelError: the kernel does not type-check.
    """
    return tuple(p[1:] for p in null_unsafe_paths(kernel) if len(p) > 1 and p[0] == index)


def null_unsafe_paths(kernel) -> tuple:
    """Every ``null_unsafe`` entry of ``kernel`` as a tuple ``(index, field, ...)``."""
    return tuple((int(p[0]), *p[1:]) if isinstance(p, list) else (int(p),) for p in kernel.fact(NULL_UNSAFE) or ())

_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def tid_accesses(kernel) -> tuple:
    """The ``TidAccess``es of ``kernel`` (a concrete ``Kernel``), read once per kernel: from the
    direct cache's manifest when its binary is cached (no lowering), else from the IR.

    Raises:
        KernelError: the kernel does not type-check.
    """
    hit = _CACHE.get(kernel)
    if hit is None:
        hit = _CACHE[kernel] = tuple(TidAccess(*map(int, a)) for a in kernel.fact(TID_ACCESSES) or ())
    return hit


def tid_extent(component: int, components: int, grid: tuple) -> int:
    """The number of values ``tid()`` component ``component`` of ``components`` takes over ``grid``
    (one component: the whole grid, flat; fewer components than grid dims: the first takes the
    leading dims together)."""
    nd = len(grid)
    d = component + nd - components
    if components == 1 or (component == 0 and d >= 0):
        n = 1
        for x in grid[:nd if components == 1 else d + 1]:
            n *= x
        return n
    return grid[d] if 0 <= d < nd else 1


def grid_overrun(accesses, grid, length_of):
    """The first access of ``accesses`` that ``grid`` overruns, as ``(access, extent, length)``,
    or None. ``length_of(param, dim) -> int or None`` gives an array parameter's length in a
    dimension (None: not known, skipped)."""
    for a in accesses:
        n = length_of(a.param, a.dim)
        if n is None:
            continue
        ext = tid_extent(a.component, a.components, grid)
        if ext > n:
            return a, ext, n
    return None


def overrun_message(kernel, grid, hit, who: str) -> str:
    """The error of ``grid_overrun``'s ``hit``: names the kernel, ``dim``, the array and its length."""
    a, ext, length = hit
    name = kernel.arg_names[a.param]
    where = f"{name}.shape[{a.dim}]"
    return (f"{who}: the launch grid dim={tuple(grid)} is larger than argument '{name}' allows: kernel "
            f"'{kernel.key}' indexes dimension {a.dim} of '{name}' (length {length}) with tid() values up to "
            f"{ext - 1}, without a guard; launch at most {length} threads along it, or guard the access "
            f"(if i < {where}:)")


def check_grid_fits(kernel, grid, shapes: dict, who: str) -> None:
    """Raise ValueError when ``grid`` makes ``kernel`` index an array past its end with unguarded
    ``tid()`` values (``shapes``: kernel parameter index -> that array's tapegrad shape).

    Raises:
        ValueError: names the kernel, the grid (``dim``), the argument and its length.
    """
    def length_of(param, dim):
        shape = shapes.get(param)
        return shape[dim] if shape is not None and dim < len(shape) else None
    hit = grid_overrun(tid_accesses(kernel), tuple(grid), length_of)
    if hit is not None:
        raise ValueError(overrun_message(kernel, grid, hit, who))
