"""Names that bind an exported program's tapegrad ops to kernels in another process (SPEC B20).

A program saved by ``torch.export`` or ``jax.export`` names each tapegrad op; the process
that loads it must find the same kernel under the same name, whatever order it builds its
kernels in. The name is the kernel's module-qualified name (readable, and telling the user
what to import) and a digest of everything that makes the op compute what it computes: the
kernel's Python source, its parameter types, ``enable_backward``, the values its closure
captures, and the op's options (``num_outputs``, ``launch_dims``, ``output_dims``...).
Nothing in it depends on the process (no counters, addresses or file paths), so two kernels
named ``f`` in two modules, or one edited between export and load, never share a name.

    stable_name(kmod_a.f, 1, None, None)   # 'kmod_a__f__3f9a1c2b7d4e5f60'
    describe(stable_name(...))             # ('kmod_a', 'f')
"""
from __future__ import annotations

import hashlib
import re

__all__ = ["kernel_path", "kernel_digest", "stable_name", "describe", "advice"]

_DIGEST_CHARS = 16
_NAME = re.compile(r"^(?P<path>\w+?)__(?P<digest>[0-9a-f]{%d})$" % _DIGEST_CHARS)


def kernel_path(kernel) -> tuple:
    """``(module, qualified name)`` of the kernel's Python function (``<locals>`` dropped); a
    generic kernel's specialization keeps the generic kernel's (its types go in the digest)."""
    fn = kernel.func
    return fn.__module__, fn.__qualname__.replace(".<locals>", "")


def _value_print(v) -> str:
    """A process-independent text of an op option or closure value: ints, tuples and dicts as
    themselves; functions by their module, name and bytecode (not their address)."""
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: repr(kv[0]))
        return "{" + ",".join(f"{k!r}:{_value_print(x)}" for k, x in items) + "}"
    if isinstance(v, (list, tuple)):
        return "(" + ",".join(_value_print(x) for x in v) + ")"
    code = getattr(v, "__code__", None)
    if code is not None:
        h = hashlib.sha256(code.co_code)
        h.update(repr(code.co_consts).encode())
        h.update(repr(code.co_names).encode())
        return f"fn:{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', '')}:{h.hexdigest()[:16]}"
    from tapegrad.lang.depends import fingerprint
    try:
        f = fingerprint(v)
    except Exception:  # noqa: BLE001  a value the cache cannot fingerprint: its type and text
        f = None
    return f if f is not None else f"{type(v).__module__}.{type(v).__qualname__}:{v!r}"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _code_print(pyfunc, seen: set) -> str:
    """What a kernel's or helper's Python function computes with: its source text, its closure
    values and the module globals its body names (``tg.constant`` values...), through the
    ``@tg.func`` helpers it calls, recursively. (The source alone named two kernels alike whose
    helper closes over another constant, or a module reloaded with a changed global constant.)"""
    from tapegrad.lang.signature import source_of
    if id(pyfunc) in seen:
        return "<seen>"
    seen.add(id(pyfunc))
    try:
        parts = [source_of(pyfunc)[0]]
    except Exception:  # noqa: BLE001  no source (typed at a prompt): its bytecode instead
        parts = [_value_print(pyfunc)]
    code = pyfunc.__code__
    for name, cell in zip(code.co_freevars, pyfunc.__closure__ or ()):
        try:
            parts.append(f"{name}={_dep_print(cell.cell_contents, seen)}")
        except ValueError:   # an empty cell
            parts.append(f"{name}=<empty>")
    g = getattr(pyfunc, "__globals__", {})
    for name in sorted(set(code.co_names)):
        if name in g:
            parts.append(f"g:{name}={_dep_print(g[name], seen)}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _dep_print(v, seen: set) -> str:
    """A value a kernel's body reads, printed without process-specific parts: ``@tg.func`` helpers
    by what they compute (``_code_print`` of each overload, custom adjoint and native snippet),
    modules by name, other values by ``_value_print`` (an object printed with its address by its
    type only: an address differs between processes)."""
    import types as pytypes
    if isinstance(v, pytypes.ModuleType):
        return "module:" + v.__name__
    overloads = getattr(v, "overloads", None)
    if isinstance(overloads, list) and overloads and all(hasattr(o, "pyfunc") for o in overloads):
        return "func:" + "|".join(_code_print(o.pyfunc, seen) + ("/" + _code_print(o.grad, seen)
                                                                if getattr(o, "grad", None) is not None else "")
                                  for o in overloads)
    if hasattr(v, "snippet") and callable(getattr(v, "pyfunc", None)):   # a native snippet function
        return f"native:{_code_print(v.pyfunc, seen)}:{v.snippet}:{getattr(v, 'adj_snippet', '')}"
    text = _value_print(v)
    return f"{type(v).__module__}.{type(v).__qualname__}" if _ADDRESS.search(text) else text


def kernel_digest(kernel) -> str:
    """sha256 hex digest of what the kernel computes: its function's source text, parameter
    types, ``enable_backward``, closure values and the module globals its body names, through
    the ``@tg.func`` helpers it calls (not where its file lies)."""
    from tapegrad.lang.depends import type_fingerprint
    fn = kernel.func
    _, types = kernel.parameters()
    parts = ["tapegrad-op 2", ".".join(kernel_path(kernel)), _code_print(fn, set()), str(bool(kernel.enable_backward))]
    parts += [str(type_fingerprint(t)) for t in types]
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def stable_name(kernel, *options) -> str:
    """The identifier naming ``kernel`` with op ``options`` in exported programs:
    ``<module>__<name>__<digest>`` (dots written ``__``, other non-identifier characters ``_``).

    Args:
        kernel: a ``@tg.kernel`` (a generic kernel's specialization included).
        options: the op's configuration (ints, tuples, dicts, functions), part of the digest.
    """
    module, qual = kernel_path(kernel)
    h = hashlib.sha256(kernel_digest(kernel).encode())
    h.update(_value_print(tuple(options)).encode())
    path = re.sub(r"\W", "_", f"{module}.{qual}".replace(".", "__"))
    return f"{path}__{h.hexdigest()[:_DIGEST_CHARS]}"


def describe(name: str):
    """``(module, kernel name)`` read back from a ``stable_name`` (best effort: the last
    ``__``-separated part is the kernel's name), or None for a name of another form."""
    m = _NAME.match(name)
    if m is None:
        return None
    path = m.group("path")
    k = path.rfind("__")
    if k <= 0:
        return None
    return path[:k].replace("__", ".").strip(".") or path[:k], path[k + 2:]


def advice(name: str, builder: str) -> str:
    """What to do when an exported program names ``name`` and this process has not defined it."""
    d = describe(name)
    if d is None:
        return (f"build the op with {builder}(...) in this process first (the same kernel source, types and "
                "options as when the program was exported)")
    module, kname = d
    return (f"import the module that defines kernel '{kname}' (import {module}) and build "
            f"{builder}({module}.{kname}, ...) with the options used at export before loading the program; a kernel "
            "whose source, parameter types, closure values or op options changed since the export gets another "
            "name")
