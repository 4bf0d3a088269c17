"""Forward-mode builds and the direct cache (issue 26): a fresh process runs a kernel's tangent
and tangent-of-adjoint code from the cache without lowering the kernel, and an edited kernel
lowers (and builds its tangent code) again. Real fresh processes on a private cache."""
import numpy as np

from .test_direct_cache import _run

SRC = """
import numpy as np
import tapegrad as tg

@tg.kernel
def k(a: tg.array(dtype=tg.float64), b: tg.array(dtype=tg.float64)):
    i = tg.tid()
    b[i] = tg.sin(a[i]) * {c}

KERNELS = [k]

def run():
    a = tg.array(np.arange(4, dtype=np.float64))
    b = tg.zeros(4, dtype=tg.float64)
    tg.launch(k, 4, inputs=[a, b])
    tb = tg.zeros(4, dtype=tg.float64)
    tg.launch(k, 4, inputs=[a, b], tangent=True, tan_inputs=[tg.ones(4, dtype=tg.float64), tb])
    ha = tg.zeros(4, dtype=tg.float64)
    g = [tg.zeros(4, dtype=tg.float64), tg.ones(4, dtype=tg.float64)]
    t = [tg.ones(4, dtype=tg.float64), None]
    tg.launch(k, 4, inputs=[a, b], adjoint=True, adj_inputs=g, tangent=True, tan_inputs=t, tan_adj_inputs=[ha, None])
    return [tb.numpy().tolist(), ha.numpy().tolist()]
"""


def test_tangent_code_loads_without_lowering(tmp_path):
    a = np.arange(4.0)
    first = _run(tmp_path, SRC.format(c=2.0))
    assert first["lowered"] == [True]
    second = _run(tmp_path, SRC.format(c=2.0))
    assert second["lowered"] == [False]
    assert second["out"] == first["out"]
    np.testing.assert_allclose(second["out"][0], 2.0 * np.cos(a), rtol=1e-14)
    np.testing.assert_allclose(second["out"][1], -2.0 * np.sin(a), rtol=1e-14)
    third = _run(tmp_path, SRC.format(c=3.0))      # edited: lowered and built again
    assert third["lowered"] == [True]
    np.testing.assert_allclose(third["out"][0], 3.0 * np.cos(a), rtol=1e-14)
