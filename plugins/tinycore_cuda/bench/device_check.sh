#!/usr/bin/env bash
# The CUDA device check for a lent GPU machine (issue 20), in one run of under 5 minutes: install from wheels brought
# along, `tinycore doctor CUDA`, the conformance kit's static and core tiers, the plugin's on-GPU tests (dynamic
# shared memory above 48 KB, warp-shuffle reduces, tensor-core matmuls checked against numpy; no spills and
# HMMA / LDG.E.128 / SHFL.BFLY in the SASS), the op-parity suites on CUDA, then
# bench_cuda.py beside torch on the same GPU; everything also lands in $OUT (or the folder given as $1).
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
    ls -l "$wheels"
    exit 0
fi
out="${1:-${OUT:-/tmp/device_check}}"
mkdir -p "$out"
step() { echo; echo "== $1 =="; }

step "install"
python3 -m pip install -q --no-index --no-deps "$wheels"/*.whl 2>&1 | grep -v "WARNING: Running pip as" | tail -3
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . -e plugins/tinycore_cuda 2>&1 \
    | grep -v "WARNING: Running pip as" | tail -3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$out/gpu.txt"

step "tinycore doctor CUDA"
timeout 60 python3 -m tinycore doctor CUDA 2>&1 | tee "$out/doctor.txt"

step "conformance kit: static and core tiers on CUDA"
timeout 120 python3 -m pytest -q -p no:cacheprovider --pyargs tinycore.testkit --tinycore-device=CUDA \
    -k "TestStatic or TestCore" 2>&1 | tail -15 | tee "$out/kit.txt"

step "issue 20 on hardware: dynamic shared memory > 48 KB, warp-shuffle reduces, tensor cores, SASS"
# the GPU tests run for real here (elsewhere they skip); the SASS checks read cuobjdump/nvdisasm from the toolkit
PATH="$PATH:/usr/local/cuda/bin" timeout 150 python3 -m pytest -q -p no:cacheprovider -rs \
    plugins/tinycore_cuda/tests/test_cuda_shared_memory.py plugins/tinycore_cuda/tests/test_cuda_warp_reduce.py \
    plugins/tinycore_cuda/tests/test_cuda_tensor_cores.py plugins/tinycore_cuda/tests/test_cuda_sass.py 2>&1 \
    | tail -25 | tee "$out/issue20.txt"

step "op-parity suites on CUDA"
TINYCORE_TEST_DEVICES=CUDA timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_ops_elementwise.py \
    tests/test_ops_reduce.py tests/test_ops_movement.py -k CUDA 2>&1 | tail -20 | tee "$out/ops.txt"

step "benchmark beside torch"
timeout 150 python3 plugins/tinycore_cuda/bench/bench_cuda.py 2>&1 | tail -20 | tee "$out/bench.txt"
