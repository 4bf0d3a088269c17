"""The import graph of tapegrad's own modules, function-level imports included.

    python .ci/import_graph.py              # modules with line counts, then the import circles
    python .ci/import_graph.py --json       # the same as JSON

An import circle is a strongly connected component of more than one module (or a module that
imports itself). Imports inside functions count: they hide a circle from Python's import
machinery, not from a reader. ``TYPE_CHECKING`` blocks count too. The one permitted circle,
``tapegrad.device`` <-> ``tapegrad.cuda.stream`` (a lazy import that keeps CuPy out of
``import tapegrad``), is listed in ``PERMITTED``; ``tests/core/test_layers.py`` asserts that no
other circle exists.
"""
from __future__ import annotations

import ast
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# (repository folder, import name): the bridges folder is installed as tapegrad.bridges
PACKAGES = (("tapegrad", "tapegrad"), ("bridges", "tapegrad.bridges"))
ALIASES = {"bridges": "tapegrad.bridges"}   # the bridges' old top-level import name
PERMITTED = [frozenset({"tapegrad.device", "tapegrad.cuda.stream"})]


def _module_files(root: pathlib.Path = ROOT):
    """``{module name: path}`` for every ``.py`` file of the packages."""
    out = {}
    for folder, name in PACKAGES:
        base = root / folder
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(base).with_suffix("")
            parts = [name] + list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if node.level > 1:
        base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: pathlib.Path = ROOT):
    """Returns ``(files, edges)``: ``{module: path}`` and ``{module: set of imported modules}``
    (only modules of the packages; ``from pkg import name`` counts as importing ``pkg.name``
    when that is a module, else ``pkg``)."""
    files = _module_files(root)
    edges = {m: set() for m in files}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for t in targets:
                head, _, rest = t.partition(".")
                if head in ALIASES:
                    t = ALIASES[head] + ("." + rest if rest else "")
                while t and t not in files:   # `import tapegrad.cuda.stream` -> that module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    edges[mod].add(t)
    return files, edges


def circles(edges) -> list:
    """Strongly connected components with more than one module (Tarjan), sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def forbidden_circles(edges) -> list:
    """The circles that are not the permitted device/stream one."""
    return [c for c in circles(edges) if frozenset(c) not in PERMITTED]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    files, edges = import_graph()
    lines = {m: len(p.read_text().splitlines()) for m, p in files.items()}
    comps = circles(edges)
    if "--json" in argv:
        print(json.dumps({"modules": lines, "circles": comps}, indent=2))
        return 0
    for m in sorted(files):
        print(f"{lines[m]:6d}  {m}")
    print(f"{sum(lines.values()):6d}  total, {len(files)} modules")
    print(f"\n{len(comps)} import circle(s):")
    for c in comps:
        tag = " (permitted)" if frozenset(c) in PERMITTED else ""
        print(f"  {len(c)} modules{tag}: {', '.join(c)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
