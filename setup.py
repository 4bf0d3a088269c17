"""Packaging glue pyproject.toml cannot express.

- The repository's ``bridges/`` folder ships as ``tapegrad.bridges`` (a generic top-level name
  such as ``bridges`` must not be claimed).
- The native helpers (``tapegrad/native.py``: the launch helper, the DLPack capsule helper, the
  batched host memset) are compiled here, at install, into ``tapegrad/native_libs/`` of the
  wheel and of an editable install, so that no launch waits for a compiler. Each library's
  file name carries the sha256 of the source it was built from: an edited source (an editable
  checkout) no longer matches, and tapegrad compiles that helper into its kernel cache instead
  (the fallback, also taken when no compiler was found at install: the extensions are
  optional).
- setuptools' build directory is ``.build/``, not ``build/``: a ``build/`` folder in the
  checkout shadows the ``build`` package (``python -m build``: "No module named
  build.__main__").
"""
import hashlib
import importlib.util
import os
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
# (library name, source) -- tapegrad/native.py's HELPERS, which setup.py cannot import
HELPERS = [("tg_fastlaunch", "tapegrad/launch/fastlaunch.c"), ("tg_dlpack", "tapegrad/dlpack/capsule_helper.c"),
           ("tg_hostops", "tapegrad/hostops.c")]
# the helpers whose large copies and memsets run on a team of threads (a compiler without OpenMP
# fails this optional build: tapegrad then compiles the helper on first use, as kernels are)
OPENMP_HELPERS = {"tg_hostops"}


def _abi():
    """tapegrad/abi (the kernel ABI table) loaded on its own: it imports nothing of tapegrad, and
    importing the package would need numpy in the build environment."""
    spec = importlib.util.spec_from_file_location("_tapegrad_abi", os.path.join(HERE, "tapegrad", "abi", "__init__.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def helper_extension(name, source):
    with open(os.path.join(HERE, source)) as f:   # text with the ABI header inlined, as tapegrad.native hashes it
        digest = hashlib.sha256(_abi().inline_header(f.read()).encode()).hexdigest()
    flags = [] if sys.platform == "win32" else ["-O2", "-fvisibility=hidden", "-fno-math-errno"]
    link = []
    if name in OPENMP_HELPERS and sys.platform != "win32":
        flags, link = flags + ["-fopenmp"], ["-fopenmp"]
    return Extension(f"tapegrad.native_libs.{name}_{digest[:16]}", [source], extra_compile_args=flags,
                     extra_link_args=link,
                     include_dirs=[os.path.join("tapegrad", "include")], optional=True)


class BuildHelpers(build_ext):
    """The helpers are plain C libraries loaded with ctypes, not Python modules: no
    ``PyInit_`` symbol to export."""

    def get_export_symbols(self, ext):
        return []

    def copy_extensions_to_source(self):   # editable install: into the checkout's tapegrad/native_libs/
        lib_dir = os.path.join(HERE, "tapegrad", "native_libs")
        os.makedirs(lib_dir, exist_ok=True)
        current = {os.path.basename(self.get_ext_filename(ext.name)) for ext in self.extensions}
        for stale in set(os.listdir(lib_dir)) - current:   # libraries of sources edited since
            os.unlink(os.path.join(lib_dir, stale))
        super().copy_extensions_to_source()


bridge_packages = ["tapegrad.bridges"] + [f"tapegrad.bridges.{p}" for p in find_packages("bridges")]

setup(
    packages=find_packages(include=["tapegrad", "tapegrad.*", "optim_examples", "optim_examples.*"])
    + ["tapegrad.lang.runtime"] + bridge_packages,   # runtime: the kernels' C++ headers (package data)
    package_dir={"tapegrad.bridges": "bridges"},
    ext_modules=[helper_extension(n, s) for n, s in HELPERS],
    cmdclass={"build_ext": BuildHelpers},
    options={"build": {"build_base": ".build"}},
)
