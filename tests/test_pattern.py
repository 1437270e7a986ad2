"""UPat / PatternMatcher / graph_rewrite: matching semantics, compiled matcher vs interpreter, rewrite order,
fixed points, deep graphs, tracing."""

from __future__ import annotations

import random
import sys

import pytest

from tinycore.dtype import dtypes
from tinycore.helpers import Context
from tinycore.uop.ops import GroupOp, Ops, UOp
from tinycore.uop.patterns import (
    PatternMatcher,
    RewriteError,
    UPat,
    clear_rewrite_traces,
    graph_rewrite,
    graph_rewrite_map,
    rewrite_traces,
)


@pytest.fixture(autouse=True)
def _spec_on():
    with Context(SPEC=1):
        yield


x = UOp.variable("x", 0, 10)
y = UOp.variable("y", 0, 10)
c3 = UOp.const(dtypes.index, 3)


def rw(pm: PatternMatcher, u: UOp, ctx=None):
    """Apply one matcher once (through the compiled code)."""
    return pm.rewrite(u, ctx)


# ----- single-node matching


def test_match_on_op_dtype_arg_and_name():
    pm = PatternMatcher(
        [
            (UPat(Ops.CONST, dtypes.index, arg=3, name="c"), lambda c: c.const_like(4)),
            (UPat(Ops.CONST, dtypes.float, name="c"), lambda c: c.const_like(9.0)),
            (UPat((Ops.IDIV, Ops.MOD), name="d"), lambda d: d.src[0]),
        ]
    )
    assert rw(pm, c3) is UOp.const(dtypes.index, 4)
    assert rw(pm, UOp.const(dtypes.index, 5)) is None  # arg mismatch
    assert rw(pm, UOp.const(dtypes.float, 1.0)).arg == 9.0  # dtype picks the second rule
    assert rw(pm, UOp.const(dtypes.int, 3)) is None  # dtype mismatch
    assert rw(pm, x // 2) is x and rw(pm, x % 2) is x and rw(pm, x * 2) is None


def test_dtype_tuple_and_any_op():
    pm = PatternMatcher([(UPat(dtype=(dtypes.int, dtypes.long), name="u"), lambda u: u.replace(tag="seen"))])
    assert rw(pm, UOp.const(dtypes.int, 1)).tag == "seen"
    assert rw(pm, UOp.const(dtypes.long, 1)).tag == "seen"
    assert rw(pm, UOp.const(dtypes.short, 1)) is None
    assert rw(pm, UOp.variable("v", 0, 1, dtypes.int)).tag == "seen"


def test_arg_none_and_bool_args_match_by_identity():
    pm = PatternMatcher([(UPat(Ops.NOOP, arg=None, name="n"), lambda n: c3), (UPat(Ops.NOOP, arg=True), lambda: x)])
    assert rw(pm, UOp(Ops.NOOP)) is c3
    assert rw(pm, UOp(Ops.NOOP, arg=True)) is x
    assert rw(pm, UOp(Ops.NOOP, arg=1)) is None  # 1 == True, but a bool arg pattern wants the bool


def test_repeated_name_must_bind_the_same_node():
    pm = PatternMatcher([(UPat.var("a") + UPat.var("a"), lambda a: a * 2)])
    assert rw(pm, x + x) is x * 2
    assert rw(pm, x + y) is None


def test_ordered_src_vs_permutation_src():
    ordered = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c"))), lambda a, c: a)])
    any_order = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("a"), UPat.cvar("c")]), lambda a, c: a)])
    assert rw(ordered, x + 3) is x and rw(ordered, 3 + x) is None
    assert rw(any_order, x + 3) is x and rw(any_order, 3 + x) is x


def test_permutations_of_three_sources():
    pm = PatternMatcher(
        [(UPat(Ops.WHERE, src=[UPat(Ops.CMPLT, name="g"), UPat.cvar("c"), UPat.var("v")]), lambda g, c, v: v)]
    )
    gate = x < 5
    # WHERE is not commutative, but a list src means "any order" whatever the op
    assert rw(pm, UOp(Ops.WHERE, dtypes.index, (gate, c3, y))) is y
    assert rw(pm, UOp(Ops.WHERE, dtypes.index, (c3, y, gate))) is y


