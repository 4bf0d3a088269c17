"""tg.autograd's Jacobians and gradcheck refuse what they cannot differentiate, before running
anything: with no float array to perturb, their loops launch nothing, so an external entry
(``entry_point_abi='external_constant_params'``) or a kernel without a backward gave ``{}``
and ``gradcheck`` passed (a check that compared nothing)."""
import numpy as np
import pytest

import tapegrad as tg
from tapegrad.autograd import gradcheck, jacobian, jacobian_fd, jacobian_fwd


@tg.struct
class ExtParams:
    a: tg.array(dtype=tg.float32)
    n: int


@tg.kernel(enable_backward=False, entry_point_abi="external_constant_params")
def ext_entry(p: ExtParams):
    p.a[0] = 1.0


@tg.kernel(enable_backward=False)
def no_backward(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def int_only(x: tg.array(dtype=tg.int32), y: tg.array(dtype=tg.int32)):
    i = tg.tid()
    y[i] = x[i] * 2


@tg.kernel
def square(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i]


def _params():
    s = ExtParams()
    s.a = tg.zeros(4, dtype=tg.float32, device="cpu")
    s.n = 4
    return s


@pytest.mark.parametrize("fn", [jacobian, jacobian_fwd, jacobian_fd, gradcheck])
def test_external_entry_is_refused(fn):
    with pytest.raises(RuntimeError, match="external_constant_params"):
        fn(ext_entry, 1, [_params()], [])


@pytest.mark.parametrize("fn", [jacobian, gradcheck])
def test_kernel_without_backward_is_refused_with_no_float_outputs(fn):
    x = tg.array(np.arange(3.0), dtype=tg.float64, device="cpu")
    with pytest.raises(RuntimeError, match="enable_backward=False"):
        fn(no_backward, 3, [x], [])   # nothing to launch: it returned {} / True


def test_gradcheck_comparing_nothing_raises():
    x = tg.array(np.arange(3, dtype=np.int32), dtype=tg.int32, device="cpu")
    y = tg.zeros(3, dtype=tg.int32, device="cpu")
    with pytest.raises(ValueError, match="nothing to compare"):
        gradcheck(int_only, 3, [x], [y])
    xf = tg.array(np.arange(3.0), dtype=tg.float64, device="cpu")
    yf = tg.zeros(3, dtype=tg.float64, device="cpu")
    with pytest.raises(ValueError, match="nothing to compare"):
        gradcheck(square, 3, [xf], [yf], output_indices=[5])


def test_gradcheck_still_compares():
    x = tg.array(np.array([0.5, -1.25, 2.0]), dtype=tg.float64, device="cpu")
    y = tg.zeros(3, dtype=tg.float64, device="cpu")
    assert gradcheck(square, 3, [x], [y], eps=1e-6, atol=1e-8, rtol=1e-8)
    np.testing.assert_allclose(jacobian(square, 3, [x], [y])[(0, 0)], np.diag(2 * x.numpy()), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [jacobian, jacobian_fwd, jacobian_fd, gradcheck])
def test_a_python_function_is_a_type_error(fn):
    x = tg.array(np.arange(3.0), dtype=tg.float64, device="cpu")
    y = tg.zeros(3, dtype=tg.float64, device="cpu")
    with pytest.raises(TypeError, match=r"expected a @tg.kernel function, got function"):
        fn(lambda a: a, 3, [x], [y])
