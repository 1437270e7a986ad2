"""The hipRTC compiler (`tinycore_amd.compiler.HIPRTCCompiler`) and the choice between it and clang.

On the recording fake (`tinycore_amd.testing.FakeHIPRTC`): the options, the program's source and name, the code object
stored as a `KernelImage`, failures as `CompileError`s with the log, the program always destroyed, the cache key, and
which compiler a GPU, a compile-only target and ``AMD_COMPILER`` get. On a stand-in ``libhiprtc`` (C, built here):
`CtypesHIPRTC`'s calls and the library search. On ROCm's real ``libhiprtc`` (skipped without one): every kernel case
builds to an AMDGPU code object."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("tinycore_amd", reason="tinycore-amd is not installed (pip install -e plugins/tinycore_amd)")
from tinycore_amd import compiler, hiprtc, plugin  # noqa: E402
from tinycore_amd.compiler import HIPCompiler, HIPRTCCompiler, find_clang, kernel_signature, make_compiler  # noqa: E402
from tinycore_amd.device import AMDDevice  # noqa: E402
from tinycore_amd.renderer import AMDRenderer  # noqa: E402
from tinycore_amd.testing import FakeHIP, FakeHIPRTC  # noqa: E402

from tinycore.errors import CompileError  # noqa: E402
from tinycore.sdk import KernelImage  # noqa: E402
from tinycore.testkit.kernels import render_cases  # noqa: E402

SRC = (
    'extern "C" __attribute__((global)) void k_add(float* __restrict__ out, const float* __restrict__ a, '
    "const int n, const long long m) { out[0] = a[0] + n + m; }"
)
KINDS = ["buffer", "buffer", "int", "long"]
needs_clang = pytest.mark.skipif(find_clang() is None, reason="no clang for AMDGPU (apt-get install clang-19 lld-19)")


@pytest.fixture(autouse=True)
def _no_compiler_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with ``AMD_COMPILER`` unset, whatever the environment says."""
    monkeypatch.delenv(compiler.COMPILER_VARIABLE, raising=False)


@pytest.fixture
def rtc() -> FakeHIPRTC:
    return FakeHIPRTC()


@pytest.fixture
def rocm(monkeypatch: pytest.MonkeyPatch) -> FakeHIPRTC:
    """ROCm's hipRTC is installed (a fake one)."""
    fake = FakeHIPRTC()
    monkeypatch.setattr(hiprtc, "load_hiprtc", lambda: fake)
    return fake


@pytest.fixture
def no_rocm(monkeypatch: pytest.MonkeyPatch) -> None:
    """No hipRTC anywhere."""

    def missing() -> hiprtc.HIPRTCApi:
        raise hiprtc.HIPRTCMissing("ROCm's hipRTC is not available (libhiprtc not found)")

    monkeypatch.setattr(hiprtc, "load_hiprtc", missing)


def _names(fake: FakeHIPRTC) -> list[str]:
    return [name for name, _ in fake.calls]


# ----- the compiler, on the fake


def test_the_options_name_the_arch_and_optimize(rtc: FakeHIPRTC) -> None:
    HIPRTCCompiler("gfx90a", rtc).compile(SRC)
    (program,) = rtc.programs
    assert program["options"] == ("--offload-arch=gfx90a", "-O3", "-std=c++17")
    assert not any("nogpu" in option for option in program["options"])  # hipRTC brings its own headers


def test_the_program_holds_the_kernel_source_and_name(rtc: FakeHIPRTC) -> None:
    src = render_cases(AMDRenderer("gfx1100"), ["broadcast"])["broadcast"]
    HIPRTCCompiler("gfx1100", rtc).compile(src)
    name, _ = kernel_signature(src)
    assert ("create_program", (src, f"{name}.hip")) in rtc.calls
    assert _names(rtc) == ["version", "create_program", "compile_program", "code", "destroy_program"]


def test_the_code_object_is_stored_as_a_kernel_image_and_loads(rtc: FakeHIPRTC) -> None:
    lib = HIPRTCCompiler("gfx1100", rtc).compile(SRC)
    assert KernelImage.unpack(lib) == (KINDS, rtc.image)
    hip = FakeHIP()
    program = AMDDevice("AMD", hip=hip).runtime("k_add", lib)
    assert hip.modules == [rtc.image] and program.kinds == KINDS and program.function == (0, "k_add")


