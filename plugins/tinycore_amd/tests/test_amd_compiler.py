"""clang builds every kernel core renders for AMD (the testkit's kernel cases) into a linked code object for
gfx90a, gfx942, gfx1100 and gfx1201: each has its ``.kd`` kernel descriptor, the right arch flag and no scratch
spills; a build error names the kernel. No AMD GPU or ROCm needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd.compiler import HIPCompiler, check_arch, clang_version, find_clang  # noqa: E402
from tinycore_amd.renderer import AMDRenderer  # noqa: E402

from tinycore.errors import CompileError  # noqa: E402
from tinycore.sdk import KernelImage  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402

CLANG = find_clang()
MAJOR = int(m.group(1)) if CLANG and (m := re.search(r"version (\d+)", clang_version(CLANG))) else 0
READELF = next(
    (shutil.which(n) for n in ("llvm-readelf-19", "llvm-readelf-18", "llvm-readelf") if shutil.which(n)), None
)
needs_clang = pytest.mark.skipif(CLANG is None, reason="no clang for AMDGPU (apt-get install clang-19 lld-19)")
ARCHS = [("gfx90a", 15), ("gfx942", 17), ("gfx1100", 15), ("gfx1201", 19)]  # (arch, oldest clang that knows it)


@needs_clang
@pytest.mark.parametrize("arch,oldest", ARCHS, ids=[a for a, _ in ARCHS])
def test_every_kernel_case_builds_to_a_code_object(arch: str, oldest: int, tmp_path: Path) -> None:
    if MAJOR < oldest:
        pytest.skip(f"{CLANG} is clang {MAJOR}; {arch} needs clang {oldest} (apt-get install clang-19 lld-19)")
    compiler = HIPCompiler(arch)
    sources = render_cases(AMDRenderer(arch))
    assert len(sources) >= 20
    for name, src in sources.items():
        kinds, image = KernelImage.unpack(compiler.compile(src))
        assert image[:4] == b"\x7fELF" and image[18] == 0xE0, f"{name}: not an AMDGPU object"  # EM_AMDGPU
        assert kinds[0] == "buffer"
        if READELF is None:
            continue
        path = tmp_path / f"{name}.hsaco"
        path.write_bytes(image)
        info = subprocess.run([READELF, "-h", "-s", "--notes", str(path)], capture_output=True, text=True).stdout
        assert f"k_{name}.kd" in info and arch in info, f"{name}: no kernel descriptor or wrong arch"
        if name in ("broadcast", "row_sum", "grouped_sum", "add_float64"):
            assert ".private_segment_fixed_size: 0" in info and ".vgpr_spill_count: 0" in info, f"{name} spills"


@needs_clang
def test_a_build_error_names_the_kernel_and_shows_clang() -> None:
    src = 'extern "C" __attribute__((global)) void broken(float* a) { a[0] = nope; }'
    with pytest.raises(CompileError, match=r"(?s)kernel broken failed to compile for gfx90a.*nope"):
        HIPCompiler("gfx90a").compile(src)


def test_arch_names_are_checked_before_clang_sees_them() -> None:
    assert check_arch("gfx942") == "gfx942"
    for bad in ("sm_90", "gfx", "gfx90a; rm -rf /", "GFX1100"):
        with pytest.raises(ValueError, match="is not an AMDGPU architecture"):
            HIPCompiler(bad)


@needs_clang
def test_the_cache_key_holds_clang_flags_and_arch() -> None:
    parts = HIPCompiler("gfx1100").cache_key_parts()
    assert parts[0] == CLANG and "version" in parts[1] and "gfx1100" in parts and "--cuda-device-only" in parts
    assert HIPCompiler("gfx90a").cache_key("x") != HIPCompiler("gfx1100").cache_key("x")
