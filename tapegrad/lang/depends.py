"""What lowering read from Python besides the function's own source, recorded so a later process
can reuse a kernel's cached binary without lowering it again (``direct.py``: the direct cache,
like ccache's *direct mode*).

Lowering a kernel reads its source, its parameter types and, through the frontend's name
resolution, values outside the function: module globals and closure cells (numbers,
``tg.constant`` values, types, structs, ``@tg.func`` helpers), attributes of modules and
classes, results of compile-time calls. The frontend reports each of them here
(``note_value``, ``note_call``) while a ``recording()`` is open; the record lists, per lookup,
the function whose scope it ran in, the name chain (``("tg", "sin")``) and a fingerprint of
what it found. ``verify`` replays the lookups in a fresh process and compares fingerprints:
equal fingerprints mean lowering would produce the same C++, so the cached binary is the
kernel's. A value with no faithful fingerprint (an arbitrary Python object, an attribute of a
computed value) makes the record *uncacheable*: such a kernel always lowers, as before.

``@tg.func`` helpers: their fingerprint covers every overload's source, location and
parameter types (``register_fingerprint``, from ``funcs.py``, which sits above the frontend),
and the lookups inside their bodies are recorded in their own scope. A specialization lowered
for an earlier kernel is reused without lowering again, so its record travels with it
(``Record`` / ``replay``).
"""
from __future__ import annotations

import builtins as python_builtins
import hashlib
import linecache
import threading
import types as pytypes
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..types import ArrayType, MatrixType, ScalarType, StructType, VectorType
from .builtins import Builtin
from .signature import captured, lines_digest
from .values import adjoint, is_constant

__all__ = ["Record", "recording", "replay", "note_value", "note_call", "note_warning",
           "fingerprint", "type_fingerprint", "file_digest", "source_fingerprint", "register_fingerprint",
           "scope_id", "verify", "references"]


@dataclass(frozen=True)
class Record:
    """What one lowering read: ``deps`` (``(kind, scope, chain, args, fingerprint)`` tuples in
    lookup order), ``reason`` (why it cannot be reused, or None) and the compile warnings it gave
    (``(category name, message)``), replayed when the cached binary is used instead."""

    deps: tuple = ()
    reason: str | None = None
    warnings: tuple = ()


class _Frame:
    def __init__(self):
        self.deps: dict = {}    # (kind, scope, chain, args) -> fingerprint, in lookup order
        self.reason = None
        self.warnings: list = []

    def add(self, key, fp):
        if fp is None:
            self.fail(f"'{'.'.join(key[2])}' is a {_kind_of(key)} the cache cannot fingerprint")
        else:
            self.deps.setdefault(key, fp)

    def fail(self, reason):
        if self.reason is None:
            self.reason = reason

    def merge(self, rec: Record):
        for kind, scope, chain, args, fp in rec.deps:
            self.deps.setdefault((kind, scope, chain, args), fp)
        if rec.reason is not None:
            self.fail(rec.reason)
        self.warnings += [w for w in rec.warnings if w not in self.warnings]

    def record(self) -> Record:
        return Record(tuple(k + (fp,) for k, fp in self.deps.items()), self.reason, tuple(self.warnings))


def _kind_of(key):
    return "compile-time call result" if key[0] == "c" else "value"


_local = threading.local()   # lowering runs under one lock, but a frame stack per thread costs nothing


def _top():
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


@contextmanager
def recording():
    """Record the lookups of the lowering run inside; yields a callable returning the
    ``Record``. Nested recordings (a helper specialized while its caller lowers) merge into
    the enclosing one when they end."""
    stack = _local.__dict__.setdefault("stack", [])
    frame = _Frame()
    stack.append(frame)
    try:
        yield frame.record
    finally:
        stack.pop()
        if stack:
            stack[-1].merge(frame.record())


def replay(rec: Record) -> None:
    """Add ``rec`` (a reused specialization's record) to the open recording, if any."""
    top = _top()
    if top is not None:
        top.merge(rec)


def note_value(pyfunc, chain, value) -> None:
    """The frontend resolved ``chain`` (a name, then attributes) in ``pyfunc``'s scope to ``value``;
    ``chain`` None: the value came from something the cache cannot look up again."""
    top = _top()
    if top is None:
        return
    if chain is None:
        top.fail("an attribute of a computed value")
        return
    top.add(("v", scope_id(pyfunc), chain, None), fingerprint(value))