def test_permutation_tries_the_next_order_when_the_function_declines():
    seen = []

    def fn(a, b):
        seen.append((a, b))
        return a if a is y else None

    pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")]), fn)])
    assert rw(pm, x + y) is y
    assert seen == [(x, y), (y, x)]


def test_allow_any_len_and_repeated_src():
    first_two = PatternMatcher(
        [(UPat(Ops.SINK, src=(UPat.var("a"), UPat.var("b")), allow_any_len=True), lambda a, b: b)]
    )
    assert rw(first_two, UOp.sink(x, y, c3)) is y
    assert rw(first_two, UOp.sink(x)) is None
    all_consts = PatternMatcher([(UPat(Ops.SINK, src=UPat(Ops.CONST), name="s"), lambda s: s.src[0])])
    assert rw(all_consts, UOp.sink(c3, UOp.const(dtypes.index, 4))) is c3
    assert rw(all_consts, UOp.sink(c3, x)) is None
    no_src = PatternMatcher([(UPat(Ops.SINK, src=()), lambda: c3)])
    assert rw(no_src, UOp.sink()) is c3 and rw(no_src, UOp.sink(x)) is None


def test_named_repeated_src_falls_back_to_the_interpreter():
    pm = PatternMatcher([(UPat(Ops.SINK, src=UPat.var("a")), lambda a: a)])
    assert rw(pm, UOp.sink(x, x)) is x  # every source binds the same node
    assert rw(pm, UOp.sink(x, y)) is None


def test_alternatives():
    pm = PatternMatcher([(UPat.any(UPat(Ops.ADD, name="e"), UPat(Ops.MUL, name="e")), lambda e: e.src[0])])
    assert rw(pm, x + 1) is x and rw(pm, x * 2) is x and rw(pm, x - 1) is None
    nested = PatternMatcher(
        [(UPat(Ops.NEG, src=(UPat.any(UPat.cvar("c"), UPat(Ops.DEFINE_VAR, name="c")),)), lambda c: c)]
    )
    assert rw(nested, -x) is x and rw(nested, -c3) is c3 and rw(nested, -(x + 1)) is None


def test_none_means_no_match_and_the_next_rule_runs():
    calls = []
    pm = PatternMatcher(
        [
            (UPat(Ops.ADD, name="a"), lambda a: calls.append("first")),  # returns None
            (UPat(Ops.ADD, name="a"), lambda a: a),  # returning the node itself also means "no change"
            (UPat(Ops.ADD, name="a"), lambda a: a.src[0]),
        ]
    )
    assert rw(pm, x + y) is x and calls == ["first"]


def test_ctx_is_passed_when_the_first_parameter_is_named_ctx():
    pm = PatternMatcher(
        [
            (UPat(Ops.DEFINE_VAR, name="v"), lambda ctx, v: ctx.setdefault(v.arg[0], v.replace(arg=(v.arg[0], 0, 99)))),
        ]
    )
    ctx: dict = {}
    out = graph_rewrite(x + y, pm, ctx=ctx)
    assert set(ctx) == {"x", "y"} and out.src[0].arg == ("x", 0, 99)


def test_rule_function_needs_names_the_pattern_binds():
    with pytest.raises(TypeError, match="needs"):
        PatternMatcher([(UPat(Ops.ADD, name="a"), lambda b: b)])
    # extra names the function doesn't take are simply not passed
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), lambda a: a)])
    assert rw(pm, x + y) is x
    # **kwargs receives every name
    pm2 = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))), lambda **kw: kw["b"])])
    assert rw(pm2, x + y) is y


def test_upat_operator_sugar():
    pm = PatternMatcher(
        [
            ((UPat.var("a") * UPat.cvar("c1")) + UPat.cvar("c2"), lambda a, c1, c2: a),
            (UPat.var("a").ne(UPat.var("b")), lambda a, b: b),
            (UPat.var("g").where(UPat.var("a"), UPat.var("b")), lambda g, a, b: a),
            (UPat.var("a").cast(dtypes.int), lambda a: a),
        ]
    )
    assert rw(pm, 5 + 2 * x) is x
    assert rw(pm, x.ne(y)) is y and rw(pm, y.ne(x)) is x
    assert rw(pm, (x < 3).where(x, y)) is x
    assert rw(pm, x.cast(dtypes.int)) is x and rw(pm, x.cast(dtypes.long)) is None
    assert "UPat(Ops.ADD" in repr((UPat.var("a") * 2) + 1)


