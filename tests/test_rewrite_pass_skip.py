"""Skipping rewrite passes that can't match (`PatternMatcher.ops` against the remembered ops of a pass's output graph)
and the per-op lazy compilation of matchers: a skipped pass must be exactly a pass that would change nothing."""

from __future__ import annotations

import pytest

from tinycore.codegen import decompositions, expander, kernel, lowerer
from tinycore.dtype import dtypes
from tinycore.uop import patterns
from tinycore.uop.ops import Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite, graph_rewrite_map
from tinycore.uop.symbolic import pm_lower_index_dtype, symbolic, symbolic_flat, symbolic_simple

CODEGEN_MATCHERS = [
    symbolic_simple,
    symbolic,
    symbolic_flat,
    pm_lower_index_dtype,
    lowerer.pm_lower_index,
    lowerer.pm_fold_gated_loads,
    lowerer.pm_lower_reduce,
    expander.pm_expand_memory,
    expander.pm_expand_lanes,
    expander.pm_vector_cleanup,
    expander.pm_unroll_wide,
    expander.pm_unroll_scalar,
    kernel.pm_lower_vector_reduce,
    kernel.pm_wmma_accumulate,
    kernel.pm_fuse_accumulate,
    kernel.pm_wmma_fuse_accumulate,
    kernel.pm_group_reduce,
    decompositions.decomposition_rules(set()),
    decompositions.decomposition_rules({"ADD", "MUL", "EXP2"}),
]


def _graph_with(op: Ops) -> UOp:
    """A SINK over a leaf node of `op` (and an ADD, so the graph always has an inner node)."""
    leaf = UOp(op, dtypes.int, (), ("leaf", op.value))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.ADD, dtypes.int, (leaf, leaf)),))


def _remember(graph: UOp) -> UOp:
    """Run a pass that changes nothing, so the graph's ops are remembered for the next pass."""
    out = graph_rewrite(graph, PatternMatcher([(UPat(Ops.SINK, name="s"), lambda s: None)]))
    assert out is graph and patterns._graph_ops.get(graph) is not None
    return out


@pytest.mark.parametrize("pm", CODEGEN_MATCHERS, ids=lambda pm: pm.name)
def test_ops_of_a_matcher_cover_every_op_a_rule_can_match(pm: PatternMatcher):
    assert pm.ops == frozenset(pm.dispatch)
    for pat, _ in pm.patterns:
        roots = [pat] if pat.alts is None else [alt for alt in pat.alts]
        for root in roots:
            assert root.op is None and pm.ops == frozenset(Ops) or root.op is not None and set(root.op) <= pm.ops


@pytest.mark.parametrize("op", list(Ops), ids=lambda op: op.name)
def test_a_pass_whose_rule_matches_an_op_of_the_graph_is_never_skipped(op: Ops):
    graph = _remember(_graph_with(op))
    seen: list[UOp] = []
    counting = PatternMatcher([(UPat(op, name="u"), lambda u: seen.append(u))])
    assert graph_rewrite(graph, counting) is graph
    assert [u.op for u in seen if u.op is op]
    marker = UOp(Ops.NOOP, dtypes.int, (), "rewritten")
    replacing = PatternMatcher([(UPat(op, name="u"), lambda u: marker if u.arg == ("leaf", op.value) else None)])
    assert marker in graph_rewrite(graph, replacing).toposort()


def test_a_pass_that_can_match_nothing_is_skipped_and_gives_the_identity(monkeypatch):
    graph = _remember(_graph_with(Ops.DEFINE_VAR))
    runs: list[UOp] = []
    original = patterns._rewrite_sources_first

    def counting(root, *args):
        runs.append(root)
        return original(root, *args)

    monkeypatch.setattr(patterns, "_rewrite_sources_first", counting)
    called: list[UOp] = []
    absent = PatternMatcher([(UPat(Ops.WMMA, name="u"), lambda u: called.append(u))])
    assert graph_rewrite(graph, absent) is graph and not runs and not called
    mapping = graph_rewrite_map(graph, absent)
    assert mapping == {u: u for u in graph.toposort()} and not runs
    present = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="u"), lambda u: None)])
    assert graph_rewrite(graph, present) is graph and runs == [graph]


def test_ops_are_remembered_for_rewritten_graphs_too():
    x = UOp.variable("x", 0, 9)
    to_mul = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("c")]), lambda a, c: a * c)])
    out = graph_rewrite(UOp.sink(x + 3), to_mul)
    assert out is UOp.sink(x * 3)
    assert Ops.MUL in patterns._graph_ops[out]
    mul_to_sub = PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a - c)])
    assert graph_rewrite(out, mul_to_sub) is UOp.sink(x - 3)


def test_matchers_compile_each_op_on_its_first_call_only():
    pm = PatternMatcher(
        [
            (UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("c", arg=0)]), lambda a, c: a),
            (UPat(Ops.MUL, src=[UPat.var("a"), UPat.cvar("c", arg=1)]), lambda a, c: a),
        ]
    )
    x = UOp.variable("x", 0, 9)
    lazy = dict(pm.dispatch)
    assert set(lazy) == {Ops.ADD, Ops.MUL}
    assert pm.rewrite(x + 0) is x
    assert pm.dispatch[Ops.ADD] is not lazy[Ops.ADD] and pm.dispatch[Ops.MUL] is lazy[Ops.MUL]
    assert pm.rewrite(x * 1) is x and pm.rewrite(x * 2) is None
    assert "def match_ADD(u, ctx):" in pm.source() and "def match_MUL(u, ctx):" in pm.source()
