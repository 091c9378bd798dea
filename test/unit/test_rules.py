"""PartitionRules: base rules, every combinator, specs and defaults, serialization, properties."""

from __future__ import annotations

import itertools

import pytest
from dags import random_dag
from hypothesis import given, settings
from hypothesis import strategies as st

import collage_mlir
from collage_mlir.annotate import PartitionSpec, generate_candidates
from collage_mlir.backends.base import Backend, BackendKind, default_rule_for
from collage_mlir.candidate import CandidatePartition
from collage_mlir.dialects.op_kinds import OpKind
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraph, SubGraphConfig, bits_of
from collage_mlir.graph.bits import iter_bits
from collage_mlir.rules.base import OpKindRule, OpPredicateRule, PatternRule, RuleContext
from collage_mlir.rules.combinators import (
    CombineRule,
    CompositeRule,
    HostRule,
    OnlyValidRule,
    PrimitiveRule,
    UnionRule,
)
from collage_mlir.rules.defaults import compiler_rule, graph_rule, library_rule
from collage_mlir.rules.fusion import (
    AllSimpleCombiner,
    ByKindCombiner,
    CombinerRule,
    JoinAnythingCombiner,
    TupleArgCombiner,
    fuse_ops_combiners,
)
from collage_mlir.rules.patterns import Op, Wildcard
from collage_mlir.rules.regions import MAXIMAL_CONFIG, convex_pieces
from collage_mlir.rules.serialize import candidates_from_attr, candidates_to_attr, summary

T = "!torch.vtensor<[1,8],f32>"
_alive = []


class FixedBackend(Backend):
    """Test double: runs exactly the op types it is given; never compiles anything."""

    name = "fixed"

    def __init__(self, ops: set[str] | None = None, kind: BackendKind = BackendKind.GRAPH,
                 **options) -> None:
        super().__init__(**options)
        self.ops, self.kind = ops, kind

    @property
    def version(self) -> str:
        return "0"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return None

    def capability(self, graph: DataflowGraph) -> int:
        return sum(1 << n.index for n in graph.op_nodes() if self.ops is None or
                   n.op_type in self.ops)

    def compile(self, module):
        raise NotImplementedError


def graph(lines: list[str], args: str = f"%x: {T}", results: str = T) -> DataflowGraph:
    text = (f"func.func @g({args}) -> ({results}) "
            "attributes {torch.onnx_meta.opset_version = 17 : si64} {\n" + "\n".join(lines)
            + "\n}\n")
    module = collage_mlir.parse_mlir(text)
    _alive.append(module)
    return DataflowGraph(module.body.operations[0])


def op(result: str, op_type: str, operands: str) -> str:
    n = len(operands.split(","))
    return f'  {result} = torch.operator "onnx.{op_type}"({operands}) : ({", ".join([T] * n)}) -> {T}'


def chain(*op_types: str) -> DataflowGraph:
    lines = [op(f"%{k}", t, f"%{k - 1}" if k else "%x") for k, t in enumerate(op_types)]
    return graph(lines + [f"  return %{len(op_types) - 1} : {T}"])


def ctx(g: DataflowGraph, supported: int | None = None, **config) -> RuleContext:
    return RuleContext(g, "fixed", g.op_bits if supported is None else supported,
                       SubGraphConfig(**config))


def sets(candidates: list[CandidatePartition]) -> set[tuple[int, ...]]:
    return {tuple(c.sub_graph.nodes) for c in candidates}


def ops_of(g: DataflowGraph) -> list[int]:
    return [n.index for n in g.op_nodes()]


def contiguous(nodes: list[int], max_len: int) -> set[tuple[int, ...]]:
    return {tuple(nodes[i:j]) for i in range(len(nodes))
            for j in range(i + 1, min(len(nodes), i + max_len) + 1)}


# -- base rules -----------------------------------------------------------------------------

