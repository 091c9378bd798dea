"""Staged measuring (search/prune.py, driver.measure): order, pruning, the phase budget."""

from __future__ import annotations

import math

from test_search import cand, graph_of

from collage_mlir import driver
from collage_mlir.cost.base import CostEstimator
from collage_mlir.search import prune
from collage_mlir.search.prune import (
    FUSION_FLOOR,
    LOSER_FACTOR,
    RANKING_OPS,
    WINDOW,
    dominated,
    floor_cover,
    interleave,
    stages,
    stop_above,
)
from collage_mlir.search.search import MAX_EXACT_STATES, search


class PerOp(CostEstimator):
    """Test double: a region costs `per_op[backend]` per op, times 0.8 when fused (more than
    one op); hand-offs cost nothing. Records every batch it is asked to cost."""

    def __init__(self, per_op: dict[str, float]) -> None:
        self.per_op, self.batches = per_op, []

    def estimate(self, candidates, progress=None):
        self.batches.append(list(candidates))
        return [self.per_op[c.backend] * len(c.sub_graph.nodes)
                * (0.8 if len(c.sub_graph.nodes) > 1 else 1.0) for c in candidates]

    def transition_cost(self, src_backend, dst_backend, nbytes):
        return 0.0


class Bounded(PerOp):
    """PerOp that also records the bounds `driver.measure` hands it with each batch."""

    def __init__(self, per_op: dict[str, float]) -> None:
        super().__init__(per_op)
        self.bounds = []

    def estimate_bounded(self, candidates, stop_above, progress=None):
        self.bounds.append(list(stop_above))
        return self.estimate(candidates, progress)


def chain_candidates(backends=("fast", "slow")):
    """A 4-op chain: every single op, every adjacent pair and the whole chain, per backend."""
    graph, n = graph_of([[], [0], [1], [2]])
    spans = [[k] for k in range(4)] + [[k, k + 1] for k in range(3)] + [[0, 1, 2, 3]]
    return graph, [cand(graph, [n[k] for k in span], b) for b in backends for span in spans]


def test_stages_are_single_ops_then_whole_models_then_the_rest_largest_first():
    graph, cands = chain_candidates()
    single, whole, rest = stages(graph, cands)
    assert all(cands[k].inside == graph.op_bits for k in whole) and len(whole) == 2
    assert all(len(cands[k].sub_graph.nodes) == 1 for k in single) and len(single) == 8
    sizes = [len(cands[k].sub_graph.nodes) for k in rest]
    assert sizes == sorted(sizes, reverse=True) and len(rest) == 6


def test_a_backend_ten_times_slower_per_op_loses_its_fused_regions_to_pruning():
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 10.0})
    single, whole, rest = stages(graph, cands)
    known = dict(zip(single, est.estimate([cands[k] for k in single]), strict=True))
    out = dominated(graph, cands, rest, known, None)
    assert {cands[k].backend for k in out} == {"slow"}
    assert len(out) == 3  # every fused pair on slow; none on fast
    assert all("pruned" in why and "one by one on fast" in why for why in out.values())


def test_backends_that_compete_op_by_op_keep_their_fused_regions():
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 1.5})
    single, whole, rest = stages(graph, cands)
    known = dict(zip(single, est.estimate([cands[k] for k in single]), strict=True))
    assert dominated(graph, cands, rest, known, None) == {}


def test_pruning_keeps_the_pick_and_skips_the_dominated_measurements():
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 10.0})
    costs, left = driver.measure(est, cands, graph=graph, bound=False)  # the rest in one batch
    full = PerOp({"fast": 1.0, "slow": 10.0}).estimate(cands)
    measured = [c for batch in est.batches for c in batch]
    assert len(measured) == len(cands) - len(left) and len(left) == 3
    assert search(graph, cands, costs, None).candidates == search(graph, cands, full,
                                                                  None).candidates
    assert [len(b) for b in est.batches] == [8, 2, 3]  # single, whole, the unpruned rest
    rejected = driver.rejections(graph, cands, costs, est, left)
    assert [(r.backend, r.count) for r in rejected] == [("slow", 3)]
    assert rejected[0].reason.startswith("pruned")


