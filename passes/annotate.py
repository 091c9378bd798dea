"""collage-annotate: RFC Phases 1-2, find every candidate partition of every backend.

    collage-annotate{backends=onnxruntime,openvino,iree max-depth=3 max-exits=1 print-summary=true}

Stamps `collage.node` on each op and writes `collage.candidates` on each public function
(see rules/serialize.py); the IR is otherwise unchanged. Each backend's rule comes from its
kind (rules/defaults.py) and finds sub-graphs within `max-depth`, `max-exits` and
`allow-taps`, plus the backend's maximal supported regions whatever the limits.
`print-summary=true` prints candidate counts per backend and rule to stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.dialects import collage
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraphConfig
from collage_mlir.passes.common import function_name, functions, stamp_nodes
from collage_mlir.passes.registry import CollagePass, register
from collage_mlir.rules.serialize import candidates_to_attr, summary
from collage_mlir.rules.spec import generate_candidates, specs_for

DEFAULT_MAX_DEPTH = 3
"""Measured with onnxruntime, openvino and iree (max-exits=1): light_resnet50 has 177/340/
498/639 candidates per graph backend at depth 1/2/3/4 (iree 169 to 185), light_densenet121
669/1278/1828/2319 (iree 366). Each level adds about 30%; 3 takes Conv+BN+Relu and
Conv+Add+Relu whole, and deeper groups stay reachable through the maximal regions."""


@register
@dataclass(frozen=True)
class AnnotatePass(CollagePass):
    name = "collage-annotate"
    summary = "find candidate partitions per backend; write collage.node and collage.candidates"

    backends: tuple[str, ...] = ()
    max_depth: int | None = DEFAULT_MAX_DEPTH
    max_exits: int = 1
    allow_taps: bool = False
    print_summary: bool = False

    def run_on_module(self, module: ir.Operation) -> None:
        if not self.backends:
            raise CollageError("pass 'collage-annotate' needs backends=<name>[,<name>...]")
        specs = specs_for(self.backends)
        config = SubGraphConfig(self.max_exits, self.allow_taps, self.max_depth)
        for fn in functions(module):
            graph = DataflowGraph(fn)
            stamp_nodes(graph)
            candidates = generate_candidates(graph, specs, config)
            with fn.context:
                fn.attributes[collage.CANDIDATES] = candidates_to_attr(candidates, fn.context)
            if self.print_summary:
                sys.stderr.write(f"collage-annotate @{function_name(fn)}: "
                                 f"{summary(candidates)}\n")
