"""What a device's code generator declares and consumes: `Renderer`, `TensorCore`, `ProgramSpec`, `Estimates`.

A `Renderer` turns one linearized UOp program into source text for its device family and declares what the
optimizer and the decomposition passes may assume about that device (vector widths, local/shared memory, limits,
tensor cores, natively rendered ops, dtypes). `ProgramSpec` is the one program format every renderer consumes
and the `PYTHON` device executes.

>>> spec = ProgramSpec("E_4", [], "PYTHON", global_size=(4, 1, 1), local_size=(1, 1, 1))
>>> spec.launch_dims({})
((4, 1, 1), (1, 1, 1))
>>> (Estimates(ops=2, mem=8) + Estimates(ops=1, lds=4)).ops
3
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tinycore.dtype import ALL_SCALARS, DType

if TYPE_CHECKING:
    from tinycore.uop.ops import UOp
    from tinycore.uop.patterns import PatternMatcher

Coord = tuple[int, int]
# layout[lane][element] = (row, col) of the operand matrix that this lane's element holds
Layout = tuple[tuple[Coord, ...], ...]


def eval_dim(value: Any, var_vals: dict[str, int]) -> int:
    """Evaluate one size (an int, or a symbolic UOp expression over bound variables) to an int.

    Ints pass through untouched; anything else is handed to `tinycore.uop.ops.sym_infer`, imported only then.

    >>> eval_dim(7, {})
    7
    """
    if isinstance(value, int):
        return value
    from tinycore.uop.ops import sym_infer  # symbolic sizes only: keeps this module free of the IR

    return int(sym_infer(value, var_vals))


@dataclass(frozen=True)
class Estimates:
    """Cost estimates of a program: `ops` arithmetic operations, `lds` bytes loaded/stored (cache hits included),
    `mem` bytes of global memory touched. Each may be an int or a symbolic expression of the program's variables.

    >>> Estimates(ops=10, mem=40).evaluate({})
    Estimates(ops=10, lds=0, mem=40)
    """

    ops: Any = 0
    lds: Any = 0
    mem: Any = 0

    def __add__(self, other: Estimates) -> Estimates:
        return Estimates(self.ops + other.ops, self.lds + other.lds, self.mem + other.mem)

    def evaluate(self, var_vals: dict[str, int]) -> Estimates:
        """These estimates with every symbolic expression evaluated at `var_vals`."""
        return Estimates(eval_dim(self.ops, var_vals), eval_dim(self.lds, var_vals), eval_dim(self.mem, var_vals))


@dataclass(frozen=True)
class TensorCore:
    """One warp-level matrix-multiply-accumulate instruction (WMMA): ``D = A @ B + C``.

    Shapes: ``dims = (N, M, K)``; ``A`` is M x K and ``B`` is K x N in `dtype_in`, ``C`` and ``D`` are M x N in
    `dtype_out`. `threads` lanes cooperate; lane ``t`` holds ``elements_per_thread = (a, b, c)`` elements of A, B
    and C/D in registers.

    The lane-to-element layout is explicit so that the `PYTHON` device can emulate the instruction:
    ``swizzle = (layout_a, layout_b, layout_c)`` where ``layout_x[lane][i] = (row, col)`` is the coordinate in
    operand X's matrix of the ``i``-th element lane ``lane`` holds. Every element of C/D is held by exactly one
    (lane, element) pair; A and B elements may be replicated over lanes (as on RDNA3), in which case all copies
    must hold the same value and the emulator reads the lowest lane's copy. `from_maps` builds the tables from
    functions. `opts` is the optimizer's recipe for laying the instruction onto local/upcast axes, interpreted by
    the kernel optimizer (``"l0"``: a local axis of size 2 on dim 0, ``"u1"``: an upcast axis of size 2 on dim 1).

    >>> tc = TensorCore.from_maps((2, 2, 1), 2, DType.new(11, 4, "float", "f"), DType.new(11, 4, "float", "f"),
    ...     a=lambda lane, i: (lane, 0), b=lambda lane, i: (0, lane), c=lambda lane, i: (lane, i))
    >>> tc.emulate([[1.0], [2.0]], [[3.0], [4.0]], [[0.0, 0.0], [0.0, 1.0]])
    [[3.0, 4.0], [6.0, 9.0]]
    """

    dims: tuple[int, int, int]
    threads: int
    elements_per_thread: tuple[int, int, int]
    dtype_in: DType
    dtype_out: DType
    swizzle: tuple[Layout, Layout, Layout]
    opts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n, m, k = self.dims
        shapes = ((m, k), (k, n), (m, n))
        for which, layout, count, (rows, cols) in zip("ABC", self.swizzle, self.elements_per_thread, shapes):
            if len(layout) != self.threads or any(len(lane) != count for lane in layout):
                raise ValueError(f"TensorCore {self.name}: layout of {which} must be {self.threads} lanes x {count}")
            held = [coord for lane in layout for coord in lane]
            if any(not (0 <= r < rows and 0 <= c < cols) for r, c in held):
                raise ValueError(f"TensorCore {self.name}: layout of {which} leaves the {rows}x{cols} matrix")
            if set(held) != {(r, c) for r in range(rows) for c in range(cols)}:
                raise ValueError(f"TensorCore {self.name}: layout of {which} does not cover the {rows}x{cols} matrix")
            if which == "C" and len(held) != rows * cols:
                raise ValueError(f"TensorCore {self.name}: each element of C must be held by exactly one lane")

    @property
    def name(self) -> str:
        """A readable name such as ``WMMA_16_16_16_half_float``."""
        return f"WMMA_{'_'.join(map(str, self.dims))}_{self.dtype_in.name}_{self.dtype_out.name}".replace(" ", "")

    @classmethod
    def from_maps(
        cls,
        dims: tuple[int, int, int],
        threads: int,
        dtype_in: DType,
        dtype_out: DType,
        a: Callable[[int, int], Coord],
        b: Callable[[int, int], Coord],
        c: Callable[[int, int], Coord],
        opts: tuple[str, ...] = (),
        replication: tuple[int, int] = (1, 1),
    ) -> TensorCore:
        """Build a TensorCore from per-operand functions ``(lane, element) -> (row, col)``.

        Elements per thread are derived from the matrix sizes; `replication` says how many lanes hold each element
        of A and of B (1 unless the hardware replicates inputs).
        """
        n, m, k = dims
        counts = (m * k * replication[0], k * n * replication[1], m * n)
        if any(count % threads for count in counts):
            raise ValueError(f"matrix sizes {counts} are not divisible by {threads} threads")
        per_thread = tuple(count // threads for count in counts)
        layouts = tuple(
            tuple(tuple(tuple(fn(lane, i)) for i in range(count)) for lane in range(threads))
            for fn, count in zip((a, b, c), per_thread)
        )
        return cls(dims, threads, per_thread, dtype_in, dtype_out, layouts, opts)  # type: ignore[arg-type]

    def emulate(self, a: Sequence[Sequence[Any]], b: Sequence[Sequence[Any]], c: Sequence[Sequence[Any]]) -> list:
        """Reference semantics: per-lane register values of A, B, C in, per-lane values of D out (Python numbers)."""
        n, m, k = self.dims
        mat_a: dict[Coord, Any] = {}
        mat_b: dict[Coord, Any] = {}
        mat_c: dict[Coord, Any] = {}
        for values, layout, mat in zip((a, b, c), self.swizzle, (mat_a, mat_b, mat_c)):
            for lane, coords in enumerate(layout):
                for i, coord in enumerate(coords):
                    mat.setdefault(coord, values[lane][i])  # replicated inputs: the lowest lane's copy wins
        out = {
            (row, col): mat_c[(row, col)] + sum(mat_a[(row, j)] * mat_b[(j, col)] for j in range(k))
            for row in range(m)
            for col in range(n)
        }
        return [[out[coord] for coord in coords] for coords in self.swizzle[2]]


class Renderer:
    """Base class of a device family's code generator: UOp program in, source text out.

    Subclasses set the class attributes (or instance attributes per `arch`) and implement `render`:

    - `device`: the device family (``"PYTHON"``, ``"CUDA"``), `arch`: target architecture or None, `suffix`: a
      short tag used in kernel names and cache keys;
    - `supports_float4`: vector loads/stores are rendered; `masked_access`: a vector load or store through a
      scalar INDEX may be gated by a bool vector (one lane per element: masked lanes are neither read, their value
      being the alt value's lane, nor written) or by one scalar gate; `has_local`: work-groups and local ids exist;
      `has_shared`: work-group shared memory exists; `global_max`/`local_max`: per-axis launch limits (None: no
      such axes), `shared_max`: bytes of shared memory per group;
    - `warp_size`: lanes of one SIMD warp when the device has cross-lane XOR shuffles (``Ops.SHUFFLE``), 0 when
      not: a grouped reduce whose innermost local axes are GROUP_REDUCE lanes filling whole warps then reduces
      within each warp by shuffles first, so shared memory holds one partial per warp (none when one warp is the
      whole group); the PYTHON interpreter runs ``Ops.SHUFFLE`` too;
    - `tensor_cores`: the WMMA instructions it can render; `native_ops`: names of `Ops` it renders directly (for
      example ``"MULACC"``, ``"EXP2"``); core decomposes every other op before rendering;
    - `supported_dtypes`: scalar dtypes it can load, store and compute in;
    - `index_bits`: the narrowest integer width of index arithmetic: 32 computes an index in int32 wherever its
      value range fits (cheaper on GPUs), 64 always in int64 (64-bit CPUs, where a 32-bit index must be widened
      again for every address and the compiler spends time proving that it can be);
    - `vector_bytes`: bytes of one vector register (CPU-style renderers; the heuristics' vector width);
      `vector_registers`: how many such registers the target has (16 with AVX2, 32 with AVX-512): the heuristics
      size a matmul's register tile of accumulators from it;
      `l2_bytes`: one core's L2 cache (CPU-style): a matmul's block of left-operand rows is sized to half of it;
      `reduce_streams`: how many rows a long reduce that is contiguous in memory reads side by side, each its own
      memory stream (1: one row at a time); what is fastest depends on the CPU's prefetchers, not on its ISA;
      `gemm_panel_bytes`: when > 0, the right operand of a large matrix product is repacked into column panels
      this many bytes wide (``(K, N) -> (N / w, K, w)``), so a register-blocked kernel reads it contiguously;
    - `row_reduce_bytes`: when > 0, a reduce over the last axis of rows at most this many bytes long stays in the
      kernel that broadcasts its result back over the row (softmax, layernorm: one kernel, each row read from
      memory once). On a CPU-style renderer one thread runs a whole row and rereads it from cache; a value the
      reduce loop computes and the output needs again is kept in a row-sized register array, not computed twice
      (`tinycore.codegen.stash`). On a GPU-style renderer (`has_local`) a work-group runs the row, each work-item
      holding its share of it in registers (`row_split`: only rows it can split that way fuse). 0: such reduces
      get kernels of their own.
    - `threads`: how many native CPU threads one kernel's ``THREAD`` split (``core_id``) runs on (CPU-style
      renderers); None: ``os.cpu_count()``. It is part of the BEAM cache key;
    - `max_vector_access`: the widest vector load/store, in lanes, the vectorizer emits (a power of two);
    - `extra_rules`: the device's own rewrite rules, ``{stage: PatternMatcher}``, applied by core to the kernel at the
      end of each named lowering stage (`tinycore.codegen.REWRITE_STAGES`: ``lower``, ``expand``, ``decompose``,
      ``linearize``; the last runs just before linearizing). Core fills it from the plugins'
      ``tinycore_rewrite_rules(stage, device)`` hook when the device is opened; an unknown stage name raises a
      ValueError naming the renderer and the valid stages.

    Every attribute above is declared here with its default, and core reads them as plain attributes: a renderer
    changes a default by assigning the attribute, never by adding a new name core would have to look up.

    Renderers pickle as ``(device family, arch)`` and are rebuilt through the plugin's `tinycore_compile_target`
    hook, so BEAM workers and compile-only tools get an identical renderer without any hardware.
    """

    device: str = ""
    arch: str | None = None
    suffix: str = ""
    supports_float4: bool = True
    masked_access: bool = False
    has_local: bool = True
    has_shared: bool = True
    global_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3
    local_max: tuple[int, ...] | None = (0x8FFFFFFF,) * 3
    shared_max: int = 32768
    warp_size: int = 0
    tensor_cores: list[TensorCore] = []  # read-only default: subclasses assign their own
    native_ops: frozenset[str] = frozenset()
    supported_dtypes: frozenset[DType] = frozenset(ALL_SCALARS)
    index_bits: int = 32
    vector_bytes: int = 32
    vector_registers: int = 16
    l2_bytes: int = 512 << 10
    reduce_streams: int = 4
    gemm_panel_bytes: int = 0
    row_reduce_bytes: int = 0
    threads: int | None = None
    max_vector_access: int = 16  # tinycore.codegen.expander.MAX_ACCESS_WIDTH (not imported: this module stays light)
    extra_rules: dict[str, PatternMatcher] = {}  # read-only default: subclasses assign their own

    def fuses_row(self, length: int, itemsize: int) -> bool:
        """Whether a reduce over rows of `length` elements of `itemsize` bytes stays in the kernel that broadcasts
        it back over the row (see `row_reduce_bytes`; on a GPU-style renderer also `row_split`)."""
        if length * itemsize > self.row_reduce_bytes:
            return False
        return not self.has_local or self.row_split(length, itemsize) is not None

    def row_split(self, length: int, itemsize: int) -> tuple[int, int] | None:
        """How a GPU-style work-group runs one row of `length` elements (a fused softmax or layernorm row):
        ``(vector lanes, work-items)``. Each work-item takes at most 16 elements: vectors of up to 16 bytes (4 lanes
        at most) along the row, neighbouring work-items on neighbouring vectors; the work-group is the fewest whole
        warps (`warp_size`) that hold the row, else the row's vectors one per work-item when a work-group can hold
        them, within `local_max`. None: no such split (the row's reduces then get kernels of their own)."""
        limit = min(1024, self.local_max[0] if self.local_max else 1024)
        warp = max(1, self.warp_size)
        for lanes in (4, 2, 1):
            if length % lanes or lanes * itemsize > 16:
                continue
            vectors = length // lanes
            for items in range(warp, limit + 1, warp):
                if vectors % items == 0 and (vectors // items) * lanes <= 16:
                    return lanes, items
            if vectors <= limit and lanes <= 16:
                return lanes, vectors
        return None

    def render(self, uops: list[UOp], name: str | None = None) -> str:
        """Render the linearized program `uops` (a `ProgramSpec.uops` list) to source text.

        `name` is the kernel's function name (core passes ``ProgramSpec.function_name``, so the sources of different
        kernels can share one translation unit in a batch compile); a renderer whose language has no function names
        ignores it, and None means "derive a name from the program" (its SINK's arg, else a fixed default).
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement render")

    def __reduce__(self) -> tuple[Callable[[str, str | None], Renderer], tuple[str, str | None]]:
        if _rebuilder is None:
            raise TypeError(
                f"cannot pickle {type(self).__name__}: a renderer is rebuilt from (device family, arch) by the plugin "
                "manager, which is not loaded; open the device first (tinycore.device.Device[...])"
            )
        return _rebuilder, (self.device, self.arch)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} device={self.device!r} arch={self.arch!r}>"


# The function that rebuilds a renderer from its device family and arch through the plugin owning the family (its
# `tinycore_compile_target` hook). The plugin manager sits above this module and installs it when imported, so a
# pickled renderer names the manager's function and unpickling imports the manager.
_rebuilder: Callable[[str, str | None], Renderer] | None = None


def set_renderer_rebuilder(rebuild: Callable[[str, str | None], Renderer] | None) -> None:
    """Install `rebuild(family, arch) -> Renderer`, what unpickling a `Renderer` calls (the plugin manager installs
    its own when imported); None uninstalls it."""
    global _rebuilder
    _rebuilder = rebuild


_IDENTIFIER_CHARS = re.compile(r"[^A-Za-z0-9_]")
_ANSI_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def c_identifier(name: str) -> str:
    """`name` made a C (and LLVM) identifier: ANSI colour codes dropped, other characters replaced by ``_``, and a
    ``k_`` prefix when it would start with a digit (or be empty).

    >>> c_identifier("E_4\x1b[32m_2"), c_identifier("3x")
    ('E_4_2', 'k_3x')
    """
    cleaned = _IDENTIFIER_CHARS.sub("_", _ANSI_ESCAPES.sub("", name))
    return cleaned if cleaned and not cleaned[0].isdigit() else f"k_{cleaned}"


def kernel_function_name(uops: list[UOp], name: str | None = None) -> str:
    """The function name a renderer gives a kernel: `name` (what core passes, `ProgramSpec.function_name`), else the
    name the program's SINK carries (an arg that is a string or has ``function_name``/``name``), else ``kernel``;
    always a C identifier."""
    if name:
        return c_identifier(name)
    for u in reversed(uops):
        if u.op.name == "SINK" and u.arg is not None:
            if isinstance(u.arg, str):
                return c_identifier(u.arg)
            for attr in ("function_name", "name"):
                value = getattr(u.arg, attr, None)
                if isinstance(value, str) and value:
                    return c_identifier(value)
    return "kernel"


@dataclass
class ProgramSpec:
    """One kernel as every renderer consumes it and the `PYTHON` device executes it.

    - `name`: the kernel's display name (may carry ANSI colors; `function_name` is the C identifier form);
    - `uops`: the linearized UOp program; `device`: the device it is built for;
    - `global_size` / `local_size`: launch dims (ints or symbolic expressions; `local_size=None` lets the device
      choose); `vars`: names of the program's variables, in argument order after the buffers;
    - `ins` / `outs`: indices of the buffer arguments read / written; `estimates`: cost estimates;
    - `src`: the rendered source once rendered, `lib`: the compiled binary once compiled.
    """

    name: str
    uops: list[UOp]
    device: str
    global_size: tuple[Any, ...] = (1, 1, 1)
    local_size: tuple[Any, ...] | None = (1, 1, 1)
    vars: list[str] = field(default_factory=list)
    ins: list[int] = field(default_factory=list)
    outs: list[int] = field(default_factory=list)
    estimates: Estimates = field(default_factory=Estimates)
    src: str | None = None
    lib: bytes | None = None

    @property
    def function_name(self) -> str:
        """`name` as a valid C identifier (colors removed, other characters replaced by ``_``).

        >>> ProgramSpec("r_4:2", [], "PYTHON").function_name
        'r_4_2'
        """
        return c_identifier(self.name)

    @property
    def has_symbolic_dims(self) -> bool:
        """True when a launch dim depends on a variable (it must be re-evaluated on every launch)."""
        return not all(isinstance(d, int) for d in (*self.global_size, *(self.local_size or ())))

    def launch_dims(self, var_vals: dict[str, int]) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """(global_size, local_size) as ints, with symbolic sizes evaluated at `var_vals`."""
        global_size = tuple(eval_dim(d, var_vals) for d in self.global_size)
        local_size = None if self.local_size is None else tuple(eval_dim(d, var_vals) for d in self.local_size)
        return global_size, local_size

    def var_values(self, var_vals: dict[str, int]) -> tuple[int, ...]:
        """The values of `vars` in argument order (raises KeyError naming a missing variable)."""
        try:
            return tuple(int(var_vals[name]) for name in self.vars)
        except KeyError as missing:
            raise KeyError(f"kernel {self.function_name} needs variable {missing.args[0]!r}, got {var_vals}") from None