def test_base_rules_respect_capability():
    g = chain("Conv", "Relu", "Conv", "Relu")
    c1, r1, c2, r2 = ops_of(g)
    only_convs = bits_of([c1, c2])
    assert sets(OpPredicateRule().all_candidates(ctx(g, only_convs))) == {(c1,), (c2,)}
    pick = OpPredicateRule("relu", lambda g, n: n.op_type == "Relu")
    assert sets(pick.all_candidates(ctx(g))) == {(r1,), (r2,)}
    assert sets(OpKindRule(kinds=[OpKind.ELEMWISE]).all_candidates(ctx(g))) == {(r1,), (r2,)}
    conv_relu = PatternRule("conv_relu", Op("Relu", Op("Conv")))
    assert sets(conv_relu.all_candidates(ctx(g))) == {(c1, r1), (c2, r2)}
    assert sets(conv_relu.all_candidates(ctx(g, only_convs | (1 << r1)))) == {(c1, r1)}
    veto = PatternRule("conv_relu", Op("Relu", Op("Conv")), lambda g, s: s.first == c1)
    assert sets(veto.all_candidates(ctx(g))) == {(c1, r1)}


# -- combinators ----------------------------------------------------------------------------

def test_composite_primitive_union_only_valid_host():
    g = chain("Conv", "Relu", "Conv", "Relu")
    c1, r1, c2, r2 = ops_of(g)
    pattern = PatternRule("p", Op("Relu", Op("Conv")))
    composite = CompositeRule("conv_relu", pattern).all_candidates(ctx(g))
    assert {c.rule_name for c in composite} == {"conv_relu"} and len(composite) == 2
    assert PrimitiveRule(pattern).all_candidates(ctx(g)) == pattern.all_candidates(ctx(g))
    assert {c.rule_name for c in PrimitiveRule(pattern, "k").all_candidates(ctx(g))} == {"k"}
    union = UnionRule([OpPredicateRule("a"), OpPredicateRule("b"), pattern])
    got = union.all_candidates(ctx(g))
    assert len(got) == 6 and {c.rule_name for c in got} == {"a", "p"}, "first rule names a tie"
    deep = CombineRule(OpPredicateRule(), [JoinAnythingCombiner()],
                       config=SubGraphConfig(max_depth=None))
    assert max(len(c.sub_graph) for c in deep.all_candidates(ctx(g))) == 4
    limited = OnlyValidRule(deep, SubGraphConfig(max_depth=2)).all_candidates(ctx(g))
    assert sets(limited) == contiguous([c1, r1, c2, r2], 2)
    from_ctx = OnlyValidRule(deep).all_candidates(ctx(g, max_depth=3))
    assert sets(from_ctx) == contiguous([c1, r1, c2, r2], 3)
    host = HostRule(lambda g, n: n.op_type == "Relu")
    assert sets(host.all_candidates(ctx(g, supported=0))) == {(r1,), (r2,)}, "ignores capability"


def test_combine_join_anything_on_chain_is_every_window():
    g = chain("Abs", "Relu", "Relu", "Neg", "Abs")
    rule = CombineRule(OpPredicateRule(), [JoinAnythingCombiner()])
    for depth in (1, 2, 3, 5):
        got = rule.all_candidates(ctx(g, max_depth=depth))
        assert sets(got) == contiguous(ops_of(g), depth)
        assert len(got) == len(sets(got)), "no duplicates"


def test_combine_by_kind_mimics_fuse_ops():
    g = chain("Conv", "Relu", "Reshape", "Conv", "Softmax", "Relu")
    conv1, relu1, reshape, conv2, softmax, relu2 = ops_of(g)
    got = sets(CombineRule(OpKindRule(), fuse_ops_combiners()).all_candidates(ctx(g)))
    singles = {(n,) for n in ops_of(g)}
    # conv absorbs relu; relu and reshape chain (both simple); the conv+relu group is OEF so
    # the injective reshape may not join it; nothing joins the opaque softmax; a simple op
    # never flows into a conv.
    assert got == singles | {(conv1, relu1), (relu1, reshape)}


def test_combiner_rules_fire_as_documented():
    g = chain("Conv", "Relu", "Reshape", "ReduceMean", "Conv")
    conv1, relu, reshape, reduce, conv2 = ops_of(g)
    c = ctx(g)

    def fires(rule: CombinerRule, up: list[int], down: list[int]) -> bool:
        return rule.fires(c, bits_of(up), bits_of(down))

    oef_ew = ByKindCombiner(OpKind.OUT_ELEMWISE_FUSABLE, OpKind.BROADCAST)
    assert fires(oef_ew, [conv1], [relu]) and not fires(oef_ew, [relu], [conv2])
    assert not fires(oef_ew, [conv1, relu], [reshape])
    simple = AllSimpleCombiner()
    assert fires(simple, [relu], [reshape]) and not fires(simple, [reshape], [reduce])
    assert fires(ByKindCombiner(OpKind.INJECTIVE, OpKind.COMM_REDUCE), [reshape], [reduce])
    assert fires(JoinAnythingCombiner(), [reduce], [conv2])


