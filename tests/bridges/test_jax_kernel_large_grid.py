"""jax_kernel refuses grids past 2^31 - 1 threads (its XLA handler runs the 32-bit tid() build)."""
import pytest

import tapegrad as tg

jax = pytest.importorskip("jax")
pytestmark = pytest.mark.jax


@tg.kernel
def _fill(out: tg.array(dtype=tg.float32, ndim=2)):
    i, j = tg.tid()
    out[i, j] = 1.0


def test_grid_product_past_int32_is_refused():
    op = tg.jax_kernel(_fill, num_outputs=1, launch_dims=(2 ** 16, 2 ** 16), output_dims=(1, 1))
    with pytest.raises(ValueError, match=r"launch_dims \(65536, 65536\) has 4294967296 threads"):
        op()
