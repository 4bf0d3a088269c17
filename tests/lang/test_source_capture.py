"""The code that was imported is the code that runs (issue 23 item 4, s27 d): a kernel's and a
helper's source is captured when they are decorated, so a file saved after the import changes
nothing until the module is imported (or reloaded) again, and the direct cache never hands a
process the binary of file contents it did not import."""
import importlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np

import tapegrad as tg

SRC = textwrap.dedent("""
    import tapegrad as tg

    @tg.func
    def val(v: float) -> float:
        return v * 1.0

    @tg.kernel
    def a(x: tg.array[float]):
        i = tg.tid()
        x[i] = val(1.0)

    @tg.kernel
    def b(x: tg.array[float]):
        i = tg.tid()
        x[i] = val(2.0)
    """)
# an editor's save: lines moved down (kernel b's first line now holds kernel a's body), a's
# value and the helper changed
EDITED = "# edited\n# edited\n# edited\n# edited\n" + SRC.replace("val(1.0)", "val(10.0)").replace("v * 1.0", "v * 3.0")


def _import(tmp_path, name, text):
    (tmp_path / f"{name}.py").write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))


def _run(kern):
    x = tg.zeros(2, dtype=float)
    tg.launch(kern, dim=2, inputs=[x])
    return x.numpy()


def test_edit_after_import_runs_imported_code(tmp_path):
    """s27 (d): before the fix, kernel b ran 10 (kernel a's edited body, from b's old line)."""
    mod = _import(tmp_path, "tg_capture_mod1", SRC)
    (tmp_path / "tg_capture_mod1.py").write_text(EDITED)
    os.utime(tmp_path / "tg_capture_mod1.py", ns=(1, 10**18))   # a distinct mtime, whatever the clock
    np.testing.assert_array_equal(_run(mod.b), [2.0, 2.0])
    np.testing.assert_array_equal(_run(mod.a), [1.0, 1.0])


def test_reload_runs_the_new_code(tmp_path):
    mod = _import(tmp_path, "tg_capture_mod2", SRC)
    np.testing.assert_array_equal(_run(mod.a), [1.0, 1.0])
    (tmp_path / "tg_capture_mod2.py").write_text(EDITED)
    os.utime(tmp_path / "tg_capture_mod2.py", ns=(1, 10**18))
    sys.path.insert(0, str(tmp_path))
    try:
        mod = importlib.reload(mod)
    finally:
        sys.path.remove(str(tmp_path))
    np.testing.assert_array_equal(_run(mod.a), [30.0, 30.0])
    np.testing.assert_array_equal(_run(mod.b), [6.0, 6.0])


RUNNER = """
import json, os, subprocess, sys
sys.path.insert(0, {dir!r})
import numpy as np
import tapegrad as tg
import tg_capture_dc as m
with open({path!r}, "w") as fh:      # the editor saves while this process runs
    fh.write({edited!r})
os.utime({path!r}, ns=(1, 10**18))
# another process imports the edited file and builds (its direct-cache manifest names the
# binary of the edited text)
child = subprocess.run([sys.executable, "-c", {child!r}], capture_output=True, text=True)
assert child.returncode == 0, child.stderr
x = tg.zeros(2, dtype=float)
tg.launch(m.b, dim=2, inputs=[x])
y = tg.zeros(2, dtype=float)
tg.launch(m.a, dim=2, inputs=[y])
print("@@" + json.dumps({{"child": child.stdout.strip(), "b": x.numpy().tolist(), "a": y.numpy().tolist()}}))
"""

CHILD = """
import sys
sys.path.insert(0, {dir!r})
import tapegrad as tg
import tg_capture_dc as m
for k in (m.a, m.b):
    x = tg.zeros(2, dtype=float)
    tg.launch(k, dim=2, inputs=[x])
    print(x.numpy()[0], end=" ")
"""


def test_direct_cache_never_loads_the_edited_files_binary(tmp_path):
    """A fresh process imports the file, another one builds the edited file (writing direct-cache
    manifests for it), then the first launches: it must build what it imported (before the fix
    the manifest key read the file anew, so the first process loaded the edited binary)."""
    d = tmp_path / "src"
    d.mkdir()
    path = d / "tg_capture_dc.py"
    path.write_text(SRC)
    env = dict(os.environ, TAPEGRAD_CACHE=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    code = RUNNER.format(dir=str(d), path=str(path), edited=EDITED, child=CHILD.format(dir=str(d)))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("@@")][-1][2:])
    assert out["child"] == "30.0 6.0", out      # the edited file, built by the child
    assert out["b"] == [2.0, 2.0] and out["a"] == [1.0, 1.0], out
    assert any(n.endswith(".dep") for n in os.listdir(tmp_path / "cache"))


def test_source_is_captured_at_decoration():
    from tapegrad.lang.signature import captured

    @tg.kernel
    def k(x: tg.array[float]):
        x[0] = 1.0

    cap = captured(k.func)
    assert cap is not None and cap.file == k.func.__code__.co_filename
    assert "    def k(x: tg.array[float]):\n" in cap.lines
