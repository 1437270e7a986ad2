"""The device contract: the base classes and protocols a device plugin implements (DESIGN.md §4).

- `tinycore.backend.allocator`: `BufferSpec`, `Allocator`, `LRUAllocator`, `host_address`;
- `tinycore.backend.compiled`: the `Compiled` device bundle, the `Program`/`LaunchableProgram` protocols,
  `grid_and_block`, `DeviceCapabilities`, `ProbeResult`;
- `tinycore.backend.compiler`: the `Compiler` base with its disk cache; `tinycore.backend.disk_cache` the cache;
- the `Renderer` base is its own package, `tinycore.renderer`, and the `GraphRunner` base lives with the engine
  (`tinycore.engine.graph_runner`): it replays the engine's exec items.

This layer sits below code generation, the plugin manager and the engine, and imports none of them: where it needs
an answer from above (the capabilities a plugin declares), the layer above installs it. Plugins import all of this
through `tinycore.sdk`.
"""