def test_tuple_arg_joins_producers_of_a_variadic_op():
    lines = [op("%0", "Conv", "%x"), op("%1", "Conv", "%x"), op("%2", "Concat", "%0, %1"),
             op("%3", "Relu", "%2"), f"  return %3 : {T}"]
    g = graph(lines)
    conv_a, conv_b = [n for n in ops_of(g) if g.nodes[n].op_type == "Conv"]
    (concat,) = [n for n in ops_of(g) if g.nodes[n].op_type == "Concat"]
    (relu,) = [n for n in ops_of(g) if g.nodes[n].op_type == "Relu"]
    tuple_arg = TupleArgCombiner()
    c = ctx(g)
    assert tuple_arg.fires(c, 1 << conv_a, 1 << concat)
    assert not tuple_arg.fires(c, 1 << concat, 1 << relu), "relu is no variadic op"
    got = sets(CombineRule(OpKindRule(), fuse_ops_combiners()).all_candidates(c))
    assert tuple(sorted([conv_a, conv_b, concat])) in got
    assert tuple(sorted([conv_a, conv_b, concat, relu])) in got
    without = sets(CombineRule(OpKindRule(), fuse_ops_combiners()[:3]).all_candidates(c))
    assert tuple(sorted([conv_a, concat])) not in without


def test_combine_work_grows_linearly_not_quadratically():
    """Each new candidate meets only candidates at its boundary: count combiner calls."""

    class Counting(JoinAnythingCombiner):
        calls = 0

        def fires(self, ctx, upstream, downstream):
            Counting.calls += 1
            return True

    calls = []
    for n in (40, 160):
        Counting.calls = 0
        g = chain(*["Relu"] * n)
        got = CombineRule(OpPredicateRule(), [Counting()]).all_candidates(ctx(g, max_depth=3))
        assert len(got) == 3 * n - 3
        calls.append(Counting.calls)
    assert calls[1] < 5 * calls[0], f"4x the graph cost {calls[1] / calls[0]:.1f}x the calls"


def test_a_wide_concat_takes_part_in_a_bounded_number_of_sets_the_smallest_first():
    """Every subset of a Concat's producers joins it validly: 2^20 sets here without a cap."""
    fan_in = 20
    lines = [op(f"%r{k}", "Relu", "%x") for k in range(fan_in)]
    lines += [op("%c", "Concat", ", ".join(f"%r{k}" for k in range(fan_in))),
              op("%y", "Sigmoid", "%c"), f"  return %y : {T}"]
    g = graph(lines)
    (concat,) = [n for n in ops_of(g) if g.nodes[n].op_type == "Concat"]
    relus = [n for n in ops_of(g) if g.nodes[n].op_type == "Relu"]
    cap = 64
    got = CombineRule(OpPredicateRule(), [JoinAnythingCombiner()], max_per_node=cap
                      ).all_candidates(ctx(g, max_depth=3))
    per_node = {n: sum(1 for c in got if c.inside >> n & 1) for n in ops_of(g)}
    assert max(per_node.values()) == cap
    insides = {c.inside for c in got}
    assert all(1 << n in insides for n in ops_of(g)), "every single op stays a candidate"
    assert all(1 << concat | 1 << r in insides for r in relus), "the smallest joins come first"
    assert len(got) < 2 * cap + fan_in + 2


# -- maximal regions ------------------------------------------------------------------------

def test_maximal_regions_split_non_convex_support():
    # a -> x -> c and a -> c: {a, c} is supported but not convex around unsupported x.
    lines = [op("%0", "Abs", "%x"), op("%1", "Neg", "%0"), op("%2", "Add", "%0, %1"),
             op("%3", "Relu", "%2"), f"  return %3 : {T}"]
    g = graph(lines)
    a, neg, add, relu = ops_of(g)
    supported = bits_of([a, add, relu])
    assert convex_pieces(g, supported) == [1 << a, bits_of([add, relu])]
    assert convex_pieces(g, g.op_bits) == [g.op_bits], "everything supported: one region"


