"""The dataflow view of one function: DataflowGraph (post-dfs index) and SubGraph."""

import collage_mlir.context  # noqa: F401  (binding set-up)
from collage_mlir.graph.bits import bits_of, iter_bits, popcount
from collage_mlir.graph.dataflow import DataflowGraph, Node, NodeKind
from collage_mlir.graph.subgraph import SubGraph, SubGraphConfig

__all__ = [
    "DataflowGraph", "Node", "NodeKind", "SubGraph", "SubGraphConfig",
    "bits_of", "iter_bits", "popcount",
]
