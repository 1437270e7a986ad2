#!/usr/bin/env bash
# The CUDA device check for a lent GPU machine (issue 20), in one run of about 5 minutes: install from wheels brought
# along; a smoke test against numpy; `tinycore doctor CUDA`; the plugin's on-GPU tests (dynamic shared memory above
# 48 KB, warp-shuffle reduces, tensor-core matmuls checked against numpy; no spills and HMMA / LDG.E.128 /
# SHFL.BFLY in the SASS); bench_cuda.py beside torch on the same GPU; the bench's MLP against CLANG; a sweep of
# tensor-core blockings; the device time of each benchmark kernel; where the eager host time goes;
# examples/char_lm.py training on CUDA; the conformance kit's static and core tiers; the op-parity suites on CUDA.
# Every step's whole log lands in $OUT (or the folder given as $1), gathered into $OUT/device_check.md at the end;
# ONLY="smoke bench" runs just those steps (``failing`` and the ``cpu_*`` steps run only when named).
#
# Before the run, on the development machine (the GPU machine reaches no package registry; see PLATFORMS.md):
#     bash plugins/tinycore_cuda/bench/device_check.sh --fetch      # wheels for Python 3.12 into bench/wheels/
# then run it there with the wheels carried along (they are git-ignored):
#     run(command="bash plugins/tinycore_cuda/bench/device_check.sh", carry=["plugins/tinycore_cuda/bench/wheels"])
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
wheels="$here/wheels"
if [ "${1:-}" = "--fetch" ]; then
    mkdir -p "$wheels"
    # what the H100 image lacks (PLATFORMS.md): platformdirs; the CUDA wheels there already fit our ranges
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux2014_x86_64 -d "$wheels" platformdirs
    # the shared peer harness, for the CPU figures on that host (the last, optional step)
    cp "$here/../../../../shared/bench/peer_bench.py" "$wheels/" 2>/dev/null || echo "no ../shared/bench/peer_bench.py"
    ls -l "$wheels"
    exit 0
fi
out="${1:-${OUT:-/tmp/device_check}}"
mkdir -p "$out"
step() { echo; echo "== $1 ($(date +%T)) =="; }
# ONLY="smoke bench" runs just those steps (after the install); unset, every step runs
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
# each step keeps its whole log in $out (it comes back even when the run is cut short) and prints its tail here
logged() { local name="$1" lines="$2"; shift 2; "$@" >"$out/$name.log" 2>&1; echo "[exit $?]" >>"$out/$name.log"; \
    tail -n "$lines" "$out/$name.log"; }

