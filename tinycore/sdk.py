"""The device SDK: everything a device plugin may import from core, in one module.

A plugin (in-tree or third-party) imports core only from here (``from tinycore.sdk import Compiled, Renderer``);
the rest of `tinycore` is internal and may change without notice. `docs/plugins.md` is the guide ("Writing a device
plugin"); DESIGN §4 the binding summary. Importing this module is cheap: each name is imported from the core module
that defines it on first access, so a light entry module may ``from tinycore.sdk import hookimpl, ProbeResult``
without pulling in numpy, the compiler or the runtime.

What a plugin implements, per device family:

- an entry module (entry point group ``tinycore.devices``) with `hookimpl` hooks: ``tinycore_register_devices``
  (calls `DeviceRegistrar.register`), ``tinycore_probe_device`` (returns a `ProbeResult`), optionally
  ``tinycore_open_device``, ``tinycore_compile_target``, ``tinycore_device_capabilities`` (a `DeviceCapabilities`:
  the one place capabilities are declared), ``tinycore_doctor_checks`` (a list of `DoctorCheck`) and
  ``tinycore_report_info``; `PlaceholderHooks` gives the three hooks of a device that registers its name before it
  exists;
- a `Compiled` subclass bundling an `Allocator` (usually an `LRUAllocator`; allocations take a `BufferSpec`), a
  `Renderer` (every attribute core reads is declared on the base, with its meaning and default; ``render(uops,
  name=None)``; the ``tinycore_rewrite_rules`` hook's rules reach it as ``extra_rules``), a `Compiler`
  (source to bytes, disk-cached by core) and a `Program` class (optionally a
  `LaunchableProgram`), plus an optional `GraphRunner` for TinyJit replay (it patches `GraphUpdate`s);
- optionally doctor checks: `DoctorCheck`s returned by the ``tinycore_doctor_checks`` hook, raising `CheckFailed` /
  `CheckSkipped` (`add_doctor_check` is for code already running inside ``tinycore doctor``).

Names, by topic (classes and functions carry their own documentation):

- hooks and registration: `hookimpl`, `ProbeResult`, `DeviceCapabilities`, `DeviceRegistrar` (the ``registry``
  the register hook receives), `PlaceholderHooks`, `PLUGIN_API_VERSION` (core's ``(major, minor)`` device-contract
  version: a plugin's ``TINYCORE_PLUGIN_API`` must have the same major and a minor not above it),
  `ENTRY_POINT_GROUP` (``"tinycore.devices"``);
- the device: `Compiled`, `Allocator`, `LRUAllocator`, `BufferSpec`, `Buffer`, `Device` (the registry of opened
  devices: ``Device["CLANG:1"]``), `Program`, `LaunchableProgram`, `host_address` (a host buffer's address for a
  driver's memcpy), `grid_and_block` (launch dims as a grid and a block);
- code generation: `Renderer`, `TensorCore`, `ProgramSpec`, `Estimates`, `Compiler`, `KernelImage` (a GPU-style
  binary with its parameter kinds), the C-family renderer base (`CStyleRenderer`, `CDialect`, `KernelWriter`,
  `CRenderError`, `index_only_values`: a plugin for a C-family language declares a dialect table instead of
  writing a renderer), `kernel_function_name` / `c_identifier` (the name a renderer gives a kernel), `disk_get` /
  `disk_put` (core's disk cache, for compilers caching more than `Compiler.compile_cached` does);
- the IR a renderer reads: `UOp`, `Ops`, `GroupOp`, `AxisType`, `UPat`, `PatternMatcher`, `DType`, `PtrDType`,
  `AddrSpace`, `dtypes`, `ALL_SCALARS` (every scalar dtype, a tuple);
- JIT replay: `GraphRunner`, `GraphUpdate`, `Runner`, `CompiledRunner`, `ExecItem`;
- errors: `TinycoreError`, `DeviceError`, `DeviceNotInstalledError`, `DevicePluginError`,
  `DevicePluginIncompatibleError`, `DeviceUnavailableError`, `CompileError`;
- `tinycore doctor`: `DoctorCheck`, `DoctorContext`, `add_doctor_check`, `CheckFailed`, `CheckSkipped`,
  `DOCTOR_CHECKS` (the ordered list of checks, read-only for plugins: add with `add_doctor_check`);
- collectives across processes: `CollectiveBackend` (what the ``tinycore_collective_backend`` hook answers),
  `CollectiveCall` (one collective in flight: its name and deadline, ``wait`` to poll against it) and
  `DistributedError`;
- helpers: `parse_env` (an environment value parsed like core's knobs).

>>> import tinycore.sdk as sdk
>>> sdk.PLUGIN_API_VERSION[0], sdk.Renderer.threads is None
(1, True)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tinycore.backend.compiler import Compiler, KernelImage
    from tinycore.backend.disk_cache import disk_get, disk_put
    from tinycore.cli import (
        DOCTOR_CHECKS,
        CheckFailed,
        CheckSkipped,
        DoctorCheck,
        DoctorContext,
        add_doctor_check,
    )
    from tinycore.device import (
        Allocator,
        Buffer,
        BufferSpec,
        Compiled,
        Device,
        LaunchableProgram,
        LRUAllocator,
        Program,
        grid_and_block,
        host_address,
    )
    from tinycore.distributed.backend import CollectiveBackend
    from tinycore.distributed.group import CollectiveCall, DistributedError
    from tinycore.dtype import ALL_SCALARS, AddrSpace, DType, PtrDType, dtypes
    from tinycore.engine.exec_item import CompiledRunner, ExecItem, Runner
    from tinycore.engine.graph_runner import GraphRunner, GraphUpdate
    from tinycore.errors import (
        CompileError,
        DeviceError,
        DeviceNotInstalledError,
        DevicePluginError,
        DevicePluginIncompatibleError,
        DeviceUnavailableError,
        TinycoreError,
    )
    from tinycore.helpers import parse_env
    from tinycore.plugin.hookspecs import (
        ENTRY_POINT_GROUP,
        PLUGIN_API_VERSION,
        DeviceCapabilities,
        ProbeResult,
        hookimpl,
    )
    from tinycore.plugin.manager import DeviceRegistrar
    from tinycore.plugin.placeholder import PlaceholderHooks
    from tinycore.renderer import Estimates, ProgramSpec, Renderer, TensorCore, c_identifier, kernel_function_name
    from tinycore.renderer.cstyle import CDialect, CRenderError, CStyleRenderer, KernelWriter, index_only_values
    from tinycore.uop.ops import AxisType, GroupOp, Ops, UOp
    from tinycore.uop.patterns import PatternMatcher, UPat

# public name -> the core module defining it (imported on first access, PEP 562)
_EXPORTS: dict[str, str] = {
    # hooks and registration
    "hookimpl": "tinycore.plugin.hookspecs",
    "ProbeResult": "tinycore.plugin.hookspecs",
    "DeviceCapabilities": "tinycore.plugin.hookspecs",
    "PLUGIN_API_VERSION": "tinycore.plugin.hookspecs",
    "ENTRY_POINT_GROUP": "tinycore.plugin.hookspecs",
    "DeviceRegistrar": "tinycore.plugin.manager",
    "PlaceholderHooks": "tinycore.plugin.placeholder",
    # the device
    "Compiled": "tinycore.device",
    "Allocator": "tinycore.device",
    "LRUAllocator": "tinycore.device",
    "BufferSpec": "tinycore.device",
    "Buffer": "tinycore.device",
    "Device": "tinycore.device",
    "Program": "tinycore.device",
    "LaunchableProgram": "tinycore.device",
    "host_address": "tinycore.device",
    "grid_and_block": "tinycore.device",
    # code generation
    "Renderer": "tinycore.renderer",
    "TensorCore": "tinycore.renderer",
    "ProgramSpec": "tinycore.renderer",
    "Estimates": "tinycore.renderer",
    "c_identifier": "tinycore.renderer",
    "kernel_function_name": "tinycore.renderer",
    "CStyleRenderer": "tinycore.renderer.cstyle",
    "CDialect": "tinycore.renderer.cstyle",
    "CRenderError": "tinycore.renderer.cstyle",
    "KernelWriter": "tinycore.renderer.cstyle",
    "index_only_values": "tinycore.renderer.cstyle",
    "Compiler": "tinycore.backend.compiler",
    "KernelImage": "tinycore.backend.compiler",
    "disk_get": "tinycore.backend.disk_cache",
    "disk_put": "tinycore.backend.disk_cache",
    # the IR
    "UOp": "tinycore.uop.ops",
    "Ops": "tinycore.uop.ops",
    "GroupOp": "tinycore.uop.ops",
    "AxisType": "tinycore.uop.ops",
    "UPat": "tinycore.uop.patterns",
    "PatternMatcher": "tinycore.uop.patterns",
    "DType": "tinycore.dtype",
    "PtrDType": "tinycore.dtype",
    "AddrSpace": "tinycore.dtype",
    "dtypes": "tinycore.dtype",
    "ALL_SCALARS": "tinycore.dtype",
    # JIT replay
    "GraphRunner": "tinycore.engine.graph_runner",
    "GraphUpdate": "tinycore.engine.graph_runner",
    "Runner": "tinycore.engine.exec_item",
    "CompiledRunner": "tinycore.engine.exec_item",
    "ExecItem": "tinycore.engine.exec_item",
    # errors
    "TinycoreError": "tinycore.errors",
    "DeviceError": "tinycore.errors",
    "DeviceNotInstalledError": "tinycore.errors",
    "DevicePluginError": "tinycore.errors",
    "DevicePluginIncompatibleError": "tinycore.errors",
    "DeviceUnavailableError": "tinycore.errors",
    "CompileError": "tinycore.errors",
    # tinycore doctor
    "DoctorCheck": "tinycore.cli",
    "DoctorContext": "tinycore.cli",
    "add_doctor_check": "tinycore.cli",
    "CheckFailed": "tinycore.cli",
    "CheckSkipped": "tinycore.cli",
    "DOCTOR_CHECKS": "tinycore.cli",
    # collectives across processes
    "CollectiveBackend": "tinycore.distributed.backend",
    "CollectiveCall": "tinycore.distributed.group",
    "DistributedError": "tinycore.distributed.group",
    # helpers
    "parse_env": "tinycore.helpers",
}

__all__ = [
    "ALL_SCALARS",
    "DOCTOR_CHECKS",
    "ENTRY_POINT_GROUP",
    "PLUGIN_API_VERSION",
    "AddrSpace",
    "Allocator",
    "AxisType",
    "Buffer",
    "BufferSpec",
    "CheckFailed",
    "CDialect",
    "CRenderError",
    "CStyleRenderer",
    "CheckSkipped",
    "CollectiveBackend",
    "CollectiveCall",
    "CompileError",
    "Compiled",
    "CompiledRunner",
    "Compiler",
    "DType",
    "Device",
    "DeviceCapabilities",
    "DeviceError",
    "DeviceNotInstalledError",
    "DevicePluginError",
    "DevicePluginIncompatibleError",
    "DeviceRegistrar",
    "DeviceUnavailableError",
    "DistributedError",
    "DoctorCheck",
    "DoctorContext",
    "Estimates",
    "ExecItem",
    "GraphRunner",
    "GraphUpdate",
    "GroupOp",
    "KernelImage",
    "KernelWriter",
    "LRUAllocator",
    "LaunchableProgram",
    "Ops",
    "PatternMatcher",
    "PlaceholderHooks",
    "ProbeResult",
    "Program",
    "ProgramSpec",
    "PtrDType",
    "Renderer",
    "Runner",
    "TensorCore",
    "TinycoreError",
    "UOp",
    "UPat",
    "add_doctor_check",
    "c_identifier",
    "disk_get",
    "disk_put",
    "dtypes",
    "grid_and_block",
    "hookimpl",
    "host_address",
    "index_only_values",
    "kernel_function_name",
    "parse_env",
]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tinycore.sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
