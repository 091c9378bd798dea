"""CandidatePartition: a SubGraph that one backend could run, found by one rule."""

from __future__ import annotations

from dataclasses import dataclass

from collage_mlir.graph.subgraph import SubGraph

HOST = "host"
"""Backend name of the caller: it owns the function's arguments and results, and hands
them to (and takes them from) the regions like any other backend."""


@dataclass(frozen=True)
class CandidatePartition:
    """A (SubGraph, backend) pair: the unit that is measured and chosen by the search.

    `rule_name` says which PartitionRule produced it (for reports and lit tests).
    """

    sub_graph: SubGraph
    backend: str
    rule_name: str = ""

    @property
    def inside(self) -> int:
        return self.sub_graph.inside

    def sort_key(self) -> tuple:
        """Deterministic order: by first node, then nodes, then backend, then rule."""
        return (self.sub_graph.first, self.sub_graph.nodes, self.backend, self.rule_name)

    def __repr__(self) -> str:
        return f"Candidate({self.backend}:{self.rule_name} {self.sub_graph.nodes})"
