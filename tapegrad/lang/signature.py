"""Reading a decorated Python function: its source, its parameter annotations as tapegrad
types, and the stable names its compiled symbols get."""
from __future__ import annotations

import ast
import hashlib
import inspect
import linecache
import textwrap
import typing
import weakref
from dataclasses import dataclass

from ..errors import KernelError
from ..types import GENERIC_SCALARS, type_of


def short_hash(*parts) -> str:
    """10 hex digits identifying ``parts`` (symbol suffixes: stable across processes)."""
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:10]


def where(pyfunc) -> str:
    """``file:line`` of a function's definition, for messages."""
    return f"{pyfunc.__code__.co_filename}:{pyfunc.__code__.co_firstlineno}"


def annotations(pyfunc, what):
    """Resolve parameter annotations (string annotations are evaluated in the function's scope).

    Args:
        pyfunc: the function.
        what: "kernel", "function"... for messages.
    Returns:
        ``([(name, annotation), ...], return annotation)``.
    Raises:
        KernelError: a string annotation cannot be evaluated.
    """
    sig = inspect.signature(pyfunc)
    ns = dict(pyfunc.__globals__)
    if pyfunc.__closure__:
        for n, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
            try:
                ns[n] = cell.cell_contents
            except ValueError:
                pass
    out = []
    for name, p in sig.parameters.items():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            form = {p.VAR_POSITIONAL: f"*{name}", p.VAR_KEYWORD: f"**{name}"}.get(p.kind, f"keyword-only '{name}'")
            raise KernelError(f"{where(pyfunc)}: {what} '{pyfunc.__name__}': parameter {form}: *args, **kwargs and "
                              f"keyword-only parameters are not supported; list each parameter with its type "
                              f"before any '*'")
        ann = p.annotation
        if isinstance(ann, str):
            try:
                ann = eval(ann, ns)  # noqa: S307  annotations are the user's own code
            except Exception as e:
                raise KernelError(f"{where(pyfunc)}: {what} '{pyfunc.__name__}': cannot evaluate the annotation "
                                  f"of '{name}' ({ann!r}): {e}") from None
        out.append((name, ann))
    ret = sig.return_annotation
    if isinstance(ret, str):
        ret = eval(ret, ns)  # noqa: S307
    return out, ret


def resolve_type(pyfunc, what, name, ann, allow_generic=False):
    """The tapegrad type of parameter ``name``'s annotation ``ann``.

    Returns:
        The type, or None for a generic parameter (``allow_generic``: no annotation or ``Any``).
    Raises:
        KernelError: a missing annotation (not generic) or one that is not a kernel type.
    """
    if ann is inspect.Parameter.empty or ann is None:
        if allow_generic:
            return None
        raise KernelError(f"{where(pyfunc)}: {what} '{pyfunc.__name__}': parameter '{name}' needs a type "
                          f"annotation (e.g. {name}: float or {name}: tg.array(dtype=float))")
    if ann is typing.Any and allow_generic:
        return None
    if allow_generic and isinstance(ann, typing.TypeVar) and ann in GENERIC_SCALARS:
        return ann     # Warp's Int / Float / Scalar: specialized per argument type (funcs.py)
    try:
        return type_of(ann, arg=name)
    except (TypeError, ValueError) as e:
        raise KernelError(f"{where(pyfunc)}: {what} '{pyfunc.__name__}': parameter '{name}': {e}") from None


@dataclass(frozen=True, eq=False)
class CapturedSource:
    """The text of a function's file as it was when the function was decorated: what lowering
    parses and what the direct cache keys on, whatever happens to the file afterwards.

    ``lines`` is ``linecache``'s list of the file's lines at decoration (shared by every
    function of the file decorated before the file changed on disk: capturing costs one
    ``stat``, the file is read once); ``digest`` (sha256 of the text) is computed on first use
    and shared the same way."""

    file: str
    lines: list

    @property
    def digest(self) -> str:
        return lines_digest(self.lines)


_CAPTURED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # function -> CapturedSource
_DIGESTS: dict = {}   # id(lines) -> (lines, digest): the lines are kept alive, so the id is theirs


def lines_digest(lines) -> str:
    """sha256 hex digest of a file's text given as ``linecache``'s list of lines, computed once
    per list."""
    hit = _DIGESTS.get(id(lines))
    if hit is not None and hit[0] is lines:
        return hit[1]
    d = hashlib.sha256("".join(lines).encode()).hexdigest()
    if len(_DIGESTS) > 4096:
        _DIGESTS.clear()
    _DIGESTS[id(lines)] = (lines, d)
    return d


