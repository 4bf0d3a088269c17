"""The native helpers' libraries: compiled at install, compiled on first use only as a fallback.

Three small C helpers ship as source beside their modules: the launch helper
(``launch/fastlaunch.c``, ``tapegrad.launch.fastlaunch``), the DLPack capsule helper
(``dlpack/capsule_helper.c``, ``tapegrad.dlpack.capsules``) and the batched host memset
(``hostops.c``, ``tapegrad.memory_ops``). ``setup.py`` compiles each into
``tapegrad/native_libs/<name>_<sha256 of the source, 16 hex digits><extension suffix>`` of the
wheel and of an editable install, so a launch never waits for a compiler.

``load`` opens that library when it exists for the source as it is now (the digest is part of
the file name: an edited source, in an editable checkout, does not match a stale library).
Otherwise — no compiler at install, a stale or unloadable library, a source tree used without
installing — it compiles the helper through ``tapegrad.build`` into the kernel cache (same
compiler, checks and atomic rename as kernels; one ``tapegrad`` log line says so), which is
what every first use did before helpers were built at install. ``TAPEGRAD_PREBUILT_HELPERS=0``
ignores the libraries built at install (the fallback always).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import os

from . import abi, build, buildlog

__all__ = ["HELPERS", "LIB_DIR", "source_path", "helper_source", "prebuilt_path", "load"]

_HERE = os.path.dirname(os.path.abspath(__file__))
LIB_DIR = os.path.join(_HERE, "native_libs")
# library name -> source, relative to the package (setup.py's HELPERS lists the same pairs)
HELPERS = {"tg_fastlaunch": "launch/fastlaunch.c", "tg_dlpack": "dlpack/capsule_helper.c", "tg_hostops": "hostops.c"}


def source_path(name: str) -> str:
    """The shipped C source of helper ``name``.

    Raises:
        KeyError: ``name`` is not one of ``HELPERS``.
    """
    return os.path.join(_HERE, *HELPERS[name].split("/"))


def prebuilt_path(name: str, source: str, lib_dir: str | None = None):
    """The library ``setup.py`` built from exactly ``source`` for helper ``name``, or None when
    there is none (not installed with a compiler, or built from another version of the source).

    Args:
        lib_dir: where to look (default ``LIB_DIR``, the installed package's ``native_libs``).
    """
    stem = os.path.join(lib_dir or LIB_DIR, f"{name}_{hashlib.sha256(source.encode()).hexdigest()[:16]}")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.isfile(stem + suffix):
            return stem + suffix
    return None


def load(name: str, python_api: bool = False):
    """Helper ``name``'s library, loaded: the one built at install when it matches the source,
    else compiled into (or found in) the kernel cache.

    Args:
        name: a key of ``HELPERS``.
        python_api: load with ``ctypes.PyDLL`` (calls keep the GIL, Python errors propagate).
    Returns:
        The ``ctypes`` library.
    Raises:
        CompileError: no prebuilt library and the C++ compiler failed or none exists.
        CacheDirError: the kernel cache directory is unsafe (only when compiling).
    """
    source = helper_source(name)
    # TAPEGRAD_PREBUILT_HELPERS=0: always the fallback (tests of the kernel cache's helper entries)
    path = prebuilt_path(name, source) if os.environ.get("TAPEGRAD_PREBUILT_HELPERS", "1") != "0" else None
    if path is not None:
        try:
            lib = build.load_cpu_library(path, python_api)
        except OSError as e:   # e.g. a wheel copied to an incompatible system: compile here instead
            buildlog.debug("native helper %s: the library built at install cannot be loaded (%s); compiling it",
                           name, e)
        else:
            buildlog.debug("native helper %s: loaded the library built at install (%s)", name, path)
            return lib
    else:
        buildlog.debug("native helper %s: no library built at install for this source; compiling it", name)
    return build.load_cpu(source, name, python_api=python_api)


def helper_source(name: str) -> str:
    """The text of helper ``name``'s C source with the kernel ABI header inlined
    (``abi.inline_header``): what the fallback compiles and what the library's digest names."""
    with open(source_path(name)) as f:
        return abi.inline_header(f.read())

