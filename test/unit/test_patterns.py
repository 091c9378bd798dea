"""Dataflow patterns: exhaustive, overlapping matches; wildcards bind without joining."""

from __future__ import annotations

import collage_mlir
from collage_mlir.graph import DataflowGraph
from collage_mlir.graph.bits import bits_of
from collage_mlir.rules.patterns import (
    Constant,
    Op,
    Wildcard,
    find_matches,
    match_subgraphs,
)

T = "!torch.vtensor<[1,8],f32>"
_alive = []  # keep modules alive while their graphs are in use


def graph(body: str, args: str = f"%x: {T}, %b: {T}", results: str = T) -> DataflowGraph:
    text = (f"func.func @g({args}) -> ({results}) "
            "attributes {torch.onnx_meta.opset_version = 17 : si64} {\n" + body + "\n}\n")
    module = collage_mlir.parse_mlir(text)
    _alive.append(module)
    return DataflowGraph(module.body.operations[0])


def op(result: str, op_type: str, operands: str, n: int = 1, attrs: str = "", out: str = T) -> str:
    ins = ", ".join([T] * n)
    return (f'  {result} = torch.operator "onnx.{op_type}"({operands}) {attrs} : '
            f"({ins}) -> {out}")


def nodes(g: DataflowGraph, op_type: str) -> list[int]:
    """Op nodes of a type, in post-dfs order."""
    return [n.index for n in g.op_nodes() if n.op_type == op_type]


def found(pattern, g: DataflowGraph) -> set[int]:
    return {s.inside for s in match_subgraphs(pattern, g)}


CONV_ADD_RELU = "\n".join([
    '  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense<1.0> : tensor<8xf32>}'
    " : () -> !torch.vtensor<[8],f32>",
    f'  %0 = torch.operator "onnx.Conv"(%x, %w) : ({T}, !torch.vtensor<[8],f32>) -> {T}',
    op("%1", "Add", "%0, %b", 2),
    op("%2", "Relu", "%1"),
    op("%3", "Add", "%b, %2", 2),  # operands swapped on purpose
    op("%4", "Relu", "%3"),
    f"  return %4 : {T}",
])


def test_nested_pattern_with_constant_and_wildcard():
    g = graph(CONV_ADD_RELU)
    (conv,), (add1, _add2), (relu1, _relu2) = nodes(g, "Conv"), nodes(g, "Add"), nodes(g, "Relu")
    p = Op("Relu", Op("Add", Op("Conv", Wildcard(), Constant()), Wildcard()))
    assert found(p, g) == {bits_of([conv, add1, relu1])}, "constants and the bias stay outside"
    assert found(Op("Conv", Constant(), Wildcard()), g) == set(), "the data input is no constant"
    assert found(Op("Conv", Wildcard()), g) == set(), "arity must agree when inputs are given"
    assert found(Wildcard(), g) == set(), "a match with nothing inside names no work"


def test_commutative_tries_both_operand_orders():
    g = graph(CONV_ADD_RELU)
    (_add1, add2), (relu1, _) = nodes(g, "Add"), nodes(g, "Relu")
    plain = Op("Add", Op("Relu"), Wildcard())
    assert found(plain, g) == set()
    both = Op("Add", Op("Relu"), Wildcard(), commutative=True)
    assert found(both, g) == {bits_of([relu1, add2])}


def test_alternatives_and_optional_yield_every_overlapping_match():
    g = graph(CONV_ADD_RELU)
    (conv,), (add1, add2), (relu1, relu2) = nodes(g, "Conv"), nodes(g, "Add"), nodes(g, "Relu")
    alt = Op("Relu", Op("Add")) | Op("Relu")
    assert found(alt, g) == {bits_of([add1, relu1]), bits_of([relu1]),
                             bits_of([add2, relu2]), bits_of([relu2])}
    opt = Op("Conv").optional(lambda c: Op("Add", c, Wildcard()))
    assert found(opt, g) == {bits_of([conv]), bits_of([conv, add1])}
    # the same sub-graph found twice (through both alternatives) is one SubGraph
    twice = Op("Relu") | Op("Relu")
    assert len(list(find_matches(twice, g))) == 4 and len(found(twice, g)) == 2


