"""collage-test-extract: outline one SubGraph given by node indices, if it is valid.

A test-only pass that pins SubGraph behaviour in lit tests: it stamps `collage.node` on every
op so the indices are visible, then outlines the SubGraph `nodes` of each function as
`@<fn>_extracted`, or leaves the IR unchanged and adds `collage.invalid = "<reason>"` to the
function when the SubGraph is not valid under the configured limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.dialects.func import function_name, public_functions
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, NodeKind, SubGraph, SubGraphConfig, bits_of
from collage_mlir.graph.outline import Region, outline
from collage_mlir.passes.common import stamp_nodes
from collage_mlir.passes.registry import CollagePass, option, register


@register
@dataclass(frozen=True)
class TestExtractPass(CollagePass):
    name = "collage-test-extract"
    summary = "outline the SubGraph `nodes` when valid (tests only)"

    nodes: tuple[int, ...] = option((), "post-dfs indices of the nodes to outline")
    max_exits: int = option(1, "most ops whose results leave the SubGraph")
    allow_taps: bool = option(False, "allow an op whose result leaves the SubGraph to feed "
                              "ops inside it too")
    max_depth: int | None = option(None, "most ops on a path through it (none: unlimited)")

    def run_on_module(self, module: ir.Operation) -> None:
        config = SubGraphConfig(self.max_exits, self.allow_taps, self.max_depth)
        for fn in public_functions(module):
            graph = DataflowGraph(fn)
            stamp_nodes(graph)
            for i in self.nodes:
                if not 0 <= i < len(graph) or graph.nodes[i].kind is not NodeKind.OP:
                    raise CollageError(f"node {i} is not an op of @{function_name(fn)}")
            sub = SubGraph(graph, bits_of(self.nodes))
            reason = sub.why_invalid(config)
            if reason:
                with fn.context:
                    fn.attributes["collage.invalid"] = ir.StringAttr.get(reason)
                continue
            outline(graph, [Region(sub, f"{function_name(fn)}_extracted")])
