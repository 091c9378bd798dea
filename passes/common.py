"""Small helpers shared by the passes: which functions to visit, node stamps."""

from __future__ import annotations

from iree.compiler import ir

from collage_mlir.dialects import collage
from collage_mlir.graph import DataflowGraph, NodeKind


def functions(module: ir.Operation) -> list[ir.Operation]:
    """The public `func.func`s with a body: the model entry points (outlined regions are
    private and are skipped)."""
    out = []
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "func.func" or not op.regions[0].blocks:
            continue
        vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
        if vis is not None and ir.StringAttr(vis).value == "private":
            continue
        out.append(op)
    return out


def function_name(fn: ir.Operation) -> str:
    return ir.StringAttr(fn.attributes["sym_name"]).value


def stamp_nodes(graph: DataflowGraph) -> None:
    """Write `collage.node = <post-dfs index>` on every op node (not on constants)."""
    with graph.func_op.context:
        i64 = ir.IntegerType.get_signless(64)
        for node in graph.nodes:
            if node.kind is NodeKind.OP:
                node.op.attributes[collage.NODE] = ir.IntegerAttr.get(i64, node.index)
