"""collage-merge: join adjacent chosen regions on one backend where the union costs no more.

    collage-merge{cost=table:costs.json}            union costs from a JSON table (lit tests)
    collage-merge{cost=measure cache=run.sqlite}    unions measured on the real backends

Runs after collage-search (TVM Collage's MaxCoalesce, `search/merge.py`): reads the regions
collage-search stamped (`collage.region`, `collage.backend`, `collage.region_costs`), costs
the convex unions of adjacent regions on one backend, keeps each that does not raise the
whole cover's estimate (kernels plus hand-offs), and stamps the result the same way, regions
renumbered in execution order. Only attributes change.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.base import CostEstimator
from collage_mlir.dialects import collage
from collage_mlir.dialects.func import function_name, public_functions
from collage_mlir.driver import make_estimator, merge, tolerance
from collage_mlir.errors import CollageError
from collage_mlir.graph import SubGraph, bits_of
from collage_mlir.passes.common import region_costs, stamped_regions
from collage_mlir.passes.registry import CollagePass, option, register, stage_option
from collage_mlir.passes.search import SearchPass, write_partitioning
from collage_mlir.search import Partitioning, evaluate
from collage_mlir.search.partitioning import Choice

RULE = "searched"
"""`rule_name` of a region read back from the stamps (the rule that found it is not kept)."""


@register
@dataclass(frozen=True)
class MergePass(CollagePass):
    name = "collage-merge"
    summary = ("join adjacent collage.regions on one backend where the union costs no more "
               "(cost=measure|table:FILE)")

    cost: str = option("measure", "'measure' (time the unions on the real backends) or "
                       "'table:FILE' (a JSON cost table; its format: collage-opt --help)")
    cache: str = option("", "measurement cache file; empty: $COLLAGE_CACHE, else "
                        "~/.cache/collage_mlir/cache.sqlite")
    rtol: float | None = stage_option(SearchPass, "rtol")
    atol_scale: float | None = stage_option(SearchPass, "atol_scale")

    def run_on_module(self, module: ir.Operation) -> None:
        estimator = make_estimator(self.cost, [], None) if self.cost != "measure" else None
        work = [(fn, read_partitioning(fn)) for fn in public_functions(module)]
        if estimator is None:
            named = sorted({ch.candidate.backend for _, p in work for ch in p.choices})
            estimator = make_estimator("measure", named, self.cache or None,
                                       tolerance=tolerance(self.rtol, self.atol_scale))
        with estimator:
            for fn, pick in work:
                merged, _ = merge(_priced(pick, estimator), estimator)
                write_partitioning(fn, merged)


def read_partitioning(fn: ir.Operation) -> Partitioning:
    """The regions collage-search stamped on `fn`, in region order, with their costs."""
    name = function_name(fn)
    graph, members, backend = stamped_regions(fn, "collage-merge")
    costs = region_costs(fn, len(members))
    if costs is None:
        raise CollageError(f"@{name} has no {collage.REGION_COSTS}; run collage-search first")
    choices = tuple(Choice(CandidatePartition(SubGraph(graph, bits_of(members[k])),
                                              backend[k], RULE), costs[k])
                    for k in sorted(members))
    return Partitioning(graph, choices, float("nan"))


def _priced(pick: Partitioning, estimator: CostEstimator) -> Partitioning:
    """`pick` with its total priced as the search prices covers (hand-offs included)."""
    total, moved = evaluate(pick.graph, pick.candidates, [ch.cost for ch in pick.choices],
                            estimator.transition_cost)
    return Partitioning(pick.graph, pick.choices, total, moved, pick.states, pick.exact)