def test_a_spent_budget_leaves_the_rest_unmeasured_but_a_cover_stays():
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 1.5})
    costs, left = driver.measure(est, cands, graph=graph, budget_s=1e-9)
    assert len(left) == 6 and all("measure budget" in why for why in left.values())
    assert all(math.isinf(costs[k]) for k in left)
    assert [len(b) for b in est.batches] == [8, 2]
    pick = search(graph, cands, costs, None)
    assert math.isfinite(pick.total_cost)


def test_without_pruning_everything_is_measured():
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 10.0})
    costs, left = driver.measure(est, cands, graph=graph, prune=False)
    assert left == {} and sum(len(b) for b in est.batches) == len(cands)


def test_the_rest_is_measured_one_backend_at_a_time_fastest_whole_model_first():
    graph, cands = chain_candidates(("slow", "fast"))  # listed slow first
    est = PerOp({"fast": 1.0, "slow": 1.5})
    driver.measure(est, cands, graph=graph, bound=False)
    rest = [{c.backend for c in batch} for batch in est.batches[2:]]
    assert rest == [{"fast"}, {"slow"}]


def test_a_tie_for_fastest_goes_to_the_reference_backend():
    # "slow" is the reference: 4% behind is a tie (TIE) and it measures first; 50% behind
    # is not, and the fastest goes first
    class Reference(PerOp):
        reference_backend = "slow"

    graph, cands = chain_candidates(("fast", "slow"))
    for slow, want in ((1.04, [{"slow"}, {"fast"}]), (1.5, [{"fast"}, {"slow"}])):
        est = Reference({"fast": 1.0, "slow": slow})
        driver.measure(est, cands, graph=graph, bound=False)
        assert [{c.backend for c in batch} for batch in est.batches[2:]] == want, slow


def test_a_region_measured_on_another_backend_prunes_the_same_nodes():
    """Slow is 4x fast per op: half its dearest op (2.0) is no more than fast's two single
    ops (2.0), so the single ops alone prune nothing; fast's measured pair (1.6) does."""
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 4.0})
    single, whole, rest = stages(graph, cands)
    known = dict(zip(single, est.estimate([cands[k] for k in single]), strict=True))
    slow_pairs = [k for k in rest if cands[k].backend == "slow"]
    assert dominated(graph, cands, slow_pairs, known, None) == {}
    fast_pairs = [k for k in rest if cands[k].backend == "fast"]
    known.update(zip(fast_pairs, est.estimate([cands[k] for k in fast_pairs]), strict=True))
    out = dominated(graph, cands, slow_pairs, known, None)
    assert sorted(out) == sorted(slow_pairs)
    assert all("the same 2 ops as one region on fast (1.6e+03 ms)" in why for why in out.values())
    costs, left = driver.measure(PerOp({"fast": 1.0, "slow": 4.0}), cands,
                                 graph=graph)
    assert sorted(left) == sorted(slow_pairs)


def test_a_candidate_loses_beyond_twice_the_cheapest_cover_of_its_nodes_known():
    graph, cands = chain_candidates()
    est = PerOp({"fast": 1.0, "slow": 10.0})
    single, whole, rest = stages(graph, cands)
    assert stop_above(graph, cands, single, {}, None) == [None] * len(single)
    known = dict(zip(single, est.estimate([cands[k] for k in single]), strict=True))
    by = {(cands[k].backend, len(cands[k].sub_graph.nodes)): b
          for k, b in zip(single + whole + rest,
                          stop_above(graph, cands, single + whole + rest, known, None),
                          strict=True)}
    assert by[("slow", 1)] == LOSER_FACTOR * 1.0  # fast's single op
    assert by[("fast", 1)] == LOSER_FACTOR * 10.0  # slow's, the only other cover
    assert by[("slow", 2)] == LOSER_FACTOR * 2.0  # fast's two single ops
    assert by[("fast", 2)] == LOSER_FACTOR * 2.0  # its own two single ops
    assert by[("fast", 4)] is None and by[("slow", 4)] is None  # whole models: baselines
    fast_pairs = [k for k in rest
                  if cands[k].backend == "fast" and len(cands[k].sub_graph.nodes) == 2]
    known.update(zip(fast_pairs, est.estimate([cands[k] for k in fast_pairs]), strict=True))
    slow_pair = next(k for k in rest if cands[k].backend == "slow"
                     and cands[k].inside == cands[fast_pairs[0]].inside)
    assert stop_above(graph, cands, [slow_pair], known, None) == [LOSER_FACTOR * 1.6]