def test_a_failed_build_names_the_kernel_and_arch_and_shows_the_log(rtc: FakeHIPRTC) -> None:
    rtc.fail["compile_program"] = "HIPRTC_ERROR_COMPILATION"
    rtc.log = "k_add.hip:1:80: error: use of undeclared identifier 'nope'\n"
    pattern = (
        r"(?s)kernel k_add failed to compile for gfx1100 with hipRTC 6\.2 \(HIPRTC_ERROR_COMPILATION\):\n"
        r"k_add\.hip:1:80: error: use of undeclared identifier 'nope'$"
    )
    with pytest.raises(CompileError, match=pattern):
        HIPRTCCompiler("gfx1100", rtc).compile(SRC)
    assert _names(rtc)[-2:] == ["program_log", "destroy_program"] and rtc.live == set()


@pytest.mark.parametrize("failing", [None, "compile_program", "program_log", "code"])
def test_the_program_is_destroyed_whatever_happens(rtc: FakeHIPRTC, failing: str | None) -> None:
    if failing is not None:
        rtc.fail[failing] = "HIPRTC_ERROR_INTERNAL_ERROR"
    if failing == "program_log":  # the log is read only after a failed compile
        rtc.fail["compile_program"] = "HIPRTC_ERROR_COMPILATION"
    if failing is None:
        HIPRTCCompiler("gfx1100", rtc).compile(SRC)
    else:
        with pytest.raises(CompileError, match=r"kernel k_add failed to compile for gfx1100"):
            HIPRTCCompiler("gfx1100", rtc).compile(SRC)
    assert _names(rtc).count("destroy_program") == 1 and rtc.live == set()


def test_a_program_that_cannot_be_created_is_a_compile_error(rtc: FakeHIPRTC) -> None:
    rtc.fail["create_program"] = "HIPRTC_ERROR_OUT_OF_MEMORY"
    with pytest.raises(CompileError, match=r"kernel k_add .*create_program failed: HIPRTC_ERROR_OUT_OF_MEMORY"):
        HIPRTCCompiler("gfx1100", rtc).compile(SRC)
    assert "destroy_program" not in _names(rtc)


def test_an_empty_code_object_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match="kernel k_add .*hipRTC returned no code object"):
        HIPRTCCompiler("gfx1100", FakeHIPRTC(image=b"")).compile(SRC)


def test_archs_are_checked_before_hiprtc_sees_them(rtc: FakeHIPRTC) -> None:
    for bad in ("sm_90", "gfx", "gfx90a; rm -rf /"):
        with pytest.raises(ValueError, match="is not an AMDGPU architecture"):
            HIPRTCCompiler(bad, rtc)
    # a gfx name its comgr does not list never reaches hipRTC (hipRTC 5.2 aborts the process on one)
    with pytest.raises(CompileError, match=r"hipRTC 6\.2 \(libhiprtc\.so\.6\.2\.60200\) does not know gfx1201; fix: "):
        HIPRTCCompiler("gfx1201", rtc).compile(SRC)
    assert rtc.programs == []
    assert HIPRTCCompiler("gfx1201", FakeHIPRTC(archs=None)).compile(SRC)  # comgr can't be asked: hipRTC decides


def test_the_cache_key_holds_hiprtc_its_version_the_options_and_arch(rtc: FakeHIPRTC) -> None:
    compiler = HIPRTCCompiler("gfx1100", rtc)
    parts = compiler.cache_key_parts()
    assert parts[:3] == ("hiprtc", "6.2", "libhiprtc.so.6.2.60200") and parts[-1] == KernelImage.MAGIC.decode()
    assert {"--offload-arch=gfx1100", "-O3", "-std=c++17", "gfx1100"} <= set(parts)
    assert compiler.cachekey == "amd_hiprtc_gfx1100" != HIPCompiler("gfx1100").cachekey
    assert compiler.cache_key(SRC) != HIPRTCCompiler("gfx1100", FakeHIPRTC(version=(6, 3))).cache_key(SRC)
    assert compiler.cache_key(SRC) != HIPRTCCompiler("gfx90a", rtc).cache_key(SRC)


@needs_clang
def test_the_cache_key_differs_from_clangs(rtc: FakeHIPRTC) -> None:
    assert HIPRTCCompiler("gfx1100", rtc).cache_key(SRC) != HIPCompiler("gfx1100").cache_key(SRC)