def test_chain_matches_overlap():
    body = "\n".join([op("%0", "Relu", "%x"), op("%1", "Relu", "%0"), op("%2", "Relu", "%1"),
                      f"  return %2 : {T}"])
    g = graph(body, args=f"%x: {T}")
    r = nodes(g, "Relu")
    assert found(Op("Relu", Op("Relu")), g) == {bits_of(r[:2]), bits_of(r[1:])}
    subs = match_subgraphs(Op("Relu", Op("Relu")), g)
    assert [s.nodes for s in subs] == sorted(s.nodes for s in subs), "deterministic order"


SHARED = "\n".join([
    op("%0", "Relu", "%x"),
    op("%1", "Add", "%0, %0", 2),
    op("%2", "Relu", "%x"),
    op("%3", "Add", "%0, %2", 2),
    op("%4", "Softmax", "%3", attrs="{torch.onnx.axis = 1 : si64}"),
    op("%5", "Softmax", "%1", attrs="{torch.onnx.axis = -1 : si64}"),
    op("%6", "Cast", "%4", attrs="{torch.onnx.to = 7 : si64}", out="!torch.vtensor<[1,8],si64>"),
    f"  return %5, %6 : {T}, !torch.vtensor<[1,8],si64>",
])


def test_a_shared_sub_pattern_binds_one_value():
    g = graph(SHARED, args=f"%x: {T}", results=f"{T}, !torch.vtensor<[1,8],si64>")
    adds = nodes(g, "Add")
    same = next(a for a in adds if g.nodes[a].operands[0] == g.nodes[a].operands[1])
    r = Op("Relu")
    m = list(find_matches(Op("Add", r, r), g))
    assert [x.inside for x in m] == [bits_of([same, g.nodes[same].operands[0][0]])]
    assert m[0].bound(r) == g.nodes[same].operands[0]
    assert len(found(Op("Add", Op("Relu"), Op("Relu")), g)) == 2, "distinct patterns may differ"


def test_attribute_shape_and_dtype_predicates():
    g = graph(SHARED, args=f"%x: {T}", results=f"{T}, !torch.vtensor<[1,8],si64>")
    softmax = nodes(g, "Softmax")
    axis1 = next(s for s in softmax if g.nodes[s].operands[0][0] in nodes(g, "Add")
                 and any(g.nodes[c].op_type == "Cast" for c in range(len(g))
                         if g.nodes[c].operands and g.nodes[c].operands[0] == (s, 0)))
    assert found(Op("Softmax").has_attr(axis=1), g) == {1 << axis1}
    assert found(Op("Softmax").has_attr(axis=1, missing=0), g) == set()
    assert found(Op("Softmax").has_shape((1, -1)), g) == {1 << s for s in softmax}
    assert found(Op("Softmax").has_shape((8,)), g) == set()
    (cast,) = nodes(g, "Cast")
    assert found(Op("Cast").has_dtype("si64"), g) == {1 << cast}
    assert found(Op("Cast").has_dtype("f32"), g) == set()
    assert found(Op("Cast").where(lambda g, v: False), g) == set()


def test_omitted_optional_operand_only_matches_wildcard():
    body = "\n".join([
        "  %none = torch.constant.none",
        f'  %0 = torch.operator "onnx.Clip"(%x, %none, %none) : ({T}, !torch.none, !torch.none)'
        f" -> {T}",
        f"  return %0 : {T}",
    ])
    g = graph(body, args=f"%x: {T}")
    (clip,) = nodes(g, "Clip")
    assert found(Op("Clip", Wildcard(), Wildcard(), Wildcard()), g) == {1 << clip}
    assert found(Op("Clip", Wildcard(), Constant(), Wildcard()), g) == set()
