"""The lowering of one kernel is the recipe `tinycore.codegen.passes.KERNEL_PASSES`: what `lower_kernel` (and so
`get_program`) runs is that list, by name and in order, and the traces (``TRACK_REWRITES``, ``DEBUG>=5``) show the
same names; `record_stage_times` still reports its five stages."""

from __future__ import annotations

import numpy as np
import pytest

from tinycore.codegen import (
    KERNEL_PASSES,
    REWRITE_STAGES,
    Opt,
    OptOps,
    get_kernel,
    get_program,
    program_from_kernel,
    record_stage_times,
)
from tinycore.codegen.passes import lower_kernel
from tinycore.helpers import Context
from tinycore.runtime.python_device import PythonRenderer
from tinycore.tensor import Tensor
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, clear_rewrite_traces, rewrite_traces

PASS_NAMES = [p.name for p in KERNEL_PASSES]
STAGES = {"lower", "optimize", "expand", "decompose", "linearize"}


class CPURenderer(PythonRenderer):
    """CPU style: no launch ids but threads, loops instead."""

    has_local = False
    has_shared = False
    threads = 4


class DoublingRenderer(PythonRenderer):
    """The PYTHON renderer with its own rules (``x * 2`` -> ``x + x``) for the ``expand`` stage."""

    def __init__(self) -> None:
        super().__init__()
        self.extra_rules = {
            "expand": PatternMatcher([(UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar(arg=2)]), lambda x: x + x)])
        }


def _ast(t: Tensor) -> UOp:
    (item,) = [si for si in t.schedule() if si.ast is not None and si.ast.op is Ops.SINK]
    return item.ast


def _x(*shape: int) -> Tensor:
    return Tensor(np.arange(np.prod(shape), dtype=np.float32).reshape(shape), device="PYTHON")


CASES = {
    "elementwise": (lambda: _x(8, 8) * 2 + 1, PythonRenderer, None),
    "grouped_sum": (lambda: _x(1024).sum(), PythonRenderer, [Opt(OptOps.GROUP, 0, 16)]),
    "row_sum_cpu": (lambda: _x(64, 64).sum(axis=1), CPURenderer, None),
    "matmul": (lambda: _x(16, 16) @ _x(16, 16), PythonRenderer, None),
    "tensor_core": (lambda: _x(16, 16) @ _x(16, 16), PythonRenderer, [Opt(OptOps.TC, 0, None)]),
    "extra_rules": (lambda: _x(8, 8) * 2, DoublingRenderer, []),
}


def test_the_recipe_names_every_pass_once_and_its_stages_are_the_timed_ones():
    assert len(set(PASS_NAMES)) == len(PASS_NAMES)
    assert PASS_NAMES[0] == "expand" and PASS_NAMES[-1] == "linearize"
    assert {p.stage for p in KERNEL_PASSES} == STAGES - {"lower", "optimize"}
    extra = [name for name in PASS_NAMES if name.startswith("extra_rules")]
    assert extra == [f"extra_rules[{stage}]" for stage in REWRITE_STAGES[1:]]  # `lower`'s run in get_kernel
    # the renderer's rules run at the end of their stage (the linearize stage's before the ordering itself)
    for stage, before, after in (
        ("expand", "simplify_kernel", "decompositions"),
        ("decompose", "decompositions", "check_bounds"),
        ("linearize", "lower_index_dtype", "linearize"),
    ):
        i = PASS_NAMES.index(f"extra_rules[{stage}]")
        assert KERNEL_PASSES[i].stage == stage and PASS_NAMES[i - 1 : i + 2 : 2] == [before, after]
    order = ["expand", "launch_ids", "lower_reduce", "simplify_kernel", "decompositions", "estimates", "linearize"]
    assert sorted(order, key=PASS_NAMES.index) == order


@pytest.mark.parametrize("case", CASES)
def test_track_rewrites_shows_the_recipe_in_order(case):
    build, renderer, opts = CASES[case]
    ast = _ast(build())
    clear_rewrite_traces()
    try:
        with Context(TRACK_REWRITES=1):
            program = get_program(ast, renderer(), opts)
        traces = [t for t in rewrite_traces if t.name in PASS_NAMES]
    finally:
        clear_rewrite_traces()
    assert [t.name for t in traces] == PASS_NAMES
    # each pass starts from the graph the one before it ended with: the recipe is what ran, end to end
    for before, after in zip(traces, traces[1:]):
        assert after.input is before.output, f"{after.name} did not start where {before.name} ended"
    assert program.uops and program.uops[-1].op in (Ops.STORE, Ops.END, Ops.ENDIF)
    if case == "extra_rules":
        assert sum(traces[PASS_NAMES.index("extra_rules[expand]")].hits.values()) == 1
    if case == "tensor_core":
        assert any(u.op is Ops.WMMA for u in program.uops)


def test_the_traced_program_is_the_untraced_one():
    build, renderer, opts = CASES["grouped_sum"]
    ast = _ast(build())
    plain = get_program(ast, renderer(), opts)
    clear_rewrite_traces()
    try:
        with Context(TRACK_REWRITES=1):
            traced = get_program(ast, renderer(), opts)
    finally:
        clear_rewrite_traces()
    assert traced.uops == plain.uops and traced.global_size == plain.global_size
    assert traced.local_size == plain.local_size


def test_debug_5_prints_one_pass_line_per_pass_in_order(capsys):
    build, renderer, opts = CASES["elementwise"]
    ast = _ast(build())
    k = get_kernel(ast, renderer())
    k.apply_opts([])
    capsys.readouterr()
    with Context(DEBUG=5):
        lower_kernel(k)
    lines = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("pass ")]
    assert lines == [f"pass {name}" for name in PASS_NAMES]


def test_record_stage_times_reports_its_stages():
    build, renderer, opts = CASES["grouped_sum"]
    ast = _ast(build())
    with record_stage_times() as times:
        get_program(ast, renderer(), opts)
    assert set(times) == STAGES and all(seconds >= 0 for seconds in times.values())
    k = get_kernel(ast, renderer()).apply_opts(opts)
    with record_stage_times() as times:
        program_from_kernel(k)
    assert set(times) == STAGES - {"lower", "optimize"}


def test_get_optimized_sink_runs_the_recipe_up_to_the_simplified_graph():
    build, renderer, opts = CASES["grouped_sum"]
    ast = _ast(build())
    k = get_kernel(ast, renderer()).apply_opts(opts)
    sink = k.get_optimized_sink()
    assert (k.global_size, k.local_size) == ((1, 1, 1), (16, 1, 1))
    assert sink is lower_kernel(k, stop_after="simplify_kernel").sink
    ops = {u.op for u in sink.toposort()}
    assert {Ops.DEFINE_LOCAL, Ops.BARRIER, Ops.DEFINE_REG, Ops.SPECIAL} <= ops and Ops.REDUCE not in ops
    lowered = lower_kernel(k)
    assert lowered.uops == get_program(ast, renderer(), opts).uops and lowered.estimates is not None


def test_stop_after_an_unknown_pass_names_the_passes():
    k = get_kernel(_ast(_x(4) + 1), PythonRenderer())
    with pytest.raises(ValueError, match=r"no pass named 'simplify'.*expand, loops_to_globals"):
        lower_kernel(k, stop_after="simplify")
