"""The slice of the HIP runtime the ``AMD`` device uses, behind one small interface (`HIPApi`), so the device runs on
the real runtime (`CtypesHIP`: ctypes on ``libamdhip64``, no Python bindings needed) or on a recording fake in tests
(`tinycore_amd.testing.FakeHIP`).

Every method raises `HIPError` naming the call and HIP's error name on failure; `malloc` raises `MemoryError` when
the GPU is out of memory, so the allocator's cache can be emptied and the allocation retried.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinycore.sdk import DeviceError

DISTRIBUTION = "tinycore-amd"
OUT_OF_MEMORY, NO_DEVICE = 2, 100  # hipErrorOutOfMemory, hipErrorNoDevice
ARG_TYPES = {"buffer": ctypes.c_void_p, "int": ctypes.c_int, "long": ctypes.c_longlong}


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel launch as a graph node holds it: the function, grid and block dims, and the arguments (pointers
    and integers) with their kinds (``"buffer"``, ``"int"``, ``"long"``)."""

    function: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[int, ...]
    kinds: tuple[str, ...]


class Dim3(ctypes.Structure):
    """HIP's ``dim3``: three unsigned ints."""

    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class KernelNodeParams(ctypes.Structure):
    """``hipKernelNodeParams`` as ROCm's ``hip_runtime_api.h`` lays it out (its fields in alphabetical order, unlike
    CUDA's ``cudaKernelNodeParams``): blockDim, extra, func, gridDim, kernelParams, sharedMemBytes."""

    _fields_ = [
        ("blockDim", Dim3),
        ("extra", ctypes.c_void_p),
        ("func", ctypes.c_void_p),
        ("gridDim", Dim3),
        ("kernelParams", ctypes.c_void_p),
        ("sharedMemBytes", ctypes.c_uint),
    ]


class HIPError(DeviceError):
    """A HIP runtime call failed: the call and HIP's error name."""


class HIPApi:
    """What the AMD device needs from HIP. Handles (pointers, modules, functions, events) are opaque to callers."""

    def device_count(self) -> int:
        """GPUs the runtime sees (0 when none)."""
        raise NotImplementedError

    def set_device(self, ordinal: int) -> None:
        """Make GPU `ordinal` current on this thread."""
        raise NotImplementedError

    def device_name(self, ordinal: int) -> str:
        """The GPU's marketing name."""
        raise NotImplementedError

    def arch(self, ordinal: int) -> str:
        """The GPU's ``gfx`` target name (``gfx1100``)."""
        raise NotImplementedError

    def malloc(self, size: int) -> int:
        """Device memory of `size` bytes (`MemoryError` when out of memory)."""
        raise NotImplementedError

    def free(self, pointer: int) -> None:
        """Release device memory."""
        raise NotImplementedError

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current GPU."""
        raise NotImplementedError

    def copy_to_device(self, dest: int, host: int, size: int) -> None:
        """Host bytes into device memory (synchronous)."""
        raise NotImplementedError

    def copy_to_host(self, host: int, src: int, size: int) -> None:
        """Device bytes to the host (waits for queued work)."""
        raise NotImplementedError

    def copy_device(self, dest: int, src: int, size: int) -> None:
        """Device to device, also between GPUs (peer copy)."""
        raise NotImplementedError

    def load_module(self, image: bytes) -> Any:
        """Load a code object."""
        raise NotImplementedError

    def get_function(self, module: Any, name: str) -> Any:
        """A kernel of a loaded module."""
        raise NotImplementedError

    def launch(
        self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int], kinds: Sequence[str]
    ):
        """Queue the kernel with `args` (pointers and integers, typed by `kinds`)."""
        raise NotImplementedError

    def timed_launch(self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
                     kinds: Sequence[str]) -> float:  # fmt: skip
        """Launch between two events and wait; the seconds between them."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued work of the current GPU."""
        raise NotImplementedError

    # ----- graphs: a `tinycore_amd.graph.HIPGraph` builds one per TinyJit capture
    def graph_create(self) -> Any:
        """A new, empty HIP graph."""
        raise NotImplementedError

    def graph_add_kernel_node(self, graph: Any, after: Sequence[Any], launch: KernelLaunch) -> Any:
        """Add a kernel node doing `launch`, run after the nodes `after` (none: a root node); the node."""
        raise NotImplementedError

    def graph_instantiate(self, graph: Any) -> Any:
        """The executable graph of `graph`."""
        raise NotImplementedError

    def graph_exec_set_kernel_params(self, graph_exec: Any, node: Any, launch: KernelLaunch) -> None:
        """Patch kernel node `node` of the executable graph in place (new arguments or dims; same function)."""
        raise NotImplementedError

    def graph_launch(self, graph_exec: Any) -> None:
        """Queue the executable graph on the null stream."""
        raise NotImplementedError

    def timed_graph_launch(self, graph_exec: Any) -> float:
        """Launch the executable graph between two events and wait; the seconds between them."""
        raise NotImplementedError

    def graph_destroy(self, graph: Any, graph_exec: Any) -> None:
        """Free an executable graph and its graph."""
        raise NotImplementedError


