"""Default partition rules for the three backend kinds (RFC Phase 1: inspect the backend,
pick a rule; `Backend.partition_rule` does the picking).

- graph kind (onnxruntime, openvino): any connected set of supported ops within the limits
  (join-anything combine, as the RFC's predicate-based BYOC recipe);
- compiler kind (iree): FuseOps-like groups from the op kinds;
- library kind: composite patterns (Conv+Add+Relu, Gemm+Relu, ...) plus single ops.
Each is wrapped with MaximalRegionsRule, so the backend's largest convex supported regions
(the whole function when it runs every op) are candidates whatever the depth limit.
A backend overrides `Backend.partition_rule` for anything else; a user hands a
PartitionSpec an explicit rule.
"""

from __future__ import annotations

from collage_mlir.rules.base import OpKindRule, OpPredicateRule, PartitionRule, PatternRule
from collage_mlir.rules.combinators import CombineRule, CompositeRule, OnlyValidRule, UnionRule
from collage_mlir.rules.fusion import JoinAnythingCombiner, fuse_ops_combiners
from collage_mlir.rules.patterns import Op, Pattern, Wildcard
from collage_mlir.rules.regions import MaximalRegionsRule


def with_maximal(rule: PartitionRule, name: str) -> PartitionRule:
    """`rule` plus the maximal supported regions (listed last, so smaller rules name ties)."""
    return UnionRule([rule, MaximalRegionsRule()], name=name)


def graph_rule() -> PartitionRule:
    """Any connected, valid set of supported ops (RFC: predicate-based BYOC)."""
    connected = CombineRule(OpPredicateRule("op"), [JoinAnythingCombiner()], name="connected")
    return with_maximal(OnlyValidRule(connected), "graph")


def compiler_rule() -> PartitionRule:
    """FuseOps-like groups from the op kinds (RFC: classic TVM FuseOps, all candidates)."""
    fused = CombineRule(OpKindRule("op"), fuse_ops_combiners(), name="fuse_ops")
    return with_maximal(OnlyValidRule(fused), "compiler")


def library_patterns() -> dict[str, Pattern]:
    """The composites a typical DNN library offers as one call (cuDNN, oneDNN fused convs)."""
    conv, gemm, matmul = Op("Conv"), Op("Gemm"), Op("MatMul")
    bias = Wildcard()

    def add(x: Pattern) -> Pattern:
        return Op("Add", x, bias, commutative=True)

    return {
        "conv_add_relu": Op("Relu", add(conv)),
        "conv_relu": Op("Relu", conv),
        "conv_add": add(conv),
        "conv_bn_relu": Op("Relu", Op("BatchNormalization", conv, any_inputs=True)),
        "gemm_relu": Op("Relu", gemm),
        "matmul_add": add(matmul),
        "matmul_add_relu": Op("Relu", add(matmul)),
    }


def library_rule(patterns: dict[str, Pattern] | None = None) -> PartitionRule:
    """One candidate per composite match, plus single ops (RFC: pattern-based BYOC)."""
    patterns = library_patterns() if patterns is None else patterns
    composites = [CompositeRule(label, PatternRule(label, p)) for label, p in patterns.items()]
    return with_maximal(OnlyValidRule(UnionRule([*composites, OpPredicateRule("op")])),
                        "library")