def test_single_ops_are_ranked_on_a_few_then_measured_fastest_backend_first():
    """A 10-op chain, the slow backend ("heavy") listed and named first: RANKING_OPS ops on
    both backends rank "quick" first; its other single ops get no bound (no other backend
    ran those nodes), heavy's are bounded by quick's. Without pruning: one batch."""
    graph, n = graph_of([[]] + [[k] for k in range(9)])
    cands = [cand(graph, [n[k]], b) for b in ("heavy", "quick") for k in range(10)]
    est = Bounded({"quick": 1.0, "heavy": 3.0})
    driver.measure(est, cands, graph=graph)
    ranking, quick, heavy = est.batches[:3]
    assert len(ranking) == 2 * RANKING_OPS and {c.backend for c in ranking} == {"heavy", "quick"}
    assert {c.backend for c in quick} == {"quick"} and {c.backend for c in heavy} == {"heavy"}
    assert len(quick) == len(heavy) == 10 - RANKING_OPS
    assert est.bounds[0] == [None] * len(ranking)
    assert est.bounds[1] == [None] * len(quick)  # heavy never ran these nodes
    assert est.bounds[2] == [LOSER_FACTOR * 1.0] * len(heavy)
    est = Bounded({"quick": 1.0, "heavy": 3.0})
    driver.measure(est, cands, graph=graph, prune=False)
    assert len(est.batches[0]) == len(cands) and est.bounds[0] == [None] * len(cands)


