"""PartitionRule and the base rules, which find candidates in the DataflowGraph directly.

A rule maps a RuleContext (the graph, the backend's name, the op nodes it supports, the
default SubGraphConfig) to a list of CandidatePartitions; candidates may overlap, the search
picks a cover. Base rules (RFC names in brackets):
- PatternRule [DFPatternPartitionRule]: every sub-graph a dataflow pattern matches;
- OpPredicateRule [OpPredicatePartitionRule]: one op per candidate, chosen by a predicate;
- OpKindRule [OpCallByKindPartitionRule]: one op per candidate, chosen by fusion kind.
Every base rule keeps to the backend's capability: a candidate holding an op the backend
says it cannot run would only waste a measurement.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from collage_mlir.candidate import CandidatePartition
from collage_mlir.dialects.op_kinds import OpKind, op_kind
from collage_mlir.graph import DataflowGraph, Node, SubGraph, SubGraphConfig
from collage_mlir.graph.bits import iter_bits
from collage_mlir.rules.patterns import Pattern, find_matches


@dataclass
class RuleContext:
    """What a rule may look at: the graph, whose candidates it makes, what that one runs."""

    graph: DataflowGraph
    backend: str
    supported: int
    config: SubGraphConfig = field(default_factory=SubGraphConfig)
    _sub_graphs: dict[int, SubGraph] = field(default_factory=dict, repr=False)

    def sub_graph(self, inside: int) -> SubGraph:
        """One shared SubGraph per bitset, so boundary caches are computed once."""
        sub = self._sub_graphs.get(inside)
        if sub is None:
            sub = self._sub_graphs[inside] = SubGraph(self.graph, inside)
        return sub

    def remember(self, sub: SubGraph) -> None:
        self._sub_graphs.setdefault(sub.inside, sub)

    def candidate(self, inside: int, rule_name: str) -> CandidatePartition:
        return CandidatePartition(self.sub_graph(inside), self.backend, rule_name)

    def kind(self, inside: int) -> OpKind:
        """The fusion kind of a group: the largest kind inside (as TVM's FuseOps)."""
        return max((node_kind(self.graph.nodes[i]) for i in iter_bits(inside)),
                   default=OpKind.ELEMWISE)


def node_kind(node: Node) -> OpKind:
    return op_kind(node.op_type)


class PartitionRule(abc.ABC):
    """Finds candidate partitions; `name` labels the candidates it creates."""

    name: str = ""

    @abc.abstractmethod
    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        """Every candidate this rule proposes, in deterministic order (duplicates allowed)."""

    def children(self) -> Iterable[PartitionRule]:
        return ()

    def describe(self, indent: int = 0) -> str:
        """The rule tree, one rule per line (for reports and `--debug` output)."""
        lines = [" " * indent + f"{type(self).__name__}({self.name})"]
        lines += [c.describe(indent + 2) for c in self.children()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


def dedupe(candidates: Iterable[CandidatePartition]) -> list[CandidatePartition]:
    """First candidate per (backend, inside), in input order."""
    seen: set[tuple[str, int]] = set()
    out = []
    for c in candidates:
        key = (c.backend, c.inside)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


class PatternRule(PartitionRule):
    """A candidate for each distinct sub-graph `pattern` matches (overlaps included).

    `predicate(graph, sub_graph)` can veto a match (a BYOC-style check function).
    """

    def __init__(self, name: str, pattern: Pattern,
                 predicate: Callable[[DataflowGraph, SubGraph], bool] | None = None) -> None:
        self.name, self.pattern, self.predicate = name, pattern, predicate

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        seen: set[int] = set()
        out = []
        for m in find_matches(self.pattern, ctx.graph):
            if m.inside in seen or m.inside & ~ctx.supported:
                continue
            seen.add(m.inside)
            if self.predicate is None or self.predicate(ctx.graph, ctx.sub_graph(m.inside)):
                out.append(ctx.candidate(m.inside, self.name))
        return out


class OpPredicateRule(PartitionRule):
    """A singleton candidate for every supported op satisfying `predicate(graph, node)`."""

    def __init__(self, name: str = "op",
                 predicate: Callable[[DataflowGraph, Node], bool] | None = None) -> None:
        self.name, self.predicate = name, predicate

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        g = ctx.graph
        return [ctx.candidate(1 << i, self.name) for i in iter_bits(ctx.supported & g.op_bits)
                if self.predicate is None or self.predicate(g, g.nodes[i])]


class OpKindRule(PartitionRule):
    """A singleton candidate for every supported op whose fusion kind is in `kinds`.

    By default every kind, OPAQUE included: a compiler backend can still run an opaque op on
    its own; the combiner rules are what keep it from being grouped.
    """

    def __init__(self, name: str = "op_kind", kinds: Iterable[OpKind] | None = None) -> None:
        self.name = name
        self.kinds = frozenset(OpKind) if kinds is None else frozenset(kinds)

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        g = ctx.graph
        return [ctx.candidate(1 << i, self.name) for i in iter_bits(ctx.supported & g.op_bits)
                if node_kind(g.nodes[i]) in self.kinds]
