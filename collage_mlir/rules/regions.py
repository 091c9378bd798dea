"""MaximalRegionsRule: the largest convex pieces of the ops a backend supports.

Depth limits keep the candidate count small, but "run everything on backend X" must stay in
the search space whatever the limit, or the search can never do at least as well as the best
single backend. So every default spec also proposes its maximal supported regions: the whole
function when the backend runs every op (one multi-exit SubGraph), else the supported ops cut
into convex pieces.

The cut is linear time. Give each supported node a stage: the largest number of times a path
reaching it has left the supported set and come back. Stages never decrease along a path and
grow on every excursion outside, so no path leaves a (stage, connected component) group and
re-enters it: each group is convex.
"""

from __future__ import annotations

from collage_mlir.candidate import CandidatePartition
from collage_mlir.graph import DataflowGraph, SubGraphConfig
from collage_mlir.graph.bits import iter_bits
from collage_mlir.rules.base import PartitionRule, RuleContext

MAXIMAL_CONFIG = SubGraphConfig(max_exits=1 << 30, allow_taps=True, max_depth=None)
"""The limits maximal regions satisfy: convex, any number of exits and taps, any depth."""


def stages(graph: DataflowGraph, supported: int) -> dict[int, int]:
    """Stage of every supported op node (see module docstring)."""
    stage: dict[int, int] = {}
    after_exit: dict[int, int] = {}  # unsupported node → largest stage of a path through it
    for node in graph.nodes:
        i = node.index
        inside = (supported >> i) & 1
        best = 0 if inside else -1
        for p in iter_bits(node.preds):
            if p in stage:
                best = max(best, stage[p])
            elif p in after_exit:
                best = max(best, after_exit[p] + 1 if inside else after_exit[p])
        if inside:
            stage[i] = best
        elif best >= 0:
            after_exit[i] = best
    return stage


def convex_pieces(graph: DataflowGraph, supported: int) -> list[int]:
    """The supported op nodes cut into convex, weakly connected pieces, by first node."""
    stage = stages(graph, supported & graph.op_bits)
    piece_of: dict[int, int] = {}
    pieces: list[int] = []
    for i in sorted(stage):  # union-find would do too; this merges by flood fill
        if i in piece_of:
            continue
        bits, frontier = 0, [i]
        while frontier:
            j = frontier.pop()
            if j in piece_of:
                continue
            piece_of[j] = len(pieces)
            bits |= 1 << j
            node = graph.nodes[j]
            for k in iter_bits(node.preds | node.succs):
                if stage.get(k) == stage[i] and k not in piece_of:
                    frontier.append(k)
        pieces.append(bits)
    return sorted(pieces, key=lambda b: (b & -b).bit_length())


class MaximalRegionsRule(PartitionRule):
    """One candidate per convex piece of the backend's supported ops (no depth limit)."""

    def __init__(self, name: str = "maximal") -> None:
        self.name = name

    def all_candidates(self, ctx: RuleContext) -> list[CandidatePartition]:
        return [ctx.candidate(b, self.name) for b in convex_pieces(ctx.graph, ctx.supported)]