def test_match_returns_every_binding():
    pat = UPat(Ops.ADD, src=[UPat.var("a"), UPat.var("b")])
    assert pat.match(x + y) == [{"a": x, "b": y}, {"a": y, "b": x}]
    assert pat.match(x * y) == []


def test_composition_keeps_rule_order():
    first = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: a.src[0])])
    second = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: a.src[1]), (UPat(Ops.MUL, name="m"), lambda m: c3)])
    both = first + second
    assert len(both) == 3
    assert rw(both, x + y) is x and rw(second + first, x + y) is y and rw(both, x * y) is c3


# ----- the compiled matcher agrees with the interpreted one


def _random_pattern(rng: random.Random, depth: int) -> UPat:
    choice = rng.randrange(6)
    name = rng.choice([None, None, "a", "b"])
    if depth == 0 or choice == 0:
        return UPat(name=name) if rng.random() < 0.5 else UPat(Ops.CONST, name=name)
    op = rng.choice([Ops.ADD, Ops.MUL, Ops.MAX])
    kids = [_random_pattern(rng, depth - 1) for _ in range(2)]
    if choice == 1:
        return UPat(op, src=kids, name=name)
    if choice == 2:
        return UPat(op, src=tuple(kids), name=name)
    if choice == 3:
        return UPat.any(UPat(op, src=tuple(kids)), UPat(Ops.CONST), name=name)
    if choice == 4:
        return UPat(op, dtype=dtypes.index, src=tuple(kids[:1]), allow_any_len=True, name=name)
    return UPat((Ops.ADD, Ops.MUL), src=kids, name=name)


def _random_expr(rng: random.Random, depth: int) -> UOp:
    leaves = [x, y, c3, UOp.const(dtypes.index, 1)]
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(leaves)
    op = rng.choice([Ops.ADD, Ops.MUL, Ops.MAX])
    return UOp(op, dtypes.index, (_random_expr(rng, depth - 1), _random_expr(rng, depth - 1)))


def test_compiled_matcher_agrees_with_interpreter():
    rng = random.Random(1234)
    exprs = [_random_expr(rng, 3) for _ in range(60)]
    got: list = []
    for _ in range(150):
        pat = _random_pattern(rng, 3)
        names = pat.names()

        def fn(**kw):
            got.append(kw)
            return None  # decline: every binding gets tried

        pm = PatternMatcher([(pat, fn)])
        for e in exprs:
            got.clear()
            pm.rewrite(e)
            expected = pat.match(e)
            # same bindings, same order (the interpreter restricted to the names the function receives)
            assert got == [{n: m[n] for n in names if n in m} for m in expected], (pat, e)


# ----- graph_rewrite


add_zero = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])


def test_graph_rewrite_reaches_a_fixed_point():
    e = ((x + 0) + 0) * ((y + 0) + 0) + 0
    assert graph_rewrite(e, add_zero) is x * y


def test_replacements_are_rewritten_too():
    # rule 1 creates nodes that rule 2 must still see
    pm = PatternMatcher(
        [
            (UPat(Ops.MUL, src=[UPat.var("a"), UPat.const(None, 2)]), lambda a: a + a),
            (
                UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("a")), name="s"),
                lambda a, s: s.replace(tag="doubled") if s.tag is None else None,
            ),
        ]
    )
    out = graph_rewrite((x * 2) * 2, pm)
    assert out.tag == "doubled" and out.src[0].tag == "doubled" and out.src[0].src[0] is x


def test_bottom_up_sees_original_sources():
    seen: list = []
    pm = PatternMatcher(
        [
            (
                UPat(Ops.ADD, src=(UPat(Ops.ADD, name="inner"), UPat.cvar("c")), name="outer"),
                lambda inner, c, outer: seen.append("outer"),
            ),
            (UPat.var("a") + 0, lambda a: a),
        ]
    )
    e = (x + 0) + 1
    out_default = graph_rewrite(e, pm)
    assert out_default is x + 1 and seen == []  # the inner ADD vanished before the outer one was matched
    out_bottom = graph_rewrite(e, pm, bottom_up=True)
    assert out_bottom is x + 1 and seen == ["outer"]


