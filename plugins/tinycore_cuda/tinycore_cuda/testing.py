"""`FakeDriver`: a stand-in for ``cuda.bindings.driver`` for tests without a GPU; `FakeNCCL`: one for ``libnccl``.

It answers the calls `tinycore_cuda.device` makes the bindings' way (``(CUresult, *values)``), on host memory, and
records every call in `calls`. Kernels are not executed: a launch records its function, dims and arguments.
"""

from __future__ import annotations

import ctypes
import threading
import types
from typing import Any

SUCCESS, INVALID_VALUE, OUT_OF_MEMORY, NO_DEVICE, NOT_FOUND = 0, 1, 2, 100, 500
NAMES = {
    SUCCESS: "CUDA_SUCCESS",
    INVALID_VALUE: "CUDA_ERROR_INVALID_VALUE",
    OUT_OF_MEMORY: "CUDA_ERROR_OUT_OF_MEMORY",
    NO_DEVICE: "CUDA_ERROR_NO_DEVICE",
    NOT_FOUND: "CUDA_ERROR_NOT_FOUND",
}

ATTRIBUTES = {
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": 9,
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": 0,
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X": 1024,
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y": 1024,
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z": 64,
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X": 2**31 - 1,
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y": 65535,
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z": 65535,
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,  # an H100's 227 KB
}
FUNCTION_ATTRIBUTES = ("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",)