@needs_clang
def test_clang_and_hiprtc_code_objects_take_the_same_path(rtc: FakeHIPRTC) -> None:
    src = render_cases(AMDRenderer("gfx1100"), ["broadcast"])["broadcast"]
    from_clang = HIPCompiler("gfx1100").compile(src)
    kinds, hsaco = KernelImage.unpack(from_clang)
    rtc.image = hsaco  # what hipRTC would hand back: a linked code object
    from_hiprtc = HIPRTCCompiler("gfx1100", rtc).compile(src)
    assert from_hiprtc == from_clang
    hip, (name, _) = FakeHIP(), kernel_signature(src)
    device = AMDDevice("AMD", hip=hip)
    assert [device.runtime(name, lib).kinds for lib in (from_clang, from_hiprtc)] == [kinds, kinds]
    assert hip.modules == [hsaco, hsaco]


# ----- which compiler


def test_a_gpu_builds_with_hiprtc_when_rocm_has_it(rocm: FakeHIPRTC) -> None:
    assert isinstance(make_compiler("gfx1100"), HIPRTCCompiler)
    device = AMDDevice("AMD", hip=FakeHIP(arch="gfx942"))
    assert isinstance(device.compiler, HIPRTCCompiler) and device.compiler.rtc is rocm
    assert device.compiler.arch == "gfx942"
    _, target = plugin.tinycore_compile_target(name="AMD", arch="gfx1100")
    assert type(target) is HIPCompiler  # no GPU: clang


@pytest.mark.usefixtures("no_rocm")
def test_without_hiprtc_a_gpu_builds_with_clang() -> None:
    assert type(make_compiler("gfx1100")) is HIPCompiler
    assert type(AMDDevice("AMD", hip=FakeHIP()).compiler) is HIPCompiler


