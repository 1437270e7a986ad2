"""The pluggy hook specifications a device plugin implements (project name ``"tinycore"``).

A plugin is a light module named by an entry point in group ``tinycore.devices``; it defines functions decorated
with :data:`tinycore.plugin.hookimpl` whose names and arguments match the specs below. Only
``tinycore_open_device`` may import heavy vendor libraries.

>>> sorted(name for name in dir(DeviceHookSpecs) if name.startswith("tinycore_"))[:2]
['tinycore_compile_target', 'tinycore_device_capabilities']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

from tinycore.backend.compiled import DeviceCapabilities, ProbeResult

if TYPE_CHECKING:
    from tinycore.backend.compiled import Compiled
    from tinycore.backend.compiler import Compiler
    from tinycore.renderer import Renderer
    from tinycore.uop.patterns import PatternMatcher

PROJECT_NAME = "tinycore"
ENTRY_POINT_GROUP = "tinycore.devices"
# The device contract's version. A plugin declares TINYCORE_PLUGIN_API = (major, minor) in its entry module:
# it loads when the majors are equal and its minor is <= core's minor.
PLUGIN_API_VERSION: tuple[int, int] = (1, 0)

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class DeviceHookSpecs:
    """Hook specifications; see DESIGN.md section 4 and docs/plugins.md."""

    @hookspec(historic=True)
    def tinycore_register_devices(self, registry: Any) -> None:
        """Declare devices with ``registry.register(name, priority=, aliases=, api_version=, factory=)``.

        No vendor import may happen here: this runs for every plugin when the first device is requested.
        """

    @hookspec(firstresult=True)
    def tinycore_probe_device(self, name: str) -> ProbeResult | None:
        """Cheaply check whether device family ``name`` can run here. Must never raise; None if not yours."""

    @hookspec(firstresult=True)
    def tinycore_open_device(self, name: str, ordinal: int) -> Compiled | None:
        """Build the ``Compiled`` device ``name`` number ``ordinal``; None if ``name`` is not yours."""

    @hookspec(firstresult=True)
    def tinycore_compile_target(self, name: str, arch: str | None) -> tuple[Renderer, Compiler] | None:
        """A (Renderer, Compiler) pair for ``name``/``arch`` that needs no hardware (compile-only, BEAM workers)."""

    @hookspec(firstresult=True)
    def tinycore_device_capabilities(self, name: str) -> DeviceCapabilities | None:
        """The capabilities of device family ``name``; None if not yours. The one place a plugin declares them:
        ``Compiled.capabilities`` returns this answer, and derives capabilities from the renderer only when the
        owning plugin answers None (or does not implement the hook)."""

    @hookspec
    def tinycore_rewrite_rules(self, stage: str, device: str) -> PatternMatcher | None:
        """Extra rewrite rules for the named lowering ``stage`` (``tinycore.codegen.REWRITE_STAGES``) of kernels
        for device family ``device``; None if none. Collected from every plugin when a device is opened (all results
        are combined) and run by core at the end of that stage (`Renderer.extra_rules` carries them)."""

    @hookspec
    def tinycore_doctor_checks(self) -> list[Any] | None:
        """Extra ``tinycore doctor`` checks (`tinycore.cli.DoctorCheck`; typed Any here because the CLI imports this
        module), run on every device after core's own; a check that does
        not apply to a device raises ``CheckSkipped``. Collected from every plugin once per doctor run."""

    @hookspec(firstresult=True)
    def tinycore_collective_backend(self, device: str, group: Any) -> Any | None:
        """A collective backend for tensors on ``device`` (``"CUDA:1"``) in process group ``group``, or None to let
        core move them through host memory with MPI (`tinycore.distributed.MPIBackend`, the fallback of every
        device). The answer is a `tinycore.distributed.CollectiveBackend` (typed Any here: that module imports mpi4py
        lazily and this one must stay light); vendor libraries (NCCL) are imported here, on first use, never at
        registration. Called on the plugin owning the device's family, once per device and group, on the first
        collective; ``TINYCORE_DIST_BACKEND=mpi`` skips it. ``group`` gives ``rank``, ``world_size``, ``local_rank``
        and ``broadcast_bytes(data, root)`` (to share a communicator id, as NCCL needs)."""

    @hookspec
    def tinycore_report_info(self, name: str) -> dict[str, str] | None:
        """Driver/toolkit versions and similar facts about ``name`` for ``plugins -v`` and ``doctor``."""
