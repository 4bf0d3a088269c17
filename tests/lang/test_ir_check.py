"""The lowering pipeline and the IR check: the pass list, the check running between passes in
the test suite, and each invariant failing on IR broken on purpose."""
import dataclasses

import pytest

import tapegrad as tg
from tapegrad.errors import IRCheckError
from tapegrad.lang import lower
from tapegrad.lang.check import check_ir
from tapegrad.lang.ir import Assign, Loop, Read, Var, walk

F64 = tg.array(dtype=tg.float64)
DONE = ("build", "plan_loops", "param_access")


@tg.func
def halve(v: tg.float64):
    return v * 0.5


@tg.kernel
def accumulate(x: F64, y: F64, n: int):
    i = tg.tid()
    s = tg.float64(0.0)
    scale = x[0]
    for k in range(n):
        s += x[i] * scale
    y[i] = halve(s)


def fresh_ir():
    """``accumulate`` lowered again: IR to break without touching the kernel's own."""
    return lower.lower(lower.Target(accumulate.func, "kernel", "accumulate_copy", tuple(accumulate.arg_types),
                                    label="accumulate"))


def assigns(ir, name=None):
    return [s for s in walk(ir.body) if isinstance(s, Assign) and (name is None or s.op.name == name)]


def test_the_pipeline_lists_its_passes_in_order():
    assert [p.name for p in lower.PASSES] == ["build", "plan_loops", "param_access"]
    assert all(p.doc for p in lower.PASSES)


def test_the_test_suite_runs_the_check_between_passes():
    assert lower.ir_checks(), "tests/conftest.py sets TAPEGRAD_CHECK_IR=1 before tapegrad is imported"


def test_lowered_kernels_and_functions_pass_the_check():
    check_ir(accumulate.ir, "param_access", DONE)
    calls = [s for s in assigns(accumulate.ir) if s.op.callee is not None]
    assert calls, "the kernel calls halve()"
    check_ir(calls[0].op.callee, "param_access", DONE)


def test_use_before_definition():
    ir = fresh_ir()
    body = ir.body
    defined = {id(s.out) for s in body if isinstance(s, Assign) and s.out is not None}
    j = next(j for j, s in enumerate(body) if isinstance(s, Assign) and any(id(a) in defined for a in s.args))
    body.insert(0, body.pop(j))
    with pytest.raises(IRCheckError, match="used before it is defined"):
        check_ir(ir, "build")


def test_temp_defined_twice():
    ir = fresh_ir()
    first = next(s for s in ir.body if isinstance(s, Assign) and s.out is not None)
    ir.body.append(dataclasses.replace(first))
    with pytest.raises(IRCheckError, match="defined twice"):
        check_ir(ir, "build")


def test_result_type_must_match_the_op():
    ir = fresh_ir()
    mul = assigns(ir, "mul")[0]
    mul.out.type = tg.float32
    with pytest.raises(IRCheckError, match="mul"):
        check_ir(ir, "build")


def test_operand_types_must_satisfy_the_builtin_rule():
    ir = fresh_ir()
    mul = assigns(ir, "mul")[0]
    mul.args[1] = next(s.out for s in walk(ir.body) if isinstance(s, Assign) and s.out is not None
                       and s.out.type is tg.int32)
    with pytest.raises(IRCheckError, match=r"mul\(\) does not accept"):
        check_ir(ir, "build")


def test_locals_are_not_operands():
    ir = fresh_ir()
    mul = assigns(ir, "mul")[0]
    local = next(v for v in ir.vars if v.kind == "local" and v.type is mul.args[0].type)
    mul.args[0] = local
    with pytest.raises(IRCheckError, match="is a local"):
        check_ir(ir, "build")


def test_undeclared_variable():
    ir = fresh_ir()
    mul = assigns(ir, "mul")[0]
    ir.vars.remove(mul.out)
    with pytest.raises(IRCheckError, match="not declared"):
        check_ir(ir, "build")


def test_call_of_a_function_missing_from_callees():
    ir = fresh_ir()
    ir.callees.clear()
    with pytest.raises(IRCheckError, match="not in callees"):
        check_ir(ir, "build")


def test_statement_without_location():
    ir = fresh_ir()
    ir.body[0].loc = None
    with pytest.raises(IRCheckError, match="source location"):
        check_ir(ir, "build")


def test_plan_loops_postcondition_no_unhoisted_reads():
    ir = fresh_ir()
    loop = next(s for s in walk(ir.body) if isinstance(s, Loop))
    scale = next(v for v in ir.vars if v.kind == "local" and v.label == "scale")
    t = Var("t_check_1", scale.type, "temp", "scale")
    ir.vars.append(t)
    loop.body.insert(0, Read(t, scale, loop.loc))
    check_ir(ir, "build")                                   # fine before planning...
    with pytest.raises(IRCheckError, match="plan_loops hoists"):
        check_ir(ir, "plan_loops", ("build", "plan_loops"))    # ...not after it


def test_lower_names_the_pass_that_broke_the_ir(monkeypatch):
    def breaks_types(ir, target):
        for s in walk(ir.body):
            if isinstance(s, Assign) and s.op.name == "mul":
                s.out.type = tg.int64
        return ir

    broken = lower.Pass("break_types", breaks_types, lambda t: True, "a deliberately broken pass")
    monkeypatch.setattr(lower, "PASSES", lower.PASSES + (broken,))

    @tg.kernel
    def twice(x: F64):
        i = tg.tid()
        x[i] = x[i] * 2.0

    with pytest.raises(IRCheckError, match="after pass 'break_types'"):
        twice.ir
