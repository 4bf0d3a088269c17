"""``kernel.adj``: what Warp code reads of a kernel's code-generator object: ``args``,
``kernel_dim``, ``source`` (the function's Python text as decorated) and ``get_references()``
(what the body references outside itself, looked up again at each call)."""
import os
import sys

import numpy as np

import tapegrad as tg

ADJ_SCALE = tg.constant(10.0)
ADJ_VEC = tg.constant(tg.vec3(1.0, 2.0, 3.0))
ADJ_UNUSED = 7.0


@tg.struct
class AdjStruct:
    a: float


@tg.func
def adj_helper(x: float):
    return x * 2.0


@tg.kernel(module="unique")
def adj_kernel(out: tg.array(dtype=float), s: AdjStruct):
    i, j = tg.tid()
    local = AdjStruct()
    out[i + j] = adj_helper(ADJ_SCALE) + ADJ_VEC[0] + tg.sin(0.5) + s.a + local.a


def test_references_name_constants_types_and_functions():
    constants, types, functions = adj_kernel.adj.get_references()
    assert constants == {"ADJ_SCALE": 10.0, "ADJ_VEC": tg.vec3(1.0, 2.0, 3.0)}
    assert "ADJ_UNUSED" not in constants          # not referenced by the body
    assert types == {AdjStruct: "AdjStruct"}
    assert list(functions.values()) == ["adj_helper"] and adj_helper in functions
    assert adj_kernel.adj.kernel_dim == 2
    assert [a.label for a in adj_kernel.adj.args] == ["out", "s"]
    # the launch agrees with what the references say (float64 reference)
    out = tg.zeros(1, dtype=float)
    tg.launch(adj_kernel, dim=(1, 1), inputs=[out, AdjStruct(a=0.25)])
    np.testing.assert_allclose(out.numpy(), [2 * 10.0 + 1.0 + np.sin(0.5) + 0.25], rtol=1e-6)


def test_source_is_the_decorated_text():
    src = adj_kernel.adj.source
    assert src.startswith('@tg.kernel(module="unique")\ndef adj_kernel(')
    assert "adj_helper(ADJ_SCALE)" in src


def _make():
    @tg.kernel(module="unique")
    def rebound(a: tg.array(dtype=float)):
        a[tg.tid()] = ADJ_REBOUND   # noqa: F821  (a module global set by the test)
    return rebound


def test_a_rebound_global_is_seen_by_the_next_kernel():
    module = sys.modules[__name__]
    module.ADJ_REBOUND = tg.constant(10.0)
    try:
        k1 = _make()
        assert k1.adj.get_references()[0]["ADJ_REBOUND"] == 10.0
        module.ADJ_REBOUND = tg.constant(20.0)
        k2 = _make()
        assert k2.adj.get_references()[0]["ADJ_REBOUND"] == 20.0
        assert k1.module.name != k2.module.name
        a = tg.zeros(1, dtype=float)
        tg.launch(k2, dim=1, inputs=[a])
        assert a.numpy()[0] == 20.0
    finally:
        del module.ADJ_REBOUND


def test_source_follows_the_file_when_equal_code_is_compiled_again(tmp_path):
    # an equal code object compiled from old text after the file changed (a stale .pyc): the
    # source is the file's current text, as Warp's
    v1 = "import tapegrad as tg\n\ndef kf(a: tg.array(dtype=float)):\n    a[tg.tid()] = 1.0\n"
    v2 = v1.replace("1.0", "42.25")
    path = tmp_path / "adj_demo.py"

    def make(text):
        ns = {}
        exec(compile(text, str(path), "exec"), ns)
        return ns["kf"]

    path.write_text(v1)
    os.utime(path, (1, 1))
    f_a = make(v1)
    k_a = tg.kernel(f_a, module="unique")
    assert "1.0" in k_a.adj.source
    path.write_text(v2)
    os.utime(path, (2, 2))
    f_b = make(v1)
    assert f_a.__code__ == f_b.__code__ and f_a.__code__ is not f_b.__code__
    k_b = tg.kernel(f_b, module="unique")
    assert "42.25" in k_b.adj.source and "42.25" not in k_a.adj.source