step "install"
python3 -m pip install -q --no-index --no-deps "$wheels"/*.whl 2>&1 | grep -v "WARNING: Running pip as" | tail -3
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/tinycore_cuda \
    -e plugins/tinycore_clang 2>&1 | grep -v "WARNING: Running pip as" | tail -3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt"
python3 -c "import torch, numpy, cuda.bindings; print('torch', torch.__version__, 'numpy', numpy.__version__, \
'cuda-bindings', cuda.bindings.__version__)" 2>&1 | tee -a "$out/gpu.txt"

if want smoke; then
step "smoke: x+1, a reduce and a small fp16 matmul on CUDA against numpy (full traceback on failure)"
logged smoke 40 timeout 90 python3 - <<'PY'
import time, numpy as np
t0 = time.perf_counter()
from tinycore import Tensor
from tinycore.device import Device
x = np.arange(16, dtype=np.float32)
print("x+1", np.array_equal((Tensor(x, device="CUDA") + 1).numpy(), x + 1), f"{time.perf_counter() - t0:.2f}s")
r = np.random.default_rng(0).random((300, 77), dtype=np.float32)
print("sum(1)", np.allclose(Tensor(r, device="CUDA").sum(1).numpy(), r.sum(1), rtol=1e-5))
a, b = (np.random.default_rng(i).random((64, 64)).astype(np.float16) for i in (1, 2))
got = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy().astype(np.float32)
print("fp16 matmul", np.allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=2e-2))
rng = np.random.default_rng(3)  # the GPU heuristics' shapes: blocked tensor-core tiles, grouped rows, long sums
a, b = rng.random((512, 256)).astype(np.float16), rng.random((256, 384)).astype(np.float16)
got = (Tensor(a, device="CUDA") @ Tensor(b, device="CUDA")).numpy().astype(np.float32)
print("fp16 matmul 512x256x384", np.allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-1))
big = rng.random(1 << 22, dtype=np.float32)
print("sum 4M", np.isclose(Tensor(big, device="CUDA").sum().item(), big.astype(np.float64).sum(), rtol=1e-5))
s = rng.standard_normal((256, 4096), dtype=np.float32)
e = np.exp(s - s.max(1, keepdims=True))
print("softmax 256x4096", np.allclose(Tensor(s, device="CUDA").softmax(-1).numpy(), e / e.sum(1, keepdims=True),
                                      rtol=1e-5, atol=1e-7))
for shape in [(300, 4096), (128, 10), (64, 768), (7, 33)]:  # one-kernel rows: softmax, log-softmax, layernorm
    r = rng.standard_normal(shape, dtype=np.float32) * 3
    t = Tensor(r, device="CUDA")
    e = np.exp(r - r.max(1, keepdims=True)); sm = e / e.sum(1, keepdims=True)
    ln = (r - r.mean(1, keepdims=True)) / np.sqrt(r.var(1, keepdims=True) + 1e-5)
    print("rows", shape, np.allclose(t.softmax(-1).numpy(), sm, rtol=1e-5, atol=1e-7),
          np.allclose(t.log_softmax(-1).numpy(), np.log(sm), rtol=1e-5, atol=1e-5),
          np.allclose(t.layernorm().numpy(), ln, rtol=1e-4, atol=1e-4))
print("device", Device["CUDA"], f"{time.perf_counter() - t0:.2f}s")
PY
fi

if want doctor; then
step "tinycore doctor CUDA"
logged doctor 30 timeout 60 python3 -m tinycore doctor CUDA
fi

if want gpu_tests; then
step "issue 20 on hardware: dynamic shared memory > 48 KB, warp-shuffle reduces, tensor cores, SASS"
# the GPU tests run for real here (elsewhere they skip); the SASS checks read cuobjdump/nvdisasm from the toolkit
PATH="$PATH:/usr/local/cuda/bin" logged issue20 30 timeout 120 python3 -m pytest -q -p no:cacheprovider -rs \
    --tb=short plugins/tinycore_cuda/tests/test_cuda_shared_memory.py plugins/tinycore_cuda/tests/test_cuda_warp_reduce.py \
    plugins/tinycore_cuda/tests/test_cuda_tensor_cores.py plugins/tinycore_cuda/tests/test_cuda_sass.py \
    plugins/tinycore_cuda/tests/test_cuda_device.py
fi

if want bench; then
step "benchmark beside torch"
logged bench 25 timeout 150 python3 plugins/tinycore_cuda/bench/bench_cuda.py
fi

if want mlp_check; then
step "the bench's MLP: one step's loss and gradients on CUDA against CLANG, then 30 TinyJit steps"
logged mlp_check 20 timeout 120 python3 plugins/tinycore_cuda/bench/mlp_check.py
fi

if want tc_sweep; then
step "tensor-core blockings of an fp16 matmul 4096 (GPU time)"
logged tc_sweep 12 timeout 90 python3 plugins/tinycore_cuda/bench/tc_sweep.py
fi

if want kernels; then
step "device time of each kernel of the bench's workloads (DEBUG=2, third call of each)"
DEBUG=2 logged kernels 40 timeout 90 python3 - <<'PY'
import numpy as np
from tinycore import Tensor, dtypes
from tinycore.device import Device
n, big = 4096, 64 << 20
a16, b16 = (Tensor.rand(n, n, device="CUDA").cast(dtypes.float16).realize() for _ in range(2))
x, y = (Tensor.rand(big, device="CUDA").realize() for _ in range(2))
s = Tensor.rand(n, n, device="CUDA").realize()
for name, call in [("matmul", lambda: a16 @ b16), ("a*b+a", lambda: x * y + x), ("sum", lambda: x.sum()),
                   ("softmax", lambda: s.softmax(-1)), ("layernorm", lambda: s.layernorm())]:
    for k in range(3):
        if k == 2:
            print(f"-- {name}", flush=True)
        call().realize()
    Device["CUDA"].synchronize()
PY
fi

if want eager; then
step "eager (x+1) on 16 floats: where the host time goes"
logged eager 30 timeout 60 python3 - <<'PY'
import cProfile, pstats, time, numpy as np
from tinycore import Tensor
from tinycore.device import Device
tiny = Tensor(np.ones(16, np.float32), device="CUDA").realize()
for _ in range(100): (tiny + 1).realize()
Device["CUDA"].synchronize()
times = []
for _ in range(7):  # the host's speed wanders (34.8 us in one sample of session 18, 18.3 in the bench beside it)
    t = time.perf_counter()
    for _ in range(1000): (tiny + 1).realize()
    times.append((time.perf_counter() - t) / 1000 * 1e6)
    Device["CUDA"].synchronize()
print(f"(x+1).realize(): {sorted(times)[3]:.1f} us host time per op (median of 7 x 1000; all: "
      f"{', '.join(f'{v:.1f}' for v in times)})")
dev = Device["CUDA"]  # one launch's host time: the program's prebuilt argument block against the bindings' tuple form
prg = dev.runtime("k_noop", dev.compiler.compile(
    'extern "C" __global__ void k_noop(float* a, int n) { if (n < 0 && threadIdx.x == 0) a[0] = 1.0f; }'))
ptr = dev.allocator.alloc(64)
for form in ("prebuilt block", "tuple form", "prebuilt block", "tuple form"):
    held = form == "tuple form" and prg.block_lock.acquire()  # a held block sends launches to the tuple form
    dev.synchronize()
    t = time.perf_counter()
    for _ in range(20000): prg(ptr, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(1,))
    print(f"launch, {form}: {(time.perf_counter() - t) / 20000 * 1e6:.2f} us host time")
    dev.synchronize()
    if held: prg.block_lock.release()
cProfile.run("for _ in range(2000): (tiny + 1).realize()", "/tmp/eager.prof")
pstats.Stats("/tmp/eager.prof").sort_stats("tottime").print_stats(14)
PY
fi

if want char_lm; then
step "examples/char_lm.py trains on CUDA (TinyJit, AdamW)"
logged char_lm 8 timeout 120 python3 examples/char_lm.py --device CUDA --steps 300
fi

if want kit; then
step "conformance kit: static and core tiers on CUDA"
logged kit 15 timeout 100 python3 -m pytest -q -p no:cacheprovider --tb=short --pyargs tinycore.testkit \
    --tinycore-device=CUDA -k "TestStatic or TestCore"
fi

if [[ " ${ONLY:-} " == *" failing "* ]]; then  # only when asked: the ops step runs them too
step "op-parity tests that failed on the first run, with whole tracebacks"
TINYCORE_TEST_DEVICES=CUDA logged failing 60 timeout 120 python3 -m pytest -q -p no:cacheprovider --tb=long \
    "tests/test_ops_elementwise.py::test_binary_large[CUDA]" \
    "tests/test_ops_reduce.py::test_half_mean_var_std_accumulate_in_float32[CUDA-dtypes.bfloat16]"
fi

if want ops; then
step "op-parity suites on CUDA (one process per file, side by side)"
for suite in elementwise reduce movement; do
    TINYCORE_TEST_DEVICES=CUDA timeout 200 python3 -m pytest -q -p no:cacheprovider -rf --tb=short \
        "tests/test_ops_$suite.py" -k CUDA >"$out/ops_$suite.log" 2>&1 &
done
wait
for suite in elementwise reduce movement; do
    echo "-- $suite"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/ops_$suite.log" | tail -12
done
fi

if [[ " ${ONLY:-} " == *" cpu_peers "* ]]; then  # only when asked: it takes minutes
if [ -f "$wheels/peer_bench.py" ]; then
    step "CPU peers on this host, pinned to 2 cores (what is left of the time)"
    DEV=CLANG logged cpu_peers 30 timeout 200 taskset -c 0,1 python3 bench/peers.py --rounds 1 --threads 2 \
        --harness "$wheels/peer_bench.py"
fi
fi

if [[ " ${ONLY:-} " == *" cpu_streams "* ]]; then  # only when asked: the CPU's reduce streams, pinned to 2 cores
step "CPU: long reduces reading 1 or 4 rows side by side, beside torch (pinned to 2 cores)"
logged cpu_streams 12 timeout 120 taskset -c 0,1 python3 bench/bench_reduce_streams.py --threads 2
fi

if [[ " ${ONLY:-} " == *" cpu_tiles "* ]]; then  # only when asked: CPU register-tile variants, pinned to 2 cores
step "CPU: matmul and conv register-tile variants beside torch (pinned to 2 cores)"
logged cpu_tiles 12 timeout 300 taskset -c 0,1 python3 bench/bench_cpu_tiles.py --threads 2 --rounds 3 \
    --only matmul_1024,matmul_2048,conv
fi

step "done"
# the device tool brings back a handful of files: every step's log, whole, in one (the step logs stay until here so a
# run cut short still returns them)
for log in "$out"/*.log "$out"/gpu.txt; do
    [ -f "$log" ] || continue
    printf '\n## %s\n```\n' "$(basename "$log")"; tr -d '\000' <"$log"; printf '```\n'
done >"$out/device_check.md" && rm -f "$out"/*.log
