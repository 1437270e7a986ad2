"""`KernelParams`: what a CLANG kernel takes as parameters, read once from its linearized program.

Both backends of the CLANG device (C source: `tinycore_clang.renderer`; LLVM IR: `tinycore_clang.llvm_renderer`)
produce the same kernel ABI, and this module decides it, so each renderer only spells it in its language:

- the buffers, one parameter per ``DEFINE_GLOBAL`` index from 0 to the highest (an index no uop defines is an unused
  slot), and which of them the kernel may write (read-only ones are ``const``/``readonly``);
- the variables (``DEFINE_VAR``) in the order the program defines them: parameter name, and whether it is passed as
  a 32-bit ``int`` (int32 variables) or a 64-bit ``long long``;
- ``core_id`` (a ``SPECIAL("core_id")``), the last parameter when the kernel is split across threads;
- the ``NAME_tc_info`` string read by the runtime: ``"tc1 bufs=N vars=iq cores=C"`` (`KernelParams.info`).

>>> c_identifier("E_4\\x1b[32m_2"), c_identifier("3x")
('E_4_2', 'k_3x')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tinycore.sdk import DType, Ops, PtrDType, UOp, c_identifier, dtypes

ABI_VERSION = 1


def root_buffer(u: UOp) -> UOp | None:
    """The DEFINE_GLOBAL/DEFINE_REG/DEFINE_LOCAL a pointer expression addresses (None when unknown)."""
    seen = 0
    while seen < 64:
        if u.op in (Ops.DEFINE_GLOBAL, Ops.DEFINE_REG, Ops.DEFINE_LOCAL):
            return u
        if u.op in (Ops.INDEX, Ops.CAST, Ops.AFTER, Ops.NOOP, Ops.BITCAST) and u.src:
            u = u.src[0]
            seen += 1
            continue
        return None
    return None


@dataclass(frozen=True)
class KernelVariable:
    """One ``DEFINE_VAR`` parameter: its uop, its parameter name (``var_<name>``, or ``var<position>`` when the
    variable has no name), and whether it is passed as 64 bits (``long long``/``i64``) rather than as an ``int``."""

    uop: UOp
    name: str
    wide: bool

    @property
    def letter(self) -> str:
        """Its letter in the info string: ``q`` (64-bit) or ``i`` (int)."""
        return "q" if self.wide else "i"


@dataclass(frozen=True)
class KernelParams:
    """The parameters of one kernel (see the module docstring).

    `buffers[i]` is the ``DEFINE_GLOBAL`` of index i (None: an unused slot); `written` holds the indices of the
    buffers the kernel may store to (every index when a store goes through a pointer of unknown origin);
    `variables` are in definition order; `core_id` is the ``SPECIAL("core_id")`` uop, if any.
    """

    buffers: tuple[UOp | None, ...]
    written: frozenset[int]
    variables: tuple[KernelVariable, ...]
    core_id: UOp | None

    @staticmethod
    def pointee(buffer: UOp) -> DType:
        """The element dtype of a buffer's pointer."""
        return buffer.dtype.base if isinstance(buffer.dtype, PtrDType) else buffer.dtype

    @property
    def cores(self) -> int:
        """How many chunks the ``core_id`` split has: 0 when not threaded, -1 when symbolic (the launch's
        ``global_size[0]``)."""
        if self.core_id is None:
            return 0
        size = self.core_id.src[0] if self.core_id.src else None
        return int(size.arg) if size is not None and size.op is Ops.CONST else -1

    @property
    def info(self) -> str:
        """The text of ``NAME_tc_info`` (without the terminating NUL)."""
        letters = "".join(v.letter for v in self.variables)
        return f"tc{ABI_VERSION} bufs={len(self.buffers)} vars={letters} cores={self.cores}"


def kernel_params(uops: list[UOp], fail: Callable[[UOp, str], Exception]) -> KernelParams:
    """The `KernelParams` of a linearized program. `fail(u, why)` makes the exception raised for a program no
    CLANG kernel can express: two ``DEFINE_GLOBAL``s of one index, or a GPU launch id (a ``SPECIAL`` other than
    ``core_id``). A ``CUSTOM`` uop may write through every pointer it is given."""
    globals_: dict[int, UOp] = {}
    variables: list[UOp] = []
    stored: set[int] = set()
    all_written = False
    core_id: UOp | None = None
    for u in uops:
        if u.op is Ops.DEFINE_GLOBAL:
            if u.arg in globals_ and globals_[u.arg] is not u:
                raise fail(u, f"two DEFINE_GLOBALs with index {u.arg}")
            globals_[u.arg] = u
        elif u.op is Ops.DEFINE_VAR and u not in variables:
            variables.append(u)
        elif u.op is Ops.STORE or u.op is Ops.CUSTOM:
            targets = u.src[:1] if u.op is Ops.STORE else [s for s in u.src if isinstance(s.dtype, PtrDType)]
            for target_ptr in targets:
                target = root_buffer(target_ptr)
                if target is None:
                    all_written = True
                elif target.op is Ops.DEFINE_GLOBAL:
                    stored.add(target.arg)
        elif u.op is Ops.SPECIAL:
            if u.arg != "core_id":
                raise fail(u, "the CPU has no GPU-style launch ids (only SPECIAL 'core_id')")
            core_id = u
    count = max(globals_) + 1 if globals_ else 0
    written = frozenset(range(count)) if all_written else frozenset(i for i in stored if 0 <= i < count)
    return KernelParams(
        buffers=tuple(globals_.get(i) for i in range(count)),
        written=written,
        variables=tuple(
            KernelVariable(
                uop=v,
                name=f"var_{c_identifier(v.arg[0])}" if isinstance(v.arg, tuple) else f"var{j}",
                wide=v.dtype != dtypes.int32,
            )
            for j, v in enumerate(variables)
        ),
        core_id=core_id,
    )
