"""A builtin without an adjoint on a differentiable path is a compile warning naming it and the
line, never a quiet zero (issue 23 item 6); piecewise-constant builtins (floor, sign...) whose
derivative is 0 and values that do not depend on the inputs do not warn."""
import warnings

import tapegrad as tg


def _compile_warnings(kernel):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel.module_for(tg.get_device("cpu"))
    return [str(w.message) for w in caught if issubclass(w.category, tg.TapeCompileWarning)]


@tg.kernel
def exch_on_path(x: tg.array(dtype=float), a: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    v = tg.atomic_exch(a, i, x[i] * 2.0)
    y[i] = v + 1.0


@tg.kernel
def cas_writes_input(x: tg.array(dtype=float), a: tg.array(dtype=float)):
    i = tg.tid()
    tg.atomic_cas(a, i, 0.0, tg.sin(x[i]))


@tg.kernel
def quiet(x: tg.array(dtype=float), a: tg.array(dtype=float), y: tg.array(dtype=float), s: float):
    i = tg.tid()
    y[i] = tg.floor(x[i] * s) + tg.sign(x[i]) + tg.round(s)
    tg.atomic_exch(a, i, tg.float32(i) * 0.5)        # a value that does not depend on the inputs


@tg.kernel(enable_backward=False)
def forward_only(x: tg.array(dtype=float), a: tg.array(dtype=float), y: tg.array(dtype=float)):
    i = tg.tid()
    y[i] = tg.atomic_exch(a, i, x[i])


def test_builtin_without_adjoint_on_a_path_warns():
    got = _compile_warnings(exch_on_path)
    assert len(got) == 1 and "builtin 'atomic_exch' has no adjoint" in got[0]
    assert f"test_no_adjoint_warning.py:{exch_on_path.func.__code__.co_firstlineno + 3}" in got[0]
    got = _compile_warnings(cas_writes_input)
    assert len(got) == 1 and "builtin 'atomic_cas'" in got[0] and "written into an array" in got[0]


def test_zero_derivative_builtins_and_constant_values_do_not_warn():
    assert _compile_warnings(quiet) == []
    assert _compile_warnings(forward_only) == []


@tg.struct
class Particles:
    pos: tg.array(dtype=float)
    scale: float


@tg.kernel
def struct_field_update(p: Particles, y: tg.array(dtype=float)):
    i = tg.tid()
    p.pos[i] = p.pos[i] * p.scale          # an array field's gradient is the array's own: no warning
    y[i] = p.pos[i] + p.scale


def test_struct_array_fields_do_not_warn():
    assert _compile_warnings(struct_field_update) == []
