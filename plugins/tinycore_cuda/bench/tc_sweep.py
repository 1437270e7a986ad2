"""Time one fp16 matmul kernel on CUDA under several tensor-core blockings (tiles per warp, warps per work-group),
GPU time from events: which `tinycore.codegen.heuristic.TC_BLOCK` to ship. Prints one line per blocking, with
whether 16 rows of its result agree with numpy.

    python3 plugins/tinycore_cuda/bench/tc_sweep.py [--n 4096]
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from tinycore.codegen import Opt, OptOps, get_program
from tinycore.device import Buffer, Device
from tinycore.dtype import dtypes
from tinycore.uop.ops import Ops, UOp

# (N tiles, M tiles) per warp, then (N, M) warps per work-group; the N tiles interleaved with the tensor core
# (`OptOps.TC` with (index, tiles): vector loads of B) or, marked "plain", an UPCAST after it (tile after tile);
# "stage", "stageN": then both operands through shared memory, N k steps per stage (`OptOps.STAGE`)
BLOCKINGS = [(4, 8, 2, 2, "plain"), (4, 8, 2, 2), (4, 4, 4, 2), (8, 4, 2, 2, "stage"), (8, 4, 2, 2, "stage2"),
             (8, 4, 2, 2, "stage4"), (4, 4, 4, 4, "stage"), (4, 4, 4, 4, "stage2"), (4, 4, 4, 4, "stage4"),
             (4, 8, 2, 2, "stage2"), (4, 8, 2, 2, "stage4"), (4, 4, 4, 2, "stage2"), (4, 4, 4, 2, "stage4"),
             (8, 4, 4, 2, "stage2"), (8, 4, 2, 4, "stage2"), (4, 4, 2, 2, "stage2"),
             (8, 4, 1, 4, "stage2"), (4, 4, 4, 2, "stage8"), (4, 4, 2, 4, "stage4"), (8, 4, 4, 2, "stage4"),
             (4, 8, 4, 2, "stage4"), (8, 4, 2, 4, "stage4"), (4, 4, 4, 4, "stage8")]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--device", default="CUDA")
    args = parser.parse_args()
    dev, n = Device[args.device], args.n
    half = dtypes.float16

    def load(arg: int) -> UOp:
        return UOp(Ops.LOAD, half, (UOp.define_global(arg, half, n * n),))

    a = load(1).reshape((n, n, 1)).expand((n, n, n)).cast(dtypes.float)
    b = load(2).reshape((1, n, n)).expand((n, n, n)).cast(dtypes.float)
    out = UOp.define_global(0, half, n * n).reshape((n, 1, n))
    ast = UOp.sink(out.store((a * b).r(Ops.ADD, (1,)).cast(half)))  # (a @ b) in fp16 out, fp32 accumulate
    bufs, inputs = [], []
    for i in range(3):
        buf = Buffer(dev.device, n * n * 2, dtypes.uint8).allocate()
        inputs.append(np.random.default_rng(i).random((n, n)).astype(np.float16))
        buf.copyin(memoryview(inputs[-1].reshape(-1)).cast("B"))
        bufs.append(buf)
    for n_up, m_up, n_w, m_w, *kind in BLOCKINGS:
        plain = kind == ["plain"]
        opts = [Opt(OptOps.TC, 0, 0)] if plain else [Opt(OptOps.TC, 0, (0, n_up))]
        opts += [Opt(OptOps.UPCAST, 1, n_up)] if n_up > 1 and plain else []
        opts += [Opt(OptOps.UPCAST, 0, m_up)] if m_up > 1 else []
        opts += [Opt(OptOps.LOCAL, 1, n_w)] if n_w > 1 else []
        opts += [Opt(OptOps.LOCAL, 0, m_w)] if m_w > 1 else []
        if kind and kind[0].startswith("stage"):
            opts.append(Opt(OptOps.STAGE, None, int(kind[0][5:] or 1)))
        bufs[0].copyin(memoryview(np.zeros(n * n, np.float16)).cast("B"))  # no result left from the last blocking
        try:
            program = get_program(ast, dev.renderer, opts)
            src = dev.renderer.render(program.uops, "k_sweep")
            prg = dev.runtime("k_sweep", dev.compiler.compile(src))
            times = [prg(*(b.opaque for b in bufs), global_size=program.global_size, local_size=program.local_size,
                         wait=True) for _ in range(7)]  # fmt: skip
            t = statistics.median(times[2:])
            got = np.empty(n * n, np.float16)  # rows spread over the work-groups, checked against numpy
            bufs[0].copyout(memoryview(got).cast("B"))
            rows = np.arange(0, n, max(1, n // 16)) + np.arange(0, n, max(1, n // 16)) % 7
            want = inputs[1][rows].astype(np.float32) @ inputs[2].astype(np.float32)
            ok = np.allclose(got.reshape(n, n)[rows].astype(np.float32), want, rtol=2e-2, atol=2e-1)
            print(f"TC_BLOCK={(n_up, m_up, n_w, m_w)} {''.join(kind):6}: {2 * n**3 / t / 1e12:8.1f} TFLOP/s  "
                  f"local {program.local_size}  {'ok' if ok else 'WRONG'}")  # fmt: skip
        except Exception as error:
            print(f"TC_BLOCK={(n_up, m_up, n_w, m_w)}: failed: {type(error).__name__}: {str(error).splitlines()[0]}")


if __name__ == "__main__":
    main()
