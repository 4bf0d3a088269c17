"""The direct cache: a kernel's cached binary found in a fresh process without lowering it.

A cached kernel load used to lower the function, generate its C++ and hash it, only to find
the binary the hash names: most of a cached first launch. Like ccache's *direct mode*, a
kernel's first build also writes a manifest (``<symbol>_<key>.dep`` in the cache directory,
checksummed like every entry) keyed by what can be read without lowering:

- tapegrad's code generator (the size and mtime of its files: ``compiler_identity``),
- the kernel's key, the text of its file as captured when it was decorated (what lowering
  parses: ``signature.capture_source``) and its line, ``enable_backward``, parameter types and
  the values of its closure cells,
- its module's build inputs (``extra_build_options``: preambles, include folders, the
  dependency files' contents) and entry point ABI (``Kernel.build_key``).

The manifest holds the digest of the generated C++ (which, with the toolchain, names the
binary: ``build.cpu_library_path``, ``build.cuda_image_base``), the facts the launch path reads
from the IR (``Facts``), the compile warnings lowering gave, and the record of every value
lowering looked up outside the function (``depends``). A later process recomputes the key,
replays the lookups, and loads the binary when every one still finds what it found; anything
else (no manifest, a changed global, an edited helper, a damaged file) lowers as before and
rewrites the manifest. Only single-kernel modules of the default build use it (``kernel.py``).
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from dataclasses import dataclass

import numpy as np

from .. import build, errors
from ..errors import KernelError
from ..version import __version__
from . import depends

__all__ = ["Facts", "Manifest", "FACT_RULES", "register_fact", "key_of", "lookup", "store", "compiler_identity",
           "replay_warnings", "store_variant", "lookup_variant"]

_FORMAT = "tapegrad-direct 1"


@dataclass(frozen=True)
class Facts:
    """What the launch path needs from a kernel's IR: per parameter ``(reads, writes)``, how many
    indices ``tid()`` is unpacked into, and the elementwise entry's lanes (1: none)."""

    access: tuple
    tid_ndim: int
    lanes: int


# name -> rule(kernel, ir) -> a JSON value: what higher layers read from a kernel's IR, computed
# when the manifest is written and stored in it, so a cached kernel answers without lowering
# (``register_fact``; the tape's in-place analysis registers one)
FACT_RULES: dict = {}


def register_fact(name: str, rule) -> None:
    """Register ``rule(kernel, ir) -> value`` (JSON-serialisable, deterministic in the IR) as the
    fact ``name``: stored in every manifest written from now on, read back by ``Kernel.fact``."""
    FACT_RULES[name] = rule


@dataclass(frozen=True)
class Manifest:
    """A verified manifest: the C++ digest naming the binary, the facts, the compile warnings."""

    source_digest: str
    facts: Facts
    warnings: tuple
    extra: dict = None      # FACT_RULES name -> value, as stored


_identity = None


def compiler_identity() -> str:
    """A fingerprint of the tapegrad code that turns a kernel into C++, computed once per process.

    An installed release (the package beside its ``tapegrad-<version>.dist-info``) is its version
    plus the size and mtime of the install's ``RECORD`` (rewritten by every install): one
    ``stat``. A source checkout or editable install is the size and mtime of every file of
    ``tapegrad/lang`` (frontend, passes, emitter, runtime headers), of ``tapegrad/types.py`` and of
    the kernel ABI (``tapegrad/abi``, ``include/tg_abi.h``),
    so an edited file gives another fingerprint (about 40 ``stat`` calls). Both include the
    Python and NumPy versions."""
    global _identity
    if _identity is None:
        here = os.path.dirname(os.path.abspath(__file__))
        pkg = os.path.dirname(here)
        seen = [__version__, sys.version, np.__version__]
        try:
            st = os.stat(os.path.join(os.path.dirname(pkg), f"tapegrad-{__version__}.dist-info", "RECORD"))
            seen.append(f"installed:{pkg}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            paths = [os.path.join(pkg, "types.py"), os.path.join(pkg, "abi", "__init__.py"),
                     os.path.join(pkg, "include", "tg_abi.h")]   # the kernel ABI (inlined into every kernel)
            for d in (here, os.path.join(here, "runtime")):
                with os.scandir(d) as it:
                    paths += sorted(e.path for e in it if e.name.endswith((".py", ".h")))
            for p in paths:
                st = os.stat(p)
                seen.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
        _identity = depends.digest(*seen)
    return _identity


