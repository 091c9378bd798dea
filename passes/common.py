"""Small helpers shared by the passes: node stamps."""

from __future__ import annotations

from iree.compiler import ir

from collage_mlir.dialects import collage
from collage_mlir.graph import DataflowGraph, NodeKind


def stamp_nodes(graph: DataflowGraph) -> None:
    """Write `collage.node = <post-dfs index>` on every op node (not on constants)."""
    with graph.func_op.context:
        i64 = ir.IntegerType.get_signless(64)
        for node in graph.nodes:
            if node.kind is NodeKind.OP:
                node.op.attributes[collage.NODE] = ir.IntegerAttr.get(i64, node.index)
