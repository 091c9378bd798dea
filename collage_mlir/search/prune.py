"""Pruning before measuring: which candidates to measure first, and which cannot win.

Measuring is the slow phase (a compile and a timing per candidate), so candidates are
measured in stages, most informative first (`stages`): every single-op candidate (they
guarantee a cover, and a measuring estimator learns from them which op types a backend
hangs on before it compiles anything large), then each backend's whole model (the
baselines the end-to-end check needs), then the rest, largest first, the backend whose
whole model ran fastest first (`by_backend`; the reference backend when it ties). Before
each of those, a multi-op candidate on backend X is *dominated* (`dominated`) when half of
what its dearest op alone costs on X is still more than another backend Y already costs
for the same ops: as single-op candidates, hand-offs included, or as one measured region
with the same nodes (so the same boundary). A region is not cheaper than half of its
dearest op (fusion saves memory traffic around an op, not the op's own work), so such a candidate
cannot beat a cover the search already has. The slow backend's fused regions on a model it
runs 7x slower are pruned this way; the backends that compete op by op keep theirs.
Single ops are measured on a few nodes on every backend first (`ranking_ops`), so that
`by_backend` can rank the backends before their other single ops. After them, in each
stage, the backends that time region by region take turns in windows of a few node sets
(`interleave`), so that two backends' costs for the same nodes are timed seconds apart,
not minutes: a VM's pace drifts over a run, and backends measured in phases of their own
carry the drift into their comparison (one backend's level moved 10-30% against
another's between runs). Candidates measured after a cover of their nodes is known are
told where they lose (`stop_above`), so that a clear loser is timed on a few calls, not
until its median settles.

The rest is not measured all at once but along a lower bound (`floor_cover`): with every
region not yet measured at its floor (half its dearest op alone, as above) and everything
measured at its cost, the least-cost cover is a lower bound on every cover. Its regions
not yet measured are measured next (with the regions on the same nodes on backends that
take turns); when it holds none, it is the least-cost cover itself and the rest cannot enter
a cheaper one. On a model that one backend runs whole far faster than any split (the
usual CNN on a CPU) that leaves most regions unmeasured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph
from collage_mlir.search.partitioning import TransitionCost
from collage_mlir.search.search import MAX_EXACT_STATES, search

FUSION_FLOOR = 0.5
"""A region on a backend costs at least this share of its dearest op alone there."""
RANKING_OPS = 4
"""Single ops measured on every backend first, to rank the backends (`ranking_ops`)."""
TIE = 0.05
"""Backends whose whole models (else common single ops) cost within this share of the
fastest's are tied for the measuring order (`by_backend`): resnet50's onnxruntime and
OpenVINO, 1-2% apart on a 2-core EPYC, swapped places from run to run."""
WINDOW = 8
"""Node sets (regions' node sets, whichever backend) per turn when backends alternate
(`interleave`)."""
LOSER_FACTOR = 2.0
"""Beyond this multiple of a cover of the same nodes already known, a candidate's cost needs
no more precision (`stop_above`): it stays a candidate (hand-offs may still favour it),
timed on fewer calls."""


def stages(graph: DataflowGraph, candidates: Sequence[CandidatePartition]) -> list[list[int]]:
    """Candidate indices in measuring order: [single ops], [whole models], [the rest,
    largest first]; always three lists (a stage's place says what it is), some empty."""
    whole, single, rest = [], [], []
    for k, c in enumerate(candidates):
        n = len(c.sub_graph.nodes)
        (whole if c.inside == graph.op_bits else single if n == 1 else rest).append(k)
    rest.sort(key=lambda k: (-len(candidates[k].sub_graph.nodes), candidates[k].sort_key()))
    return [single, whole, rest]


def by_backend(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
               ks: Sequence[int], known: Mapping[int, float], prefer: str | None = None
               ) -> list[list[int]]:
    """`ks` split per backend (order within kept), the fastest backend first by what
    `known` holds: its whole model, else its single ops on the nodes every backend has
    measured alone (`ranking_ops`); backends with neither last. The later ones are then
    pruned against the first one's measured regions and bounded by them (`stop_above`).
    `prefer` (the reference backend) goes first when it ties with the fastest (`TIE`):
    its worker's outputs then serve every other worker's check, which otherwise runs the
    reference itself."""
    whole = {candidates[k].backend: cost for k, cost in known.items()
             if candidates[k].inside == graph.op_bits and math.isfinite(cost)}
    groups: dict[str, list[int]] = {}
    for k in ks:
        groups.setdefault(candidates[k].backend, []).append(k)
    singles = _common_singles(candidates, known)
    order = sorted(groups, key=lambda b: (whole.get(b, math.inf), singles.get(b, math.inf), b))
    if prefer in groups and _tied(prefer, order[0], whole, singles):
        order.remove(prefer)
        order.insert(0, prefer)
    return [groups[b] for b in order]


def interleave(candidates: Sequence[CandidatePartition], groups: Sequence[list[int]],
               alternates: Callable[[str], bool], size: int = WINDOW) -> list[list[int]]:
    """`groups` (one backend each, in measuring order) re-cut so that the backends that
    `alternates` take turns in windows of `size` node sets, largest first, then in the
    model's order (`stages`' order; single ops: the model's order), each window's backends
    in the groups' order, so that a later backend is still bounded by the earlier ones'
    costs on the same nodes. The turns stand where the first alternating group stood; the
    other groups stay whole and in place."""
    turns = [g for g in groups if g and alternates(candidates[g[0]].backend)]
    if len(turns) < 2:
        return [list(g) for g in groups]
    subs = {candidates[k].inside: candidates[k].sub_graph for g in turns for k in g}
    ranked = sorted(subs, key=lambda b: (-len(subs[b].nodes), subs[b].first, subs[b].nodes))
    window = {inside: i // size for i, inside in enumerate(ranked)}
    cut = [[k for k in g if window[candidates[k].inside] == w]
           for w in range(window[ranked[-1]] + 1) for g in turns]
    out: list[list[int]] = []
    for g in groups:
        if g is turns[0]:
            out += [c for c in cut if c]
        elif not any(g is t for t in turns):
            out.append(list(g))
    return out


def _tied(a: str, b: str, *paces: Mapping[str, float]) -> bool:
    """Whether `a` costs at most `TIE` more than `b` by the first of `paces` that has both."""
    for pace in paces:
        if a in pace and b in pace:
            return pace[a] <= (1 + TIE) * pace[b]
    return False


def ranking_ops(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                ks: Sequence[int], size: int = RANKING_OPS) -> list[int]:
    """Of the single-op candidates `ks`, those on up to `size` nodes (spread over the
    model's order) that every backend of `ks` can run alone: measured first, they rank the
    backends (`by_backend`) before their other single ops are measured."""
    backends: dict[int, set[str]] = {}
    for k in ks:
        backends.setdefault(candidates[k].sub_graph.nodes[0], set()).add(candidates[k].backend)
    every = set().union(*backends.values()) if backends else set()
    common = sorted(i for i, bs in backends.items() if bs == every)
    if len(every) < 2 or not common:
        return []
    step = len(common) / min(size, len(common))
    nodes = {common[int(j * step)] for j in range(min(size, len(common)))}
    return [k for k in ks if candidates[k].sub_graph.nodes[0] in nodes]


def _common_singles(candidates: Sequence[CandidatePartition], known: Mapping[int, float]
                    ) -> dict[str, float]:
    """backend → the sum of its known single-op costs over the nodes every backend with a
    known single op has a finite cost for (empty when there are none)."""
    single, _ = _known_costs(candidates, known)
    by_node: dict[int, dict[str, float]] = {}
    for (b, i), cost in single.items():
        by_node.setdefault(i, {})[b] = cost
    backends = {b for b, _ in single}
    common = [costs for costs in by_node.values() if set(costs) == backends]
    if not common:
        return {}
    return {b: math.fsum(costs[b] for costs in common) for b in backends}


def dominated(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
              ks: Sequence[int], known: Mapping[int, float],
              transition: TransitionCost | None) -> dict[int, str]:
    """Of candidates `ks`, those that cannot win given the measured costs `known` (index →
    seconds, single-op candidates among them), each with the reason."""
    single, region = _known_costs(candidates, known)
    backends = sorted({b for b, _ in single})
    out = {}
    for k in ks:
        c = candidates[k]
        nodes = c.sub_graph.nodes
        if len(nodes) < 2 or c.inside == graph.op_bits:
            continue
        floor = _floor(c, single)
        if floor == 0.0:
            continue
        for other in backends:
            if other == c.backend:
                continue
            cover = _single_cover(nodes, other, single, transition)
            as_one = region.get((other, c.inside), math.inf)
            if min(cover, as_one) < floor:
                how = (f"its {len(nodes)} ops one by one on {other} ({cover * 1e3:.3g} ms)"
                       if cover <= as_one else
                       f"the same {len(nodes)} ops as one region on {other} "
                       f"({as_one * 1e3:.3g} ms)")
                out[k] = (f"pruned: half its dearest op alone on {c.backend} "
                          f"({floor * 1e3:.3g} ms) costs more than {how}")
                break
    return out


def stop_above(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
               ks: Sequence[int], known: Mapping[int, float],
               transition: TransitionCost | None) -> list[float | None]:
    """For each of `ks`, the cost beyond which measuring it more precisely is wasted:
    LOSER_FACTOR times the cheapest cover of its nodes already known (as single ops on any
    backend, hand-offs included, or as one region on another backend); None without one,
    and for whole models (the end-to-end check's baselines)."""
    single, region = _known_costs(candidates, known)
    backends = sorted({b for b, _ in single})
    out: list[float | None] = []
    for k in ks:
        c = candidates[k]
        nodes = c.sub_graph.nodes
        best = math.inf
        if c.inside != graph.op_bits:
            for other in backends:
                if other != c.backend or len(nodes) > 1:
                    best = min(best, _single_cover(nodes, other, single, transition))
                if other != c.backend:
                    best = min(best, region.get((other, c.inside), math.inf))
        out.append(LOSER_FACTOR * best if math.isfinite(best) else None)
    return out


def floor_cover(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                known: Mapping[int, float], pending: Collection[int],
                transition: TransitionCost | None, exact: bool = True
                ) -> tuple[list[int], float, bool]:
    """The least-cost cover when each candidate in `pending` costs its floor (`FUSION_FLOOR`
    times its dearest op alone on its backend, as `known` holds single ops; 0 when it holds
    none of them) and every other one what `known` says (+inf when it says nothing): the
    pending candidates on that cover, in its order, its cost, and whether the search was
    exact. While the floors hold and it is, no cover costs less; with no pending candidate
    on it, it is the least-cost cover. `exact=False` goes straight to the search's beam:
    where the exact search ran out of states once, it will again, round after round."""
    single, _ = _known_costs(candidates, known)
    costs = [known.get(k, math.inf) for k in range(len(candidates))]
    for k in pending:
        costs[k] = _floor(candidates[k], single)
    pick = search(graph, candidates, costs, transition, unknown="invalid",
                  max_states=MAX_EXACT_STATES if exact else 0)
    index = {id(c): k for k, c in enumerate(candidates)}
    return ([index[id(c)] for c in pick.candidates if index[id(c)] in pending],
            pick.total_cost, pick.exact)


def _floor(c: CandidatePartition, single: Mapping[tuple[str, int], float]) -> float:
    """What `c` costs at least: `FUSION_FLOOR` times its dearest op alone on its backend
    (0 when none of its ops has a finite cost alone there)."""
    own = [single[(c.backend, i)] for i in c.sub_graph.nodes if (c.backend, i) in single]
    return FUSION_FLOOR * max(own) if own else 0.0


def _known_costs(candidates: Sequence[CandidatePartition], known: Mapping[int, float]
                 ) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], float]]:
    """The finite costs in `known` as (backend, node) → single op's cost and
    (backend, node bits) → the cheapest region with exactly those nodes."""
    single: dict[tuple[str, int], float] = {}
    region: dict[tuple[str, int], float] = {}
    for k, cost in known.items():
        c = candidates[k]
        if not math.isfinite(cost):
            continue
        if len(c.sub_graph.nodes) == 1:
            single[(c.backend, c.sub_graph.nodes[0])] = cost
        region[(c.backend, c.inside)] = min(cost, region.get((c.backend, c.inside), math.inf))
    return single, region


def _single_cover(nodes: Sequence[int], backend: str, single: Mapping[tuple[str, int], float],
                  transition: TransitionCost | None) -> float:
    """Seconds for `nodes` as single-op regions on `backend` with a same-backend hand-off
    between consecutive ones (+inf when one of them has no finite single-op cost)."""
    costs = [single.get((backend, i), math.inf) for i in nodes]
    per_switch = transition(backend, backend, 0) if transition is not None else 0.0
    return math.fsum(costs) + per_switch * (len(nodes) - 1)