class FakeDriver:
    """`gpus` devices of `memory` bytes each; `fail` maps a call name to the error code it returns next (once)."""

    CUdevice_attribute = types.SimpleNamespace(**{name: name for name in ATTRIBUTES})
    CUfunction_attribute = types.SimpleNamespace(**{name: name for name in FUNCTION_ATTRIBUTES})

    def __init__(self, gpus: int = 1, memory: int = 1 << 20, driver_version: int = 13000):
        self.gpus, self.memory, self.driver_version = gpus, memory, driver_version
        self.calls: list[tuple[str, tuple]] = []
        self.fail: dict[str, int] = {}
        self.blocks: dict[int, bytearray] = {}
        self.host_blocks: dict[int, Any] = {}  # page-locked host memory (cuMemHostAlloc), by address
        self.next_address = 0x10000
        self.modules: dict[int, bytes] = {}
        self.launches: list[dict[str, Any]] = []
        self.event_times: dict[int, float] = {}
        self.attributes = dict(ATTRIBUTES)  # change one to fake another GPU
        self.function_attributes: dict[tuple[Any, str], int] = {}  # (function, attribute) -> value set
        self._memory_lock = threading.Lock()  # a real driver is thread-safe; NCCL tests allocate from two threads

    def _call(self, name: str, *args: Any) -> int:
        self.calls.append((name, args))
        return self.fail.pop(name, SUCCESS)

    def used(self) -> int:
        """Bytes allocated now."""
        with self._memory_lock:
            return sum(len(b) for b in self.blocks.values())

    def _block(self, address: int) -> tuple[bytearray, int]:
        with self._memory_lock:
            blocks = list(self.blocks.items())
        for base, block in blocks:
            if base <= address < base + len(block):
                return block, address - base
        raise AssertionError(f"fake driver: address {address:#x} is not allocated")

    # ----- errors, devices, contexts
    def cuGetErrorName(self, err: int) -> tuple[int, bytes]:
        return SUCCESS, NAMES.get(int(err), f"CUDA_ERROR_{int(err)}").encode()

    def cuInit(self, flags: int) -> tuple[int]:
        err = self._call("cuInit", flags)
        return (NO_DEVICE if self.gpus == 0 else err,)

    def cuDriverGetVersion(self) -> tuple[int, int]:
        return self._call("cuDriverGetVersion"), self.driver_version

    def cuDeviceGetCount(self) -> tuple[int, int]:
        return self._call("cuDeviceGetCount"), self.gpus

    def cuDeviceGet(self, ordinal: int) -> tuple[int, int]:
        return self._call("cuDeviceGet", ordinal), ordinal

    def cuDeviceGetName(self, size: int, device: int) -> tuple[int, bytes]:
        return self._call("cuDeviceGetName", size, device), b"Fake H100" + b"\0" * 16  # NUL-padded, as a driver does

    def cuDeviceGetAttribute(self, attribute: str, device: int) -> tuple[int, int]:
        return self._call("cuDeviceGetAttribute", attribute, device), self.attributes[attribute]

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple[int, str]:
        return self._call("cuDevicePrimaryCtxRetain", device), f"ctx{device}"

    def cuCtxSetCurrent(self, context: str) -> tuple[int]:
        return (self._call("cuCtxSetCurrent", context),)

    def cuCtxSynchronize(self) -> tuple[int]:
        return (self._call("cuCtxSynchronize"),)

    # ----- memory
    def cuMemAlloc(self, size: int) -> tuple[int, int]:
        err = self._call("cuMemAlloc", size)
        if err or self.used() + size > self.memory:
            return err or OUT_OF_MEMORY, 0
        with self._memory_lock:
            address, self.next_address = self.next_address, self.next_address + ((size + 255) // 256 + 1) * 256
            self.blocks[address] = bytearray(size)
        return SUCCESS, address

    def cuMemFree(self, address: int) -> tuple[int]:
        err = self._call("cuMemFree", address)
        with self._memory_lock:
            del self.blocks[int(address)]
        return (err,)

    def cuMemGetInfo(self) -> tuple[int, int, int]:
        return self._call("cuMemGetInfo"), self.memory - self.used(), self.memory

    def cuMemcpyHtoD(self, dest: int, host: int, size: int) -> tuple[int]:
        block, at = self._block(int(dest))
        block[at : at + size] = ctypes.string_at(host, size)
        return (self._call("cuMemcpyHtoD", dest, size),)

    def cuMemcpyDtoH(self, host: int, src: int, size: int) -> tuple[int]:
        block, at = self._block(int(src))
        ctypes.memmove(host, bytes(block[at : at + size]), size)
        return (self._call("cuMemcpyDtoH", src, size),)

    def cuMemHostAlloc(self, size: int, flags: int) -> tuple[int, int]:
        err = self._call("cuMemHostAlloc", size, flags)
        if err:
            return err, 0
        block = ctypes.create_string_buffer(size)  # real host memory: the device's staging memmoves into it
        self.host_blocks[ctypes.addressof(block)] = block
        return SUCCESS, ctypes.addressof(block)

    def cuMemFreeHost(self, address: int) -> tuple[int]:
        del self.host_blocks[int(address)]
        return (self._call("cuMemFreeHost", address),)

    def cuMemcpyHtoDAsync(self, dest: int, host: int, size: int, stream: int) -> tuple[int]:
        block, at = self._block(int(dest))
        block[at : at + size] = ctypes.string_at(host, size)
        return (self._call("cuMemcpyHtoDAsync", dest, size, stream),)

    def cuMemcpyDtoHAsync(self, host: int, src: int, size: int, stream: int) -> tuple[int]:
        block, at = self._block(int(src))
        ctypes.memmove(host, bytes(block[at : at + size]), size)
        return (self._call("cuMemcpyDtoHAsync", src, size, stream),)

    def cuMemcpyPeer(self, dest: int, dest_ctx: str, src: int, src_ctx: str, size: int) -> tuple[int]:
        (block_d, at_d), (block_s, at_s) = self._block(int(dest)), self._block(int(src))
        block_d[at_d : at_d + size] = block_s[at_s : at_s + size]
        return (self._call("cuMemcpyPeer", dest, dest_ctx, src, src_ctx, size),)

    # ----- modules, launches, events
    def cuModuleLoadData(self, image: bytes) -> tuple[int, int]:
        handle = len(self.modules) + 1
        self.modules[handle] = bytes(image)
        return self._call("cuModuleLoadData", len(image)), handle

    def cuModuleGetFunction(self, module: int, name: bytes) -> tuple[int, tuple[int, str]]:
        return self._call("cuModuleGetFunction", module, name), (module, name.decode())

    def cuFuncSetAttribute(self, function: Any, attribute: str, value: int) -> tuple[int]:
        err = self._call("cuFuncSetAttribute", function, attribute, value)
        if not err:
            self.function_attributes[(function, attribute)] = value
        return (err,)

    def shared_allowed(self, function: Any, shared: int) -> bool:
        """Whether a launch of `function` may use `shared` bytes of dynamic shared memory: up to 48 KB always, more
        only up to what ``cuFuncSetAttribute`` opted it in to (the real driver fails the launch otherwise)."""
        opted = self.function_attributes.get((function, FUNCTION_ATTRIBUTES[0]), 0)
        return shared <= max(49152, opted)

    def cuLaunchKernel(self, function: Any, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> tuple[int]:
        self.launches.append(
            dict(function=function, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, params=params)
        )
        err = self._call("cuLaunchKernel", function)
        return (err or (SUCCESS if self.shared_allowed(function, shared) else INVALID_VALUE),)

    @staticmethod
    def kernel_values(params: Any, types: tuple[Any, ...]) -> tuple[int, ...]:
        """The argument values a launch passed, in either of the bindings' forms: ``((values), (ctypes types))``, or
        the address of an array of pointers to them (read back as `types`); None: no arguments."""
        if params is None:
            return ()
        if isinstance(params, tuple):
            return tuple(params[0])
        pointers = (ctypes.c_void_p * len(types)).from_address(params)
        return tuple(kind.from_address(pointer).value or 0 for kind, pointer in zip(types, pointers))

    def cuEventCreate(self, flags: int) -> tuple[int, int]:
        handle = len(self.event_times) + 1
        self.event_times[handle] = 0.0
        return self._call("cuEventCreate", flags), handle

    def cuEventRecord(self, event: int, stream: int) -> tuple[int]:
        self.event_times[event] = 1.5 * len([c for c in self.calls if c[0] == "cuEventRecord"])
        return (self._call("cuEventRecord", event, stream),)

    def cuEventSynchronize(self, event: int) -> tuple[int]:
        return (self._call("cuEventSynchronize", event),)

    def cuEventElapsedTime(self, start: int, end: int) -> tuple[int, float]:
        return self._call("cuEventElapsedTime", start, end), self.event_times[end] - self.event_times[start]

    def cuEventDestroy(self, event: int) -> tuple[int]:
        return (self._call("cuEventDestroy", event),)

    # ----- graphs
    class CUDA_KERNEL_NODE_PARAMS(types.SimpleNamespace):  # noqa: N801 - the bindings' name
        """The kernel node parameters (plain attributes, as the bindings' struct has them)."""

    def cuGraphCreate(self, flags: int) -> tuple[int, dict[str, Any]]:
        return self._call("cuGraphCreate", flags), {"nodes": [], "deps": []}

    def cuGraphAddKernelNode(self, graph: dict, deps: Any, count: int, params: Any) -> tuple[int, int]:
        graph["nodes"].append(dict(vars(params)))
        graph["deps"].append(list(deps or [])[:count])
        return self._call("cuGraphAddKernelNode", count), len(graph["nodes"]) - 1

    def cuGraphInstantiate(self, graph: dict, flags: int) -> tuple[int, dict[str, Any]]:
        return self._call("cuGraphInstantiate", flags), {"graph": graph, "nodes": [dict(n) for n in graph["nodes"]]}

    def cuGraphExecKernelNodeSetParams(self, graph_exec: dict, node: int, params: Any) -> tuple[int]:
        graph_exec["nodes"][node] = dict(vars(params))
        return (self._call("cuGraphExecKernelNodeSetParams", node),)

    def cuGraphLaunch(self, graph_exec: dict, stream: int) -> tuple[int]:
        for node in graph_exec["nodes"]:
            self.launches.append(
                dict(
                    function=node["func"],
                    grid=(node["gridDimX"], node["gridDimY"], node["gridDimZ"]),
                    block=(node["blockDimX"], node["blockDimY"], node["blockDimZ"]),
                    shared=node["sharedMemBytes"],
                    params=node["kernelParams"],
                )
            )
        return (self._call("cuGraphLaunch", stream),)

    def cuGraphExecDestroy(self, graph_exec: dict) -> tuple[int]:
        return (self._call("cuGraphExecDestroy"),)

    def cuGraphDestroy(self, graph: dict) -> tuple[int]:
        return (self._call("cuGraphDestroy"),)


# ---------------------------------------------------------------------------------------------------------------
# NCCL


NCCL_TYPES = {0: "int8", 1: "uint8", 2: "int32", 3: "uint32", 4: "int64", 5: "uint64", 6: "float16", 7: "float32",
              8: "float64"}  # fmt: skip


class FakeNCCLWorld:
    """The ranks of fake communicators in one process: a collective completes when every rank has enqueued it,
    on the memory of the `FakeDriver` (all ranks share it; their buffers have distinct addresses)."""

    def __init__(self, driver: FakeDriver):
        self.driver = driver
        self.comms: dict[int, tuple[bytes, int, int]] = {}  # handle -> (unique id, nranks, rank)
        self.queued: dict[bytes, list[tuple[int, tuple[Any, ...]]]] = {}  # unique id -> enqueued (rank, call)
        self.next_id = 0
        self.async_errors: dict[int, int] = {}
        # ranks run in threads: a rank's stream must not look idle between a collective leaving the queue and its
        # result being written, so enqueueing (with completion) and querying hold one lock
        self._lock = threading.RLock()

    def pending(self, rank: int) -> bool:
        """Whether `rank` has a collective waiting for the other ranks."""
        with self._lock:
            return any(r == rank for calls in self.queued.values() for r, _ in calls)

    def stream_query(self, rank: int) -> tuple[int]:
        """``cuStreamQuery`` of `rank`'s stream: CUDA_ERROR_NOT_READY (600) while its collective waits."""
        return (600 if self.pending(rank) else SUCCESS,)

    def _array(self, address: int, count: int, dtype: str) -> Any:
        import numpy as np

        block, offset = self.driver._block(address)
        return np.frombuffer(block, dtype=dtype, count=count, offset=offset)

    def enqueue(self, comm: int, call: tuple[Any, ...]) -> None:
        with self._lock:
            uid, nranks, rank = self.comms[comm]
            calls = self.queued.setdefault(uid, [])
            calls.append((rank, call))
            if len(calls) < nranks:
                return
            del self.queued[uid]
            self._complete(sorted(calls, key=lambda c: c[0]))

    def _complete(self, calls: list[tuple[int, tuple[Any, ...]]]) -> None:
        import numpy as np

        kind = calls[0][1][0]
        n = len(calls)
        if kind in ("allreduce", "reducescatter"):
            _, _, _, count, dtype, op = calls[0][1]
            total = count * (n if kind == "reducescatter" else 1)
            parts = np.stack([self._array(c[1], total, NCCL_TYPES[dtype]) for _, c in calls])
            result = {0: parts.sum(0), 2: parts.max(0), 3: parts.min(0)}[op]
            for rank, c in calls:
                piece = result if kind == "allreduce" else result[rank * count : (rank + 1) * count]
                self._array(c[2], count, NCCL_TYPES[dtype])[:] = piece
        elif kind == "broadcast":
            _, _, _, count, dtype, root = calls[0][1]
            source = self._array(calls[root][1][1], count, NCCL_TYPES[dtype]).copy()
            for _, c in calls:
                self._array(c[2], count, NCCL_TYPES[dtype])[:] = source
        elif kind == "allgather":
            _, _, _, count, dtype = calls[0][1]
            gathered = np.concatenate([self._array(c[1], count, NCCL_TYPES[dtype]) for _, c in calls])
            for _, c in calls:
                self._array(c[2], count * n, NCCL_TYPES[dtype])[:] = gathered


def _value(arg: Any) -> Any:
    """The Python value of a ctypes argument (or the argument itself)."""
    return getattr(arg, "value", arg) or 0


class FakeNCCL:
    """The ``libnccl`` functions `tinycore_cuda.nccl.NCCL` calls, with its ctypes arguments, for one process of a
    `FakeNCCLWorld`; every call is recorded in `calls`. `fail` maps a function name to the result it returns next."""

    def __init__(self, world: FakeNCCLWorld):
        self.world = world
        self.calls: list[str] = []
        self.fail: dict[str, int] = {}

    def _call(self, name: str) -> int:
        self.calls.append(name)
        return self.fail.pop(name, SUCCESS)

    def ncclGetErrorString(self, code: int) -> bytes:
        texts = {0: b"no error", 2: b"unhandled system error", 6: b"remote process exited or there was a network error"}
        return texts.get(code, b"unknown result code")

    def ncclGetUniqueId(self, ref: Any) -> int:
        self.world.next_id += 1
        ref._obj.internal = f"fake-nccl-{self.world.next_id}".encode().ljust(128, b"\0")
        return self._call("ncclGetUniqueId")

    def ncclCommInitRank(self, ref: Any, nranks: int, uid: Any, rank: int) -> int:
        handle = 0x1000 + len(self.world.comms)
        self.world.comms[handle] = (bytes(uid.internal), nranks, rank)
        ref._obj.value = handle
        return self._call("ncclCommInitRank")

    def ncclAllReduce(self, send: Any, recv: Any, count: Any, dtype: int, op: int, comm: Any, stream: Any) -> int:
        self.world.enqueue(_value(comm), ("allreduce", _value(send), _value(recv), _value(count), dtype, op))
        return self._call("ncclAllReduce")

    def ncclReduceScatter(self, send: Any, recv: Any, count: Any, dtype: int, op: int, comm: Any, stream: Any) -> int:
        self.world.enqueue(_value(comm), ("reducescatter", _value(send), _value(recv), _value(count), dtype, op))
        return self._call("ncclReduceScatter")

    def ncclBroadcast(self, send: Any, recv: Any, count: Any, dtype: int, root: int, comm: Any, stream: Any) -> int:
        self.world.enqueue(_value(comm), ("broadcast", _value(send), _value(recv), _value(count), dtype, root))
        return self._call("ncclBroadcast")

    def ncclAllGather(self, send: Any, recv: Any, count: Any, dtype: int, comm: Any, stream: Any) -> int:
        self.world.enqueue(_value(comm), ("allgather", _value(send), _value(recv), _value(count), dtype))
        return self._call("ncclAllGather")

    def ncclCommGetAsyncError(self, comm: Any, ref: Any) -> int:
        ref._obj.value = self.world.async_errors.get(_value(comm), SUCCESS)
        return self._call("ncclCommGetAsyncError")

    def ncclCommAbort(self, comm: Any) -> int:
        uid = self.world.comms[_value(comm)][0]
        self.world.queued.pop(uid, None)
        return self._call("ncclCommAbort")

    def ncclCommDestroy(self, comm: Any) -> int:
        self.world.comms.pop(_value(comm), None)
        return self._call("ncclCommDestroy")