def find_runtime() -> str | None:
    """The path of ``libamdhip64`` (``HIP_LIBRARY`` if set, else the loader's search and ``/opt/rocm/lib``), or None."""
    chosen = os.environ.get("HIP_LIBRARY")
    if chosen:
        return chosen if os.path.exists(chosen) else None
    found = ctypes.util.find_library("amdhip64")
    if found:
        return found
    for folder in ("/opt/rocm/lib", "/opt/rocm/lib64"):
        for name in ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"):
            if os.path.exists(path := os.path.join(folder, name)):
                return path
    return None


class CtypesHIP(HIPApi):
    """`HIPApi` on ``libamdhip64`` through ctypes."""

    def __init__(self, path: str, device: str = "AMD"):
        self.lib, self.device = ctypes.CDLL(path), device
        self.lib.hipGetErrorName.restype = ctypes.c_char_p
        self.lib.hipModuleLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        handle, out = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        params = ctypes.POINTER(KernelNodeParams)
        signatures = {  # from ROCm's hip_runtime_api.h; every one returns hipError_t
            "hipGraphCreate": [out, ctypes.c_uint],
            "hipGraphAddKernelNode": [out, handle, out, ctypes.c_size_t, params],
            "hipGraphInstantiate": [out, handle, out, ctypes.c_char_p, ctypes.c_size_t],
            "hipGraphExecKernelNodeSetParams": [handle, handle, params],
            "hipGraphLaunch": [handle, handle],
            "hipGraphExecDestroy": [handle],
            "hipGraphDestroy": [handle],
        }
        self._graph_missing = [name for name in signatures if not hasattr(self.lib, name)]  # none since ROCm 5.3
        for name, argtypes in signatures.items() if not self._graph_missing else ():
            getattr(self.lib, name).argtypes = argtypes
            getattr(self.lib, name).restype = ctypes.c_int
        # each node's argument storage, alive until its graph is destroyed (HIP copies it; kept to be safe)
        self._node_args: dict[int, Any] = {}
        self._graph_nodes: dict[int, list[int]] = {}

    def _check(self, call: str, err: int) -> None:
        if err == OUT_OF_MEMORY and call == "hipMalloc":
            free, total = self.mem_info()
            raise MemoryError(f"{self.device}: out of GPU memory ({free} of {total} bytes free)")
        if err != 0:
            name = self.lib.hipGetErrorName(err).decode()
            raise HIPError(f"{call} failed: {name}", device=self.device, distribution=DISTRIBUTION)

    def _call(self, call: str, *args: Any) -> None:
        self._check(call, getattr(self.lib, call)(*args))

    def device_count(self) -> int:
        count = ctypes.c_int()
        err = self.lib.hipGetDeviceCount(ctypes.byref(count))
        if err == NO_DEVICE:
            return 0
        self._check("hipGetDeviceCount", err)
        return count.value

    def set_device(self, ordinal: int) -> None:
        self._call("hipSetDevice", ordinal)

    def device_name(self, ordinal: int) -> str:
        name = ctypes.create_string_buffer(256)
        self._call("hipDeviceGetName", name, 256, ordinal)
        return name.value.decode(errors="replace")

    def arch(self, ordinal: int) -> str:
        # the KFD topology gives the target version without hipDeviceProp_t's version-dependent layout
        nodes = "/sys/class/kfd/kfd/topology/nodes"
        versions = []
        for node in sorted(os.listdir(nodes), key=int) if os.path.isdir(nodes) else []:
            with open(os.path.join(nodes, node, "properties")) as properties:
                fields = dict(line.split() for line in properties if len(line.split()) == 2)
            if int(fields.get("gfx_target_version", 0)):
                versions.append(int(fields["gfx_target_version"]))
        if ordinal >= len(versions):
            raise HIPError("no KFD topology entry for this GPU", device=self.device, distribution=DISTRIBUTION)
        version = versions[ordinal]
        return f"gfx{version // 10000}{version // 100 % 100:x}{version % 100:x}"

    def malloc(self, size: int) -> int:
        pointer = ctypes.c_void_p()
        self._call("hipMalloc", ctypes.byref(pointer), ctypes.c_size_t(size))
        return int(pointer.value or 0)

    def free(self, pointer: int) -> None:
        self._call("hipFree", ctypes.c_void_p(pointer))

    def mem_info(self) -> tuple[int, int]:
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("hipMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def copy_to_device(self, dest: int, host: int, size: int) -> None:
        self._call("hipMemcpy", ctypes.c_void_p(dest), ctypes.c_void_p(host), ctypes.c_size_t(size), 1)

    def copy_to_host(self, host: int, src: int, size: int) -> None:
        self._call("hipMemcpy", ctypes.c_void_p(host), ctypes.c_void_p(src), ctypes.c_size_t(size), 2)

    def copy_device(self, dest: int, src: int, size: int) -> None:
        self._call("hipMemcpy", ctypes.c_void_p(dest), ctypes.c_void_p(src), ctypes.c_size_t(size), 3)

    def load_module(self, image: bytes) -> Any:
        module = ctypes.c_void_p()
        self._image = image  # HIP reads the image during the call only; keep it alive anyway
        self._call("hipModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image))
        return module

    def get_function(self, module: Any, name: str) -> Any:
        function = ctypes.c_void_p()
        self._call("hipModuleGetFunction", ctypes.byref(function), module, name.encode())
        return function

    def _params(self, args: Sequence[int], kinds: Sequence[str]) -> tuple[Any, list[Any]]:
        values = [ARG_TYPES[kind](arg) for arg, kind in zip(args, kinds)]
        pointers = (ctypes.c_void_p * max(1, len(values)))(*(ctypes.addressof(v) for v in values))
        return pointers, values

    def launch(
        self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int], kinds: Sequence[str]
    ):
        pointers, _keep = self._params(args, kinds)
        self._call("hipModuleLaunchKernel", function, *grid, *block, 0, None, pointers, None)

    def timed_launch(self, function: Any, grid: Sequence[int], block: Sequence[int], args: Sequence[int],
                     kinds: Sequence[str]) -> float:  # fmt: skip
        return self._timed(lambda: self.launch(function, grid, block, args, kinds))

    def _timed(self, launch: Any) -> float:
        start, end = ctypes.c_void_p(), ctypes.c_void_p()
        self._call("hipEventCreate", ctypes.byref(start))
        self._call("hipEventCreate", ctypes.byref(end))
        self._call("hipEventRecord", start, None)
        launch()
        self._call("hipEventRecord", end, None)
        self._call("hipEventSynchronize", end)
        milliseconds = ctypes.c_float()
        self._call("hipEventElapsedTime", ctypes.byref(milliseconds), start, end)
        self._call("hipEventDestroy", start)
        self._call("hipEventDestroy", end)
        return milliseconds.value * 1e-3

    def synchronize(self) -> None:
        self._call("hipDeviceSynchronize")

    def _node_params(self, launch: KernelLaunch) -> tuple[KernelNodeParams, Any]:
        pointers, values = self._params(launch.args, launch.kinds)
        params = KernelNodeParams(blockDim=Dim3(*launch.block), gridDim=Dim3(*launch.grid), sharedMemBytes=0)
        function = launch.function
        params.func = function.value if isinstance(function, ctypes.c_void_p) else function
        params.kernelParams, params.extra = ctypes.addressof(pointers), None
        return params, (pointers, values)

    def graph_create(self) -> Any:
        if self._graph_missing:
            missing = ", ".join(self._graph_missing)
            fix = "install ROCm 5.3 or newer, or set JIT_BATCH_SIZE=0 (TinyJit without graphs)"
            raise HIPError(f"this HIP runtime has no HIP graphs: {missing} missing", device=self.device,
                           distribution=DISTRIBUTION, fix=fix)  # fmt: skip
        graph = ctypes.c_void_p()
        self._call("hipGraphCreate", ctypes.byref(graph), 0)
        return graph

    def graph_add_kernel_node(self, graph: Any, after: Sequence[Any], launch: KernelLaunch) -> Any:
        params, keep = self._node_params(launch)
        deps = (ctypes.c_void_p * max(1, len(after)))(*(d.value for d in after))
        node = ctypes.c_void_p()
        self._call("hipGraphAddKernelNode", ctypes.byref(node), graph, deps if after else None, len(after),
                   ctypes.byref(params))  # fmt: skip
        self._node_args[int(node.value or 0)] = keep
        self._graph_nodes.setdefault(int(graph.value or 0), []).append(int(node.value or 0))
        return node

    def graph_instantiate(self, graph: Any) -> Any:
        graph_exec = ctypes.c_void_p()
        self._call("hipGraphInstantiate", ctypes.byref(graph_exec), graph, None, None, 0)
        return graph_exec

    def graph_exec_set_kernel_params(self, graph_exec: Any, node: Any, launch: KernelLaunch) -> None:
        params, keep = self._node_params(launch)
        self._call("hipGraphExecKernelNodeSetParams", graph_exec, node, ctypes.byref(params))
        self._node_args[int(node.value or 0)] = keep

    def graph_launch(self, graph_exec: Any) -> None:
        self._call("hipGraphLaunch", graph_exec, None)

    def timed_graph_launch(self, graph_exec: Any) -> float:
        return self._timed(lambda: self.graph_launch(graph_exec))

    def graph_destroy(self, graph: Any, graph_exec: Any) -> None:
        self._call("hipGraphExecDestroy", graph_exec)
        self._call("hipGraphDestroy", graph)
        for node in self._graph_nodes.pop(int(graph.value or 0), []):
            self._node_args.pop(node, None)
