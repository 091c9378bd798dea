"""The least-cost cover search (RFC phase 3): A* over sets of covered op nodes.

From a state we take the lowest uncovered op node n (post-dfs) and try every candidate whose
first node is n (any candidate holding n and an earlier node would overlap the covered set)
and that overlaps nothing covered. Every exact cover is reachable this way, once, in order
of first nodes, so the search is complete and explores no permutations. States are taken
cheapest first by their cost plus a lower bound on what their uncovered nodes still cost
(`_Remaining`, admissible and consistent, so the first full cover taken is least-cost).

Costs. An edge costs the candidate's estimate plus the hand-offs it settles (the transition
model of `partitioning`): each value crossing between the new region and a region already
chosen is charged when its second side is placed, so the backend of both sides is known —
a value from an uncovered producer is charged later, when the producer's region is placed.
Arguments and returned values cost a host hand-off with the candidate itself. Since future
charges depend on the backends around the covered set, a state is identified by the covered
set plus, for each value still "live" (touching covered and uncovered nodes), the backend of
its covered producer or the backends of its covered consumer regions. Without transitions
(all zero) that part is empty and states are just covered sets, as in the RFC. With them,
parallel branches multiply states, so a state is dropped when another with the same covered
set is cheaper by more than its live values could ever win back (`_Bound`); still exact.
Where many long-lived values cross many branches (DeBERTa's relative-position terms feed
every layer) the states still multiply past any budget: after `max_states` expansions the
search starts over as a beam (`_beam`): states are taken in order of their lowest uncovered
node, keeping the `BEAM_WIDTH` cheapest at each (with the same bound). That is fast but may
miss a cheaper cover, or (rarely) every cover; the result says so (`exact`), and is no
dearer than the covers the caller knew of (`covers`: the archipelago of `islands`).

Acyclicity. Two convex regions can still depend on each other. A cycle through a new region
C exists iff C reaches itself in the quotient graph. Through uncovered nodes and through
"plain" regions (every entry reaches every exit) quotient reachability equals node
reachability, which cannot re-enter the convex C. Only "merging" regions (an entry that does
not reach some exit, e.g. two parallel branches) add reachability, so states also keep the
merging regions chosen so far (usually none) and the check follows those only.

Unknown costs (NaN) raise CollageError by default (`unknown="raise"`): a decision from a
missing measurement is a silent wrong answer; `unknown="invalid"` treats them as +inf.
Ties keep the first path found: candidates are tried in `sort_key` order and states of
equal cost leave the queue in insertion order, so the result is deterministic.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from collage_mlir.candidate import CandidatePartition
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, NodeKind, iter_bits
from collage_mlir.search.partitioning import (
    HOST,
    Choice,
    Partitioning,
    TransitionCost,
    Value,
    evaluate,
    execution_order,
    value_nbytes,
)

# Expansions the exact search may take (a few seconds in CPython) before it falls back.
MAX_EXACT_STATES = 30_000
# States kept per lowest uncovered node by the fallback.
BEAM_WIDTH = 16
# What a caller tells the user when a pick is not exact.
STATE_LIMIT_NOTE = (f"the hand-off states outgrew {MAX_EXACT_STATES} expansions; searched "
                    f"again keeping the {BEAM_WIDTH} cheapest states per step (a cover, not "
                    "proven least-cost)")


class _TooManyStates(Exception):
    pass


@dataclass(frozen=True, eq=False)
class _Edge:
    """A candidate prepared for the search: boundary values and reachability as bitsets."""

    index: int
    inside: int
    backend: str
    cost: float  # estimate plus the host hand-offs, which depend on this candidate only
    inputs: tuple[tuple[Value, int, int], ...]  # from outside ops: (value, nbytes, consumers)
    outputs: tuple[tuple[Value, int, int], ...]  # to outside ops: (value, nbytes, consumers)
    down_out: int  # nodes reachable from the region, outside it
    merging: bool
    share: float = 0.0  # the least its nodes can cost by `_Remaining` (set after _prepare)


def search(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
           costs: Sequence[float], transition_cost: TransitionCost | None = None,
           unknown: str = "raise", reason: Callable[[CandidatePartition], str] | None = None,
           max_states: int = MAX_EXACT_STATES, covers: Sequence[Sequence[int]] = ()
           ) -> Partitioning:
    """The least-cost exact, acyclic cover of `graph.op_bits` by `candidates`.

    `costs[k]` is the estimate of `candidates[k]` in seconds (+inf: never taken).
    `transition_cost(src, dst, nbytes)` prices hand-offs; None means free. When some op
    has no candidate with a finite cost, the error names it with each backend's `reason`
    (the estimator's) for its candidates there. Past `max_states` expanded states the
    search keeps a beam of the cheapest states (`Partitioning.exact` is then False), and
    returns the cheapest of its cover and `covers` (valid covers known beforehand, as
    indices into `candidates`), which a beam can miss.
    """
    if len(costs) != len(candidates):
        raise ValueError(f"{len(candidates)} candidates but {len(costs)} costs")
    order = sorted(range(len(candidates)), key=lambda k: candidates[k].sort_key())
    cands = [candidates[k] for k in order]
    region_costs = [_checked_cost(candidates[k], float(costs[k]), unknown) for k in order]
    nbytes = _Sizes(graph)
    table = _transition_table(graph, cands, transition_cost, nbytes)
    edges = _prepare(graph, cands, region_costs, table, nbytes)
    _check_coverable(graph, edges, cands, region_costs, reason)
    bound = _Bound(graph, table, nbytes) if table is not None else None
    left = _Remaining(graph, edges)
    edges = left.edges
    exact = True
    try:
        path, total, states = _dijkstra(graph, edges, table, bound, max_states, left)
    except _TooManyStates:
        exact = False
        path, total, states = _beam(graph, edges, table, BEAM_WIDTH, left)
        states += max_states
        path, total = _cheapest(graph, path, total, edges, order, candidates, costs, covers,
                                transition_cost)
    chosen = [cands[e.index] for e in path]
    ranks = execution_order(graph, chosen)
    same_nodes: dict[int, list[int]] = {}
    for k, c in enumerate(cands):
        same_nodes.setdefault(c.inside, []).append(k)
    choices = tuple(_choice(cands, region_costs, path[k].index, same_nodes) for k in ranks)
    moved = total - math.fsum(c.cost for c in choices)
    return Partitioning(graph, choices, total, max(moved, 0.0), states, exact)


# -- preparation ----------------------------------------------------------------------------


def _checked_cost(cand: CandidatePartition, cost: float, unknown: str) -> float:
    if math.isnan(cost):
        if unknown == "invalid":
            return math.inf
        raise CollageError(f"unknown cost (NaN) for {cand}: the estimator has no cost for it "
                           "(a cost table without its backend and no default, or a "
                           "measurement missing); collage-opt's search pass skips such "
                           "candidates with unknown=invalid")
    if cost < 0:
        raise CollageError(f"negative cost {cost} for {cand}")
    return cost


class _Sizes(dict):
    """value -> bytes, computed once per value."""

    def __init__(self, graph: DataflowGraph) -> None:
        super().__init__()
        self.graph = graph

    def __missing__(self, value: Value) -> int:
        self[value] = n = value_nbytes(self.graph, value)
        return n


def _transition_table(graph: DataflowGraph, cands: Sequence[CandidatePartition],
                      transition: TransitionCost | None, nbytes: _Sizes
                      ) -> dict[tuple[str, str, int], float] | None:
    """Every hand-off price the search can need, asked once; None when all are free."""
    if transition is None:
        return None
    backends = sorted({c.backend for c in cands} | {HOST})
    sizes = {nbytes[v] for c in cands
             for v in c.sub_graph.input_values + c.sub_graph.output_values}
    table = {}
    for src in backends:
        for dst in backends:
            if src == dst == HOST:
                continue
            for n in sizes:
                t = float(transition(src, dst, n))
                if math.isnan(t) or t < 0:
                    raise CollageError(f"transition cost {src}->{dst} ({n} bytes) is {t}")
                table[src, dst, n] = t
    return table if any(table.values()) else None


def _consumers(graph: DataflowGraph) -> dict[Value, int]:
    """Op nodes reading each value."""
    out: dict[Value, int] = {}
    for node in graph.nodes:
        if node.kind is not NodeKind.OP:
            continue
        for src in node.operands:
            if src is not None:
                out[src] = out.get(src, 0) | (1 << node.index)
    return out


def _prepare(graph: DataflowGraph, cands: Sequence[CandidatePartition],
             region_costs: Sequence[float],
             table: dict[tuple[str, str, int], float] | None, sizes: _Sizes) -> list[_Edge]:
    consumers = _consumers(graph)
    returned = set(graph.outputs)
    edges = []
    for k, cand in enumerate(cands):
        if math.isinf(region_costs[k]):
            continue
        sub = cand.sub_graph
        if not sub.is_convex:
            raise CollageError(f"candidate {cand} is not convex")
        cost, inputs, outputs = region_costs[k], [], []
        for v in sub.input_values:
            nbytes = sizes[v]
            if graph.nodes[v[0]].kind is NodeKind.ARG:
                cost += _price(table, HOST, cand.backend, nbytes)
            else:
                inputs.append((v, nbytes, consumers[v]))
        for v in sub.output_values:
            nbytes = sizes[v]
            if v in returned:
                cost += _price(table, cand.backend, HOST, nbytes)
            outside = consumers.get(v, 0) & ~sub.inside
            if outside:
                outputs.append((v, nbytes, outside))
        if math.isinf(cost):
            continue
        down = 0
        for i in sub.nodes:
            down |= graph.downstream[i]
        edges.append(_Edge(k, sub.inside, cand.backend, cost, tuple(inputs), tuple(outputs),
                           down & ~sub.inside, _is_merging(graph, sub.inside, sub.exit_bits)))
    return edges


def _is_merging(graph: DataflowGraph, inside: int, exits: int) -> bool:
    """True when some entry does not reach every exit (the region adds reachability)."""
    for i in iter_bits(inside):
        if graph.nodes[i].preds & graph.op_bits & ~inside:
            if exits & ~(graph.downstream[i] | (1 << i)):
                return True
    return False


def _price(table: dict[tuple[str, str, int], float] | None, src: str, dst: str,
           nbytes: int) -> float:
    if table is None:
        return 0.0
    return table[src, dst, nbytes]


class Uncovered(CollageError):
    """No candidate left can run graph node `node` (the message says why, per backend)."""

    def __init__(self, message: str, node: int) -> None:
        super().__init__(message)
        self.node = node


def first_uncovered(graph: DataflowGraph, parts: Sequence[CandidatePartition | _Edge]
                    ) -> int | None:
    """The first op node of `graph` (post-dfs order) in none of `parts`, or None."""
    covered = 0
    for part in parts:
        covered |= part.inside
    missing = graph.op_bits & ~covered
    return (missing & -missing).bit_length() - 1 if missing else None


def cannot_run(graph: DataflowGraph, i: int, why: str) -> str:
    """The message for op node `i` that nothing can run: its op type and ONNX name."""
    node = graph.nodes[i]
    name = onnx_view.node_name(node.op) if node.op is not None else ""
    return f"no backend can run {node.op_type} node {repr(name) if name else i}: {why}"


def _check_coverable(graph: DataflowGraph, edges: Sequence[_Edge],
                     cands: Sequence[CandidatePartition], region_costs: Sequence[float],
                     reason: Callable[[CandidatePartition], str] | None) -> None:
    i = first_uncovered(graph, edges)
    if i is None:
        return
    # per backend, the smallest candidate holding the node says best why it is out
    why: dict[str, tuple[int, str]] = {}
    for c, cost in zip(cands, region_costs, strict=True):
        if c.inside >> i & 1:
            size = c.inside.bit_count()
            text = (reason(c) if reason else "") or ("no cost" if math.isinf(cost) else "")
            if c.backend not in why or size < why[c.backend][0]:
                why[c.backend] = (size, text or "out")
    detail = "; ".join(f"{b}: {w}" for b, (_, w) in sorted(why.items())) or \
        "no backend offered a candidate"
    raise Uncovered(cannot_run(graph, i, detail), i)


# -- the search -----------------------------------------------------------------------------

# A state key: (covered bits, live values, merging regions' bits). Live values, sorted:
# (value, ("p", producer backend)) or (value, ("c", sorted consumer-region backends)).
_Key = tuple[int, tuple, tuple[int, ...]]


class _Remaining:
    """A lower bound on what covering the uncovered nodes still costs (A*'s heuristic): each
    op node's *share* is the least cost per node of any edge holding it, and no edge costs
    less than its nodes' shares, hand-offs aside; so the bound never overestimates and
    never drops by more than an edge's cost, and the search stays exact. It ranks states
    that cover different nodes fairly: a region over many nodes has paid for them."""

    def __init__(self, graph: DataflowGraph, edges: Sequence[_Edge]) -> None:
        share: dict[int, float] = {}
        for e in edges:
            per = e.cost / e.inside.bit_count()
            for i in iter_bits(e.inside):
                share[i] = min(share.get(i, math.inf), per)
        self.total = math.fsum(share.values())
        self.edges = [dataclasses.replace(e, share=math.fsum(share[i] for i in iter_bits(
            e.inside))) for e in edges]
        self.covered: dict[int, float] = {0: 0.0}

    def after(self, covered: int, e: _Edge) -> None:
        """Note the shares of `covered | e.inside`, reached from `covered` by `e`."""
        self.covered.setdefault(covered | e.inside, self.covered[covered] + e.share)

    def __call__(self, covered: int) -> float:
        return max(self.total - self.covered[covered], 0.0)


def _dijkstra(graph: DataflowGraph, edges: Sequence[_Edge],
              table: dict[tuple[str, str, int], float] | None, bound: _Bound | None,
              max_states: int | None, left: _Remaining
              ) -> tuple[list[_Edge], float, int]:
    """(path, cost, states expanded) by A* under `left`; raises _TooManyStates past
    `max_states` (None: no limit). Only states that differ in their live values can
    multiply: without a bound (free hand-offs) a state is its covered set, so the limit
    applies with a bound only."""
    by_first, merging_of = _index(edges)
    start: _Key = (0, (), ())
    best: dict[_Key, float] = {start: 0.0}
    parent: dict[_Key, tuple[_Key, _Edge]] = {}
    heap: list[tuple[float, int, float, _Key]] = [(left(0), 0, 0.0, start)]
    # Per (covered, merging): the cheapest state so far. Another state with the same nodes
    # placed is dropped once it costs at least that much plus the most its live values'
    # backends could still save it (`_Bound`): the cheapest one can copy its future.
    group_best: dict[tuple[int, tuple[int, ...]], tuple[float, _Key]] = {}
    seq, expanded, stuck = 1, 0, -1
    while heap:
        _, _, cost, key = heapq.heappop(heap)
        if cost > best[key]:
            continue
        covered = key[0]
        if bound is not None and bound.dominated(group_best, key, cost):
            continue
        if covered == graph.op_bits:
            return _path(parent, key), cost, expanded
        expanded += 1
        if bound is not None and max_states is not None and expanded > max_states:
            raise _TooManyStates
        n = _lowest_free(graph, covered)
        progressed = False
        for e, new_key, step in _successors(key, by_first.get(n, ()), merging_of, table):
            new_cost = cost + step
            progressed = True
            if bound is not None and bound.dominated(group_best, new_key, new_cost):
                continue
            if new_cost < best.get(new_key, math.inf):
                best[new_key] = new_cost
                parent[new_key] = (key, e)
                left.after(covered, e)
                heapq.heappush(heap, (new_cost + left(new_key[0]), seq, new_cost, new_key))
                seq += 1
        if not progressed:
            stuck = max(stuck, n)
    raise _no_cover(graph, stuck)


def _beam(graph: DataflowGraph, edges: Sequence[_Edge],
          table: dict[tuple[str, str, int], float] | None, width: int, left: _Remaining
          ) -> tuple[list[_Edge], float, int]:
    """(path, cost, states expanded) of a beam search: every successor covers its parent's
    lowest uncovered node, so states are taken bucket by bucket in order of that node, the
    `width` cheapest of each bucket, counting what their uncovered nodes still cost at
    least (`left`), expanded and the rest dropped."""
    by_first, merging_of = _index(edges)
    start: _Key = (0, (), ())
    best: dict[_Key, float] = {start: 0.0}
    parent: dict[_Key, tuple[_Key, _Edge]] = {}
    buckets: dict[int, set[_Key]] = {_lowest_free(graph, 0): {start}}
    done: list[_Key] = []
    expanded, stuck = 0, -1
    while buckets:
        n = min(buckets)
        kept = sorted(buckets.pop(n), key=lambda k: (best[k] + left(k[0]), k))[:width]
        for key in kept:
            expanded += 1
            progressed = False
            for e, new_key, step in _successors(key, by_first.get(n, ()), merging_of, table):
                progressed = True
                new_cost = best[key] + step
                if new_cost >= best.get(new_key, math.inf):
                    continue
                best[new_key], parent[new_key] = new_cost, (key, e)
                left.after(key[0], e)
                if new_key[0] == graph.op_bits:
                    done.append(new_key)
                else:
                    buckets.setdefault(_lowest_free(graph, new_key[0]), set()).add(new_key)
            if not progressed:
                stuck = max(stuck, n)
    if not done:
        raise _no_cover(graph, stuck)
    last = min(done, key=lambda k: (best[k], k))
    return _path(parent, last), best[last], expanded


def _index(edges: Sequence[_Edge]) -> tuple[dict[int, list[_Edge]], dict[int, _Edge]]:
    """Edges by their first node (in sort_key order, as `edges` are) and merging edges by
    their nodes."""
    by_first: dict[int, list[_Edge]] = {}
    for e in edges:
        by_first.setdefault((e.inside & -e.inside).bit_length() - 1, []).append(e)
    return by_first, {e.inside: e for e in edges if e.merging}


def _lowest_free(graph: DataflowGraph, covered: int) -> int:
    free = graph.op_bits & ~covered
    return (free & -free).bit_length() - 1


def _successors(key: _Key, edges: Sequence[_Edge], merging_of: dict[int, _Edge],
                table: dict[tuple[str, str, int], float] | None
                ) -> Iterator[tuple[_Edge, _Key, float]]:
    """(edge, next state, edge cost with the hand-offs it settles) for each of `edges` (all
    starting at the state's lowest uncovered node) that overlaps nothing and closes no cycle."""
    covered, live_items, merging = key
    live = dict(live_items)
    for e in edges:
        if e.inside & covered:
            continue
        if merging and _closes_cycle(e, merging, merging_of):
            continue
        new_covered = covered | e.inside
        step, new_live = e.cost, ()
        if table is not None:
            extra, new_live = _hand_offs(e, covered, new_covered, live, table)
            step += extra
        new_merging = tuple(sorted(merging + (e.inside,))) if e.merging else merging
        yield e, (new_covered, new_live, new_merging), step


def _no_cover(graph: DataflowGraph, stuck: int) -> CollageError:
    return CollageError(f"no exact acyclic cover: node {stuck} ({graph.nodes[stuck].op_type}) "
                        "cannot be covered without overlapping regions or a cycle")


class _Bound:
    """How much two states with the same covered set can differ in future hand-offs.

    A live value whose producer is placed can still be charged once per uncovered consumer;
    one whose producer is not placed, once per consumer region already placed; each charge
    at most the dearest hand-off of its size. The live values depend on the covered set only.
    """

    def __init__(self, graph: DataflowGraph, table: dict[tuple[str, str, int], float],
                 sizes: _Sizes) -> None:
        self.consumers = _consumers(graph)
        self.sizes = sizes
        self.dearest: dict[int, float] = {}
        for (_, _, n), t in table.items():
            self.dearest[n] = max(self.dearest.get(n, 0.0), t)

    def __call__(self, covered: int, live_items: tuple) -> float:
        total = 0.0
        for v, (kind, info) in live_items:
            count = ((self.consumers[v] & ~covered).bit_count() if kind == "p" else len(info))
            total += count * self.dearest[self.sizes[v]]
        return total

    def dominated(self, group_best: dict, key: _Key, cost: float) -> bool:
        """True when another state of the same group makes `key` useless; else record it."""
        covered, live_items, merging = key
        group = (covered, merging)
        best = group_best.get(group)
        if best is None or cost < best[0]:
            group_best[group] = (cost, key)
            return False
        return best[1] != key and cost >= best[0] + self(covered, live_items)


def _closes_cycle(e: _Edge, merging: tuple[int, ...], merging_of: dict[int, _Edge]) -> bool:
    """True when adding `e` lets the quotient graph reach `e` from `e`."""
    reach, pending = e.down_out, list(merging)
    grew = True
    while grew and pending:
        grew = False
        for bits in list(pending):
            if reach & bits:
                reach |= merging_of[bits].down_out
                pending.remove(bits)
                grew = True
    return bool(reach & e.inside)


def _hand_offs(e: _Edge, covered: int, new_covered: int, live: dict,
               table: dict[tuple[str, str, int], float]) -> tuple[float, tuple]:
    """Hand-off seconds settled by placing `e`, and the live values after it."""
    extra = 0.0
    live = dict(live)
    for v, nbytes, readers in e.inputs:
        if (covered >> v[0]) & 1:  # producer placed: charge now
            extra += table[live[v][1], e.backend, nbytes]
            if not readers & ~new_covered:
                del live[v]
        else:  # producer not placed yet: remember this consumer region's backend
            seen = live[v][1] if v in live else ()
            live[v] = ("c", tuple(sorted(seen + (e.backend,))))
    for v, nbytes, outside in e.outputs:
        if v in live:  # consumers placed before their producer
            for dst in live[v][1]:
                extra += table[e.backend, dst, nbytes]
        if outside & ~new_covered:
            live[v] = ("p", e.backend)
        else:
            live.pop(v, None)
    return extra, tuple(sorted(live.items()))


def _cheapest(graph: DataflowGraph, path: list[_Edge], total: float, edges: Sequence[_Edge],
              order: Sequence[int], candidates: Sequence[CandidatePartition],
              costs: Sequence[float], covers: Sequence[Sequence[int]],
              transition: TransitionCost | None) -> tuple[list[_Edge], float]:
    """(path, total), or the cheapest of `covers` (indices into `candidates`, whose sorted
    order is `order`) where one costs less, priced by `partitioning.evaluate`."""
    edge_of = {order[e.index]: e for e in edges}
    for cover in covers:
        if not all(k in edge_of for k in cover):
            continue  # a region of it cannot run
        cost, _ = evaluate(graph, [candidates[k] for k in cover], [costs[k] for k in cover],
                           transition)
        if cost < total:
            path, total = [edge_of[k] for k in cover], cost
    return path, total


def _path(parent: dict[_Key, tuple[_Key, _Edge]], key: _Key) -> list[_Edge]:
    out = []
    while key in parent:
        key, e = parent[key]
        out.append(e)
    return out[::-1]


def _choice(cands: Sequence[CandidatePartition], region_costs: Sequence[float], k: int,
            same_nodes: dict[int, list[int]]) -> Choice:
    """The chosen candidate and the cheapest finite one on another backend, same nodes."""
    cand = cands[k]
    rivals = [(region_costs[j], j) for j in same_nodes[cand.inside]
              if cands[j].backend != cand.backend and math.isfinite(region_costs[j])]
    if not rivals:
        return Choice(cand, region_costs[k])
    cost, j = min(rivals)
    return Choice(cand, region_costs[k], cands[j], cost)