def test_amd_compiler_forces_one(rocm: FakeHIPRTC, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_COMPILER", "clang")
    assert type(make_compiler("gfx1100")) is HIPCompiler
    assert type(AMDDevice("AMD", hip=FakeHIP()).compiler) is HIPCompiler
    monkeypatch.setenv("AMD_COMPILER", " HIPRTC ")
    assert isinstance(make_compiler("gfx1100"), HIPRTCCompiler)
    _, target = plugin.tinycore_compile_target(name="AMD", arch=None)
    assert isinstance(target, HIPRTCCompiler) and target.arch == plugin.DEFAULT_ARCH


def test_a_bad_amd_compiler_value_is_a_clear_error(rocm: FakeHIPRTC, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_COMPILER", "nvcc")
    message = r"AMD_COMPILER='nvcc' is not an AMD compiler: use one of clang, hiprtc"
    with pytest.raises(ValueError, match=message):
        make_compiler("gfx1100")
    with pytest.raises(ValueError, match=message):
        plugin.tinycore_compile_target(name="AMD", arch=None)
    result = plugin.probe(FakeHIP())  # a probe reports it, never raises
    assert not result.ok and result.reason.startswith("AMD_COMPILER='nvcc'") and "clang, hiprtc" in result.hint


@pytest.mark.usefixtures("no_rocm")
def test_forcing_a_missing_hiprtc_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_COMPILER", "hiprtc")
    pattern = (
        r"AMD: AMD_COMPILER=hiprtc, but ROCm's hipRTC is not available \(libhiprtc not found\); fix: install ROCm .*"
        r"AMD_HIPRTC_LIB .*; or unset AMD_COMPILER$"
    )
    with pytest.raises(CompileError, match=pattern):
        make_compiler("gfx1100")
    result = plugin.probe(FakeHIP())
    assert not result.ok and result.reason.startswith("AMD_COMPILER=hiprtc, but") and "AMD_HIPRTC_LIB" in result.hint


def test_the_probe_asks_hiprtc_not_clang_about_the_arch(rocm: FakeHIPRTC, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compiler, "supports_arch", lambda arch: f"clang 15 does not know {arch}")
    assert plugin.probe(FakeHIP(arch="gfx1100")).ok
    result = plugin.probe(FakeHIP(arch="gfx1201"))
    assert not result.ok and result.reason == (
        "GPU arch gfx1201 not supported by this build: hipRTC 6.2 (libhiprtc.so.6.2.60200) does not know gfx1201"
    )
    assert "AMD_COMPILER=clang" in result.hint


def test_the_report_says_which_compiler_and_its_version(rocm: FakeHIPRTC, monkeypatch: pytest.MonkeyPatch) -> None:
    from tinycore.plugin.manager import get_manager

    info = get_manager().report_info("AMD")  # what `tinycore doctor AMD` and `tinycore plugins -v` print
    assert info["compiler"] == f"hipRTC 6.2 ({rocm.path})" and info["hiprtc"] == f"6.2 ({rocm.path})"
    monkeypatch.setenv("AMD_COMPILER", "clang")
    assert plugin.tinycore_report_info(name="AMD")["compiler"].startswith("clang")


@pytest.mark.usefixtures("no_rocm")
def test_the_report_without_hiprtc() -> None:
    info = plugin.tinycore_report_info(name="AMD")
    assert info["compiler"].startswith("clang") and info["hiprtc"].startswith("not available: ")


def test_a_missing_library_file_is_no_hiprtc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AMD_HIPRTC_LIB", str(tmp_path / "libhiprtc.so"))
    assert hiprtc.find_hiprtc() is None
    with pytest.raises(hiprtc.HIPRTCMissing, match=r"AMD_HIPRTC_LIB=.*libhiprtc\.so does not exist\); fix: install"):
        hiprtc.load_hiprtc()
    assert type(make_compiler("gfx1100")) is HIPCompiler
    (tmp_path / "libhiprtc.so").write_bytes(b"not a library")
    with pytest.raises(hiprtc.HIPRTCMissing, match=r"hipRTC at .*libhiprtc\.so does not load"):
        hiprtc.load_hiprtc()


# ----- CtypesHIPRTC on a stand-in libhiprtc (and comgr), built here with the host C compiler

STAND_IN_HIPRTC = r"""
#include <stdlib.h>
#include <string.h>
typedef struct { char *source, *name, *log, *code; size_t size; } program;
int live = 0;
int hiprtcVersion(int *major, int *minor) { *major = 6; *minor = 2; return 0; }
const char *hiprtcGetErrorString(int result) {
  return result == 6 ? "HIPRTC_ERROR_COMPILATION" : result == 3 ? "HIPRTC_ERROR_INVALID_INPUT" : "HIPRTC_ERROR_?";
}
int hiprtcCreateProgram(program **out, const char *source, const char *name, int count, const char **headers,
                        const char **names) {
  if (count != 0 || headers || names) return 3;
  program *p = calloc(1, sizeof *p);
  p->source = strdup(source); p->name = strdup(name); p->log = strdup("");
  *out = p; live++;
  return 0;
}
int hiprtcCompileProgram(program *p, int count, const char **options) {  /* code: \x7fELF|name|option|...|source */
  size_t size = 8 + strlen(p->name) + strlen(p->source);
  for (int i = 0; i < count; i++) size += strlen(options[i]) + 1;
  p->code = calloc(size, 1);
  strcat(strcat(strcpy(p->code, "\x7f" "ELF|"), p->name), "|");
  for (int i = 0; i < count; i++) strcat(strcat(p->code, options[i]), "|");
  strcat(p->code, p->source);
  p->size = strlen(p->code);
  if (strstr(p->source, "nope")) {
    free(p->log); p->log = strdup("k.hip:1:9: error: use of undeclared identifier 'nope'\n");
    return 6;
  }
  return 0;
}
int hiprtcGetProgramLogSize(program *p, size_t *size) { *size = strlen(p->log) + 1; return 0; }
int hiprtcGetProgramLog(program *p, char *log) { strcpy(log, p->log); return 0; }
int hiprtcGetCodeSize(program *p, size_t *size) { *size = p->size; return 0; }
int hiprtcGetCode(program *p, char *code) { memcpy(code, p->code, p->size); return 0; }
int hiprtcDestroyProgram(program **p) {
  free((*p)->source); free((*p)->name); free((*p)->log); free((*p)->code); free(*p);
  *p = NULL; live--;
  return 0;
}
"""
STAND_IN_COMGR = r"""
#include <stddef.h>
static const char *isas[] = {"amdgcn-amd-amdhsa--gfx90a:xnack+", "amdgcn-amd-amdhsa--gfx1100"};
int amd_comgr_get_isa_count(size_t *count) { *count = 2; return 0; }
int amd_comgr_get_isa_name(size_t index, const char **name) { *name = isas[index]; return index < 2 ? 0 : 1; }
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The path of a stand-in ``libhiprtc.so`` (a link to ``libhiprtc.so.6.2.60200``), with ``libamd_comgr.so.3``
    beside it."""
    cc = shutil.which("cc") or shutil.which("gcc") or find_clang()
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libhiprtc (apt-get install gcc)")
    folder = tmp_path_factory.mktemp("rocm")
    for name, source in (("libhiprtc.so.6.2.60200", STAND_IN_HIPRTC), ("libamd_comgr.so.3", STAND_IN_COMGR)):
        (folder / f"{name}.c").write_text(source)
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(folder / name), str(folder / f"{name}.c")],
                       check=True, capture_output=True)  # fmt: skip
    (folder / "libhiprtc.so").symlink_to("libhiprtc.so.6.2.60200")
    return folder / "libhiprtc.so"


