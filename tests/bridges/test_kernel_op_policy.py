"""One op lifecycle (issue 25 item 4): ``tg.torch_op``, ``tg.paddle_op`` and ``tg.jax_kernel`` run the
same cases with one behaviour and one wording — the grid check, ``output_dims``, a kernel built with
``enable_backward=False``, bad arguments and out-of-range scalars.

Each case runs once per framework; the message is checked against ONE template in which only the op's
label (``<who> '<kernel key>'``), the framework's tensor name and its dtype spelling differ.
"""
import re

import numpy as np
import pytest

import tapegrad as tg

F32 = tg.float32


@tg.kernel
def kp_square(x: tg.array(dtype=F32), y: tg.array(dtype=F32)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def kp_two(x: tg.array(dtype=F32), b: tg.array(dtype=F32), c: tg.array(dtype=F32)):
    i = tg.tid()
    b[i] = x[i] * 2.0
    c[i] = x[i] * 3.0


@tg.kernel(enable_backward=False)
def kp_no_adjoint(x: tg.array(dtype=F32), y: tg.array(dtype=F32)):
    i = tg.tid()
    y[i] = x[i] * x[i]


@tg.kernel
def kp_scaled(x: tg.array(dtype=F32), k: tg.int8, y: tg.array(dtype=F32)):
    i = tg.tid()
    y[i] = x[i] * F32(k)


FRAMEWORKS = [pytest.param("torch", marks=pytest.mark.torch), pytest.param("paddle", marks=pytest.mark.paddle),
              pytest.param("jax", marks=pytest.mark.jax)]
WHO = {"torch": "torch_op", "paddle": "paddle_op", "jax": "jax_kernel"}
TENSOR = {"torch": "torch tensor", "paddle": "paddle tensor", "jax": "JAX array"}


class Fw:
    """One framework's side of a case: build an op, make a tensor, read a result, ask a gradient."""

    def __init__(self, name, cuda=False):
        self.name, self.cuda = name, cuda
        self.who = WHO[name]
        if name == "torch":
            import torch
            self.mod = torch
        elif name == "paddle":
            import paddle
            self.mod = paddle
        else:
            import jax
            self.mod = jax

    def op(self, kernel, **kw):
        """The op; for JAX a function returning the outputs as the others do (one or a tuple)."""
        if self.name == "jax":
            k = tg.jax_kernel(kernel, **kw)

            def call(*args):
                outs = k(*args)
                return outs[0] if len(outs) == 1 else tuple(outs)
            return call
        return getattr(tg, self.who)(kernel, **kw)

    def tensor(self, values, dtype="float32", trainable=False):
        a = np.asarray(values, dtype=dtype)
        if self.name == "torch":
            return self.mod.tensor(a, requires_grad=trainable, device="cuda" if self.cuda else "cpu")
        if self.name == "paddle":
            place = self.mod.CUDAPlace(0) if self.cuda else self.mod.CPUPlace()
            return self.mod.to_tensor(a, stop_gradient=not trainable, place=place)
        return self.mod.device_put(a, self.mod.devices("gpu" if self.cuda else "cpu")[0])

    def numpy(self, t):
        return np.asarray(t.detach().cpu().numpy() if self.name == "torch" else t.numpy() if self.name == "paddle"
                          else t)

    def grad(self, fn, x):
        """d sum(fn(x)) / dx in the framework's own reverse mode."""
        if self.name == "torch":
            x = x.detach().requires_grad_()
            return self.mod.autograd.grad(fn(x).sum(), x)[0]
        if self.name == "paddle":
            x = self.tensor(x.numpy(), trainable=True)
            return self.mod.grad(fn(x).sum(), [x])[0]
        return self.mod.grad(lambda v: fn(v).sum())(x)

    def label(self, kernel):
        return f"{self.who} '{kernel.key}'"


@pytest.fixture(params=FRAMEWORKS)
def fw(request):
    return Fw(request.param)


def _raises(cls, fw, kernel, body, fn):
    """``fn()`` raises ``cls`` whose message is ``<label><body>`` (``body`` a regex)."""
    with pytest.raises(cls) as e:
        fn()
    msg = str(e.value)
    assert re.match(re.escape(fw.label(kernel)) + body, msg, re.S), msg
    return e.value


# ------------------------------------------------------------------------------ grid check

def test_a_grid_past_an_input_is_refused_before_the_launch(fw):
    op = fw.op(kp_square, launch_dims=8)
    _raises(ValueError, fw, kp_square, r": the launch grid dim=\(8,\) is larger than argument 'x' allows: kernel "
            r"'.*kp_square' indexes dimension 0 of 'x' \(length 4\)", lambda: op(fw.tensor(np.ones(4))))


def test_a_grid_past_an_output_is_refused_before_the_launch(fw):
    op = fw.op(kp_square, output_dims=2)
    _raises(ValueError, fw, kp_square, r": the launch grid dim=\(4,\) is larger than argument 'y' allows",
            lambda: op(fw.tensor(np.ones(4))))


def test_too_many_launch_dims(fw):
    op = fw.op(kp_square, launch_dims=(1, 1, 1, 1, 1))
    _raises(ValueError, fw, kp_square, r": launch_dims must have 1\.\.4 non-negative entries, got \(1, 1, 1, 1, 1\)",
            lambda: op(fw.tensor(np.ones(4))))


# ---------------------------------------------------------------------------- output_dims

def test_an_output_dims_dict_names_every_output(fw):
    """Warp's jax_kernel rule, for all three: a dict names every (pure) output; None there means the grid."""
    op = fw.op(kp_two, num_outputs=2, output_dims={"b": 4})
    _raises(ValueError, fw, kp_two, r": output_dims has no entry for output 'c' \(a dict names every output: "
            r"\['b', 'c'\]; None there means the launch grid\)", lambda: op(fw.tensor(np.ones(4))))
    b, c = fw.op(kp_two, num_outputs=2, output_dims={"b": 4, "c": None})(fw.tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(fw.numpy(b), [2, 4, 6, 8])
    np.testing.assert_allclose(fw.numpy(c), [3, 6, 9, 12])


def test_output_dims_of_the_wrong_rank(fw):
    op = fw.op(kp_square, output_dims=(4, 4))
    _raises(ValueError, fw, kp_square, r": output 'y' \(.*\) needs 1 non-negative output dims, got \(4, 4\)",
            lambda: op(fw.tensor(np.ones(4))))


def test_an_unknown_output_name(fw):
    with pytest.raises(ValueError, match=rf"{fw.who}: output_dims names \['zz'\], kernel '.*kp_square' outputs are "
                                         r"\['y'\]"):
        fw.op(kp_square, output_dims={"zz": 3})


# ------------------------------------------------------------------ enable_backward=False

def test_a_kernel_without_adjoint_runs_forward_and_refuses_every_gradient(fw):
    op = fw.op(kp_no_adjoint)
    np.testing.assert_allclose(fw.numpy(op(fw.tensor([1.0, 2.0]))), [1.0, 4.0])
    x = fw.tensor([1.0, 2.0], trainable=True)
    np.testing.assert_allclose(fw.numpy(op(x)), [1.0, 4.0])          # a trainable input: forward still works
    # paddle re-raises errors of a PyLayer's backward as its own OSError, with the message kept
    cls = (tg.NotDifferentiableError, OSError) if fw.name == "paddle" else tg.NotDifferentiableError
    with pytest.raises(cls) as e:
        fw.grad(op, x)
    msg = str(e.value)
    assert re.search(re.escape(fw.label(kp_no_adjoint)) + r": cannot differentiate kernel '.*kp_no_adjoint' \(.*\): "
                     r"it was built with @tg\.kernel\(enable_backward=False\) \(no adjoint, no tangent\)\. Drop "
                     r"enable_backward=False \(adjoints are generated by default\), or ", msg, re.S), msg


@pytest.mark.jax
def test_jax_kernel_enable_backward_true_on_a_kernel_without_adjoint_is_the_same_case():
    """Before: a ValueError at construction (torch_op/paddle_op build such ops and refuse the gradient)."""
    import jax
    import jax.numpy as jnp
    k = tg.jax_kernel(kp_no_adjoint, enable_backward=True)
    x = jnp.asarray([1.0, 2.0], jnp.float32)
    np.testing.assert_allclose(np.asarray(k(x)[0]), [1.0, 4.0])
    with pytest.raises(tg.NotDifferentiableError, match=r"jax_kernel '.*kp_no_adjoint': cannot differentiate kernel"):
        jax.grad(lambda v: k(v)[0].sum())(x)


def test_not_differentiable_error_is_a_runtime_and_a_value_error():
    assert issubclass(tg.NotDifferentiableError, RuntimeError) and issubclass(tg.NotDifferentiableError, ValueError)


# -------------------------------------------------------------------------- bad arguments

def test_wrong_argument_count(fw):
    op = fw.op(kp_square)
    x = fw.tensor(np.ones(4))
    err = _raises(TypeError, fw, kp_square, r": expected 1 arguments \(x\), got 2$", lambda: op(x, x))
    assert isinstance(err, ValueError)   # Warp's jax_kernel raises ValueError here


def test_not_a_tensor(fw):
    op = fw.op(kp_square)
    _raises(TypeError, fw, kp_square, rf" argument 'x': expected a {TENSOR[fw.name]} for "
            r"array\(dtype=tapegrad\.float32, ndim=1\), got list$", lambda: op([1.0, 2.0]))


def test_wrong_dtype(fw):
    op = fw.op(kp_square)
    err = _raises(TypeError, fw, kp_square, r" argument 'x': cannot view a tensor of .*int16 as tapegrad "
                  r"tapegrad\.float32", lambda: op(fw.tensor(np.ones(4), dtype="int16")))
    assert isinstance(err, tg.BridgeTypeError)


def test_wrong_ndim(fw):
    op = fw.op(kp_square)
    _raises(TypeError, fw, kp_square, r" argument 'x': expected a 1-D tensor for array\(dtype=tapegrad\.float32, "
            r"ndim=1\), got 2-D of shape \(2, 2\)$", lambda: op(fw.tensor(np.ones((2, 2)))))


# -------------------------------------------------------------------------------- scalars

def test_scalar_out_of_range(fw):
    op = fw.op(kp_scaled)
    _raises(OverflowError, fw, kp_scaled, r" argument 'k': 300 is out of range for tapegrad\.int8 \(-128\.\.127\)$",
            lambda: op(fw.tensor(np.ones(4)), 300))
    np.testing.assert_allclose(fw.numpy(op(fw.tensor(np.ones(4)), -128)), [-128.0] * 4)


def test_scalar_of_the_wrong_type(fw):
    op = fw.op(kp_scaled)
    _raises(TypeError, fw, kp_scaled, r" argument 'k': expected a scalar of tapegrad\.int8, got 'a'$",
            lambda: op(fw.tensor(np.ones(4)), "a"))


@tg.kernel
def kp_writes_input(x: tg.array(dtype=tg.float64), y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    v = x[i]
    x[i] = v * 2.0
    y[i] = v * v


def test_a_kernel_writing_an_input_is_refused(fw):
    """jax_kernel refused it; torch_op and paddle_op ran it: the caller's tensor was doubled behind the
    framework's back (torch's schema says the op mutates nothing) and the gradient read the doubled
    values ([4, 8, 12] for x = [1, 2, 3] instead of 2x = [2, 4, 6])."""
    hint = " or name it in in_out_argnames" if fw.name == "jax" else ""
    with pytest.raises(ValueError) as e:
        fw.op(kp_writes_input)
    assert str(e.value) == (f"{fw.who}: kernel '{kp_writes_input.key}' writes its input array 'x', but a kernel op "
                            f"must not change its caller's {TENSOR[fw.name]}s (they would change behind the "
                            f"framework's back, and gradients would read the new values); make it an output "
                            f"(num_outputs){hint}")


@tg.kernel
def kp_scaled_f(x: tg.array(dtype=tg.float64), s: tg.float64, y: tg.array(dtype=tg.float64)):
    i = tg.tid()
    y[i] = x[i] * x[i] * s


@pytest.mark.parametrize("name", [pytest.param("torch", marks=pytest.mark.torch),
                                  pytest.param("paddle", marks=pytest.mark.paddle)])
def test_a_trainable_tensor_for_a_scalar_is_refused(name):
    """A trainable tensor given for a value parameter was taken as a number: its gradient came back as
    None (torch, paddle) or 0 (torch.func.grad, jvp), silently. JAX refuses traced scalars itself."""
    fw = Fw(name)
    op = fw.op(kp_scaled_f)
    x = fw.tensor([1.0, 2.0, 3.0], dtype="float64", trainable=True)
    s = fw.tensor(1.5, dtype="float64", trainable=True)
    body = (r" argument 's': a value parameter \(tapegrad\.float64\) takes a number and gets no gradient, but a "
            + TENSOR[name] + r" that requires grad or is traced by a transform")
    _raises(TypeError, fw, kp_scaled_f, body, lambda: op(x, s))
    np.testing.assert_allclose(fw.numpy(op(x, 1.5)), [1.5, 6.0, 13.5])
    np.testing.assert_allclose(fw.numpy(op(x, fw.tensor(1.5, dtype="float64"))), [1.5, 6.0, 13.5])   # plain: a value
    with fw.mod.no_grad():   # nothing is differentiated: the trainable tensor is a value
        np.testing.assert_allclose(fw.numpy(op(x, s)), [1.5, 6.0, 13.5])
    if name == "torch":
        import torch
        xd, sd = x.detach(), s.detach()
        for transform in (lambda: torch.func.grad(lambda v: op(xd, v).sum())(sd),
                          lambda: torch.func.jvp(lambda v: op(xd, v), (sd,), (torch.ones_like(sd),)),
                          lambda: torch.func.vmap(lambda v: op(xd, v))(torch.ones(2, dtype=torch.float64))):
            _raises(TypeError, fw, kp_scaled_f, body, transform)
        # a value captured from outside the transform stays a value; the array argument is differentiated
        g = torch.func.grad(lambda v: op(v, sd).sum())(xd)
        np.testing.assert_allclose(g.numpy(), 2 * 1.5 * np.array([1.0, 2.0, 3.0]))


# ----------------------------------------------------------------------------------- CUDA

CUDA_FRAMEWORKS = [pytest.param(n, marks=[getattr(pytest.mark, n), pytest.mark.cuda]) for n in WHO]


def _one_policy(fw):
    """Values and the gradient through the generic launches (on the framework's stream), the grid
    check, output_dims and a kernel without adjoint."""
    x = fw.tensor([1.0, 2.0, 3.0, 4.0])
    op = fw.op(kp_square, **({"enable_backward": True} if fw.name == "jax" else {}))
    np.testing.assert_allclose(fw.numpy(op(x)), [1, 4, 9, 16])
    np.testing.assert_allclose(fw.numpy(fw.grad(op, x)), [2, 4, 6, 8])
    _raises(ValueError, fw, kp_square, r": the launch grid dim=\(8,\) is larger than argument 'x' allows",
            lambda: fw.op(kp_square, launch_dims=8)(x))
    _raises(ValueError, fw, kp_two, r": output_dims has no entry for output 'c'",
            lambda: fw.op(kp_two, num_outputs=2, output_dims={"b": 4})(x))
    nob = fw.op(kp_no_adjoint)
    np.testing.assert_allclose(fw.numpy(nob(x)), [1, 4, 9, 16])
    cls = (tg.NotDifferentiableError, OSError) if fw.name == "paddle" else tg.NotDifferentiableError
    with pytest.raises(cls, match="enable_backward=False"):
        fw.grad(nob, fw.tensor([1.0, 2.0], trainable=True))


def test_one_policy_on_the_cpu(fw):
    _one_policy(fw)


@pytest.mark.parametrize("name", CUDA_FRAMEWORKS)
def test_cuda_one_policy(name):
    _one_policy(Fw(name, cuda=True))


def test_a_call_checked_before_skips_nothing_that_changed(fw):
    """Calls met before (same tensor types, shapes, dtypes and values) reuse their checks; any
    difference is checked again."""
    op = fw.op(kp_scaled, launch_dims=4)
    np.testing.assert_allclose(fw.numpy(op(fw.tensor(np.ones(4)), 3)), [3.0] * 4)
    np.testing.assert_allclose(fw.numpy(op(fw.tensor(np.ones(4)), 3)), [3.0] * 4)
    _raises(OverflowError, fw, kp_scaled, r" argument 'k': 300 is out of range", lambda: op(fw.tensor(np.ones(4)), 300))
    _raises(ValueError, fw, kp_scaled, r": the launch grid dim=\(4,\) is larger than argument 'x' allows",
            lambda: op(fw.tensor(np.ones(2)), 3))
    _raises(TypeError, fw, kp_scaled, r" argument 'x': cannot view a tensor of", lambda: op(fw.tensor(np.ones(4),
                                                                                                    "int16"), 3))
    _raises(TypeError, fw, kp_scaled, r": expected 2 arguments \(x, k\), got 3",
            lambda: op(fw.tensor(np.ones(4)), 3, 4))
