"""LLVM from the ``llvmlite`` wheel: the CLANG device's default in-process compiler, the same LLVM on every machine.

``pip install tinycore-clang`` brings ``llvmlite``, whose wheels carry a whole LLVM (22 with llvmlite 0.50) in one
shared library, so fast kernels need no system clang, gcc or ``libLLVM``. `LlvmliteToolchain` has the interface of
`tinycore_clang.libllvm.LLVMToolchain` (``cpu``, ``features``, ``version``, ``compile_object``), so
`tinycore_clang.llvm_compiler.LLVMCompiler` uses either; `tinycore_clang.libllvm.find_library` picks this one unless
``TINYCORE_LLVM_LIB`` names a system library.

What llvmlite cannot do is take a pass pipeline as text: it offers LLVM's standard pipelines (by optimization
level) and a list of single passes. The optimizer pipelines it runs are therefore named (`PIPELINES`):

- ``kernel`` (the default, what `tinycore_clang.libllvm.KERNEL_PIPELINE` means here): LLVM's ``-O1`` function
  simplification pipeline (the passes ``KERNEL_PIPELINE`` was chosen from: SROA, early CSE, instcombine, LICM, loop
  rotation, SCCP, ADCE...) followed by ``reassociate``; unlike ``KERNEL_PIPELINE`` it has no SLP vectorizer and
  keeps ``indvars``;
- ``function<O1>`` / ``function<O2>``: LLVM's function simplification pipeline at that level alone;
- ``default<O1>`` ... ``default<O3>``: the whole ``-O`` pipeline, as ``clang -O2`` runs it.

Single passes are not offered on purpose: LLVM >= 18 aborts the process when a bare ``instcombine`` misses its
fixpoint, which only the standard pipelines switch off (see `tinycore_clang.libllvm.pipeline_for`).

llvmlite serializes every call into LLVM behind one process-wide lock, so kernels compile one at a time even with
several compile threads (Python-side lowering of the next kernel still overlaps them).
"""

from __future__ import annotations

import threading
from typing import Any

from tinycore_clang.libllvm import KERNEL_PIPELINE, TARGET_CPU_MIN_VERSION, CommandLine, LLVMError, PassOptions

MIN_LLVMLITE = (0, 46)
INSTALL_HINT = "pip install 'llvmlite>=0.46' (its wheels bundle LLVM)"
DEFAULT_OPTIONS = PassOptions()
PIPELINES = ("kernel", "function<O1>", "function<O2>", "default<O1>", "default<O2>", "default<O3>")


def pipeline_name(pipeline: str) -> str:
    """The llvmlite pipeline (`PIPELINES`) that pass options' `pipeline` asks for: ``KERNEL_PIPELINE`` is
    ``kernel``; other pipeline texts raise `LLVMError` (llvmlite can't parse them) naming the choices and the fix.

    >>> pipeline_name(KERNEL_PIPELINE), pipeline_name("default<O2>")
    ('kernel', 'default<O2>')
    """
    if pipeline == KERNEL_PIPELINE:
        return "kernel"
    if pipeline in PIPELINES:
        return pipeline
    raise LLVMError(
        f"pipeline {pipeline!r}: LLVM from llvmlite runs one of {', '.join(PIPELINES)} (llvmlite takes no pipeline "
        "text); for a pipeline text set TINYCORE_LLVM_LIB=/path/to/libLLVM-N.so to use a system LLVM"
    )


