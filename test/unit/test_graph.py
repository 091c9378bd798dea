"""DataflowGraph and SubGraph: invariants on real models, properties on random DAGs."""

from __future__ import annotations

import itertools

from dags import random_dag
from hypothesis import given, settings
from hypothesis import strategies as st

import collage_mlir
from collage_mlir.graph import DataflowGraph, NodeKind, SubGraph, SubGraphConfig, bits_of
from collage_mlir.graph.bits import iter_bits

_alive = []  # the bindings free a module's ops when the Python module object dies


def graph_of(text: str) -> DataflowGraph:
    module = collage_mlir.parse_mlir(text)
    _alive.append(module)
    return DataflowGraph(module.body.operations[0])


def test_post_dfs_order_and_reachability(light_model):
    module = collage_mlir.import_onnx(light_model)
    g = DataflowGraph(module.body.operations[0])
    for node in g.nodes:
        assert all(p < node.index for p in iter_bits(node.preds)), "producers come first"
        assert (node.kind is NodeKind.ARG) == (node.op is None)
    # downstream = transitive closure of succs, checked by a plain BFS on a sample of nodes
    for start in list(range(0, len(g), max(1, len(g) // 25))):
        seen, frontier = 0, g.nodes[start].succs
        while frontier:
            seen |= frontier
            nxt = 0
            for s in iter_bits(frontier):
                nxt |= g.nodes[s].succs
            frontier = nxt & ~seen
        assert g.downstream[start] == seen


def brute_force_convex(g: DataflowGraph, inside: int) -> bool:
    """Convex iff no outside node lies on a path between two inside nodes."""
    for o in range(len(g)):
        if (inside >> o) & 1:
            continue
        reaches_in = g.downstream[o] & inside
        reached_from_in = any((g.downstream[i] >> o) & 1 for i in iter_bits(inside))
        if reaches_in and reached_from_in:
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(random_dag(min_nodes=2), st.data())
def test_is_valid_agrees_with_brute_force(dag, data):
    text, preds = dag
    g = graph_of(text)
    ops = [n.index for n in g.op_nodes()]
    picked = data.draw(st.lists(st.sampled_from(ops), min_size=1, unique=True))
    sub = SubGraph(g, bits_of(picked))
    assert sub.is_convex == brute_force_convex(g, sub.inside)
    unlimited = SubGraphConfig(max_exits=len(ops), allow_taps=True)
    assert sub.is_valid(unlimited) == sub.is_convex


@settings(max_examples=60, deadline=None)
@given(random_dag(min_nodes=2, max_nodes=8), st.data())
def test_hull_is_the_least_convex_set_holding_the_nodes(dag, data):
    text, _ = dag
    g = graph_of(text)
    ops = [n.index for n in g.op_nodes()]
    picked = bits_of(data.draw(st.lists(st.sampled_from(ops), min_size=1, unique=True)))
    hull = g.hull(picked)
    assert hull & picked == picked and brute_force_convex(g, hull)
    supersets = (picked | bits_of(extra) for r in range(len(ops) + 1)
                 for extra in itertools.combinations(ops, r))
    least = min((b for b in supersets if brute_force_convex(g, b)), key=int.bit_count)
    assert hull == least


@settings(max_examples=30, deadline=None)
@given(random_dag(min_nodes=2, max_nodes=7))
def test_every_convex_subgraph_extracts_and_verifies(dag):
    text, _ = dag
    g = graph_of(text)
    ops = [n.index for n in g.op_nodes()]
    for r in range(1, len(ops) + 1):
        for combo in itertools.combinations(ops, r):
            sub = SubGraph(g, bits_of(combo))
            if not sub.is_convex:
                continue
            module = sub.extract("region")
            assert module.operation.verify()
            fn = module.body.operations[0]
            body = list(fn.regions[0].blocks[0].operations)
            assert len(body) - 1 == len(combo)  # the region's ops plus a return
            assert len(fn.regions[0].blocks[0].arguments) == len(sub.input_values)


def test_extract_leaves_original_untouched(light_model):
    module = collage_mlir.import_onnx(light_model)
    before = str(module)
    g = DataflowGraph(module.body.operations[0])
    ops = [n.index for n in g.op_nodes()]
    SubGraph(g, bits_of(ops[:3])).extract()
    assert str(module) == before