def note_call(pyfunc, chain, args, value) -> None:
    """A compile-time call of ``chain`` with literal ``args`` returned ``value`` (verification
    calls it again, as lowering would)."""
    top = _top()
    if top is None:
        return
    if chain is None or not all(isinstance(a, (bool, int, float)) for a in args):
        top.fail("a compile-time call of a computed callee")
        return
    top.add(("c", scope_id(pyfunc), chain, tuple(args)), fingerprint(value))


def note_warning(warning: Warning) -> None:
    """A compile warning lowering gives (replayed when the cached binary is reused)."""
    top = _top()
    if top is not None:
        top.warnings.append((type(warning).__name__, str(warning)))


# ------------------------------------------------------------------------------ fingerprints

_FINGERPRINTS: dict = {}   # class -> (fingerprint(obj) -> str | None, scopes(obj) -> [pyfunc, ...])


def register_fingerprint(cls, fn, scopes=None) -> None:
    """Register how to fingerprint objects of ``cls`` (a higher layer's: ``funcs.Func``) and,
    with ``scopes``, the Python functions whose bodies lowering reads through such an object."""
    _FINGERPRINTS[cls] = (fn, scopes)


def _registered(obj):
    for cls in type(obj).__mro__:
        r = _FINGERPRINTS.get(cls)
        if r is not None:
            return r
    return None


def scope_id(pyfunc) -> str:
    """A Python function's identity across processes: module, qualified name, first line."""
    return f"{pyfunc.__module__}:{pyfunc.__qualname__}:{pyfunc.__code__.co_firstlineno}"


