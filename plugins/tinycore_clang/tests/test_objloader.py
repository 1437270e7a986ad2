"""The in-process object loader (`tinycore_clang.objloader`): each relocation kind LLVM emits, sections of every
kind, calls into the process, and errors. Objects come from hand-written LLVM IR compiled by the LLVM the backend
picks."""

from __future__ import annotations

import ctypes
import math

import pytest
from tinycore_clang import libllvm
from tinycore_clang.libllvm import PassOptions, find_library
from tinycore_clang.llvm_compiler import open_toolchain
from tinycore_clang.objloader import ObjectLoadError, can_load_objects, load_object
from tinycore_clang.runtime import is_object_file, load_kernels

pytestmark = [
    pytest.mark.skipif(not can_load_objects(), reason="the object loader handles x86-64 Linux only"),
    pytest.mark.skipif(not find_library().ok, reason="neither llvmlite nor a libLLVM (>= 14) (pip install llvmlite)"),
]

# {p}: the pointer type of the installed LLVM (typed `float*` / `i8*` on 14, opaque `ptr` on 15+)
MODULE = """
@table = constant [3 x float] [float 1.5, float 2.5, float 4.0]
@counter = global i32 0
@message = constant [6 x i8] c"hello\\00"
@pointer_table = global [1 x {i8p}] [{i8p} getelementptr ([6 x i8], [6 x i8]* @message, i64 0, i64 0)]
@stdout = external global {i8p}

declare float @sinf(float)
declare float @atan2f(float, float)

define float @table_at(i32 %i) {{
  %slot = getelementptr inbounds [3 x float], [3 x float]* @table, i64 0, i32 %i
  %value = load float, {fp} %slot
  ret float %value
}}

define i32 @bump() noinline {{
  %old = load i32, {i32p} @counter
  %new = add i32 %old, 1
  store i32 %new, {i32p} @counter
  ret i32 %new
}}

define i32 @bump_twice() {{
  %a = call i32 @bump()
  %b = call i32 @bump()
  ret i32 %b
}}

define float @sin_plus_atan2(float %x) {{
  %s = call float @sinf(float %x)
  %t = call float @atan2f(float %x, float 2.0)
  %sum = fadd float %s, %t
  ret float %sum
}}

define {i8p} @first_message() {{
  %slot = getelementptr inbounds [1 x {i8p}], [1 x {i8p}]* @pointer_table, i64 0, i64 0
  %value = load {i8p}, {i8pp} %slot
  ret {i8p} %value
}}

define {i8pp} @stdout_address() {{
  ret {i8pp} @stdout
}}
"""


def module_ir() -> str:
    """`MODULE` with the installed LLVM's pointer spelling."""
    if libllvm.uses_typed_pointers(find_library().version):
        return MODULE.format(fp="float*", i32p="i32*", i8p="i8*", i8pp="i8**")
    text = MODULE.format(fp="ptr", i32p="ptr", i8p="ptr", i8pp="ptr")
    return (
        text.replace("[3 x float]* @table", "ptr @table")
        .replace("[6 x i8]* @message", "ptr @message")
        .replace("[1 x ptr]* @pointer_table", "ptr @pointer_table")
    )


@pytest.fixture(scope="module")
def loaded():
    """The test module compiled to an object file (position-independent, as the llvm backend builds) and loaded."""
    obj = open_toolchain().compile_object(module_ir(), PassOptions(), "objloader_test")
    assert is_object_file(obj)
    return load_object(obj)


def function(loaded, name: str, restype, *argtypes):
    address = loaded.address(name)
    assert address is not None, f"{name} not exported: {loaded.exports}"
    return ctypes.CFUNCTYPE(restype, *argtypes)(address)


def test_exports_are_the_defined_globals(loaded) -> None:
    for name in ("table_at", "bump", "bump_twice", "sin_plus_atan2", "first_message", "table", "counter"):
        assert name in loaded.exports
    assert "sinf" not in loaded.exports and "stdout" not in loaded.exports
    assert loaded.address("no_such_symbol") is None


def test_read_only_constants(loaded) -> None:
    table_at = function(loaded, "table_at", ctypes.c_float, ctypes.c_int)
    assert [table_at(i) for i in range(3)] == [1.5, 2.5, 4.0]


def test_writable_data_is_private_and_mutable(loaded) -> None:
    counter = ctypes.c_int.from_address(loaded.address("counter"))
    start = counter.value
    assert function(loaded, "bump_twice", ctypes.c_int)() == start + 2
    assert counter.value == start + 2


def test_calls_into_the_process_through_stubs(loaded) -> None:
    result = function(loaded, "sin_plus_atan2", ctypes.c_float, ctypes.c_float)(0.5)
    assert result == pytest.approx(math.sin(0.5) + math.atan2(0.5, 2.0), rel=1e-6)


def test_absolute_pointers_in_data_are_relocated(loaded) -> None:
    text = function(loaded, "first_message", ctypes.c_void_p)()
    assert ctypes.string_at(text) == b"hello"
    assert text == loaded.address("message")


def test_external_data_through_the_got(loaded) -> None:
    libc_stdout = ctypes.cast(ctypes.CDLL(None).stdout, ctypes.c_void_p).value
    assert function(loaded, "stdout_address", ctypes.c_void_p)() == libc_stdout


def test_code_is_not_writable(loaded) -> None:
    maps = open("/proc/self/maps").read().splitlines()
    code = loaded.address("table_at")
    for line in maps:
        span, perms = line.split()[:2]
        low, high = (int(part, 16) for part in span.split("-"))
        if low <= code < high:
            assert perms.startswith("r-x"), line
            return
    pytest.fail("the loaded code is in no mapping")


def test_same_bytes_load_once() -> None:
    obj = open_toolchain().compile_object(module_ir(), PassOptions(), "objloader_test")
    assert load_kernels(obj) is load_kernels(bytes(obj))


def test_errors_name_the_problem() -> None:
    with pytest.raises(ObjectLoadError, match="not a 64-bit"):
        load_object(b"plain text, not an object")
    with open("/proc/self/exe", "rb") as exe:  # the Python executable: an ELF, but not a relocatable object
        with pytest.raises(ObjectLoadError, match="relocatable object"):
            load_object(exe.read(1 << 16))
    missing = "declare float @tinycore_no_such_function(float)\ndefine float @call_missing(float %x) {\n"
    missing += "  %y = call float @tinycore_no_such_function(float %x)\n  ret float %y\n}\n"
    obj = open_toolchain().compile_object(missing, PassOptions(), "missing")
    with pytest.raises(ObjectLoadError, match="tinycore_no_such_function"):
        load_object(obj)