def test_ctypes_hiprtc_on_a_stand_in_library(stand_in: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMD_HIPRTC_LIB", str(stand_in))
    assert hiprtc.find_hiprtc() == str(stand_in)
    rtc = hiprtc.load_hiprtc()
    assert isinstance(rtc, hiprtc.CtypesHIPRTC) and rtc.library == "libhiprtc.so.6.2.60200"
    assert rtc.version() == (6, 2) and rtc.archs() == {"gfx90a", "gfx1100"}
    assert isinstance(make_compiler("gfx1100"), HIPRTCCompiler)  # found through AMD_HIPRTC_LIB
    kinds, code = KernelImage.unpack(HIPRTCCompiler("gfx1100").compile(SRC))
    assert kinds == KINDS
    assert code == f"\x7fELF|k_add.hip|--offload-arch=gfx1100|-O3|-std=c++17|{SRC}".encode()
    with pytest.raises(CompileError, match=r"(?s)kernel k_add failed .*\(HIPRTC_ERROR_COMPILATION\):\n.*'nope'$"):
        HIPRTCCompiler("gfx1100").compile(SRC.replace("a[0] + n", "nope"))
    with pytest.raises(CompileError, match="does not know gfx942"):
        HIPRTCCompiler("gfx942").compile(SRC)
    assert ctypes.c_int.in_dll(rtc.lib, "live").value == 0  # every program destroyed


# ----- ROCm's real hipRTC


def _real_hiprtc() -> hiprtc.HIPRTCApi:
    try:
        return hiprtc.load_hiprtc()
    except hiprtc.HIPRTCMissing as error:
        pytest.skip(f"needs ROCm's libhiprtc (hipRTC), missing here: {error.reason}")


def test_real_hiprtc_builds_every_kernel_case(tmp_path: Path) -> None:
    rtc = _real_hiprtc()
    known = rtc.archs()
    arch = next((a for a in ("gfx1100", "gfx90a", "gfx1030") if known is None or a in known), None)
    if arch is None:
        pytest.skip(f"this hipRTC knows none of gfx1100, gfx90a, gfx1030 (it knows {sorted(known or ())})")
    build = HIPRTCCompiler(arch, rtc)
    readelf = next((shutil.which(n) for n in ("llvm-readelf-19", "llvm-readelf") if shutil.which(n)), None)
    for name, src in render_cases(AMDRenderer(arch)).items():
        kinds, image = KernelImage.unpack(build.compile(src))
        assert image[:4] == b"\x7fELF" and image[18] == 0xE0, f"{name}: not an AMDGPU code object"  # EM_AMDGPU
        assert kinds == kernel_signature(src)[1]
        if readelf is not None:
            (tmp_path / "k.hsaco").write_bytes(image)
            info = subprocess.run([readelf, "-s", "--notes", str(tmp_path / "k.hsaco")], capture_output=True, text=True)
            assert f"{kernel_signature(src)[0]}.kd" in info.stdout and arch in info.stdout, name
    with pytest.raises(CompileError, match=rf"(?s)kernel k_add failed to compile for {arch}.*nope"):
        build.compile(SRC.replace("a[0] + n", "nope"))
    if known:  # an arch its comgr does not list is refused, not handed to hipRTC
        with pytest.raises(CompileError, match="does not know gfx9999"):
            HIPRTCCompiler("gfx9999", rtc).compile(SRC)