def digest(*parts) -> str:
    """sha256 hex digest of ``parts`` (strings), separated."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\x00")
    return h.hexdigest()


def file_digest(file: str) -> str | None:
    """The digest of a source file's text as ``linecache`` holds it now, computed once per
    version of the file and process; None if unreadable. (Kernels and helpers key on the text
    captured when they were decorated: ``source_fingerprint``.)"""
    lines = linecache.getlines(file)
    return lines_digest(lines) if lines else None


def source_fingerprint(pyfunc) -> str | None:
    """A function's file, the digest of the file's text captured at decoration (what lowering
    parses: ``signature.capture_source``), its first line and qualified name; None if
    unreadable. Fingerprints use the whole file, which costs no parse (an edit anywhere in it
    makes its kernels lower once more)."""
    code = pyfunc.__code__
    cap = captured(pyfunc)
    return None if cap is None else f"{code.co_filename}:{cap.digest}:{code.co_firstlineno}:{pyfunc.__qualname__}"


def type_fingerprint(t) -> str | None:
    """A string that differs whenever two kernel types would generate different code."""
    if isinstance(t, StructType):
        fields = [f"{n}:{type_fingerprint(ft)}" for n, ft in t.fields]
        cls = getattr(t, "cls", None)
        owner = f"{cls.__module__}.{cls.__qualname__}" if cls is not None else ""
        return f"struct {t.name}<{owner}>{{{','.join(fields)}}}"
    if isinstance(t, ArrayType):
        return f"array[{type_fingerprint(t.dtype)},{t.ndim}]"
    if isinstance(t, (ScalarType, VectorType, MatrixType)):
        return f"{type(t).__name__}:{t.cname}"
    return None


_PLAIN = (bool, int, float, str, type(None))


def fingerprint(obj) -> str | None:
    """A string equal for two values exactly when the frontend treats them alike, or None when
    there is none (the lowering is then not reusable)."""
    if isinstance(obj, _PLAIN):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, np.generic):
        return f"np:{obj.dtype.str}:{obj!r}"
    if isinstance(obj, np.ndarray):
        if not is_constant(obj):
            return None
        return f"const:{obj.dtype.str}:{obj.shape}:{hashlib.sha256(obj.tobytes()).hexdigest()}"
    t = type_fingerprint(obj)
    if t is not None:
        return "type:" + t
    if isinstance(obj, type) and isinstance(getattr(obj, "_tg_struct", None), StructType):
        return "structclass:" + type_fingerprint(obj._tg_struct)
    if isinstance(obj, Builtin):
        return "builtin:" + obj.name
    if obj is adjoint:
        return "adjoint"
    if isinstance(obj, pytypes.ModuleType):
        return "module:" + obj.__name__
    reg = _registered(obj)
    if reg is not None:
        return reg[0](obj)
    if isinstance(obj, (pytypes.BuiltinFunctionType, np.ufunc)) or \
            (isinstance(obj, type) and getattr(python_builtins, obj.__name__, None) is obj):
        return f"pyfn:{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', obj.__name__)}"
    if isinstance(obj, pytypes.FunctionType):
        # only ever called at compile time (with literal arguments): the call's own record
        # ("c") compares its result; the code hash tells edited functions apart
        code = obj.__code__
        return (f"pyfunc:{obj.__module__}.{obj.__qualname__}:"
                f"{digest(code.co_code.hex(), repr(code.co_consts), repr(code.co_names))}")
    return None


# ------------------------------------------------------------------------------ verification

_MISSING = object()


def _resolve(pyfunc, chain):
    """``chain`` looked up as the frontend does: closure cell, module global, Python builtin;
    then attributes."""
    name = chain[0]
    v = _MISSING
    code = pyfunc.__code__
    if pyfunc.__closure__ and name in code.co_freevars:
        try:
            v = pyfunc.__closure__[code.co_freevars.index(name)].cell_contents
        except ValueError:   # an empty cell: the frontend skips it too
            pass
    if v is _MISSING:
        g = pyfunc.__globals__
        if name in g:
            v = g[name]
        elif hasattr(python_builtins, name):
            v = getattr(python_builtins, name)
        else:
            return _MISSING
    for attr in chain[1:]:
        try:
            v = getattr(v, attr)
        except Exception:   # noqa: BLE001  any failure: the record no longer holds
            return _MISSING
    return v


def verify(root, deps) -> bool:
    """Whether every lookup in ``deps`` (a ``Record``'s, possibly read back from disk) still
    finds what it found, starting in the scope of ``root`` (the kernel's function)."""
    scopes = {scope_id(root): root}
    for kind, scope, chain, args, fp in deps:
        pyfunc = scopes.get(scope)
        if pyfunc is None:
            return False
        v = _resolve(pyfunc, tuple(chain))
        if v is _MISSING:
            return False
        if kind == "c":
            try:
                v = v(*args)
            except Exception:   # noqa: BLE001
                return False
        try:
            got = fingerprint(v)
        except Exception:   # noqa: BLE001  (a helper whose annotations no longer evaluate...)
            return False
        if got != fp:
            return False
        reg = _registered(v)
        if reg is not None and reg[1] is not None:
            for f in reg[1](v):
                scopes.setdefault(scope_id(f), f)
    return True


def _is_value(v) -> bool:
    # Warp's "values": numbers and vector/matrix/quaternion values (not types, arrays, callables)
    if isinstance(v, (bool, int, float, np.generic)):
        return True
    return isinstance(v, np.ndarray) and type(v) is not np.ndarray and getattr(type(v), "tg_type", None) is not None


def _is_type(v) -> bool:
    return isinstance(v, (ScalarType, VectorType, MatrixType, StructType, ArrayType)) or (
        isinstance(v, type) and getattr(v, "_tg_struct", None) is not None)


def references(root, rec: Record) -> tuple:
    """What ``root`` (a kernel's or function's Python function) referenced outside itself when
    ``rec`` was recorded, looked up again now in its own scope (Warp's ``adj.get_references()``):
    ``(constants, types, functions)``, three dicts: dotted name -> value for numbers and
    vector/matrix values, type -> dotted name for types and structs, and ``@func`` object ->
    dotted name for the functions it calls (those the fingerprint registry knows: ``funcs.Func``).
    Lookups made inside called functions' bodies belong to those functions and are left out;
    names that no longer resolve are left out."""
    own = scope_id(root)
    constants: dict = {}
    types_: dict = {}
    functions: dict = {}
    for kind, scope, chain, _args, _fp in rec.deps:
        if kind != "v" or scope != own:
            continue
        v = _resolve(root, tuple(chain))
        if v is _MISSING:
            continue
        name = ".".join(chain)
        if _is_type(v):
            types_.setdefault(v, name)
        elif _is_value(v):
            constants[name] = v
        elif _registered(v) is not None and not isinstance(v, (pytypes.ModuleType, Builtin)):
            try:
                functions.setdefault(v, name)
            except TypeError:   # not hashable: not one of the registered function objects
                pass
    return constants, types_, functions
