"""Fusion kinds of ONNX ops, in the spirit of TVM's `TOpPattern` (OpPatternKind).

The compiler-kind backends get FuseOps-like candidates: which neighbours may be grouped
depends on these kinds (an out-elementwise-fusable Conv may absorb the elementwise ops after
it, injective ops chain together, ...). The order of the enum matters: a group's kind is the
largest kind inside it, and combiner rules compare kinds with `<=`, exactly as in TVM.
Ops not listed are OPAQUE, which no combiner joins with anything: unknown ops stay alone.
"""

from __future__ import annotations

import enum


class OpKind(enum.IntEnum):
    """TVM's OpPatternKind values (same numbers, so the literature's rules read the same)."""

    ELEMWISE = 0  # one output element from the same-index input element(s)
    BROADCAST = 1  # elementwise after broadcasting an input (Add with a bias)
    INJECTIVE = 2  # each output element from one input element, any index map (Reshape)
    COMM_REDUCE = 3  # commutative reduction over some axes (ReduceMean)
    OUT_ELEMWISE_FUSABLE = 4  # complex op whose output can take elementwise ops (Conv, MatMul)
    TUPLE = 7  # builds a tuple of its inputs (no ONNX op is one; kept for TVM parity)
    OPAQUE = 8  # anything else: never fused

    REDUCTION = 3  # alias of COMM_REDUCE (the name used in most prose)


_ELEMWISE = """
Abs Acos Acosh Asin Asinh Atan Atanh Cast CastLike Ceil Celu Clip Cos Cosh Dropout Elu Erf Exp
Floor Gelu HardSigmoid HardSwish Identity IsInf IsNaN LeakyRelu Log Mish Neg Not Reciprocal Relu
Round Selu Shrink Sigmoid Sign Sin Sinh Softplus Softsign Sqrt Tan Tanh ThresholdedRelu
"""
_BROADCAST = """
Add And BatchNormalization BitShift Div Equal Expand Greater GreaterOrEqual Less LessOrEqual
Max Mean Min Mod Mul Or PRelu Pow Sub Sum Where Xor
"""
_INJECTIVE = """
Concat DepthToSpace Flatten Gather GatherElements GatherND Pad Reshape Slice SpaceToDepth Split
Squeeze Tile Transpose Unsqueeze
"""
_COMM_REDUCE = """
ArgMax ArgMin ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin
ReduceProd ReduceSum ReduceSumSquare
"""
_OUT_ELEMWISE_FUSABLE = """
AveragePool Conv ConvTranspose Gemm GlobalAveragePool GlobalMaxPool MatMul MaxPool
"""
_OPAQUE = """
LayerNormalization LRN Softmax LogSoftmax TopK NonMaxSuppression Resize Einsum
InstanceNormalization GroupNormalization
"""
# Softmax, LRN and the normalisations are OPAQUE in TVM too: each is several reductions
# with elementwise glue, so grouping it with neighbours is the backend's business.

OP_KINDS: dict[str, OpKind] = {
    name: kind
    for text, kind in (
        (_ELEMWISE, OpKind.ELEMWISE), (_BROADCAST, OpKind.BROADCAST),
        (_INJECTIVE, OpKind.INJECTIVE), (_COMM_REDUCE, OpKind.COMM_REDUCE),
        (_OUT_ELEMWISE_FUSABLE, OpKind.OUT_ELEMWISE_FUSABLE), (_OPAQUE, OpKind.OPAQUE))
    for name in text.split()
}
"""ONNX op type → kind, for the ops we know; see `op_kind` for the rest."""

VARIADIC_OPS = frozenset({"Concat", "Sum", "Max", "Min", "Mean"})
"""Ops that take a list of tensors: ONNX's spelling of a Relay tuple argument."""


def op_kind(op_type: str) -> OpKind:
    """The fusion kind of an ONNX op type; OPAQUE for any op we do not know."""
    return OP_KINDS.get(op_type, OpKind.OPAQUE)