def test_backends_that_alternate_take_turns_in_windows_of_nodes():
    """Three backends on a 20-op chain; "batch" compiles its regions together and keeps its
    single ops in one group. The other two take turns, WINDOW nodes each, the fastest first
    in every window, so each is bounded by the other's cost on the same nodes."""

    class Alternating(Bounded):
        def alternates(self, backend):
            return backend != "batch"

    graph, n = graph_of([[]] + [[k] for k in range(19)])
    cands = [cand(graph, [n[k]], b) for b in ("batch", "slow", "fast") for k in range(20)]
    est = Alternating({"fast": 1.0, "slow": 1.5, "batch": 3.0})
    driver.measure(est, cands, graph=graph)
    after = est.batches[1:]  # the ranking ops first
    backends = [{c.backend for c in b} for b in after]
    assert all(len(b) == 1 for b in backends)
    order = [b.pop() for b in backends]
    assert order[-1] == "batch" and order.count("batch") == 1
    turns = order[:-1]
    assert turns == ["fast", "slow"] * (len(turns) // 2)
    firsts = [{c.sub_graph.first for c in b} for b in after[:-1]]
    assert all(len(f) <= WINDOW for f in firsts)
    assert all(firsts[i] == firsts[i + 1] for i in range(0, len(firsts), 2))
    assert len(turns) // 2 == math.ceil((20 - RANKING_OPS) / WINDOW)
    assert all(b == [LOSER_FACTOR * 1.0] * len(b) for b in est.bounds[2:-1:2])  # slow's turns


def test_interleave_keeps_the_groups_when_fewer_than_two_alternate():
    graph, n = graph_of([[], [0], [1], [2]])
    cands = [cand(graph, [n[k]], b) for b in ("fast", "slow") for k in range(4)]
    groups = [[k for k, c in enumerate(cands) if c.backend == b] for b in ("fast", "slow")]
    assert interleave(cands, groups, lambda b: b == "fast") == groups
    firsts = sorted({c.sub_graph.first for c in cands})
    windows = (set(firsts[:2]), set(firsts[2:]))
    assert interleave(cands, groups, lambda b: True, size=2) == [
        [k for k in g if cands[k].sub_graph.first in w] for w in windows for g in groups]


def test_the_rest_takes_turns_in_windows_of_node_sets_largest_first():
    """A 12-op chain's triples and pairs on two backends that alternate: windows of WINDOW
    node sets, triples before pairs, the fastest backend first in each window on the same
    node sets, and each of slow's regions bounded by fast's. No whole model is a
    candidate here: the rest is still the third stage (it once became the second, measured
    in one batch, neither pruned nor bounded)."""

    class Alternating(Bounded):
        def alternates(self, backend):
            return True

    graph, n = graph_of([[]] + [[k] for k in range(11)])
    spans = [[k] for k in range(12)] + [[k, k + 1, k + 2] for k in range(10)] + [
        [k, k + 1] for k in range(11)]
    cands = [cand(graph, [n[k] for k in span], b) for b in ("slow", "fast") for span in spans]
    est = Alternating({"fast": 1.0, "slow": 1.05})  # fused: slow's triple 2.52 < fast's 3
    driver.measure(est, cands, graph=graph, bound=False)
    k = next(i for i, b in enumerate(est.batches) if len(b[0].sub_graph.nodes) > 1)
    rest, bounds = est.batches[k:], est.bounds[k:]
    assert [{c.backend for c in b} for b in rest] == [{"fast"}, {"slow"}] * 3
    sets = [[c.inside for c in b] for b in rest]
    assert all(sets[i] == sets[i + 1] and len(sets[i]) <= WINDOW for i in range(0, 6, 2))
    sizes = [len(c.sub_graph.nodes) for b in rest[::2] for c in b]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 21
    assert all(b is not None for bs in bounds[1::2] for b in bs)


class Table(CostEstimator):
    """Test double: costs from a table, (backend, node indices of the text) → seconds;
    free hand-offs. Records every batch; `turns` names the backends that alternate."""

    def __init__(self, graph, n, table, turns=()):
        self.by_bits = {(b, sum(1 << n[k] for k in ks)): cost for (b, ks), cost in table.items()}
        self.turns, self.batches = set(turns), []

    def estimate(self, candidates, progress=None):
        self.batches.append(list(candidates))
        return [self.by_bits[(c.backend, c.inside)] for c in candidates]

    def transition_cost(self, src_backend, dst_backend, nbytes):
        return 0.0

    def alternates(self, backend):
        return backend in self.turns


def split_chain(turns=()):
    """A 4-op chain that "a" runs fast at the front and "b" at the back: the least-cost
    cover is a's front pair then b's back pair (2.4); each whole model costs 9."""
    graph, n = graph_of([[], [0], [1], [2]])
    spans = [(0,), (1,), (2,), (3,), (0, 1), (1, 2), (2, 3), (0, 1, 2, 3)]
    a = dict(zip(spans, [1, 1, 4, 4, 1.2, 4, 7, 9], strict=True))
    b = dict(zip(spans, [4, 4, 1, 1, 7, 4, 1.2, 9], strict=True))
    table = {**{("a", s): c for s, c in a.items()}, **{("b", s): c for s, c in b.items()}}
    cands = [cand(graph, [n[k] for k in s], bk) for bk in ("a", "b") for s in spans]
    return graph, n, cands, Table(graph, n, table, turns)


def test_the_floor_cover_costs_unmeasured_regions_at_half_their_dearest_op():
    graph, n, cands, est = split_chain()
    single, whole, rest = stages(graph, cands)
    known = dict(zip(single + whole, est.estimate([cands[k] for k in single + whole]),
                     strict=True))
    wanted, floor_s, _ = floor_cover(graph, cands, known, set(rest), None)
    names = {(cands[k].backend, len(cands[k].sub_graph.nodes), cands[k].sub_graph.first)
             for k in wanted}
    # a's front pair and b's back pair at their floors: half of 1 each
    assert floor_s == 2 * FUSION_FLOOR * 1.0
    assert {(b, size) for b, size, _ in names} == {("a", 2), ("b", 2)}
    # measured, the same cover is the least-cost one, and nothing pending is on it
    known.update({k: est.estimate([cands[k]])[0] for k in wanted})
    wanted, floor_s, exact = floor_cover(graph, cands, known, set(rest) - set(known), None)
    assert wanted == [] and floor_s == 2.4 and exact
    # the beam straight away (where the exact search ran out of states once; only a search
    # that prices hand-offs can): the same cover, not proven least-cost
    def hand_off(src, dst, nbytes):
        return 0.0 if src == dst else 0.1

    exact_one = floor_cover(graph, cands, known, set(rest) - set(known), hand_off)
    beam = floor_cover(graph, cands, known, set(rest) - set(known), hand_off, exact=False)
    assert exact_one[2] and not beam[2] and beam[:2] == exact_one[:2] == ([], beam[1])


def test_the_rest_is_measured_along_the_floor_cover_and_ends_on_the_same_pick():
    graph, n, cands, est = split_chain()
    costs, left = driver.measure(est, cands, graph=graph)
    every = [est.by_bits[(c.backend, c.inside)] for c in cands]
    pick = search(graph, cands, costs, None)
    assert pick.candidates == search(graph, cands, every, None).candidates
    assert math.isclose(pick.total_cost, 2.4)
    rest = [len(b) for b in est.batches[2:]]
    assert sum(rest) == 2 < len(stages(graph, cands)[2])  # of six pairs, the two on the cover
    assert len(left) == 4 and all(why.startswith("bounded out") for why in left.values())
    assert all(math.isinf(costs[k]) for k in left)
    rejected = driver.rejections(graph, cands, costs, est, left)
    assert sum(r.count for r in rejected) == 4 and len(rejected) == 2  # one group per backend
    est = split_chain()[3]
    _, left = driver.measure(est, cands, graph=graph, bound=False)
    assert sum(len(b) for b in est.batches[2:]) == 6 - len(left) > 2


def test_regions_bounded_out_by_the_beam_are_not_called_proven(monkeypatch):
    """Where the exact search runs out of states, the cover is the beam's: the regions it
    leaves out are reported so, not as shown unable to win."""
    def measured(max_states):
        graph, _, cands, est = split_chain()
        est.transition_cost = lambda src, dst, nbytes: 0.0 if src == dst else 0.1
        monkeypatch.setattr(prune, "MAX_EXACT_STATES", max_states)  # only priced hand-offs
        costs, left = driver.measure(est, cands, graph=graph)   # can run out of states
        return search(graph, cands, costs, est.transition_cost).candidates, left

    exact_pick, exact_left = measured(MAX_EXACT_STATES)
    beam_pick, beam_left = measured(0)
    assert exact_left and not any("not proven" in why for why in exact_left.values())
    assert beam_left and all("not proven" in why for why in beam_left.values())
    assert [(c.backend, c.inside) for c in beam_pick] == [(c.backend, c.inside)
                                                         for c in exact_pick]


def test_a_region_on_the_floor_cover_brings_its_nodes_on_the_backends_taking_turns():
    """The cover's pairs come with the same pairs on the other backend; b's front pair is
    then pruned (half its dearest op, 2, is more than a's pair, 1.2), a's back pair timed."""
    graph, n, cands, est = split_chain(turns=("a", "b"))
    _, left = driver.measure(est, cands, graph=graph)
    measured = {(c.backend, c.sub_graph.first, len(c.sub_graph.nodes))
                for b in est.batches[2:] for c in b}
    front, back = n[0], n[2]
    assert measured == {("a", front, 2), ("a", back, 2), ("b", back, 2)}
    pruned = [cands[k] for k, why in left.items() if why.startswith("pruned")]
    assert [(c.backend, c.sub_graph.first) for c in pruned] == [("b", front)]
