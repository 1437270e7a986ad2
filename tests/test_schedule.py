"""Scheduler: realize points and fusion (kernel counts), kernel AST shape and buffer order, dependency order
(including read-before-assign), and the schedule cache (a hit runs no rewrite pass at all)."""

from __future__ import annotations

import pytest

from tinycore.dtype import dtypes
from tinycore.engine import realized, schedule_cache
from tinycore.engine.realized import buffer_of, new_buffer_uop
from tinycore.engine.schedule import ScheduleItem, create_schedule_with_vars
from tinycore.engine.schedule_cache import schedule_stats
from tinycore.tensor import Tensor
from tinycore.uop import patterns
from tinycore.uop.ops import GroupOp, Ops, UOp, Variable

pytestmark = pytest.mark.usefixtures("python_default_device")


@pytest.fixture
def count_rewrites(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Every graph_rewrite / graph_rewrite_map pass anywhere (they all go through `patterns._run_pass`)."""
    calls: list[str | None] = []
    original = patterns._run_pass

    def counting(sink, pm, ctx, bottom_up, name, spec, replace):  # type: ignore[no-untyped-def]
        calls.append(name)
        return original(sink, pm, ctx, bottom_up, name, spec, replace)

    monkeypatch.setattr(patterns, "_run_pass", counting)
    return calls


def kernels(items: list[ScheduleItem]) -> list[ScheduleItem]:
    return [si for si in items if si.ast.op is Ops.SINK]


def ops_of(si: ScheduleItem) -> set[Ops]:
    return {u.op for u in si.ast.toposort()}


def rand(*shape: int) -> Tensor:
    return Tensor.empty(*shape)


# ---------------------------------------------------------------------------------------------------------------
# kernel counts (fusion rules)


def test_fused_multiply_add_sum_is_one_kernel() -> None:
    a, b, c = rand(4, 4), rand(4, 4), rand(4, 4)
    items = (a * b + c).sum().schedule()
    assert len(items) == 1
    assert Ops.REDUCE_AXIS in ops_of(items[0]) and Ops.MUL in ops_of(items[0])


def test_softmax_is_at_most_three_kernels() -> None:
    items = rand(8, 16).softmax(-1).schedule()
    assert 1 <= len(items) <= 3
    assert len(items) == 3  # max, sum(exp), exp/sum: the exp is recomputed, not stored


def test_linear_bias_relu_is_one_kernel() -> None:
    x, w, b = rand(4, 8), rand(8, 3), rand(3)
    items = (x @ w + b).relu().schedule()
    assert len(items) == 1
    assert {Ops.REDUCE_AXIS, Ops.WHERE, Ops.ADD} <= ops_of(items[0])  # relu is a where (its gradient at 0 is 0)


def test_arange_is_one_kernel_without_buffer_inputs() -> None:
    items = Tensor.arange(100).schedule()
    assert len(items) == 1
    assert len(items[0].bufs) == 1  # only the output
    assert not any(u.op is Ops.LOAD for u in items[0].ast.toposort())
    assert items[0].bufs[0].size == 100


def test_elementwise_chain_fuses_into_one_kernel() -> None:
    x = rand(16)
    y = x
    for i in range(20):
        y = (y * 1.5 + i).relu()
    assert len(y.schedule()) == 1


def test_reduce_broadcast_back_is_its_own_kernel() -> None:
    x = rand(4, 4)
    items = (x - x.sum(1, keepdim=True)).schedule()
    assert len(items) == 2
    assert Ops.REDUCE_AXIS in ops_of(items[0]) and Ops.REDUCE_AXIS not in ops_of(items[1])


def test_reduce_of_reduce_splits() -> None:
    x = rand(4, 4, 4)
    assert len(x.sum(2).max(1).schedule()) == 2


def test_elementwise_after_reduce_fuses_into_the_reduce_kernel() -> None:
    x = rand(4, 4)
    items = (x.sum(1) * 2 + 1).exp().schedule()
    assert len(items) == 1


def test_shared_reduce_needed_by_two_kernels_is_computed_once() -> None:
    x = rand(4, 4)
    s = x.sum()  # used by two outputs (which share one multi-output kernel)
    items = create_schedule_with_vars(UOp.sink((x + s).uop, (x * s).uop))[0]
    reduces = [si for si in items if Ops.REDUCE_AXIS in ops_of(si)]
    assert len(reduces) == 1 and len(items) == 2 and len(items[1].outputs) == 2


def test_cheap_elementwise_shared_by_two_kernels_is_recomputed() -> None:
    x = rand(4, 4)
    e = (x * 2).exp()
    items = create_schedule_with_vars(UOp.sink(e.sum(0).uop, e.max(1).uop))[0]
    assert len(items) == 2  # e is fused into both reduce kernels, not stored


def test_mlp_layers_are_one_kernel_each() -> None:
    x = rand(2, 8)
    for _ in range(5):
        x = (x @ rand(8, 8) + rand(8)).relu()
    assert len(x.schedule()) == 5


def test_views_of_buffers_and_constants_need_no_kernel() -> None:
    x = rand(4, 4)
    assert x.T.schedule() == []
    assert Tensor.full((3, 3), 2.0).schedule() == []
    assert len(Tensor.full((3, 3), 2.0).contiguous().schedule()) == 1
    assert x.contiguous().schedule() == []  # already a contiguous buffer


def test_contiguous_of_a_view_copies() -> None:
    items = rand(4, 3).T.contiguous().schedule()
    assert len(items) == 1 and Ops.PERMUTE in ops_of(items[0])


# ---------------------------------------------------------------------------------------------------------------
# AST shape and buffer order


def test_kernel_ast_follows_the_pipeline_contract() -> None:
    a, b = rand(2, 3), rand(3)
    out = a * b
    items = out.schedule()
    (si,) = items
    ast = si.ast
    assert ast.op is Ops.SINK and [s.op for s in ast.src] == [Ops.STORE]
    target, value = ast.src[0].src
    assert target.op is Ops.RESHAPE and target.src[0].op is Ops.DEFINE_GLOBAL and target.src[0].arg == 0
    assert target.arg == (2, 3) and value.op is Ops.MUL
    globals_ = sorted(u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL)
    assert globals_ == [0, 1, 2]
    for u in ast.toposort():
        assert u.op not in (Ops.BUFFER, Ops.COPY, Ops.ASSIGN, Ops.CONTIGUOUS, Ops.DEVICE, Ops.BIND)
        if u.op is Ops.LOAD:
            assert u.src[0].op is Ops.DEFINE_GLOBAL
        if u.op is Ops.CONST:
            assert u.src == ()
    # outputs first, then inputs in order of first use
    assert si.bufs[0] is buffer_of(out.uop) and si.bufs[0].size == 6
    assert {si.bufs[1].size, si.bufs[2].size} == {6, 3}
    by_arg = {u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
    for i, buf in enumerate(si.bufs):
        assert by_arg[i].dtype.size == buf.size
    assert si.outputs == (si.bufs[0],) and len(si.inputs) == 2


def test_reading_one_buffer_twice_binds_it_once() -> None:
    a = rand(4)
    (si,) = (a * a + a.flip(0)).schedule()
    assert len(si.bufs) == 2


def test_realized_tensor_becomes_its_buffer() -> None:
    x = rand(2, 3)
    y = x.sum(1)
    y.schedule()
    assert y.uop.op is Ops.BUFFER and y.uop.arg == 2 and y.shape == (2,)
    z = (x + 1).T
    z.schedule()
    assert z.uop.op is Ops.PERMUTE and z.uop.src[0].op is Ops.RESHAPE and z.uop.src[0].src[0].op is Ops.BUFFER


def test_other_tensors_see_a_realized_node() -> None:
    x = rand(4)
    y = x * 2
    alias = Tensor(y.uop)
    z = y + 1
    y.schedule()
    assert alias.schedule() == []  # the same node: already computed
    assert alias.uop is y.uop
    (si,) = z.schedule()  # reads y's buffer instead of recomputing x * 2
    assert Ops.MUL not in ops_of(si)
    assert buffer_of(y.uop) in si.bufs


def test_copy_between_devices() -> None:
    x = Tensor.empty(4, device="PYTHON")
    items = (x + 1).to("PYTHON:1").schedule()
    assert [si.ast.op for si in items] == [Ops.SINK, Ops.COPY]
    copy = items[1]
    assert copy.bufs[0].device == "PYTHON:1" and copy.bufs[1].device == "PYTHON"
    assert copy.bufs[1] is items[0].bufs[0]
    assert x.to("PYTHON:1").schedule()[0].bufs[1] is buffer_of(x.uop)


def test_copy_of_a_permuted_view_realizes_it_first() -> None:
    x = Tensor.empty(2, 3)
    items = x.T.to("PYTHON:1").schedule()
    assert [si.ast.op for si in items] == [Ops.SINK, Ops.COPY]
    assert Ops.PERMUTE in ops_of(items[0])


# ---------------------------------------------------------------------------------------------------------------
# order and assign


def test_kernels_are_ordered_producers_first() -> None:
    x = rand(4, 4)
    items = x.softmax(-1).schedule()
    written: set[int] = set()
    for si in items:
        for buf in si.inputs:
            if any(buf is s.bufs[0] for s in items):
                assert id(buf) in written, "a kernel read a buffer before the kernel writing it ran"
        written.add(id(si.bufs[0]))


def test_assign_writes_the_target_buffer() -> None:
    x = rand(4)
    target = buffer_of(x.uop)
    x.assign(x * 2)
    (si,) = x.schedule()
    assert si.bufs[0] is target
    assert x.uop.op is Ops.BUFFER and buffer_of(x.uop) is target


def test_read_before_assign_runs_first() -> None:
    x = rand(4)
    old = x + 1  # reads the old contents
    x.assign(x * 10)
    new = x + 2  # reads the assigned contents
    items = create_schedule_with_vars(UOp.sink(new.uop, old.uop, x.uop))[0]
    target = buffer_of(_base(x.uop))
    assign_at = next(i for i, si in enumerate(items) if si.bufs[0] is target)
    old_at = next(i for i, si in enumerate(items) if Ops.ADD in ops_of(si) and _adds_const(si, 1.0))
    new_at = next(i for i, si in enumerate(items) if Ops.ADD in ops_of(si) and _adds_const(si, 2.0))
    assert old_at < assign_at < new_at


def _base(u: UOp) -> UOp:
    while u.op in GroupOp.Movement or u.op is Ops.ASSIGN:
        u = u.src[0]
    return u


def _adds_const(si: ScheduleItem, value: float) -> bool:
    return any(u.op is Ops.CONST and u.arg == value for u in si.ast.toposort())


def test_assign_of_a_different_view_of_itself_goes_through_a_temporary() -> None:
    x = rand(4)
    x.assign(x.flip(0))
    items = x.schedule()
    assert len(items) == 2  # flip into a temporary, then copy back
    assert items[1].bufs[0] is buffer_of(_base(x.uop))


def test_assign_of_the_same_view_is_one_kernel() -> None:
    x = rand(4)
    x.assign(x * 2 + 1)
    assert len(x.schedule()) == 1


def test_assign_into_a_view() -> None:
    x = rand(2, 3)
    buf = buffer_of(x.uop.src[0])
    row = x.shrink(((0, 1), None))
    row.assign(Tensor.full((1, 3), 5.0))
    (si,) = row.schedule()
    target = si.ast.src[0].src[0]
    assert si.bufs[0] is buf and Ops.SHRINK in {u.op for u in target.toposort()}


# ---------------------------------------------------------------------------------------------------------------
# the schedule cache


def test_cache_hit_runs_no_rewrite(count_rewrites: list[str | None]) -> None:
    schedule_cache.clear_schedule_cache()
    a1, b1 = rand(8, 8), rand(8)
    (a1 @ a1.T + b1).softmax(-1).schedule()
    assert count_rewrites, "a miss must run the scheduler's passes"
    count_rewrites.clear()
    hits = schedule_stats.hits
    a2, b2 = rand(8, 8), rand(8)  # same shapes, new buffers
    items = (a2 @ a2.T + b2).softmax(-1).schedule()
    assert count_rewrites == []
    assert schedule_stats.hits == hits + 1
    assert any(si.bufs[-1] is buffer_of(b2.uop) or buffer_of(b2.uop) in si.bufs for si in items)
    assert not any(buffer_of(b1.uop) in si.bufs for si in items)


def test_cache_hit_gives_new_output_buffers() -> None:
    x1, x2 = rand(4), rand(4)
    (s1,) = (x1 + 1).schedule()
    (s2,) = (x2 + 1).schedule()
    assert s1.ast is s2.ast
    assert s1.bufs[0] is not s2.bufs[0] and s2.bufs[1] is buffer_of(x2.uop)


def test_cache_key_ignores_buffer_identity_but_not_aliasing() -> None:
    a, b = rand(4), rand(4)
    k_ab = schedule_cache.KeyWalk([(a + b).uop]).key
    c, d = rand(4), rand(4)
    assert schedule_cache.KeyWalk([(c + d).uop]).key == k_ab
    assert schedule_cache.KeyWalk([(c + c).uop]).key != k_ab  # one buffer read twice is a different program
    assert schedule_cache.KeyWalk([(c + 2).uop]).key != schedule_cache.KeyWalk([(c + 1).uop]).key
    int_key = schedule_cache.KeyWalk([(Tensor.empty(4, dtype=dtypes.int32) + 1).uop]).key
    assert int_key != schedule_cache.KeyWalk([(c + 1).uop]).key


def test_cache_key_strips_bind_values() -> None:
    v = Variable("n", 1, 10)
    x = rand(4)
    k3 = schedule_cache.KeyWalk([(x + Tensor(v.bind(3)).cast(dtypes.float)).uop])
    k7 = schedule_cache.KeyWalk([(x + Tensor(v.bind(7)).cast(dtypes.float)).uop])
    assert k3.key == k7.key
    assert k3.var_vals == {"n": 3} and k7.var_vals == {"n": 7}


def test_bound_variable_reaches_the_kernel_as_define_var() -> None:
    v = Variable("n", 1, 10)
    x = rand(4)
    items, var_vals = (x + Tensor(v.bind(5)).cast(dtypes.float)).schedule_with_vars()
    assert var_vals == {"n": 5}
    found = [u for u in items[0].ast.toposort() if u.op in (Ops.DEFINE_VAR, Ops.BIND)]
    assert [u.op for u in found] == [Ops.DEFINE_VAR]


def test_conflicting_binds_raise() -> None:
    v = Variable("n", 1, 10)
    with pytest.raises(ValueError, match="bound to both"):
        (Tensor(v.bind(2)) + Tensor(v.bind(3))).schedule()


def test_rebuilding_a_live_realized_node_reads_its_buffer() -> None:
    x = rand(4)
    y = x * 3
    keep = y.uop  # something still holds the node, so rebuilding x * 3 returns that very node
    y.schedule()
    assert (x * 3).uop is keep
    again = Tensor(((x * 3) + 0).uop)  # x * 3 is the realized node: only the + 0 kernel is left
    (si,) = again.schedule()
    assert Ops.MUL not in ops_of(si)


def test_create_schedule_with_vars_needs_a_sink() -> None:
    with pytest.raises(TypeError, match="SINK"):
        create_schedule_with_vars(new_buffer_uop("PYTHON", 4, dtypes.float))


def test_stats_count_hits_and_misses() -> None:
    schedule_stats.reset()
    schedule_cache.clear_schedule_cache()
    (rand(3) * 7).schedule()
    (rand(3) * 7).schedule()
    assert (schedule_stats.misses, schedule_stats.hits) == (1, 1)


def test_very_deep_graph_schedules() -> None:
    x = rand(4)
    for _ in range(3000):
        x = x + 1.0
    (si,) = x.schedule()
    assert si.ast.src[0].src[1].op is Ops.ADD


def test_empty_outputs_run_no_kernel() -> None:
    t = Tensor.empty(0, 4) + 1
    assert t.schedule() == []
    assert t.uop.op is Ops.RESHAPE and buffer_of(t.uop).size == 0
    assert (Tensor.arange(0) * 2).schedule() == []


def test_deep_graph_key_does_not_depend_on_the_walk_strategy() -> None:
    import sys

    def chain(x: Tensor) -> Tensor:
        for i in range(150):
            x = x * 2.0 + float(i % 7)
        return x

    recursive = schedule_cache.KeyWalk([chain(rand(4)).uop]).key
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(__import__("inspect").stack()) + 60)  # too shallow for 300 nested visits
    try:
        iterative = schedule_cache.KeyWalk([chain(rand(4)).uop]).key
    finally:
        sys.setrecursionlimit(limit)
    assert iterative == recursive


def test_the_computed_node_under_an_output_view_is_reused_only_when_it_matches() -> None:
    x = rand(4, 4)
    s = x.sum(1, keepdim=True)  # REDUCE_AXIS (4, 1)
    flat = s.reshape(4)  # the output: a view of the reduce
    flat.schedule()
    (si,) = Tensor(s.uop + 1).schedule()  # s's node was computed into flat's buffer: no second reduce
    assert Ops.REDUCE_AXIS not in ops_of(si)
    y = (x * 2).permute(1, 0)
    folded = y.reshape(16).reshape(4, 4)  # the early pass folds the reshapes: chains differ, nothing is reused
    folded.schedule()
    (si,) = Tensor(y.uop + 1).schedule()
    assert Ops.MUL in ops_of(si)  # recomputed: mapping a node under a folded chain could read the wrong order


def test_schedule_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule_cache.clear_schedule_cache()
    monkeypatch.setattr(schedule_cache, "SCHEDULE_CACHE_LIMIT", 3)
    for i in range(5):
        (rand(2) * float(i)).schedule()  # a new constant each time: a new key
    assert len(schedule_cache.schedule_cache) == 3


def test_schedule_does_not_keep_the_graph_alive() -> None:
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        x = rand(8)
        y = x * 3 + 1
        node = weakref.ref(y.uop)
        y.schedule()  # a cache miss: the scheduler walks and rewrites the graph
        assert node() is None, "the scheduled graph must be freed without the cycle collector"
    finally:
        gc.enable()


def test_writing_a_buffer_drops_values_computed_from_it() -> None:
    x = rand(4)
    alias = Tensor(x.uop)  # another tensor on the same BUFFER uop
    y = alias + 1
    keep = y.uop
    y.schedule()
    assert realized.realized_view(keep) is not None
    x.assign(x * 2).schedule()
    assert realized.realized_view(keep) is None  # (alias + 1) must be recomputed from the new contents
    (si,) = (alias + 1).schedule()
    assert buffer_of(alias.uop) in si.bufs


def test_buffer_written_hook() -> None:
    x = rand(4)
    y = x + 5
    keep = y.uop
    y.schedule()
    realized.buffer_written(buffer_of(x.uop))
    assert realized.realized_view(keep) is None


def test_contiguous_of_an_assign_reads_the_assigned_value():
    # the CONTIGUOUS kernel depends on the ASSIGN kernel only; it must not be ordered before it (no false cycle)
    target = Tensor.empty(3, device="PYTHON")
    copy = target.assign(Tensor.ones(3, device="PYTHON") * 2).contiguous().realize()
    assert copy.numpy().tolist() == [2.0, 2.0, 2.0] and target.numpy().tolist() == [2.0, 2.0, 2.0]
