"""Op kinds: every op of the light models and of common transformers has a deliberate kind."""

from __future__ import annotations

import onnx
import pytest
from conftest import LIGHT_MODELS, light_model_path

from collage_mlir.dialects.op_kinds import OP_KINDS, VARIADIC_OPS, OpKind, op_kind

TRANSFORMER_OPS = """MatMul Gemm Add Mul Div Sub Pow Sqrt Erf Tanh Softmax LayerNormalization
ReduceMean Transpose Reshape Gather Concat Slice Split Where Cast Expand Unsqueeze Squeeze""".split()


@pytest.mark.parametrize("model", LIGHT_MODELS)
def test_light_model_ops_are_listed(model):
    ops = {n.op_type for n in onnx.load(light_model_path(model)).graph.node}
    ops -= {"ConstantOfShape"}  # weights: constants, never partitioned
    assert ops <= set(OP_KINDS), sorted(ops - set(OP_KINDS))


def test_transformer_ops_are_listed():
    assert set(TRANSFORMER_OPS) <= set(OP_KINDS), sorted(set(TRANSFORMER_OPS) - set(OP_KINDS))


@pytest.mark.parametrize(("op", "kind"), [
    ("Relu", OpKind.ELEMWISE), ("Erf", OpKind.ELEMWISE), ("Cast", OpKind.ELEMWISE),
    ("Add", OpKind.BROADCAST), ("Where", OpKind.BROADCAST), ("Sum", OpKind.BROADCAST),
    ("Reshape", OpKind.INJECTIVE), ("Transpose", OpKind.INJECTIVE), ("Concat", OpKind.INJECTIVE),
    ("ReduceMean", OpKind.COMM_REDUCE), ("Conv", OpKind.OUT_ELEMWISE_FUSABLE),
    ("MatMul", OpKind.OUT_ELEMWISE_FUSABLE), ("MaxPool", OpKind.OUT_ELEMWISE_FUSABLE),
    ("Softmax", OpKind.OPAQUE), ("LRN", OpKind.OPAQUE),
])
def test_kinds_follow_tvm(op, kind):
    assert op_kind(op) is kind


def test_unknown_ops_are_opaque_and_order_matches_tvm():
    assert op_kind("MyCustomOp") is OpKind.OPAQUE
    assert OpKind.REDUCTION is OpKind.COMM_REDUCE
    order = [OpKind.ELEMWISE, OpKind.BROADCAST, OpKind.INJECTIVE, OpKind.COMM_REDUCE,
             OpKind.OUT_ELEMWISE_FUSABLE, OpKind.OPAQUE]
    assert order == sorted(order) and [int(k) for k in order] == [0, 1, 2, 3, 4, 8]


def test_onnx_knows_every_listed_op():
    """A typo in the tables would silently make an op OPAQUE."""
    for name in set(OP_KINDS) | VARIADIC_OPS:
        assert onnx.defs.has(name), name


@pytest.mark.parametrize("spelled, nbytes", [
    ("!torch.vtensor<[2,8],f32>", 64), ("!torch.vtensor<[0,8],f32>", 0),
    ("!torch.vtensor<[?,8],f32>", 32), ("!torch.vtensor<[],si64>", 8)])
def test_a_tensors_bytes_count_an_empty_dim_as_empty(spelled, nbytes):
    """A zero-size hand-off moves nothing (it was priced as one element); an unknown dim
    counts as one."""
    from iree.compiler import ir

    from collage_mlir.context import make_context
    from collage_mlir.dialects.onnx import tensor_nbytes

    with make_context():
        assert tensor_nbytes(ir.Type.parse(spelled)) == nbytes
