"""Benchmark the IR core: UOp construction, graph_rewrite throughput, matcher dispatch with many rules, and the
symbolic simplifier on the index expressions of a strided, padded 2-D convolution.

Run: `python bench/bench_rewrite.py` (prints figures; nothing is asserted).
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable

from tinycore.dtype import dtypes
from tinycore.uop.ops import AxisType, Ops, UOp
from tinycore.uop.patterns import PatternMatcher, UPat, graph_rewrite
from tinycore.uop.symbolic import lower_index_dtype, symbolic, symbolic_simple


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """Fastest of `repeat` runs, in seconds of this process's CPU time (the benchmark machine is shared: CPU time
    ignores time stolen by other processes); garbage collection is off while timing."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
        gc.enable()
    return min(times)


def kernel_like_graph(n_nodes: int, seed: int = 0) -> UOp:
    """A kernel-shaped graph of about `n_nodes` nodes: loads at symbolic indices through float ALU chains, with
    plenty of foldable junk (x*1, x+0, constant arithmetic, redundant index math) for the rules to remove."""
    rng = random.Random(seed)
    bufs = [UOp.define_global(i, dtypes.float, 1 << 20) for i in range(4)]
    ranges = [UOp.range(64, i, AxisType.LOOP) for i in range(3)]
    values: list[UOp] = []
    while not values or len(values) % 50 != 0 or len(UOp.sink(*values).toposort()) < n_nodes:
        r0, r1, r2 = rng.sample(ranges, 3)
        k = rng.randint(1, 1000)
        idx = ((r0 * 64 + r1) * 64 + r2 + k) * 1 + 0
        idx = idx + (r1 * 3 + 5) - (r1 * 3 + 5)
        load = bufs[rng.randrange(4)].index(idx).load()
        v = load * 1.0 + 0.0
        if values:
            other = values[rng.randrange(len(values))]
            v = (v + other) * (UOp.const(dtypes.float, 2.0) * 0.5)
        values.append(v)
    return UOp.sink(*[bufs[i % 4].index(ranges[0] * 1000 + i).store(v) for i, v in enumerate(values)])