class LlvmliteToolchain:
    """Compiles LLVM IR text to an object file for this machine with llvmlite's LLVM (see the module docstring).

    Importing llvmlite and initializing the native target happen on construction; `LlvmliteToolchain.shared()`
    keeps one per process and target CPU (``CLANG_CPU``, else the host). `cpu` and `features` are the host CPU as
    LLVM sees it (``-march=native``), unless given: ``LlvmliteToolchain(cpu="haswell", features="")`` compiles for
    another x86-64 CPU (with its default features), so kernels for a machine that isn't at hand can be read as
    assembly (`assembly`). The constructor does not check `cpu`; `shared` does.
    """

    _instance: LlvmliteToolchain | None = None  # the host's
    _targets: dict[str, LlvmliteToolchain] = {}  # other CPUs' (`shared` with a CPU name or CLANG_CPU)
    _instance_lock = threading.Lock()

    def __init__(self, cpu: str | None = None, features: str | None = None) -> None:
        try:
            import llvmlite
            import llvmlite.binding as llvm
        except ImportError as error:
            raise LLVMError(f"llvmlite is not installed ({error}); {INSTALL_HINT}") from error
        have = tuple(int(part) for part in llvmlite.__version__.split(".")[:2] if part.isdigit())
        if have < MIN_LLVMLITE or not hasattr(llvm, "create_pass_builder"):
            raise LLVMError(f"llvmlite {llvmlite.__version__} is too old (no new pass manager); {INSTALL_HINT}")
        self._llvm: Any = llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        self.llvmlite_version: str = llvmlite.__version__
        self.version: int = int(llvm.llvm_version_info[0])
        self.triple: str = llvm.get_process_triple()
        self.cpu: str = llvm.get_host_cpu_name() if cpu is None else cpu
        host_features = llvm.get_host_cpu_features().flatten() if cpu is None else ""
        self.features: str = host_features if features is None else features
        self._target = llvm.Target.from_triple(self.triple)
        self._local = threading.local()
        self.command_line = CommandLine(lambda args: [llvm.set_option("tinycore", arg) for arg in args])

    @classmethod
    def shared(cls, cpu: str | None = None) -> LlvmliteToolchain:
        """The process's toolchain for target CPU `cpu` (created on first use): None reads ``CLANG_CPU`` (unset or
        empty: the host), ``"native"`` is the host, anything else a CPU of
        `tinycore_clang.renderer.X86_CPUS` that this machine can run, with that CPU's default features. A ValueError
        naming the value when it is not (`tinycore_clang.renderer.check_target_cpu`)."""
        from tinycore_clang.renderer import check_target_cpu, target_cpu_from_env

        target = target_cpu_from_env() if cpu is None else check_target_cpu(cpu, source="cpu")
        with cls._instance_lock:
            if target is not None:
                if target not in cls._targets:
                    chain = cls(cpu=target, features="")
                    if chain.version < TARGET_CPU_MIN_VERSION:
                        raise LLVMError(
                            f"CLANG_CPU={target} needs LLVM >= {TARGET_CPU_MIN_VERSION} (older ones don't know every "
                            f"CPU name), and llvmlite {chain.llvmlite_version} has LLVM {chain.version}; {INSTALL_HINT}"
                        )
                    cls._targets[target] = chain
                return cls._targets[target]
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _thread_state(self, codegen_level: int) -> tuple[Any, Any]:
        """This thread's (context, target machine) for `codegen_level`, created on first use."""
        states: dict[int, tuple[Any, Any]] = self._local.__dict__.setdefault("states", {})
        if codegen_level not in states:
            machine = self._target.create_target_machine(
                cpu=self.cpu, features=self.features, opt=codegen_level, reloc="pic", codemodel="default"
            )
            states[codegen_level] = (self._llvm.create_context(), machine)
        return states[codegen_level]

    def compile_object(self, ir: str, options: PassOptions = DEFAULT_OPTIONS, name: str = "kernel") -> bytes:
        """Parse, optimize and compile one LLVM IR module to the bytes of an object file; `LLVMError` with LLVM's
        message when the IR is invalid or the pipeline unknown. (`name` is for the interface; llvmlite names
        modules itself.)"""
        module, machine = self._optimized(ir, options)
        try:
            return bytes(machine.emit_object(module))
        except RuntimeError as error:
            raise LLVMError(str(error)) from None

    def assembly(self, ir: str, options: PassOptions = DEFAULT_OPTIONS) -> str:
        """The assembly text `compile_object` would assemble (LLVM marks register spills in it with ``Spill`` and
        ``Reload`` comments)."""
        module, machine = self._optimized(ir, options)
        return str(machine.emit_assembly(module))

    def _optimized(self, ir: str, options: PassOptions) -> tuple[Any, Any]:
        """`ir` parsed and optimized, with this thread's target machine for `options`."""
        pipeline = pipeline_name(options.pipeline)
        self.command_line.set(options.codegen_args)
        context, machine = self._thread_state(options.codegen_level)
        try:
            module = self._llvm.parse_assembly(ir, context=context)
        except RuntimeError as error:
            raise LLVMError(str(error)) from None
        module.triple = self.triple
        module.data_layout = str(machine.target_data)
        self._optimize(module, machine, pipeline, options)
        return module, machine

    def _optimize(self, module: Any, machine: Any, pipeline: str, options: PassOptions) -> None:
        llvm = self._llvm
        level = 1 if pipeline == "kernel" else int(pipeline[-2])
        tuning = llvm.create_pipeline_tuning_options(speed_level=level)
        tuning.loop_vectorization = options.loop_vectorization
        tuning.slp_vectorization = options.slp_vectorization
        tuning.loop_unrolling = options.loop_unrolling
        tuning.loop_interleaving = options.loop_interleaving
        builder = llvm.create_pass_builder(machine, tuning)
        if pipeline.startswith("default"):
            builder.getModulePassManager().run(module, builder)
            return
        passes = builder.getFunctionPassManager()
        if pipeline == "kernel":
            passes.add_reassociate_pass()
        for function in module.functions:
            if not function.is_declaration:
                passes.run(function, builder)
