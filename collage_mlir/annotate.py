"""Annotate (RFC Phases 1-2): PartitionSpecs pair each backend with its rule; every spec's
candidates together are the search's input.

The search indexes candidates by their first node and the lit tests print them, so the list
is deduplicated per (backend, nodes) and sorted by `CandidatePartition.sort_key`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from collage_mlir.backends.base import Backend
from collage_mlir.backends.registry import get_backend
from collage_mlir.candidate import CandidatePartition
from collage_mlir.errors import CollageError, first_line
from collage_mlir.graph import DataflowGraph, SubGraphConfig
from collage_mlir.rules.base import PartitionRule, RuleContext, dedupe


@dataclass
class PartitionSpec:
    """Backend `backend_name` proposes the candidates `rule` finds among the ops it supports.

    `rule` None means the backend's own `partition_rule()` (the default for its kind).
    `backend` None means "look it up by name" (CollageError when unknown or unavailable).
    """

    backend_name: str
    rule: PartitionRule | None = None
    backend: Backend | None = None
    _supported: WeakKeyDictionary[DataflowGraph, int] = field(
        default_factory=WeakKeyDictionary, repr=False)

    def resolve_backend(self) -> Backend:
        if self.backend is None:
            self.backend = get_backend(self.backend_name)
        return self.backend

    def resolve_rule(self) -> PartitionRule:
        if self.rule is None:
            self.rule = self.resolve_backend().partition_rule()
        return self.rule

    def supported(self, graph: DataflowGraph) -> int:
        """The op nodes of `graph` the backend can run (asked once per graph). A backend whose
        own query crashes is a CollageError naming it, not an internal error."""
        if graph not in self._supported:
            try:
                bits = self.resolve_backend().capability(graph)
            except Exception as e:
                first = first_line(e) or type(e).__name__
                raise CollageError(f"backend '{self.backend_name}' could not say which ops of "
                                   f"this model it runs ({first}); leave it out of the "
                                   "backends (--backends, backends=)") from e
            self._supported[graph] = bits & graph.op_bits
        return self._supported[graph]

    def candidates(self, graph: DataflowGraph, config: SubGraphConfig) -> list[CandidatePartition]:
        ctx = RuleContext(graph, self.backend_name, self.supported(graph), config)
        return self.resolve_rule().all_candidates(ctx)


def specs_for(backend_names: Iterable[str]) -> list[PartitionSpec]:
    """Default specs for backends named by the user; fails early on an unusable name."""
    specs = [PartitionSpec(name) for name in backend_names]
    for spec in specs:
        spec.resolve_backend()
    return specs


def generate_candidates(graph: DataflowGraph, specs: Iterable[PartitionSpec],
                        config: SubGraphConfig | None = None) -> list[CandidatePartition]:
    """Every candidate of every spec, deduplicated and in deterministic order."""
    config = config or SubGraphConfig()
    found = [c for spec in specs for c in spec.candidates(graph, config)]
    return sorted(dedupe(found), key=CandidatePartition.sort_key)
