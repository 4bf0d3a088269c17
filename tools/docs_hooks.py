"""mkdocs hooks for the documentation site (``mkdocs build --strict``).

- ``api/builtins.md`` is generated from the kernel language's builtin table, so the reference
  of every builtin is the table itself (name, what it does, whether it has an adjoint).
- Bridge functions are documented from the live objects (``force_inspection``; see ``on_config``).
- ``DocstringSections`` (a griffe extension, mkdocs.yml's ``extensions``) gives a Google section
  title written right under text (``Returns:`` after an ``Args:`` block, the code base's style)
  the blank line above it that griffe needs to see a section: without it the Returns and Raises
  of most functions rendered as run-on paragraphs.
- The build fails when a public name of ``tapegrad`` (``__all__``, lazy names too) is on no
  API reference page: a name is documented by a ``::: tapegrad...`` block whose last part is the
  name, by a block's ``members: [...]`` list, by a mention as ``tg.<name>`` on an API page, or
  as a kernel builtin.
"""
from __future__ import annotations

import re
import sys

from griffe import Extension
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

_API_PREFIX = "api/"
_SECTION_TITLE = re.compile(r"(Args|Arguments|Parameters|Params|Returns|Return|Raises|Raise|Yields|Warns|Attributes|"
                            r"Examples?|Notes?|Other Parameters):\s*$")


_NEXT_EXCEPTION = re.compile(r"(?<=[.;]) (?=[A-Z]\w*(?:Error|Warning|Exception|Interrupt): )")


def blank_line_before_sections(text: str) -> str:
    """``text`` (a dedented docstring) with an empty line above each Google section title that
    sits right under a non-empty line and has indented content below it; in a ``Raises:``
    section, several exceptions on one line (``TypeError: ... BufferError: ...``) become one
    item each."""
    lines = text.split("\n")
    out = []
    section = None
    for i, line in enumerate(lines):
        below = lines[i + 1] if i + 1 < len(lines) else ""
        title = _SECTION_TITLE.match(line)
        if title and below.startswith(" "):
            section = title.group(1)
            if out and out[-1].strip():
                out.append("")
        elif line and not line.startswith(" "):
            section = None
        if section in ("Raises", "Raise") and line.startswith(" ") and not title:
            indent = line[:len(line) - len(line.lstrip())]
            out.extend(indent + part for part in _NEXT_EXCEPTION.split(line.strip()))
            continue
        out.append(line)
    return "\n".join(out)


class DocstringSections(Extension):
    """Griffe extension: ``blank_line_before_sections`` on every docstring it loads (source or
    inspected objects)."""

    def on_instance(self, *, obj, **kwargs) -> None:
        doc = getattr(obj, "docstring", None)
        if doc is not None and doc.value:
            doc.value = blank_line_before_sections(doc.value)


def on_config(config):
    """Let mkdocstrings import modules (``force_inspection`` blocks) with the full ``sys.path``.

    Bridge functions are closures published under framework names (``from_torch`` is the
    bridge's hot-path closure), so their docstrings exist only at run time: their API blocks
    are inspected, which imports the repository's ``bridges/`` package. Griffe replaces
    ``sys.path`` by the handler's ``paths`` while importing, so the paths must include it.
    """
    handler = config["plugins"]["mkdocstrings"].config["handlers"].setdefault("python", {})
    handler["paths"] = list(dict.fromkeys([*handler.get("paths", ["."]), *sys.path]))
    return config


def _builtin_rows():
    from tapegrad.lang.builtins import exported
    rows = []
    for name, b in sorted(exported().items()):
        doc = " ".join((b.__doc__ or "").split()) or "-"
        adj = "yes" if any(ov.differentiable for ov in b.overloads) else "no"
        rows.append(f"| `tg.{name}` | {doc.replace('|', '&#124;')} | {adj} |")
    return rows


def on_files(files, config):
    """Add the generated builtin reference page."""
    text = ["# Kernel builtins", "",
            "Generated from the builtin table (`tapegrad/lang/builtins.py`) when the site is built: every",
            "name below is callable inside `@tg.kernel` and `@tg.func` bodies; *adjoint* says whether it is",
            "differentiable (each differentiable overload is checked against finite differences by",
            "`tests/lang/test_builtins_grad.py`). The language itself is described in",
            "[Kernels](../kernels.md).", "",
            "| builtin | what it does | adjoint |", "|---|---|---|", *_builtin_rows(), ""]
    files.append(File.generated(config, "api/builtins.md", content="\n".join(text)))
    return files


def _public_names():
    """``tapegrad.__all__`` and the lazily resolved names (bridges, streams...): ``dir(tapegrad)``
    lists those present but keeps them out of ``__all__`` (a star import would import them)."""
    import types

    import tapegrad
    names = getattr(tapegrad, "__all__", None)
    if names is None:
        raise PluginError("docs: tapegrad has no __all__: the API reference check needs the public names")
    lazy = {n for n in dir(tapegrad) if not n.startswith("_") and n != "annotations"
            and not isinstance(vars(tapegrad).get(n), types.ModuleType)}
    return set(names) | lazy


_documented: set = set()


def on_page_markdown(markdown, page, config, files):
    """Collect the names an API page documents."""
    if page.file.src_uri.startswith(_API_PREFIX):
        for ident in re.findall(r"^:::\s*([\w.]+)", markdown, flags=re.M):
            _documented.add(ident.rsplit(".", 1)[-1])
        for members in re.findall(r"^\s+members:\s*\[([^\]]*)\]", markdown, flags=re.M):
            _documented.update(m.strip() for m in members.split(",") if m.strip())
        _documented.update(re.findall(r"`tg\.(\w+)", markdown))
    return markdown


def on_post_build(config):
    """Fail the build if a public name is documented nowhere in the API reference."""
    missing = sorted(_public_names() - _documented)
    _documented.clear()
    if missing:
        raise PluginError(f"docs: {len(missing)} public names of tapegrad are on no API reference page: "
                          f"{', '.join(missing)}")