@settings(max_examples=60, deadline=None)
@given(random_dag(min_nodes=1), st.data())
def test_maximal_pieces_partition_support_into_convex_connected_sets(dag, data):
    g = graph_of(dag[0])
    ops = ops_of(g)
    supported = bits_of(data.draw(st.lists(st.sampled_from(ops), unique=True)))
    pieces = convex_pieces(g, supported)
    assert sum(pieces) == supported and all(a & b == 0 for a, b in itertools.combinations(pieces, 2))
    for p in pieces:
        assert SubGraph(g, p).is_valid(MAXIMAL_CONFIG) and connected(g, p)


# -- specs and defaults ---------------------------------------------------------------------

def test_default_rule_by_kind_and_maximal_region_always_present():
    g = graph([op("%0", "Conv", "%x"), op("%1", "Add", "%0, %x"), op("%2", "Relu", "%1"),
               op("%3", "Conv", "%2"), op("%4", "Relu", "%3"), f"  return %4 : {T}"])
    kinds = {BackendKind.GRAPH: "graph", BackendKind.COMPILER: "compiler",
             BackendKind.LIBRARY: "library"}
    for kind, name in kinds.items():
        backend = FixedBackend(kind=kind)
        assert default_rule_for(backend).name == name
        got = generate_candidates(g, [PartitionSpec("fixed", backend=backend)],
                                  SubGraphConfig(max_depth=1))
        assert g.op_bits in {c.inside for c in got}, f"{name}: whole function missing"
    lib = generate_candidates(g, [PartitionSpec("lib", library_rule(), FixedBackend())])
    names = {c.rule_name: c.sub_graph.nodes for c in lib}
    conv, add, relu = ops_of(g)[:3]
    assert names["conv_add_relu"] == [conv, add, relu]


def test_user_rule_and_capability_in_generate_candidates():
    g = chain("Conv", "Relu", "Softmax")
    conv, relu, softmax = ops_of(g)
    mine = PartitionSpec("mine", PatternRule("conv_relu", Op("Relu", Op("Conv", Wildcard()))),
                         FixedBackend())
    partial = PartitionSpec("partial", backend=FixedBackend({"Relu", "Softmax"}))
    got = generate_candidates(g, [mine, partial], SubGraphConfig(max_depth=3))
    assert [(c.backend, c.rule_name, c.sub_graph.nodes) for c in got] == [
        ("mine", "conv_relu", [conv, relu]),
        ("partial", "op", [relu]),
        ("partial", "connected", [relu, softmax]),
        ("partial", "op", [softmax]),
    ]
    assert got == sorted(got, key=CandidatePartition.sort_key)


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(CollageError, match="unknown backend 'nope'"):
        generate_candidates(chain("Relu"), [PartitionSpec("nope")])


def test_a_backend_whose_capability_query_crashes_is_a_clear_error():
    class CrashingBackend(FixedBackend):
        """Test double: its capability query raises, as a backend's own bug would."""

        def capability(self, graph: DataflowGraph) -> int:
            raise RuntimeError("Exception from core.cpp:256:\nmore detail")

    with pytest.raises(CollageError, match=r"backend 'crash' could not say which ops .*"
                                           r"\(Exception from core.cpp:256:\); leave it out"):
        generate_candidates(chain("Relu"), [PartitionSpec("crash", backend=CrashingBackend())])


def test_serialization_round_trip():
    g = chain("Conv", "Relu", "Relu")
    specs = [PartitionSpec("a", graph_rule(), FixedBackend()),
             PartitionSpec("b", compiler_rule(), FixedBackend())]
    got = generate_candidates(g, specs, SubGraphConfig(max_depth=2))
    attr = candidates_to_attr(got)
    back = candidates_from_attr(g, attr)
    assert [(c.backend, c.rule_name, c.inside) for c in back] == \
        [(c.backend, c.rule_name, c.inside) for c in got]
    assert "a: " in summary(got) and f"{len(got)} candidates" in summary(got)
    with g.func_op.context:
        from iree.compiler import ir
        bad = ir.ArrayAttr.get([ir.DictAttr.get({
            "backend": ir.StringAttr.get("a"), "nodes": ir.DenseI64ArrayAttr.get([0])})])
    with pytest.raises(CollageError, match="not ops"):
        candidates_from_attr(g, bad)


