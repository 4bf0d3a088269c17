"""The typed IR: straight-line SSA temporaries inside structured control flow.

Every expression value is a *temp* assigned exactly once per execution of its block; Python
variables are *locals* that are only touched through ``Read``/``Write`` statements. This
split is what makes reverse mode simple: an adjoint reads only temps (which hold the values
of the current execution of their block), never locals (which hold the latest value).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


def c_identifier(text: str) -> str:
    """``text`` with every character that cannot appear in a C identifier replaced by ``_``."""
    return "".join(ch if ch.isalnum() and ch.isascii() else "_" for ch in text)


@dataclass(frozen=True)
class Loc:
    """A source location in the user's Python file."""

    file: str
    line: int
    func: str = ""

    def __str__(self):
        return f"{self.file}:{self.line}"


class Var:
    """A C++ variable: ``temp`` (SSA value), ``local`` (Python variable), ``param``,
    ``flag`` (break/continue/return bookkeeping) or ``counter`` (loop trip counts)."""

    __slots__ = ("name", "type", "kind", "label", "const")

    def __init__(self, name: str, type_, kind: str, label: str = "", const=None):
        self.name = name
        self.type = type_
        self.kind = kind
        self.label = label or name      # the Python name, for messages
        self.const = const              # compile-time value of constant temps

    def __repr__(self):
        return f"Var({self.name}: {self.type!r})"


@dataclass
class Op:
    """A resolved operation: how to emit it forward, in the replay and in the adjoint.

    ``fwd(args) -> str`` renders the C++ expression (or statement when ``ret`` is None);
    ``adj(args, adjs, adj_ret) -> str`` renders the adjoint statement (None: no adjoint);
    ``replay`` is ``None`` (same as fwd), ``"skip"`` (side effect only) or a renderer.
    ``linear`` holds argument positions whose *values* the adjoint never reads; with
    ``bilinear`` an argument's value is needed only when another argument is non-constant.
    ``reads``/``writes`` hold positions of array arguments the op loads from / stores into.
    """

    name: str
    fwd: Callable[[list], str]
    ret: Any
    adj: Optional[Callable[[list, list, Optional[str]], str]] = None
    replay: Any = None
    linear: frozenset = frozenset()
    bilinear: bool = False
    side_effect: bool = False
    reads: tuple = ()
    writes: tuple = ()
    callee: Any = None              # FunctionIR of a user function call
    array_adj: Optional[Callable[[list, list], str]] = None  # adjoint descriptor of an array-valued result
    tid: Optional[tuple] = None     # ``tid()`` ops: (k, n), the component k of n this one computes
    bounds_checked: bool = False    # an access the compiler added, checked against the shape (never out of range)
    view: Optional[tuple] = None    # ``view`` ops: the subscript pattern (the result aliases args[0])
    field: Optional[str] = None     # ``field`` ops: the struct field's name (the result is args[0].field)


class Stmt:
    loc: Loc


@dataclass
class Assign(Stmt):
    out: Optional[Var]
    op: Op
    args: list
    loc: Loc = None


@dataclass
class Const(Stmt):
    """``out = value``: a compile-time constant (a Python number, or a flat tuple of them for
    vectors/matrices, already converted to ``out.type``'s kind; ``emit`` renders the literal)."""

    out: Var
    value: Any
    loc: Loc = None


@dataclass
class Read(Stmt):
    out: Var
    var: Var
    loc: Loc = None


@dataclass
class Write(Stmt):
    var: Var
    src: Var
    loc: Loc = None


@dataclass
class SetFlag(Stmt):
    var: Var
    value: str          # C++ literal
    loc: Loc = None


@dataclass
class If(Stmt):
    cond: Var
    body: list
    orelse: list
    loc: Loc = None


@dataclass
class Loop(Stmt):
    """``for``/``while`` loop. Range loops: ``count`` (trip count temp), ``start``/``step``
    temps and ``var`` (the Python loop variable, a local). While loops: ``header`` statements
    computing ``cond``. ``brk``/``cont`` are flags reset each iteration; ``cnt`` counts the
    iterations started (the reverse pass runs that many)."""

    kind: str
    body: list
    cnt: Var
    loc: Loc = None
    count: Optional[Var] = None
    start: Optional[Var] = None
    step: Optional[Var] = None
    var: Optional[Var] = None
    header: list = field(default_factory=list)
    cond: Optional[Var] = None
    brk: Optional[Var] = None
    cont: Optional[Var] = None
    mode: str = "storefree"         # or "prefix": recompute iterations from the loop's start
    carried: list = field(default_factory=list)   # [(local, snapshot)] for "prefix"


@dataclass
class AdjAccum(Stmt):
    """``tg.adjoint[x] += value`` inside a ``@func_grad`` body; ``path``: the struct fields
    (names) and vector/matrix components (constant indices) below ``x`` it adds into
    (``tg.adjoint[x.vec][0]``)."""

    param: Var
    src: Var
    loc: Loc = None
    path: tuple = ()


@dataclass
class Print(Stmt):
    """``print(...)`` (``fmt`` None: ``items`` are strings and values, printed space-separated
    with a newline) or ``printf(fmt, ...)`` (``items`` are the values)."""

    items: list
    fmt: Optional[str] = None
    loc: Loc = None


@dataclass
class FunctionIR:
    """A kernel or function body plus everything needed to emit it."""

    name: str                       # C++ symbol stem
    kind: str                       # "kernel" | "func" | "grad"
    params: list                    # param Vars
    body: list
    ret_type: Any = None
    ret_var: Optional[Var] = None
    vars: list = field(default_factory=list)        # temps/locals/flags/counters to declare
    loc: Loc = None
    side_effects: bool = False
    callees: list = field(default_factory=list)     # FunctionIR this one calls (emit first)
    ret_flag: Optional[Var] = None
    grad_of: Any = None             # for kind == "grad": the FunctionIR it differentiates
    adj_params: list = field(default_factory=list)  # for kind == "grad": adjoint params
    param_access: list = field(default_factory=list)  # [(reads, writes)] per param
    grad_ir: Optional["FunctionIR"] = None          # for kind == "func": the @func_grad body, if any
    tid_ndim: int = 0               # for kind == "kernel": the most indices tid() is unpacked into
    adj_ret_type: Any = None        # for kind == "grad": the function's return type (a tuple: one adj param each)
    replay_ir: Optional["FunctionIR"] = None        # for kind == "func": the @func_replay body, if any
    native: Optional[tuple] = None  # a @func_native: (C++ body, adjoint body or None, replay body or None)


def walk(stmts):
    """Yield every statement in ``stmts``, recursively (pre-order)."""
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from walk(s.body)
            yield from walk(s.orelse)
        elif isinstance(s, Loop):
            yield from walk(s.header)
            yield from walk(s.body)