def test_bottom_up_rewrites_a_node_before_its_sources():
    order: list = []
    pm = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: order.append(a.src[1].arg))])
    graph_rewrite(((x + 1) + 2) + 3, pm, bottom_up=True)
    assert order == [3, 2, 1]
    order.clear()
    graph_rewrite(((x + 1) + 2) + 3, pm)
    assert order == [1, 2, 3]


def test_bottom_up_result_is_also_a_fixed_point():
    pm = PatternMatcher([(UPat.var("a") * 1, lambda a: a), (UPat.var("a") + 0, lambda a: a)])
    assert graph_rewrite(((x * 1) + 0) * 1 + 0, pm, bottom_up=True) is x


def test_ten_thousand_node_chain_does_not_recurse():
    limit = sys.getrecursionlimit()
    node = x
    for i in range(10000):
        node = (node + 0) * 1 if i % 2 else node + 1
    pm = PatternMatcher([(UPat.var("a") + 0, lambda a: a), (UPat.var("a") * 1, lambda a: a)])
    out = graph_rewrite(node, pm)
    assert len(out.toposort()) == 5000 + 2
    out2 = graph_rewrite(node, pm, bottom_up=True)
    assert out2 is out
    assert sys.getrecursionlimit() == limit


def test_graph_rewrite_map():
    e = UOp.sink((x + 0) * 2, y + 0)
    mapping = graph_rewrite_map(e, add_zero)
    assert mapping[x + 0] is x and mapping[y + 0] is y and mapping[e] is UOp.sink(x * 2, y)
    assert mapping[x] is x
    later = graph_rewrite_map(mapping[e], PatternMatcher([(UPat.var("a") * 2, lambda a: a + a)]), input_map=mapping)
    assert later[e] is UOp.sink(x + x, y) and later[x + 0] is x


def test_a_rule_that_builds_a_cycle_is_reported():
    pm = PatternMatcher([(UPat(Ops.NEG, name="n"), lambda n: UOp.sink(n))])
    with pytest.raises(RewriteError, match="cycle"):
        graph_rewrite(-x, pm, name="loop")


def test_ctx_reaches_every_rule_call():
    counter = {"n": 0}

    def count(ctx, a):
        ctx["n"] += 1

    graph_rewrite(UOp.sink(x + 1, y + 1), PatternMatcher([(UPat(Ops.ADD, name="a"), count)]), ctx=counter)
    assert counter["n"] == 2


# ----- tracing


def test_track_rewrites_records_named_passes():
    clear_rewrite_traces()
    e = (x + 0) * 2
    with Context(TRACK_REWRITES=2):
        out = graph_rewrite(e, add_zero, name="drop add zero")
    assert len(rewrite_traces) == 1
    trace = rewrite_traces[0]
    assert trace.name == "drop add zero" and trace.input is e and trace.output is out is x * 2
    assert sum(trace.hits.values()) == 1 and "test_pattern.py" in next(iter(trace.hits))
    assert trace.steps and trace.steps[0][1] is x + 0 and trace.steps[0][2] is x
    clear_rewrite_traces()
    graph_rewrite(e, add_zero, name="untracked")
    assert rewrite_traces == []


def test_debug_5_prints_pass_name_counts_and_hits(capsys):
    with Context(DEBUG=5):
        graph_rewrite(((x + 0) + 0) * 2, add_zero, name="my pass")
    out = capsys.readouterr().out
    # x+0 -> x is one hit; (x+0)+0 then rebuilds to the already rewritten x+0 and needs no rule call
    assert "my pass" in out and "6 -> 3 nodes" in out and "1 rule hits" in out and "test_pattern.py" in out


def test_generated_source_is_inspectable():
    src = add_zero.source()
    assert "def match_ADD(u, ctx):" in src and "return None" in src


def test_many_rules_dispatch_by_op():
    rules = [(UPat(Ops.ADD, src=(UPat.var("a"), UPat.cvar("c", arg=1000 + i))), lambda a, c: a) for i in range(500)]
    pm = PatternMatcher(rules)
    assert set(pm.dispatch) == {Ops.ADD}
    assert rw(pm, x + 1250) is x and rw(pm, x + 999) is None
    assert all(op in GroupOp.All for op in pm.dispatch)