# -- properties on random DAGs --------------------------------------------------------------

def graph_of(text: str) -> DataflowGraph:
    module = collage_mlir.parse_mlir(text)
    _alive.append(module)
    return DataflowGraph(module.body.operations[0])


def connected(g: DataflowGraph, bits: int) -> bool:
    seen = frontier = bits & -bits
    while frontier:
        near = 0
        for i in iter_bits(frontier):
            near |= g.nodes[i].preds | g.nodes[i].succs
        frontier = near & bits & ~seen
        seen |= frontier
    return seen == bits


configs = st.builds(SubGraphConfig, st.integers(1, 3), st.booleans(),
                    st.sampled_from([None, 1, 2, 3]))


@settings(max_examples=50, deadline=None)
@given(random_dag(min_nodes=1), configs, st.data())
def test_every_candidate_is_valid_under_its_config(dag, config, data):
    g = graph_of(dag[0])
    ops = ops_of(g)
    supported = bits_of(data.draw(st.lists(st.sampled_from(ops), unique=True)))
    specs = [PartitionSpec(k.value, default_rule_for(FixedBackend(kind=k)), FixedBackend(kind=k))
             for k in BackendKind]
    for spec in specs:
        spec._supported[g] = supported
    got = generate_candidates(g, specs, config)
    assert len({(c.backend, c.inside) for c in got}) == len(got)
    for c in got:
        assert c.inside & ~supported == 0
        limits = MAXIMAL_CONFIG if c.rule_name == "maximal" else config
        assert c.sub_graph.is_valid(limits), (c, c.sub_graph.why_invalid(limits))
    for spec in specs:  # every maximal convex piece of each backend is there
        mine = {c.inside for c in got if c.backend == spec.backend_name}
        assert set(convex_pieces(g, supported)) <= mine


@settings(max_examples=40, deadline=None)
@given(random_dag(min_nodes=1, max_nodes=8), st.booleans(), st.sampled_from([None, 2, 3]))
def test_join_anything_finds_every_single_exit_connected_set(dag, taps, depth):
    """With one exit, growing from singletons misses nothing (a source can always be peeled)."""
    g = graph_of(dag[0])
    ops = ops_of(g)
    config = SubGraphConfig(1, taps, depth)
    want = set()
    for r in range(1, len(ops) + 1):
        for combo in itertools.combinations(ops, r):
            bits = bits_of(combo)
            if connected(g, bits) and SubGraph(g, bits).is_valid(config):
                want.add(bits)
    rule = CombineRule(OpPredicateRule(), [JoinAnythingCombiner()])
    assert {c.inside for c in rule.all_candidates(ctx(g, max_exits=1, allow_taps=taps, max_depth=depth))} == want


def test_fan_out_sets_need_a_tapped_intermediate():
    """Split → (Relu, Neg): {split, relu, neg} has two exits and no tap, but both ways to
    grow it pass through a tapped set; the exit slack keeps those as hidden intermediates."""
    s = "!torch.vtensor<[1,4],f32>"
    lines = [f'  %0:2 = torch.operator "onnx.Split"(%x) {{torch.onnx.axis = 1 : si64}} : ({T}) '
             f"-> ({s}, {s})",
             f'  %1 = torch.operator "onnx.Relu"(%0#0) : ({s}) -> {s}',
             f'  %2 = torch.operator "onnx.Neg"(%0#1) : ({s}) -> {s}',
             f"  return %1, %2 : {s}, {s}"]
    g = graph(lines, results=f"{s}, {s}")
    split, relu, neg = ops_of(g)
    found = sets(CombineRule(OpPredicateRule(), [JoinAnythingCombiner()]).all_candidates(
        ctx(g, max_exits=2)))
    assert found == {(split,), (relu,), (neg,), (split, relu, neg)}
    strict = CombineRule(OpPredicateRule(), [JoinAnythingCombiner()], exit_slack=0)
    assert (split, relu, neg) not in sets(strict.all_candidates(ctx(g, max_exits=2)))
