"""The IR of tinycore (see docs/ir.md).

- `tinycore.uop.ops`: `Ops`, `GroupOp`, `AxisType`, the hash-consed `UOp`, `Variable`, `sym_infer`, `exec_alu`.
- `tinycore.uop.patterns`: `UPat`, `PatternMatcher`, `graph_rewrite`, `graph_rewrite_map`, rewrite tracing.
- `tinycore.uop.symbolic`: the `symbolic_simple` / `symbolic` / `symbolic_flat` rule sets, `lower_index_dtype`.
- `tinycore.uop.spec`: `type_verify` and the per-stage specs.
- `tinycore.uop.render_expr`: short expression strings for symbolic UOps.

Nothing is imported here, so importing one submodule doesn't pull in the others.
"""
