#!/usr/bin/env bash
# Build the wheels of core and the four plugin distributions, install them into a fresh venv, and check from there
# that every device is discovered with its distribution, that `import tinycore` imports no plugin, and that CLANG
# runs from the wheels with no C compiler on PATH.
# Works on a fresh Debian machine with python3 + pip (installs python3-venv with apt-get if venv/ensurepip is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

work=$(mktemp -d "${TMPDIR:-/tmp}/tinycore-wheels.XXXXXX")
trap 'rm -rf "$work"' EXIT
plugins=(plugins/tinycore_clang plugins/tinycore_cuda plugins/tinycore_metal plugins/tinycore_amd)

# Build from a copy of the working tree (tracked and untracked-but-not-ignored files) so no build/ or *.egg-info
# lands in the checkout.
mkdir -p "$work/src"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf - | tar -xf - -C "$work/src"
else
    tar --exclude=.git --exclude='*.egg-info' --exclude=build -cf - . | tar -xf - -C "$work/src"
fi

# An installed setuptools >= 68 builds offline and fast; otherwise let pip fetch it in an isolated build env.
isolation=()
if python3 -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 68)' 2>/dev/null; then
    isolation=(--no-build-isolation)
fi
echo "-- building wheels into $work/wheels"
(cd "$work/src" && python3 -m pip wheel -q --no-deps ${isolation[@]+"${isolation[@]}"} -w "$work/wheels" . "${plugins[@]}")
ls "$work/wheels"

echo "-- creating a fresh venv"
if ! python3 -m venv "$work/venv" 2>/dev/null; then
    echo "python3 -m venv failed (no ensurepip?): installing python3-venv"
    rm -rf "$work/venv"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$work/venv"
fi
py="$work/venv/bin/python"

# The third-party runtime dependencies of core and the plugins come from PyPI (read from the built wheels'
# metadata); tinycore and its plugins only from the wheel folder, so a same-named project on an index can never be
# picked instead.
deps=$("$py" - "$work/wheels" <<'EOF'
import glob, sys, zipfile
found = []
for wheel in sorted(glob.glob(f"{sys.argv[1]}/tinycore*.whl")):
    with zipfile.ZipFile(wheel) as zf:
        meta = next(name for name in zf.namelist() if name.endswith(".dist-info/METADATA"))
        lines = zf.read(meta).decode().splitlines()
    for line in lines:
        if line.startswith("Requires-Dist:") and ";" not in line:
            requirement = line.split(":", 1)[1].strip().replace(" ", "")
            if not requirement.startswith("tinycore") and requirement not in found:
                found.append(requirement)
print(" ".join(found))
EOF
)
echo "-- installing the third-party dependencies: $deps"
# shellcheck disable=SC2086 # one word per requirement
"$py" -m pip install -q $deps
echo "-- installing the wheels"
"$py" -m pip install -q --no-index --find-links "$work/wheels" tinycore tinycore-clang tinycore-cuda tinycore-metal tinycore-amd

echo "-- checking discovery from the venv"
cd "$work"  # away from the checkout: only the installed wheels can be imported
"$work/venv/bin/tinycore" plugins
"$work/venv/bin/tinycore" plugins --json > plugins.json
"$py" -c '
import json
payload = json.load(open("plugins.json"))
found = {p["name"]: p["distribution"] for p in payload["plugins"]}
expected = {"PYTHON": "tinycore", "CLANG": "tinycore-clang", "CUDA": "tinycore-cuda", "METAL": "tinycore-metal",
            "AMD": "tinycore-amd"}
missing = {name: dist for name, dist in expected.items() if found.get(name) != dist}
assert not missing, f"not listed with their distributions: {missing}; got {found}"
assert all(p["state"] == "discovered" for p in payload["plugins"]), payload["plugins"]
print("listed:", ", ".join(f"{name} ({dist})" for name, dist in sorted(found.items())))
'
"$py" -c '
import sys
before = set(sys.modules)
import tinycore
assert tinycore.__file__.startswith(sys.prefix), f"tinycore imported from {tinycore.__file__}, not the venv"
new = set(sys.modules) - before
bad = sorted(m for m in new if m.startswith("tinycore_") or m.endswith("python_plugin") or m.split(".")[0] == "numpy")
assert not bad, f"import tinycore imported {bad}"
print("import tinycore imports no plugin:", len(new), "modules")
'
"$work/venv/bin/tinycore" doctor PYTHON

echo "-- CLANG with no C compiler anywhere: PATH holds only the venv (kernels by llvmlite, the thread pool from its IR)"
env PATH="$work/venv/bin" "$py" -W error::RuntimeWarning -c '
import numpy as np
from tinycore import Device, Tensor
assert Device.DEFAULT == "CLANG", f"the default device is {Device.DEFAULT}, not CLANG"
dev = Device["CLANG"]
assert dev.host_compiler is None, dev.host_compiler
a, b = Tensor.rand(300, 200).realize(), Tensor.rand(200, 100).realize()
assert np.allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)
print("CLANG runs without a C compiler:", dev.compiler)
'
env PATH="$work/venv/bin" "$work/venv/bin/tinycore" doctor CLANG
echo "wheels OK"