def capture_source(fn) -> CapturedSource | None:
    """Remember the text of ``fn``'s file now (at decoration: ``@kernel``, ``@func``,
    ``@func_grad``), so that a file saved by an editor after the import never changes what
    runs. Idempotent; None when the file cannot be read (then ``source_of`` reads it when first
    needed and fails with a clear error if it still cannot)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    try:
        hit = _CAPTURED.get(fn)
    except TypeError:   # not weak-referenceable
        return None
    if hit is not None:
        return hit
    file = code.co_filename
    # checkcache: an entry linecache holds from before the file was last written (a module
    # reloaded after an edit, a traceback printed earlier) is dropped and the file read anew
    linecache.checkcache(file)
    lines = linecache.getlines(file, getattr(fn, "__globals__", None))
    if not lines:
        return None
    cap = CapturedSource(file, lines)
    _CAPTURED[fn] = cap
    return cap


def captured(fn) -> CapturedSource | None:
    """The source captured for ``fn`` at decoration, capturing it now if it was not."""
    try:
        hit = _CAPTURED.get(fn)
    except TypeError:
        return None
    return hit if hit is not None else capture_source(fn)


def _fast_source(fn, lines):
    """``textwrap.dedent(inspect.getsource(fn))`` cut from ``lines`` (the file's captured text)
    without the tokenizer (whose regexes cost milliseconds to compile in a fresh process, a
    large part of a cached kernel load), or None when unsure (the caller then runs
    ``inspect``'s block finder on the same lines).

    The candidate is the ``def`` (with its decorators) and the following lines up to the last
    code line before one indented no deeper than the ``def`` that can start a statement. It is
    accepted only if it parses as one function definition named like ``fn`` spanning exactly
    those lines: a truncation inside the definition (a less indented line inside brackets, a
    string or after a backslash) cannot parse, and past the definition's end only blank and
    comment lines can precede such a line. Like ``inspect``'s block finder, trailing comment
    lines indented at least as deep as the body are kept.
    """
    code = fn.__code__
    first = code.co_firstlineno - 1
    if not 0 <= first < len(lines):
        return None
    head = lines[first]
    stripped = head.lstrip()
    if not stripped.startswith(("@", "def ", "def\t", "async ")):
        return None
    base = len(head) - len(stripped)
    k = first
    while not lines[k].lstrip().startswith(("def ", "def\t", "async ")):   # skip decorators
        k += 1
        if k >= len(lines) or k - first > 64:
            return None
    end = last = k + 1
    while end < len(lines):
        text = lines[end]
        body = text.lstrip()
        if body and not body.startswith("#"):
            if len(text) - len(body) <= base and not body.startswith((")", "]", "}")):
                break
            last = end + 1
        end += 1
    block = lines[first:last]
    src = textwrap.dedent("".join(block))
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != fn.__name__:
        return None
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    if start != 1 or node.end_lineno != len(block) or not node.body:
        return None
    b0 = node.body[0]
    line = src.split("\n")[b0.lineno - 1]
    if line[:b0.col_offset].strip():
        return src   # the body starts on the header's line: no indented block, no comments kept
    body_col = b0.col_offset + len(block[b0.lineno - 1].rstrip("\n")) - len(line)   # + what dedent removed
    extra = last
    for j in range(last, end):
        text = lines[j]
        body = text.lstrip()
        if body.startswith("#") and len(text) - len(body) >= body_col:
            extra = j + 1
    if extra == last:
        return src
    return textwrap.dedent("".join(lines[first:extra]))


def source_of(fn):
    """(dedented source, file, first line) of a Python function, cut from the text of its file
    captured at decoration (``capture_source``).

    Raises:
        KernelError: the source cannot be read.
    """
    code = getattr(fn, "__code__", None)
    cap = captured(fn)
    if cap is None or code is None or hasattr(fn, "__wrapped__"):
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError) as e:
            raise KernelError(f"cannot read the source of {getattr(fn, '__qualname__', fn)!r}: {e} "
                              "(kernels must be defined in a file, not typed into an interactive prompt)") from None
        return textwrap.dedent(src), code.co_filename, code.co_firstlineno
    src = _fast_source(fn, cap.lines)
    if src is None:
        first = code.co_firstlineno - 1
        try:
            src = textwrap.dedent("".join(inspect.getblock(cap.lines[first:])))
        except (IndexError, SyntaxError, ValueError) as e:   # lines that no longer match the code
            raise KernelError(f"cannot read the source of {fn.__qualname__!r} from {code.co_filename}: {e}") from None
    return src, code.co_filename, code.co_firstlineno
