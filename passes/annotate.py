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
from collage_mlir.dialects.func import function_name, public_functions
from collage_mlir.driver import DEFAULT_MAX_DEPTH, DEFAULT_MAX_EXITS, annotate, refuse_no_outputs
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraphConfig
from collage_mlir.passes.common import forget_decision, refuse_outlined, stamp_nodes
from collage_mlir.passes.registry import CollagePass, option, register
from collage_mlir.rules.serialize import candidates_to_attr, summary


@register
@dataclass(frozen=True)
class AnnotatePass(CollagePass):
    name = "collage-annotate"
    summary = "find candidate partitions per backend; write collage.node and collage.candidates"

    backends: tuple[str, ...] = option((), "backends to find candidates for (required)")
    max_depth: int | None = option(DEFAULT_MAX_DEPTH, "most ops on a path through a candidate "
                                   "(none: unlimited; a backend's maximal regions are kept "
                                   "whatever their depth)")
    max_exits: int = option(DEFAULT_MAX_EXITS, "most ops whose results leave a candidate")
    allow_taps: bool = option(False, "allow an op whose result leaves a candidate to feed "
                              "ops inside it too")
    print_summary: bool = option(False, "print candidate counts per backend and rule to stderr")

    def run_on_module(self, module: ir.Operation) -> None:
        if not self.backends:
            raise CollageError("pass 'collage-annotate' needs backends=<name>[,<name>...]")
        config = SubGraphConfig(self.max_exits, self.allow_taps, self.max_depth)
        for fn in public_functions(module):
            refuse_outlined(fn, self.name, "the model as imported")
            refuse_no_outputs(fn)
            graph = DataflowGraph(fn)
            stamp_nodes(graph)
            forget_decision(graph)
            candidates = annotate(graph, self.backends, config)
            with fn.context:
                fn.attributes[collage.CANDIDATES] = candidates_to_attr(candidates, fn.context)
            if self.print_summary:
                sys.stderr.write(f"collage-annotate @{function_name(fn)}: "
                                 f"{summary(candidates, self.backends)}\n")
