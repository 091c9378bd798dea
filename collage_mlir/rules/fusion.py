"""Combiner rules: when may an upstream candidate and a downstream candidate fuse?

CombineRule (in combinators.py) asks these about pairs of candidates where the upstream one
feeds the downstream one; SubGraph validity then weeds out unions that cannot be one call.
The kind-based rules mirror TVM's FuseOps (and its Collage port):
- ByKindCombiner(OUT_ELEMWISE_FUSABLE, BROADCAST): Conv/MatMul followed by elementwise ops;
- AllSimpleCombiner(INJECTIVE): chains of elementwise, broadcast and injective ops;
- ByKindCombiner(INJECTIVE, COMM_REDUCE): injective ops feeding a reduction;
- TupleArgCombiner: the arguments of a variadic op (Concat, Sum: ONNX's tuple arguments).
JoinAnythingCombiner is the RFC's "join-anything" rule used for graph-kind backends.
"""

from __future__ import annotations

import abc

from collage_mlir.dialects.op_kinds import VARIADIC_OPS, OpKind
from collage_mlir.graph.bits import iter_bits
from collage_mlir.rules.base import RuleContext


class CombinerRule(abc.ABC):
    """Decides whether `upstream` (which feeds `downstream`) may join it."""

    name: str = ""

    @abc.abstractmethod
    def fires(self, ctx: RuleContext, upstream: int, downstream: int) -> bool:
        """Both arguments are disjoint inside bitsets; upstream feeds downstream."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class JoinAnythingCombiner(CombinerRule):
    """Any two adjacent candidates join (graph-kind backends: any connected set)."""

    name = "join_anything"

    def fires(self, ctx, upstream, downstream):
        return True


class ByKindCombiner(CombinerRule):
    """Join when upstream's kind <= `upstream_kind` and downstream's <= `downstream_kind`."""

    def __init__(self, upstream_kind: OpKind, downstream_kind: OpKind) -> None:
        self.upstream_kind, self.downstream_kind = upstream_kind, downstream_kind
        self.name = f"{upstream_kind.name.lower()}+{downstream_kind.name.lower()}"

    def fires(self, ctx, upstream, downstream):
        return (ctx.kind(upstream) <= self.upstream_kind
                and ctx.kind(downstream) <= self.downstream_kind)


class AllSimpleCombiner(ByKindCombiner):
    """Join when both sides are 'simple': no kind above `max_kind` (default INJECTIVE)."""

    def __init__(self, max_kind: OpKind = OpKind.INJECTIVE) -> None:
        super().__init__(max_kind, max_kind)
        self.name = f"all_simple({max_kind.name.lower()})"


class TupleArgCombiner(CombinerRule):
    """An argument producer joins the variadic op (Concat, Sum) it feeds.

    ONNX has no tuple node: a variadic op's operand list plays the Relay tuple's part. This
    lets producers up to `max_arg_kind` (by default even a Conv) write straight into the
    concatenation, which plain kind rules forbid, as long as the downstream group is simple.
    """

    def __init__(self, max_arg_kind: OpKind = OpKind.OUT_ELEMWISE_FUSABLE,
                 max_consumer_kind: OpKind = OpKind.INJECTIVE) -> None:
        self.max_arg_kind, self.max_consumer_kind = max_arg_kind, max_consumer_kind
        self.name = "tuple_arg"

    def fires(self, ctx, upstream, downstream):
        if ctx.kind(upstream) > self.max_arg_kind:
            return False
        g = ctx.graph
        variadic = sum(1 << j for j in iter_bits(downstream) if g.nodes[j].op_type in VARIADIC_OPS)
        if not variadic or not any(g.nodes[i].succs & variadic for i in iter_bits(upstream)):
            return False
        # Arguments that already joined do not count against the consumer side.
        args = sum(1 << j for j in iter_bits(downstream) if g.nodes[j].succs & variadic)
        return ctx.kind(downstream & ~args) <= self.max_consumer_kind


def fuse_ops_combiners() -> list[CombinerRule]:
    """TVM's default FuseOps-like combiner rules, for compiler-kind backends."""
    return [
        ByKindCombiner(OpKind.OUT_ELEMWISE_FUSABLE, OpKind.BROADCAST),
        AllSimpleCombiner(OpKind.INJECTIVE),
        ByKindCombiner(OpKind.INJECTIVE, OpKind.COMM_REDUCE),
        TupleArgCombiner(),
    ]
