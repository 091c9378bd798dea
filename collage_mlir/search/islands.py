"""Islands: single ops another backend runs cheaper, carved out of the region around them.

A region on backend X may hold ops that backend Y runs cheaper alone, by more than the
hand-offs into and out of them cost. Carving one out (`carve`) leaves the rest of the region
in two parts on X, what lies upstream of the island and the remainder: both convex, and the
cover stays acyclic. A model repeating an op its backend runs slowly (Mamba2's CumSums on
OpenVINO) gains too little per island to show one at a time, so an *archipelago* carves
every such op of one type at once (`archipelagos`).

The parts around islands are larger than any rule's candidate (`--max-depth` bounds those),
so a search over the annotated candidates alone covers an archipelago's neighbourhood with
many small regions, one call each, and loses to the whole model. Two places carve instead:
before the search, the cheapest whole model's archipelagos (`whole_archipelagos`), whose parts
the driver measures and adds as candidates; after it, refinement's archipelagos of the pick
it keeps (`check/refine.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph, NodeKind, SubGraph, iter_bits
from collage_mlir.search.partitioning import (
    Choice,
    Partitioning,
    TransitionCost,
    evaluate,
    replaced,
    value_nbytes,
)

ISLAND_RULE = "island-rest"
"""`rule_name` of the parts of a region around an island."""
MAX_CARVED = 128
"""Islands one archipelago carves at most (each leaves a part around it to measure)."""
MAX_ARCHIPELAGOS = 1
"""Archipelagos refinement proposes per partitioning at most, the op type gaining most
first."""
WHOLE_ARCHIPELAGOS = 3
"""Archipelagos carved out of the cheapest whole model before the search at most: which op
types gain most is read off single ops timed alone, and types close in that reading
(mamba2_4l's CumSums, Expands and Transposes) change places from one cold run to the
next."""

ESTIMATE_SLACK = 0.15
"""A carved cover estimated, once the parts around its islands are measured (or guessed from
the first ones: `scaled_guess`), more than this above the cover it was carved from is
dropped: its gain by the table is gone, chain estimates err by up to ~15% either way, and
measuring, compiling and timing it spends time others need (MobileViT's islands, estimated
7-33% above the pick so measured, ran 9-38% slower)."""

TIMING_SLACK = 0.30
"""A carved cover of the whole model estimated, once its parts are measured, more than this
above that whole model is dropped before the search. Within it the cover is offered to the
search and, when the search takes another, timed end to end by the check beside the whole
models: many regions measured one at a time after a cache sweep each add up pessimistic
against one whole model on a small model, by more than ESTIMATE_SLACK."""

MIN_SHARE = 0.25
"""An archipelago carves only the islands that gain, by the measure table, at least this
share of what its best island gains: each cut also costs the region around it what no table
prices (fusions and a call: four cuts of mamba2_4l's OpenVINO model onto OpenVINO itself ran
4% slower), and Mamba2's small scans, which gain a fraction of a millisecond alone, cost
more cut out than they save (its four large scans carved alone ran 0.88x of OpenVINO's whole
model; with the eight small ones, refinement timed +0.9%)."""

ByNodes = Mapping[int, list[tuple[float, CandidatePartition]]]
"""Node bits → (cost, candidate) of every measured, valid candidate on those nodes."""


def by_nodes(candidates: Sequence[CandidatePartition], costs: Sequence[float]
             ) -> dict[int, list[tuple[float, CandidatePartition]]]:
    """The valid (finite-cost) candidates grouped by the nodes they cover (`ByNodes`)."""
    out: dict[int, list[tuple[float, CandidatePartition]]] = {}
    for c, cost in zip(candidates, costs, strict=True):
        if math.isfinite(cost):
            out.setdefault(c.inside, []).append((cost, c))
    return out


def carve(pick: Partitioning, k: int, island: CandidatePartition, cost: float, own: float,
          transition: TransitionCost | None) -> Partitioning:
    """`pick` with `island` (costing `cost`; `own` on region k's backend) carved out of
    region k: the part of the region upstream of the island, the island, the rest, the
    parts priced at their share of the region's cost (by op count) until measured. Both
    parts are convex, and the cover stays acyclic: a region is convex, so no path leaves
    it and comes back, and nothing downstream of the island reaches back upstream."""
    graph, ch = pick.graph, pick.choices[k]
    rest = ch.candidate.inside & ~island.inside
    up = sum(1 << i for i in iter_bits(rest) if graph.downstream[i] & island.inside)
    parts = [p for p in (up, rest & ~up) if p]
    share = max(ch.cost - own, 0.0) / max(rest.bit_count(), 1)  # R's cost spread
    new = [Choice(island, cost)] + [
        Choice(CandidatePartition(SubGraph(graph, p), ch.candidate.backend, ISLAND_RULE),
               share * p.bit_count()) for p in parts]
    return replaced(pick, {k}, new, transition)


Island = tuple[float, CandidatePartition, float, float]
"""An island an archipelago carves: (its gain, the candidate, its cost, what its op costs
alone on its region's backend)."""

Group = tuple[str, str, str]
"""(op type, rival backend, region's backend): the islands one archipelago carves."""


@dataclass(frozen=True)
class Archipelago:
    """Islands carved at once: of one op type (`archipelagos`), or of several
    (`union`), gain first, at most MAX_CARVED."""

    groups: tuple[tuple[Group, int], ...]
    """Each op type's group and how many of its islands this carves."""
    islands: tuple[Island, ...]

    @property
    def label(self) -> str:
        """"islands onnxruntime: 3 x CumSum, 3 x Expand out of openvino"."""
        rivals: dict[str, list[str]] = {}
        for (op_type, rival, _), n in self.groups:
            rivals.setdefault(rival, []).append(f"{n} x {op_type}")
        owners = ", ".join(dict.fromkeys(backend for (_, _, backend), _ in self.groups))
        return "islands " + "; ".join(f"{r}: {', '.join(what)}" for r, what in rivals.items()) \
            + f" out of {owners}"

    def carved(self, pick: Partitioning, transition: TransitionCost | None) -> Partitioning:
        """`pick` with every island carved out of the region holding it."""
        nb = pick
        for _, island, cost, own in self.islands:
            k = next(j for j, ch in enumerate(nb.choices)
                     if not island.inside & ~ch.candidate.inside)
            nb = carve(nb, k, island, cost, own, transition)
        return nb


def union(found: Sequence[Archipelago]) -> Archipelago:
    """`found` carved at once, at most MAX_CARVED islands. Each archipelago's parts lie
    around its own islands only, so the search cannot price several carved together
    without this: the nodes between a layer's CumSum and its Expand lie in no part of
    either."""
    islands = [island for a in found for island in a.islands][:MAX_CARVED]
    return Archipelago(tuple(g for a in found for g in a.groups), tuple(islands))


def archipelagos(pick: Partitioning, measured: ByNodes, transition: TransitionCost | None,
                 limit: int = MAX_ARCHIPELAGOS) -> list[tuple[str, Partitioning]]:
    """(label, `pick` carved) for the `limit` archipelagos gaining most (`ranked`)."""
    return [(a.label, a.carved(pick, transition))
            for a in ranked(pick, measured, transition)[:limit]]


def ranked(pick: Partitioning, measured: ByNodes, transition: TransitionCost | None
           ) -> list[Archipelago]:
    """Every single op of one type that another backend runs cheaper than its region's
    backend by more than the hand-offs into and out of it cost (`transition`), as one
    archipelago per op type and backend pair, the one gaining most first: each at most
    MAX_CARVED islands, none gaining less than MIN_SHARE of the best, at least two. Ops
    cheaper alone only by the other backend's per-call cost (SegFormer's Transposes) gain
    less than their hand-offs."""
    graph = pick.graph
    groups: dict[Group, list[Island]] = {}
    for ch in pick.choices:
        backend = ch.candidate.backend
        for i in iter_bits(ch.candidate.inside):
            rivals = measured.get(1 << i, [])
            own = min((cost for cost, c in rivals if c.backend == backend), default=None)
            best = min(((cost, c) for cost, c in rivals if c.backend != backend),
                       key=lambda t: (t[0], t[1].backend), default=None)
            if own is None or best is None:
                continue
            gain = own - best[0] - handoffs(SubGraph(graph, 1 << i), backend,
                                            best[1].backend, transition)
            if gain > 0:
                key = (graph.nodes[i].op_type, best[1].backend, backend)
                groups.setdefault(key, []).append((gain, best[1], best[0], own))
    groups = {key: _gaining(found) for key, found in groups.items()}
    order = sorted(((sum(g[0] for g in found), key, found) for key, found in groups.items()
                    if len(found) > 1), key=lambda t: (-t[0], t[1]))
    out = []
    for _, key, found in order:
        islands = sorted(found, key=lambda t: (-t[0], t[1].sort_key()))[:MAX_CARVED]
        out.append(Archipelago(((key, len(islands)),), tuple(islands)))
    return out


def _gaining(found: list[Island]) -> list[Island]:
    """The islands of `found` (gain first) gaining at least MIN_SHARE of the best one."""
    floor = MIN_SHARE * max(g[0] for g in found)
    return [g for g in found if g[0] >= floor]


def whole_archipelagos(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                       costs: Sequence[float], transition: TransitionCost | None
                       ) -> tuple[Partitioning, list[Archipelago]] | None:
    """(the cheapest whole model as a one-region cover, its archipelagos gaining most:
    `ranked`, at most WHOLE_ARCHIPELAGOS), or None when no whole model is valid or no op
    type qualifies."""
    wholes = [(cost, c) for c, cost in zip(candidates, costs, strict=True)
              if c.inside == graph.op_bits and math.isfinite(cost)]
    if not wholes:
        return None
    cost, whole = min(wholes, key=lambda t: (t[0], t[1].backend))
    total, moved = evaluate(graph, [whole], [cost], transition)
    pick = Partitioning(graph, (Choice(whole, cost),), total, moved)
    found = ranked(pick, by_nodes(candidates, costs), transition)[:WHOLE_ARCHIPELAGOS]
    return (pick, found) if found else None


def island_types(nb: Partitioning) -> str:
    """What `nb` carved, in a few words: its islands' op types and backend ("9 x CumSum on
    onnxruntime")."""
    graph = nb.graph
    counts: dict[tuple[str, str], int] = {}
    for ch in nb.choices:
        if ch.candidate.rule_name != ISLAND_RULE:
            for i in iter_bits(ch.candidate.inside):
                key = (graph.nodes[i].op_type, ch.candidate.backend)
                counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} x {op} on {backend}" for (op, backend), n in sorted(counts.items()))


def parts(nb: Partitioning) -> list[int]:
    """Indices of `nb`'s regions that are parts around islands, largest share first."""
    return sorted((k for k, ch in enumerate(nb.choices) if ch.candidate.rule_name == ISLAND_RULE),
                  key=lambda k: -nb.choices[k].cost)


def repriced(nb: Partitioning, measured: Mapping[int, float], scale: float,
             transition: TransitionCost | None) -> Partitioning:
    """`nb` with the regions in `measured` at their measured cost, its other parts around
    islands at their share times `scale`."""
    choices = [Choice(ch.candidate, measured[k] if k in measured else
                      ch.cost * scale if ch.candidate.rule_name == ISLAND_RULE else ch.cost,
                      ch.runner_up, ch.runner_up_cost)
               for k, ch in enumerate(nb.choices)]
    return replaced(nb, set(range(len(choices))), choices, transition)


def scaled_guess(nb: Partitioning, measured: Mapping[int, float],
                 transition: TransitionCost | None) -> Partitioning:
    """`nb` priced with the parts in `measured` at their cost and the others at their share
    scaled as the measured ones came out against theirs."""
    shares = sum(nb.choices[k].cost for k in measured)
    return repriced(nb, measured, sum(measured.values()) / shares if shares > 0 else 1.0,
                    transition)


def handoffs(island: SubGraph, outer: str, inner: str,
             transition: TransitionCost | None) -> float:
    """Seconds the hand-offs of `island` (over the live graph) moved from backend `outer` to
    `inner` cost: its computed inputs in, its results out (the model's own inputs come from
    the host either way; 0 without a model)."""
    if transition is None:
        return 0.0
    graph = island.graph
    ins = [v for v in island.input_values if graph.nodes[v[0]].kind is NodeKind.OP]
    return (sum(transition(outer, inner, value_nbytes(graph, v)) for v in ins)
            + sum(transition(inner, outer, value_nbytes(graph, v))
                  for v in island.output_values))
