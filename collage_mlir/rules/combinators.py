"""Combinator rules: new candidate sets built from the candidates of sub-rules (RFC names).

- CompositeRule: label the sub-candidates as a named composite ("conv_add_relu");
- PrimitiveRule: mark the sub-candidates as whole kernels (renaming is optional);
- UnionRule: all sub-rules' candidates together;
- CombineRule: grow candidates by joining neighbours that a combiner rule allows;
- OnlyValidRule: drop candidates whose SubGraph breaks a SubGraphConfig;
- HostRule: singleton candidates for ops left to the host (not limited by capability).
In this MLIR port a candidate is always extracted into its own function, so "Composite" and
"Primitive" wrapping only shows in the candidate's rule name.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph, Node, SubGraph, SubGraphConfig
from collage_mlir.graph.bits import iter_bits
from collage_mlir.rules.base import PartitionRule, RuleContext, dedupe
from collage_mlir.rules.fusion import CombinerRule


class CompositeRule(PartitionRule):
    """Every sub-candidate, renamed `label` (the composite's name)."""

    def __init__(self, label: str, sub_rule: PartitionRule) -> None:
        self.name, self.sub_rule = label, sub_rule

    def children(self):
        return (self.sub_rule,)

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        return [ctx.candidate(c.inside, self.name) for c in self.sub_rule.all_candidates(ctx)]


class PrimitiveRule(PartitionRule):
    """Every sub-candidate as a kernel; renamed `name` when given, else unchanged."""

    def __init__(self, sub_rule: PartitionRule, name: str = "") -> None:
        self.name, self.sub_rule = name, sub_rule

    def children(self):
        return (self.sub_rule,)

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        subs = self.sub_rule.all_candidates(ctx)
        return [ctx.candidate(c.inside, self.name) for c in subs] if self.name else subs


class UnionRule(PartitionRule):
    """The candidates of all sub-rules, in sub-rule order, duplicates dropped."""

    def __init__(self, sub_rules: Sequence[PartitionRule], name: str = "union") -> None:
        self.name, self.sub_rules = name, list(sub_rules)

    def children(self):
        return self.sub_rules

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        return dedupe(c for r in self.sub_rules for c in r.all_candidates(ctx))


class OnlyValidRule(PartitionRule):
    """The sub-candidates valid under `config` (the context's config when None)."""

    def __init__(self, sub_rule: PartitionRule, config: SubGraphConfig | None = None) -> None:
        self.name, self.sub_rule, self.config = "only_valid", sub_rule, config

    def children(self):
        return (self.sub_rule,)

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        config = self.config or ctx.config
        return [c for c in self.sub_rule.all_candidates(ctx) if c.sub_graph.is_valid(config)]


class HostRule(PartitionRule):
    """A singleton candidate for each op `predicate` says the host may run.

    Unlike the base rules this ignores the backend's capability: it is for a spec whose
    "backend" is the host itself (ops that need no kernel, such as a Reshape of metadata),
    so the search needs no special case for them.
    """

    def __init__(self, predicate: Callable[[DataflowGraph, Node], bool],
                 name: str = "host") -> None:
        self.name, self.predicate = name, predicate

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        g = ctx.graph
        return [ctx.candidate(1 << i, self.name) for i in iter_bits(g.op_bits)
                if self.predicate(g, g.nodes[i])]


MAX_PER_NODE = 128
"""Sets one node takes part in at most, per CombineRule run (`CombineRule`)."""


class CombineRule(PartitionRule):
    """The sub-candidates plus every union reachable by joining adjacent candidates.

    Two disjoint candidates join when one feeds the other, some combiner rule fires, and the
    union is valid under `config` (the context's config when None). This is a worklist, not
    rounds over all pairs: each new candidate only meets the candidates that contain one of
    its input or output nodes (a per-node index), so the work grows with the number of
    candidates times their boundary, not quadratically. Sets are expanded smallest first,
    each meeting only sets no larger than itself (the larger one meets it when its turn
    comes): every set smaller than the one expanded already exists, so nothing is missed,
    and the sets are found in order of size.

    Invalid unions are pruned early (as in TVM), which is exact for single-exit configs: a
    valid single-exit set minus one of its sources is still valid, so every such set grows
    from singletons. With `max_exits > 1` a fan-out (Split feeding two ops) needs a tapped
    intermediate, so unions within `exit_slack` extra exits, taps allowed, are grown further
    but not proposed. Sets that need a wider detour are still missed.

    A node takes part in at most `max_per_node` sets, the first found (so the smaller
    ones): joining any subset of a wide node's producers is a valid union, and a Concat of
    128 chunk results would otherwise stand for 2^128 candidates.
    """

    def __init__(self, sub_rule: PartitionRule, combiners: Iterable[CombinerRule],
                 config: SubGraphConfig | None = None, name: str = "combine",
                 max_candidates: int = 100_000, exit_slack: int = 1,
                 max_per_node: int = MAX_PER_NODE) -> None:
        self.name, self.sub_rule = name, sub_rule
        self.max_per_node = max_per_node
        self.exit_slack = exit_slack
        self.combiners = list(combiners)
        self.config = config
        self.max_candidates = max_candidates

    def children(self):
        return (self.sub_rule,)

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        return _Combiner(self, ctx).run()


class _Combiner:
    """The state of one CombineRule run (kept out of the rule so rules stay immutable)."""

    def __init__(self, rule: CombineRule, ctx: RuleContext) -> None:
        self.rule, self.ctx = rule, ctx
        self.config = config = rule.config or ctx.config
        self.growth = None
        if config.max_exits > 1 and rule.exit_slack > 0:
            self.growth = SubGraphConfig(config.max_exits + rule.exit_slack, True,
                                         config.max_depth)
        self.found: dict[int, CandidatePartition] = {}
        self.tried: set[int] = set()
        self.by_node: dict[int, list[int]] = {}
        self.work: list[tuple[int, int, int]] = []  # heap of (size, arrival, set)

    def run(self) -> list[CandidatePartition]:
        for c in self.rule.sub_rule.all_candidates(self.ctx):
            if c.inside not in self.found:
                self._add(c.inside, c)
        while self.work and len(self.found) < self.rule.max_candidates:
            self._expand(heapq.heappop(self.work)[2])
        return list(self.found.values())

    def _add(self, inside: int, candidate: CandidatePartition | None) -> None:
        """Index `inside` for growth; `candidate` None marks a hidden intermediate."""
        if candidate is not None:
            self.found[inside] = candidate
        self.tried.add(inside)
        for i in iter_bits(inside):
            self.by_node.setdefault(i, []).append(inside)
        heapq.heappush(self.work, (inside.bit_count(), len(self.tried), inside))

    def _expand(self, a: int) -> None:
        sub = self.ctx.sub_graph(a)
        op_bits = self.ctx.graph.op_bits
        size = a.bit_count()
        for o in iter_bits(sub.output_bits & op_bits):
            for b in list(self.by_node.get(o, ())):
                if b.bit_count() <= size:
                    self._try(a, b)
        for i in iter_bits(sub.input_bits & op_bits):
            for b in list(self.by_node.get(i, ())):
                if b.bit_count() <= size:
                    self._try(b, a)

    def _try(self, upstream: int, downstream: int) -> None:
        union = upstream | downstream
        if upstream & downstream or union in self.tried:
            return
        if not any(c.fires(self.ctx, upstream, downstream) for c in self.rule.combiners):
            return  # not marked tried: another pair may still produce this union
        self.tried.add(union)
        if any(len(self.by_node.get(i, ())) >= self.rule.max_per_node for i in iter_bits(union)):
            return
        sub = SubGraph(self.ctx.graph, union)  # not cached in ctx unless it is kept
        if sub.is_valid(self.config):
            self.ctx.remember(sub)
            self._add(union, self.ctx.candidate(union, self.rule.name))
        elif self.growth is not None and sub.is_valid(self.growth):
            self._add(union, None)
