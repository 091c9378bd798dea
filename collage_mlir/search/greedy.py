"""Greedy baselines: the partitions a user gets today without Collage (RFC "Motivation":
"only the largest possible supported sub-graphs are used ... irrespective of their execution
time"), priced by the same cost model as the search (`partitioning.evaluate`) so Collage's
pick can be compared with them (the RFC's "apparent loss").

- `partition_for(X)`: TVM's `partition_for_<toolchain>`: X takes its largest convex regions
  of the ops it supports, the rest runs on a fallback backend (onnxruntime by default: it runs
  every ONNX op, as TVM's native backend or onnxruntime's CPU execution provider does).
- `first_claim(order)`: onnxruntime's execution-provider partitioning: each backend in
  priority order claims the largest convex regions of the ops it supports that no earlier
  backend claimed; the fallback comes last and takes what is left.

A backend's supported ops are the union of its candidates: every default rule proposes its
maximal supported regions (`rules/regions.py`), so that union is what the backend's
capability said (less what a placement file forbade). The regions themselves are cut with
the same `convex_pieces` as those maximal candidates, so the first claimer's regions are
candidates of the run; other regions (the fallback's share, later claims) cost what a
candidate with the same nodes and backend cost, else they are estimated through `estimate`
(one batch) when it is given, else unknown (NaN). A first claimer's region the run has no
cost for (its candidate was pruned or forbidden) stays unknown: measuring a backend's largest
region is the expensive compile the run chose to skip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.rules.regions import convex_pieces
from collage_mlir.search.partitioning import (
    Choice,
    Partitioning,
    TransitionCost,
    check_cover,
    evaluate,
    execution_order,
)

DEFAULT_FALLBACK = "onnxruntime"
RULE_NAME = "greedy"
"""Rule name of a region no rule proposed (the fallback's share, a later claim)."""

Estimate = Callable[[Sequence[CandidatePartition]], list[float]]
"""Costs of candidates the run has no cost for (a CostEstimator's `estimate`)."""


@dataclass(frozen=True)
class Baseline:
    """One greedy partition: `order` is the claim order (the fallback last). `partitioning`
    is None when there is no cover (`reason` says why); its `total_cost` is NaN when some
    region's cost is unknown and +inf when some region cannot run (`reason` says which)."""

    name: str
    order: tuple[str, ...]
    partitioning: Partitioning | None
    reason: str = ""

    @property
    def cost(self) -> float:
        return self.partitioning.total_cost if self.partitioning is not None else math.inf

    def regions(self) -> tuple[tuple[str, int], ...]:
        """(backend, nodes) per region: two baselines with the same are the same partition."""
        if self.partitioning is None:
            return ()
        return tuple((c.candidate.backend, c.candidate.inside) for c in
                     self.partitioning.choices)


def supported_ops(candidates: Sequence[CandidatePartition]) -> dict[str, int]:
    """Backend → the op nodes its candidates hold (see the module docstring)."""
    out: dict[str, int] = {}
    for c in candidates:
        out[c.backend] = out.get(c.backend, 0) | c.inside
    return out


def claim(graph: DataflowGraph, supported: dict[str, int], order: Sequence[str]
          ) -> list[tuple[str, int]]:
    """(backend, nodes) of each region when the backends of `order` claim the largest convex
    regions of their unclaimed supported ops in turn. ValueError names an op none claims."""
    claimed, out = 0, []
    for backend in order:
        free = supported.get(backend, 0) & graph.op_bits & ~claimed
        for bits in convex_pieces(graph, free):
            out.append((backend, bits))
            claimed |= bits
    left = graph.op_bits & ~claimed
    if left:
        i = (left & -left).bit_length() - 1
        raise ValueError(f"no backend of {'>'.join(order)} supports {graph.nodes[i].op_type} "
                         f"node {i}")
    return out


def greedy_baselines(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                     costs: Sequence[float], transition: TransitionCost | None,
                     backends: Sequence[str], fallback: str | None = None,
                     estimate: Estimate | None = None,
                     reason: Callable[[CandidatePartition], str] | None = None
                     ) -> list[Baseline]:
    """`partition_for(X)` for each backend X of `backends`, then `first_claim` over
    `backends` in the order given (the fallback moved last) when that differs from every
    `partition_for`. `fallback` defaults to onnxruntime when it is among `backends`, else
    the last of them. `reason(candidate)` says why a region costs +inf."""
    if not backends:
        return []
    if fallback is None:
        fallback = DEFAULT_FALLBACK if DEFAULT_FALLBACK in backends else backends[-1]
    orders = {f"partition_for_{b}": (b,) if b == fallback else (b, fallback)
              for b in backends}
    priority = tuple(b for b in backends if b != fallback) + (fallback,)
    if priority not in orders.values():
        orders["first_claim(" + ">".join(priority) + ")"] = priority
    supported = supported_ops(candidates)
    known = {(c.backend, c.inside): (cost, c)
             for c, cost in zip(candidates, costs, strict=True)}
    plans: dict[str, list[CandidatePartition] | str] = {}
    for name, order in orders.items():
        try:
            plans[name] = _regions(graph, claim(graph, supported, order), known)
        except ValueError as e:
            plans[name] = str(e)
    _fill(known, [r for name, p in plans.items() if not isinstance(p, str) for r in p
                  if r.backend != orders[name][0]], estimate)
    return [_baseline(graph, name, orders[name], plan, known, transition, reason)
            for name, plan in plans.items()]


def _regions(graph: DataflowGraph, claimed: list[tuple[str, int]],
             known: dict[tuple[str, int], tuple[float, CandidatePartition]]
             ) -> list[CandidatePartition]:
    """The claimed regions as candidates (the run's own where it has one), checked to form
    an exact acyclic cover (ValueError otherwise)."""
    regions = [known[key][1] if key in known else
               CandidatePartition(SubGraph(graph, key[1]), key[0], RULE_NAME)
               for key in claimed]
    check_cover(graph, regions)
    return regions


def _fill(known: dict[tuple[str, int], tuple[float, CandidatePartition]],
          regions: list[CandidatePartition], estimate: Estimate | None) -> None:
    """Cost `regions` the run has no cost for (none, or NaN: not measured) through
    `estimate` (one batch)."""
    missing = list({(r.backend, r.inside): r for r in regions
                    if math.isnan(known.get((r.backend, r.inside), (math.nan,))[0])}.values())
    if estimate is None or not missing:
        return
    for r, cost in zip(missing, estimate(missing), strict=True):
        known[(r.backend, r.inside)] = (float(cost), r)


def _baseline(graph: DataflowGraph, name: str, order: tuple[str, ...],
              plan: list[CandidatePartition] | str,
              known: dict[tuple[str, int], tuple[float, CandidatePartition]],
              transition: TransitionCost | None,
              reason: Callable[[CandidatePartition], str] | None) -> Baseline:
    if isinstance(plan, str):
        return Baseline(name, order, None, plan)
    ranked = [plan[k] for k in execution_order(graph, plan)]
    costs = [known.get((r.backend, r.inside), (math.nan, r))[0] for r in ranked]
    total, moved = evaluate(graph, ranked, costs, transition)
    if any(math.isinf(c) for c in costs):
        total = math.inf  # cannot run, whatever else is unknown
    elif any(math.isnan(c) for c in costs):
        total = math.nan
    choices = tuple(Choice(r, c) for r, c in zip(ranked, costs, strict=True))
    return Baseline(name, order, Partitioning(graph, choices, total, moved),
                    _why_not(ranked, costs, reason))


def _why_not(regions: list[CandidatePartition], costs: list[float],
             reason: Callable[[CandidatePartition], str] | None) -> str:
    """"" when every region has a finite cost; else the first one that has none and why."""
    for k, (r, c) in enumerate(zip(regions, costs, strict=True)):
        if math.isinf(c):
            why = (reason(r) if reason else "") or "cannot run"
            return f"region {k} ({r.backend}, {len(r.sub_graph)} ops): {why.splitlines()[0]}"
    unknown = sum(math.isnan(c) for c in costs)
    return f"no cost known for {unknown} region(s) (not measured, or not in the table)" if unknown else ""


def best(baselines: Sequence[Baseline]) -> Baseline | None:
    """The cheapest baseline with a finite estimate (None when none has one)."""
    finite = [b for b in baselines if math.isfinite(b.cost)]
    return min(finite, key=lambda b: b.cost) if finite else None
