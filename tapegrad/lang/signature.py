"""Reading a decorated Python function's signature: parameter annotations to tapegrad types,
and the stable names its compiled symbols get."""
from __future__ import annotations

import hashlib
import inspect
import typing

from ..errors import KernelError
from ..types import type_of


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
    try:
        return type_of(ann, arg=name)
    except (TypeError, ValueError) as e:
        raise KernelError(f"{where(pyfunc)}: {what} '{pyfunc.__name__}': parameter '{name}': {e}") from None
