"""collage-search (RFC phase 3): choose the least-cost cover of each public function.

    collage-search{cost=table:costs.json}             costs from a JSON table (lit tests)
    collage-search{cost=measure cache=run.sqlite}     measure on the real backends (cached)

Reads the `collage.candidates` that collage-annotate wrote, costs every candidate, runs the
search and records the decision as attributes only: `collage.region` (i64, the region's
index in execution order) and `collage.backend` (string) on every op node, and on the
function `collage.estimated_cost` (f64 seconds, hand-offs included) and
`collage.region_costs` (f64 per region, for collage-outline). The IR is otherwise unchanged.
`unknown=invalid` skips candidates the estimator could not cost (NaN) instead of failing.
`placement=FILE` drops the candidates a user placement file forbids (see placement.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.backends.registry import registered_backends
from collage_mlir.cost.base import CostEstimator
from collage_mlir.dialects import collage
from collage_mlir.dialects.func import function_name, public_functions
from collage_mlir.driver import carve_islands, choose, make_estimator, tolerance
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph
from collage_mlir.passes.common import check_node_stamps
from collage_mlir.passes.registry import CollagePass, option, register
from collage_mlir.placement import Placement
from collage_mlir.rules.serialize import candidates_from_attr
from collage_mlir.search import Partitioning

UNKNOWN_POLICIES = ("raise", "invalid")


@register
@dataclass(frozen=True)
class SearchPass(CollagePass):
    name = "collage-search"
    summary = "pick the least-cost cover from collage.candidates (cost=measure|table:FILE)"

    cost: str = option("measure", "'measure' (time candidates on the real backends) or "
                       "'table:FILE' (a JSON cost table; its format: collage-opt --help)")
    cache: str = option("", "measurement cache file; empty: $COLLAGE_CACHE, else "
                        "~/.cache/collage_mlir/cache.sqlite")
    backends: tuple[str, ...] = option((), "backends to search over (candidates for others "
                                       "are left out); empty: those the candidates name")
    unknown: str = option("raise", "a candidate the estimator cannot cost: 'raise' fails, "
                          "'invalid' leaves it out")
    placement: str = option("", "JSON placement file pinning or excluding backends per op")
    rtol: float | None = option(None, "relative tolerance of measured outputs against the "
                                "reference (none: 0.01)")
    atol_scale: float | None = option(None, "absolute tolerance as a fraction of the output's "
                                      "magnitude (none: 0.003; quantized models may need more)")
    islands: bool = option(True, "offer the search the cheapest whole model with the ops "
                           "another backend runs cheaper carved out (its parts measured)")

    def run_on_module(self, module: ir.Operation) -> None:
        if self.unknown not in UNKNOWN_POLICIES:
            raise CollageError(f"unknown={self.unknown}: expected one of "
                               f"{', '.join(UNKNOWN_POLICIES)}")
        # options, tables and placement files fail before any IR is read
        estimator = make_estimator(self.cost, [], None) if self.cost != "measure" else None
        placement = Placement.from_json(self.placement) if self.placement else None
        unknown = sorted(set(self.backends) - set(registered_backends()))
        if unknown:
            raise CollageError(f"backends={','.join(self.backends)}: {', '.join(unknown)} "
                               f"names no backend (known: {', '.join(registered_backends())})")
        work = []
        for fn in public_functions(module):
            graph, cands = read_candidates(fn)
            if self.backends:
                cands = [c for c in cands if c.backend in self.backends]
            work.append((fn, graph, placement.filter(graph, cands) if placement else cands))
        if estimator is None:
            named = sorted({c.backend for _, _, cands in work for c in cands})
            estimator = make_estimator("measure", list(self.backends) or named, self.cache or None,
                                       tolerance=tolerance(self.rtol, self.atol_scale))
        with estimator:
            for fn, graph, cands in work:
                write_partitioning(fn, _search(graph, list(cands), estimator, self.unknown,
                                               self.islands, placement))


def read_candidates(fn: ir.Operation) -> tuple[DataflowGraph, list]:
    """The function's graph and the candidates collage-annotate recorded on it."""
    if collage.CANDIDATES not in fn.attributes:
        raise CollageError(f"@{function_name(fn)} has no {collage.CANDIDATES}; run "
                           "collage-annotate first")
    graph = DataflowGraph(fn)
    try:
        check_node_stamps(graph)
        return graph, candidates_from_attr(graph, fn.attributes[collage.CANDIDATES])
    except CollageError as e:
        raise CollageError(f"@{function_name(fn)}: {e}") from None


def search_function(func_op: ir.Operation, estimator: CostEstimator,
                    unknown: str = "raise", islands: bool = True) -> Partitioning:
    """Python API: cost the annotated candidates of `func_op` and search (IR unchanged)."""
    graph, cands = read_candidates(func_op.operation)
    return _search(graph, cands, estimator, unknown, islands)


def _search(graph: DataflowGraph, cands: list, estimator: CostEstimator, unknown: str,
            islands: bool, placement: Placement | None = None) -> Partitioning:
    """Cost `cands`, offer the cheapest whole model's archipelagos with `islands`
    (`driver.carve_islands`, which adds its parts to `cands`), and search."""
    costs = estimator.estimate(cands)
    carved = carve_islands(graph, cands, costs, estimator) if islands else []
    return choose(graph, cands, costs, estimator, unknown, carved, placement)


def write_partitioning(fn: ir.Operation, result: Partitioning) -> None:
    """Stamp the decision on the ops and the function (attributes only)."""
    graph = result.graph
    with fn.context:
        i64 = ir.IntegerType.get_signless(64)
        for k, choice in enumerate(result.choices):
            region = ir.IntegerAttr.get(i64, k)
            backend = ir.StringAttr.get(choice.candidate.backend)
            for i in choice.candidate.sub_graph.nodes:
                attrs = graph.nodes[i].op.attributes
                attrs[collage.REGION] = region
                attrs[collage.BACKEND] = backend
        fn.attributes[collage.ESTIMATED_COST] = ir.FloatAttr.get_f64(result.total_cost)
        fn.attributes[collage.REGION_COSTS] = ir.ArrayAttr.get(
            [ir.FloatAttr.get_f64(c.cost) for c in result.choices])