def key_of(kernel) -> str | None:
    """The manifest key of ``kernel`` (None when a parameter type or closure value has no
    fingerprint, or the source cannot be read: such a kernel always lowers)."""
    fn = kernel.func
    src = depends.source_fingerprint(fn)
    if src is None:
        return None
    try:
        _, types = kernel.parameters()
    except KernelError:
        return None
    try:
        build_key = kernel.build_key()
    except ValueError:   # an unreadable dependency: the build itself says so
        return None
    parts = [_FORMAT, compiler_identity(), kernel.key, kernel.symbol, kernel.enable_backward, src, build_key]
    for t in types:
        f = depends.type_fingerprint(t)
        if f is None:
            return None
        parts.append(f)
    for n, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            f = depends.fingerprint(cell.cell_contents)
        except ValueError:
            f = "empty"
        if f is None:
            return None
        parts += [n, f]
    return depends.digest(*parts)


def _path(kernel, key):
    return os.path.join(build.cache_dir(), f"{kernel.symbol}_{key[:24]}.dep")


def lookup(kernel) -> Manifest | None:
    """The kernel's manifest if it exists, is intact and every recorded lookup still holds.

    Raises:
        CacheDirError: the cache directory is unsafe.
    """
    key = key_of(kernel)
    if key is None:
        return None
    data, problem = build.read_entry(_path(kernel, key))
    if data is None or problem is not None:
        return None
    try:
        m = json.loads(data)
        if m.get("format") != _FORMAT or m.get("key") != key:
            return None
        deps = [(d[0], d[1], tuple(d[2]), tuple(d[3]) if d[3] is not None else None, d[4]) for d in m["deps"]]
        f = m["facts"]
        facts = Facts(tuple((bool(r), bool(w)) for r, w in f["access"]), int(f["tid_ndim"]), int(f["lanes"]))
        digest, warns = str(m["source_digest"]), tuple((str(c), str(t)) for c, t in m["warnings"])
        extra = dict(m.get("extra", {}))
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    if not depends.verify(kernel.func, deps):
        return None
    return Manifest(digest, facts, warns, extra)


def store(kernel, record: depends.Record, source_digest: str, facts: Facts, extra: dict) -> bool:
    """Write the manifest of a kernel just lowered and built (nothing when its lowering read a
    value the cache cannot fingerprint). Returns whether one was written; a failure to write
    (a full disk...) only costs the next process a lowering."""
    if record.reason is not None:
        return False
    key = key_of(kernel)
    if key is None:
        return False
    m = {"format": _FORMAT, "key": key, "kernel": kernel.key, "source_digest": source_digest,
         "facts": {"access": [list(a) for a in facts.access], "tid_ndim": facts.tid_ndim, "lanes": facts.lanes},
         "warnings": [list(w) for w in record.warnings], "extra": extra,
         "deps": [[k, s, list(c), list(a) if a is not None else None, f] for k, s, c, a, f in record.deps]}
    try:
        build.write_entry(_path(kernel, key), json.dumps(m, separators=(",", ":")).encode())
    except OSError:
        return False
    return True


def replay_warnings(manifest: Manifest) -> None:
    """Give again the compile warnings the kernel's lowering gave when it was built."""
    for cat, text in manifest.warnings:
        c = getattr(errors, cat, None)
        category = c if isinstance(c, type) and issubclass(c, Warning) else UserWarning
        warnings.warn(category(text), stacklevel=4)


# ---------------------------------------------------------------- other builds of a kernel
# A kernel's other translation units (its forward-mode code: ``launch_tangent``) are found the
# same way: a small entry beside the manifest, under the same key, names the digest of that
# unit's C++. It is used only when the kernel's manifest itself verifies (``lookup``), so every
# condition that invalidates the default build's direct load invalidates these too.

def _variant_path(kernel, key, variant):
    return os.path.join(build.cache_dir(), f"{kernel.symbol}_{key[:24]}_{variant}.dep")


def store_variant(kernel, variant: str, source_digest: str) -> bool:
    """Remember that the ``variant`` build (``"tan"``, ``"tan2"``) of ``kernel`` is the C++ with
    digest ``source_digest``. Returns whether an entry was written."""
    key = key_of(kernel)
    if key is None:
        return False
    m = {"format": _FORMAT, "key": key, "variant": variant, "source_digest": source_digest}
    try:
        build.write_entry(_variant_path(kernel, key, variant), json.dumps(m, separators=(",", ":")).encode())
    except OSError:
        return False
    return True


def lookup_variant(kernel, variant: str) -> str | None:
    """The C++ digest of the ``variant`` build of ``kernel`` when its entry exists and the
    kernel's manifest verifies (``lookup``); else None (the caller lowers and generates)."""
    key = key_of(kernel)
    if key is None:
        return None
    data, problem = build.read_entry(_variant_path(kernel, key, variant))
    if data is None or problem is not None:
        return None
    try:
        m = json.loads(data)
        if m.get("format") != _FORMAT or m.get("key") != key or m.get("variant") != variant:
            return None
        digest = str(m["source_digest"])
    except (ValueError, KeyError, TypeError):
        return None
    return digest if lookup(kernel) is not None else None
