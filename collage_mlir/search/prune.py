"""Pruning before measuring: which candidates to measure first, and which cannot win.

Measuring is the slow phase (a compile and a timing per candidate), so candidates are
measured in stages, most informative first (`stages`): every single-op candidate (they
guarantee a cover, and a measuring estimator learns from them which op types a backend
hangs on before it compiles anything large), then each backend's whole model (the
baselines the end-to-end check needs), then the rest, largest first, one backend at a
time, the backend whose whole model ran fastest first (`by_backend`). Before each of those,
a multi-op candidate on backend X is *dominated* (`dominated`) when half of what its
dearest op alone costs on X is still more than another backend Y already costs for the
same ops: as single-op candidates, hand-offs included, or as one measured region with the
same nodes (so the same boundary). A region is not cheaper than half of its dearest op
(fusion saves memory traffic around an op, not the op's own work), so such a candidate
cannot beat a cover the search already has. The slow backend's fused regions on a model it
runs 7x slower are pruned this way; the backends that compete op by op keep theirs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph
from collage_mlir.search.partitioning import TransitionCost

FUSION_FLOOR = 0.5
"""A region on a backend costs at least this share of its dearest op alone there."""
SUM_FLOOR = 0.0


def stages(graph: DataflowGraph, candidates: Sequence[CandidatePartition]) -> list[list[int]]:
    """Candidate indices in measuring order: [single ops], [whole models], [the rest,
    largest first]; empty stages left out."""
    whole, single, rest = [], [], []
    for k, c in enumerate(candidates):
        n = len(c.sub_graph.nodes)
        (whole if c.inside == graph.op_bits else single if n == 1 else rest).append(k)
    rest.sort(key=lambda k: (-len(candidates[k].sub_graph.nodes), candidates[k].sort_key()))
    return [s for s in (single, whole, rest) if s]


def by_backend(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
               ks: Sequence[int], known: Mapping[int, float]) -> list[list[int]]:
    """`ks` split per backend (order within kept), the backend whose whole model costs
    least in `known` first, backends without a measured whole model last: the later ones
    are then pruned against the first one's measured regions."""
    whole = {candidates[k].backend: cost for k, cost in known.items()
             if candidates[k].inside == graph.op_bits and math.isfinite(cost)}
    groups: dict[str, list[int]] = {}
    for k in ks:
        groups.setdefault(candidates[k].backend, []).append(k)
    order = sorted(groups, key=lambda b: (whole.get(b, math.inf), b))
    return [groups[b] for b in order]


def dominated(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
              ks: Sequence[int], known: Mapping[int, float],
              transition: TransitionCost | None) -> dict[int, str]:
    """Of candidates `ks`, those that cannot win given the measured costs `known` (index →
    seconds, single-op candidates among them), each with the reason."""
    single: dict[tuple[str, int], float] = {}
    region: dict[tuple[str, int], float] = {}
    for k, cost in known.items():
        c = candidates[k]
        if not math.isfinite(cost):
            continue
        if len(c.sub_graph.nodes) == 1:
            single[(c.backend, c.sub_graph.nodes[0])] = cost
        region[(c.backend, c.inside)] = min(cost, region.get((c.backend, c.inside), math.inf))
    backends = sorted({b for b, _ in single})
    out = {}
    for k in ks:
        c = candidates[k]
        nodes = c.sub_graph.nodes
        if len(nodes) < 2 or c.inside == graph.op_bits:
            continue
        own = [single[(c.backend, i)] for i in nodes if (c.backend, i) in single]
        if not own:
            continue
        floor = max(FUSION_FLOOR * max(own), SUM_FLOOR * math.fsum(own))
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


def _single_cover(nodes: Sequence[int], backend: str, single: Mapping[tuple[str, int], float],
                  transition: TransitionCost | None) -> float:
    """Seconds for `nodes` as single-op regions on `backend` with a same-backend hand-off
    between consecutive ones (+inf when one of them has no finite single-op cost)."""
    costs = [single.get((backend, i), math.inf) for i in nodes]
    per_switch = transition(backend, backend, 0) if transition is not None else 0.0
    return math.fsum(costs) + per_switch * (len(nodes) - 1)
