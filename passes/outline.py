"""collage-outline (RFC phase 4): one private function per chosen region.

Reads `collage.region` / `collage.backend` stamped by collage-search and outlines each
region of each public function as `func.func private @<fn>_<backend>_<k>` carrying
`collage.backend` and, when the search recorded it, `collage.estimated_cost`. The public
function is left holding calls in a valid order; multi-output regions return several
results. This is the only pass that rewrites the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.dialects.func import public_functions
from collage_mlir.errors import CollageError
from collage_mlir.graph import SubGraph, bits_of
from collage_mlir.graph.outline import outline_placed
from collage_mlir.passes.common import region_costs, stamped_regions
from collage_mlir.passes.registry import CollagePass, register


@register
@dataclass(frozen=True)
class OutlinePass(CollagePass):
    name = "collage-outline"
    summary = "outline each collage.region into a per-backend private function"

    def run_on_module(self, module: ir.Operation) -> None:
        for fn in public_functions(module):
            outline_function(fn)
        try:
            module.verify()  # these bindings raise MLIRError rather than return False
        except ir.MLIRError as e:
            raise CollageError(f"the outlined module does not verify: "
                               f"{str(e).strip().splitlines()[-1].strip()}") from None


def outline_function(fn: ir.Operation) -> list[ir.Operation]:
    """Outline the regions of one function; returns the new call ops in execution order."""
    graph, members, backend = stamped_regions(fn, "collage-outline")
    costs = region_costs(fn, len(members))
    return outline_placed(graph, [(k, SubGraph(graph, bits_of(members[k])), backend[k],
                                   costs[k] if costs else None)
                                  for k in sorted(members)])
