"""Partitioning: the search's answer — chosen regions in execution order, with their costs.

Also the independent, whole-partition view of the cost model that the incremental search
must agree with (`evaluate`) and the validity check of a cover (`check_cover`). Both work
on a plain list of candidates so tests can score hand-made or brute-forced partitions.

Transition model (shared with the search): a value crossing from a region on backend X to
another region on backend Y costs `transition(X, Y, nbytes)` once per (value, consuming
region) — Y == X included: splitting one backend's work into two calls is not free either
(on OpenVINO each compiled model switch was measured in the hundreds of µs).
Function arguments are handed from `HOST` to each region that reads them, and every value the
function returns is handed from its producing region to `HOST`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collage_mlir.candidate import HOST, CandidatePartition
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.graph import DataflowGraph, NodeKind
from collage_mlir.graph.subgraph import execution_order as sub_graph_order

TransitionCost = Callable[[str, str, int], float]
"""transition(src_backend, dst_backend, nbytes) -> seconds."""

Value = tuple[int, int]
"""(producer node, result number)."""

def value_nbytes(graph: DataflowGraph, value: Value) -> int:
    """Bytes of one tensor value, from its `!torch.vtensor` type (unknown dims count as 1)."""
    node, result = value
    return onnx_view.tensor_nbytes(graph.nodes[node].values[result].type)


@dataclass(frozen=True)
class Choice:
    """One chosen region, with the best candidate on another backend for the same nodes."""

    candidate: CandidatePartition
    cost: float
    runner_up: CandidatePartition | None = None
    runner_up_cost: float | None = None


@dataclass(frozen=True)
class Partitioning:
    """The least-cost exact cover: `choices` in a valid execution order.

    `total_cost` = sum of region costs + `transition_cost` (all hand-offs, host included).
    `states` counts the search states expanded (a measure of search effort); `exact` is
    False when the search ran out of states and kept one per covered set (least-cost then
    not guaranteed).
    """

    graph: DataflowGraph
    choices: tuple[Choice, ...]
    total_cost: float
    transition_cost: float = 0.0
    states: int = 0
    exact: bool = True

    @property
    def candidates(self) -> list[CandidatePartition]:
        return [c.candidate for c in self.choices]

    def summary(self) -> str:
        """One line per region, for logs and reports."""
        lines = [f"total {self.total_cost:.6g} s (transitions {self.transition_cost:.6g} s), "
                 f"{len(self.choices)} regions, {self.states} states"
                 + ("" if self.exact else " (state limit: not proven least-cost)")]
        for k, c in enumerate(self.choices):
            cand = c.candidate
            ops = ",".join(self.graph.nodes[i].op_type for i in cand.sub_graph.nodes)
            alt = (f"  (next: {c.runner_up.backend} {c.runner_up_cost:.6g})"
                   if c.runner_up is not None else "")
            lines.append(f"  {k}: {cand.backend:<12} {c.cost:.6g}  {ops}{alt}")
        return "\n".join(lines)


def adjacent_regions(choices: Sequence[Choice]) -> list[tuple[int, int]]:
    """Sorted index pairs (a < b) of chosen regions where one reads a value the other
    produces."""
    owner = {i: k for k, ch in enumerate(choices) for i in ch.candidate.sub_graph.nodes}
    pairs = set()
    for b, ch in enumerate(choices):
        for producer, _ in ch.candidate.sub_graph.input_values:
            a = owner.get(producer)
            if a is not None and a != b:
                pairs.add((min(a, b), max(a, b)))
    return sorted(pairs)


def execution_order(graph: DataflowGraph, regions: Sequence[CandidatePartition]) -> list[int]:
    """Region indices so each region follows those it reads (`graph.subgraph.execution_order`).

    Raises ValueError when the regions' quotient graph has a cycle.
    """
    return sub_graph_order([r.sub_graph for r in regions])


def check_cover(graph: DataflowGraph, regions: Sequence[CandidatePartition]) -> None:
    """Raise ValueError unless `regions` cover every op node exactly once, acyclically."""
    seen = 0
    for r in regions:
        if r.inside & seen:
            raise ValueError(f"{r} overlaps another region")
        seen |= r.inside
    missing = graph.op_bits & ~seen
    if missing:
        i = (missing & -missing).bit_length() - 1
        raise ValueError(f"node {i} ({graph.nodes[i].op_type}) is not covered")
    if seen & ~graph.op_bits:
        raise ValueError("a region holds a node that is not an op")
    execution_order(graph, regions)


def evaluate(graph: DataflowGraph, regions: Sequence[CandidatePartition],
             costs: Sequence[float], transition: TransitionCost | None = None) -> tuple[float, float]:
    """(total, transitions) of a whole partition under the transition model above."""
    owner = {i: k for k, r in enumerate(regions) for i in r.sub_graph.nodes}
    moved = 0.0
    if transition is not None:
        for r in regions:
            for value in r.sub_graph.input_values:
                p = value[0]
                src = HOST if graph.nodes[p].kind is NodeKind.ARG else regions[owner[p]].backend
                moved += transition(src, r.backend, value_nbytes(graph, value))
        for value in sorted(set(graph.outputs)):
            if value[0] in owner:
                moved += transition(regions[owner[value[0]]].backend, HOST,
                                    value_nbytes(graph, value))
    return math.fsum(costs) + moved, moved


def replaced(pick: Partitioning, drop: set[int], new: Sequence[Choice],
             transition: TransitionCost | None) -> Partitioning:
    """`pick` with the regions in `drop` replaced by `new`, in execution order, re-priced."""
    kept = [ch for k, ch in enumerate(pick.choices) if k not in drop] + list(new)
    order = execution_order(pick.graph, [ch.candidate for ch in kept])
    ordered = tuple(kept[k] for k in order)
    total, moved = evaluate(pick.graph, [ch.candidate for ch in ordered],
                            [ch.cost for ch in ordered], transition)
    return Partitioning(pick.graph, ordered, total, moved, pick.states, pick.exact)