def conv_index_exprs() -> list[UOp]:
    """Index expressions of input[n, c, oh*s+kh-p, ow*s+kw-p] for a 3x3 stride-2 pad-1 conv (NCHW), in the forms
    lowering produces: the flat input index, its padding gate, and a reshape-view round trip of the output index."""
    n_, c_, h_, w_ = 8, 64, 56, 56
    k_, s_, p_ = 3, 2, 1
    oh_, ow_ = (h_ + 2 * p_ - k_) // s_ + 1, (w_ + 2 * p_ - k_) // s_ + 1
    n = UOp.range(n_, 0, AxisType.GLOBAL)
    co = UOp.range(128, 1, AxisType.GLOBAL)
    oh = UOp.range(oh_, 2, AxisType.GLOBAL)
    ow = UOp.range(ow_, 3, AxisType.GLOBAL)
    ci = UOp.range(c_, 4, AxisType.REDUCE)
    kh = UOp.range(k_, 5, AxisType.REDUCE)
    kw = UOp.range(k_, 6, AxisType.REDUCE)
    ih = oh * s_ + kh - p_
    iw = ow * s_ + kw - p_
    flat_in = ((n * c_ + ci) * h_ + ih) * w_ + iw
    gate = (ih >= 0) & (ih < h_) & (iw >= 0) & (iw < w_)
    # the output index reshaped to (N*128, OH*OW) and back: what chained views leave behind before simplification
    out_flat = ((n * 128 + co) * oh_ + oh) * ow_ + ow
    row, col = out_flat // (oh_ * ow_), out_flat % (oh_ * ow_)
    unreshaped = (row // 128) * (128 * oh_ * ow_) + (row % 128) * (oh_ * ow_) + (col // ow_) * ow_ + col % ow_
    # an im2col-style view: (ci, kh, kw) flattened to one reduce axis and split again
    red = (ci * k_ + kh) * k_ + kw
    ci2, kh2, kw2 = red // (k_ * k_), (red // k_) % k_, red % k_
    im2col = ((n * c_ + ci2) * h_ + (oh * s_ + kh2 - p_)) * w_ + (ow * s_ + kw2 - p_)
    return [flat_in, gate.where(flat_in, 0), unreshaped, im2col]


def main() -> None:
    print("== UOp construction")
    xs = [UOp.variable(f"v{i}", 0, 100) for i in range(100)]

    def build_new() -> None:
        for j in range(200):
            c = UOp.const(dtypes.index, j)
            for x in xs:
                _ = x + c

    keep = []

    def build_hits() -> None:
        for j in range(200):
            c = UOp.const(dtypes.index, j)
            for x in xs:
                _ = x + c

    t_new = best_of(build_new, 3)
    keep = [x + UOp.const(dtypes.index, j) for j in range(200) for x in xs]  # keep alive: next loop hits the cache
    t_hit = best_of(build_hits, 3)
    print(f"  new nodes:  {20000 / t_new / 1e6:.2f} M/s ({t_new / 20000 * 1e9:.0f} ns each)")
    print(f"  cache hits: {20000 / t_hit / 1e6:.2f} M/s ({t_hit / 20000 * 1e9:.0f} ns each)")
    del keep

    print("== graph_rewrite on a kernel-like graph")
    g = kernel_like_graph(10000)
    n_nodes = len(g.toposort())
    out: list[UOp] = []
    t = best_of(lambda: out.append(graph_rewrite(g, symbolic)), 3)
    print(
        f"  symbolic ({len(symbolic)} rules): {n_nodes} -> {len(out[-1].toposort())} nodes in {t * 1e3:.1f} ms "
        f"= {n_nodes / t / 1e3:.0f}k nodes/s"
    )
    t = best_of(lambda: graph_rewrite(g, symbolic_simple), 3)
    print(f"  symbolic_simple ({len(symbolic_simple)} rules): {t * 1e3:.1f} ms = {n_nodes / t / 1e3:.0f}k nodes/s")
    t = best_of(lambda: graph_rewrite(out[-1], symbolic), 3)
    print(
        f"  symbolic on the already simplified graph (no hits): {t * 1e3:.1f} ms "
        f"= {len(out[-1].toposort()) / t / 1e3:.0f}k nodes/s"
    )
    t = best_of(lambda: graph_rewrite(g, symbolic, bottom_up=True), 3)
    print(f"  symbolic, bottom_up=True: {t * 1e3:.1f} ms")
    t = best_of(lambda: lower_index_dtype(out[-1]), 3)
    print(f"  lower_index_dtype: {t * 1e3:.1f} ms")

    print("== dispatch with many rules (500 rules that never match + symbolic)")
    junk = [
        (UPat(op, src=(UPat.var("x"), UPat.cvar("c", arg=1000 + i))), lambda x, c: x)
        for i, op in enumerate([Ops.ADD, Ops.MUL, Ops.LOAD, Ops.INDEX, Ops.CMPLT] * 100)
    ]
    big = PatternMatcher(junk) + symbolic
    t0 = time.process_time()
    _ = big.dispatch
    t_compile = time.process_time() - t0
    t = best_of(lambda: graph_rewrite(g, big), 3)
    print(
        f"  compile {len(big)} rules: {t_compile * 1e3:.1f} ms; rewrite: {t * 1e3:.1f} ms "
        f"= {n_nodes / t / 1e3:.0f}k nodes/s"
    )

    print("== symbolic on conv index expressions (3x3, stride 2, pad 1, NCHW 8x64x56x56 -> 128 channels)")
    for name, e in zip(
        ["flat input index", "gated input index", "reshape round trip", "im2col view"], conv_index_exprs()
    ):
        res: list[UOp] = []
        t = best_of(lambda e=e, res=res: res.append(e.simplify()), 5)
        s = res[-1]
        print(f"  {name:20s}: tree {e.tree_size:4d} -> {s.tree_size:4d} nodes in {t * 1e3:.2f} ms: {s.render(False)}")


if __name__ == "__main__":
    main()
