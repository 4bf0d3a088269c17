"""The import contract (issue 12): layers point one way, no import circles, no framework or
bridge imported by the core; and each check fails when a deliberate back-import is added."""
from __future__ import annotations

import importlib.util
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".ci"))
import import_graph  # noqa: E402

LINT = shutil.which("lint-imports")
needs_import_linter = pytest.mark.skipif(LINT is None or importlib.util.find_spec("importlinter") is None,
                                         reason="import-linter is not installed")


def _copy_repo(tmp_path):
    """The package sources and pyproject.toml in ``tmp_path`` (to break them on purpose)."""
    shutil.copytree(ROOT / "tapegrad", tmp_path / "tapegrad", ignore=shutil.ignore_patterns("__pycache__"))
    if (ROOT / "bridges").is_dir():
        shutil.copytree(ROOT / "bridges", tmp_path / "bridges", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: pathlib.Path, line: str):
    path.write_text(path.read_text() + f"\n{line}\n")


def _lint(cwd):
    # lint-imports puts its working directory first on sys.path: it analyses that copy
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300)


# ------------------------------------------------------------------------------- circles

def test_no_import_circle_but_the_permitted_one():
    _, edges = import_graph.import_graph(ROOT)
    assert import_graph.forbidden_circles(edges) == []


def test_the_permitted_circle_is_device_and_stream_only():
    _, edges = import_graph.import_graph(ROOT)
    assert "tapegrad.cuda.stream" in edges["tapegrad.device"]      # the documented lazy import
    assert import_graph.PERMITTED == [frozenset({"tapegrad.device", "tapegrad.cuda.stream"})]


def test_a_back_import_makes_a_circle(tmp_path):
    root = _copy_repo(tmp_path)
    # inside a function, as the old circles hid: the graph still sees it
    _append(root / "tapegrad" / "storage.py", "def _deliberate():\n    from .tape import Tape\n    return Tape")
    _, edges = import_graph.import_graph(root)
    found = import_graph.forbidden_circles(edges)
    assert found and any({"tapegrad.storage", "tapegrad.tape"} <= set(c) for c in found), found


def test_function_level_and_relative_imports_are_edges(tmp_path):
    root = _copy_repo(tmp_path)
    _append(root / "tapegrad" / "errors.py",
            "def _f():\n    from .dlpack import export\n    import tapegrad.cuda.graph")
    _, edges = import_graph.import_graph(root)
    assert {"tapegrad.dlpack.export", "tapegrad.cuda.graph"} <= edges["tapegrad.errors"]


# ------------------------------------------------------------------------------- bridges

def _core(module: str) -> bool:
    return not module.startswith("tapegrad.bridges")


def _bridge_imports_by_core(edges):
    return sorted((m, t) for m, ts in edges.items() if _core(m) for t in ts if not _core(t))


def test_the_core_imports_no_bridge():
    _, edges = import_graph.import_graph(ROOT)
    assert _bridge_imports_by_core(edges) == []


def test_a_bridge_import_in_the_core_is_caught(tmp_path):
    root = _copy_repo(tmp_path)
    if not (root / "bridges" / "torch.py").exists():
        pytest.skip("no torch bridge in this checkout")
    _append(root / "tapegrad" / "launch" / "__init__.py", "def _f():\n    from ..bridges import torch")
    _, edges = import_graph.import_graph(root)
    assert ("tapegrad.launch", "tapegrad.bridges.torch") in _bridge_imports_by_core(edges)


# --------------------------------------------------------------------------- import-linter

@needs_import_linter
def test_the_import_contract_is_kept():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "broken" in r.stdout and "0 broken" in r.stdout


@needs_import_linter
@pytest.mark.parametrize("module, line, broken", [
    ("types.py", "from . import launch  # deliberate back-import", "tapegrad.types -> tapegrad.launch"),
    ("array.py", "def _f():\n    import torch\n    return torch", "tapegrad.array -> torch"),
    # the native launch helper's loader lives in the launch package, above lang and array (its
    # C half reads both): a low layer importing it breaks the contract
    ("storage.py", "def _f():\n    from .launch import fastlaunch\n    return fastlaunch",
     "tapegrad.storage -> tapegrad.launch"),
], ids=["back-import", "framework-import", "launch-helper-import"])
def test_the_import_contract_breaks(tmp_path, module, line, broken):
    root = _copy_repo(tmp_path)
    _append(root / "tapegrad" / module, line)
    r = _lint(root)
    assert r.returncode != 0
    assert broken in r.stdout, r.stdout


def test_import_tapegrad_imports_no_framework_and_no_cupy():
    code = ("import sys, tapegrad; bad = [m for m in ('torch', 'paddle', 'jax', 'cupy', 'tapegrad.bridges') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
