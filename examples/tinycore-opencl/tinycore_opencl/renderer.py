"""`OpenCLRenderer`: OpenCL C as a dialect table on core's C-family renderer base (`tinycore.sdk.CStyleRenderer`).

Everything OpenCL spells its own way is in `OPENCL_C`; the device's limits (work-group sizes, local memory, the
fp16/fp64 extensions) come from the `DeviceLimits` the device reports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tinycore.sdk import ALL_SCALARS, AddrSpace, CDialect, CStyleRenderer, dtypes

OPENCL_C = CDialect(
    name="OpenCL C",
    prelude="#pragma OPENCL FP_CONTRACT OFF",  # no fused multiply-adds the reference device doesn't do
    kernel_prefix="__kernel void",
    buffer_param="{const}{space}{type}* restrict {name}",
    var_param="const {type} {name}",
    address_spaces={AddrSpace.GLOBAL: "__global ", AddrSpace.LOCAL: "__local "},
    types={  # bool is stored as uchar: OpenCL forbids bool kernel arguments
        dtypes.bool: "uchar",
        dtypes.int8: "char",
        dtypes.uint8: "uchar",
        dtypes.uint16: "ushort",
        dtypes.uint32: "uint",
        dtypes.int64: "long",
        dtypes.uint64: "ulong",
    },  # fmt: skip
    long_suffix="l",
    launch_ids={"gidx": "get_group_id({dim})", "lidx": "get_local_id({dim})"},
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    shared_decl="__local {type} {name}[{size}];",
    vector_widths=(2, 4, 8, 16),
    vector_load="vload{n}(0, {ptr})",  # element alignment is enough (a cast pointer would need the vector's)
    vector_store="vstore{n}({value}, 0, {ptr});",
    lane_access="{v}.s{i:x}",
    intrinsics={
        "SQRT": "sqrt({0})",
        "TRUNC": "trunc({0})",
        "EXP2": "exp2({0})",
        "LOG2": "log2({0})",
        "SIN": "sin({0})",
        "MULACC": "fma({0}, {1}, {2})",
    },  # fmt: skip
    bitcast="as_{type}({x})",
)

OPENCL_FP16 = replace(OPENCL_C, prelude="#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n" + OPENCL_C.prelude)


@dataclass(frozen=True)
class DeviceLimits:
    """What the renderer needs to know about one OpenCL device (read by `tinycore_opencl.device.limits_of`)."""

    name: str
    max_work_group: int = 256
    max_work_items: tuple[int, int, int] = (256, 256, 256)
    local_mem: int = 32768
    fp16: bool = False
    fp64: bool = False


class OpenCLRenderer(CStyleRenderer):
    """OpenCL C for one device: `arch` is the device's name; limits and dtypes come from `limits`."""

    device = "OPENCL"
    suffix = "CL"
    dialect = OPENCL_C
    has_local = True
    has_shared = True
    supports_float4 = True
    native_ops = frozenset({"SQRT", "TRUNC", "EXP2", "LOG2", "SIN", "MULACC"})

    def __init__(self, limits: DeviceLimits):
        self.arch = limits.name
        self.local_max = tuple(min(n, limits.max_work_group) for n in limits.max_work_items)
        self.shared_max = limits.local_mem
        excluded = {dtypes.bfloat16} | ({dtypes.float16} if not limits.fp16 else set())
        excluded |= {dtypes.float64} if not limits.fp64 else set()
        self.supported_dtypes = frozenset(ALL_SCALARS) - excluded
        if limits.fp16:
            self.dialect = OPENCL_FP16
