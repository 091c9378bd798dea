"""DataflowGraph: a post-dfs index over the block arguments and ops of one `func.func`.

Every node gets an index such that producers come before consumers. Three kinds of node:
arguments, constants (ops computable at compile time: `onnx.Constant`, `torch.constant.none`,
and pure ops whose inputs are all constants, such as the light models' `ConstantOfShape`
weights) and ops. Only ops are partitioned; constants are cloned into every region that
needs them, so they never constrain the search.

Per node we keep the producer and consumer sets and the downstream (reachability) set as
Python-int bitsets; SubGraph validity and the search are bit operations on these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from iree.compiler import ir

from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.graph.bits import iter_bits

NONDETERMINISTIC_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
     "Bernoulli"})


class NodeKind(enum.Enum):
    ARG = "arg"
    CONST = "const"
    OP = "op"


@dataclass(eq=False)
class Node:
    """One node of the graph. `values` are its SSA results (one block argument for an ARG)."""

    index: int
    kind: NodeKind
    op: ir.Operation | None
    values: list[ir.Value]
    op_type: str = ""  # ONNX op type, or the MLIR op name for other ops, "" for arguments
    operands: list[tuple[int, int] | None] = field(default_factory=list)
    """Per operand: (producer node, result number), None for an omitted optional input."""
    preds: int = 0  # producer nodes (bitset)
    succs: int = 0  # consumer nodes (bitset)

    def __repr__(self) -> str:
        return f"Node({self.index}, {self.kind.value}, {self.op_type or 'arg'})"


class DataflowGraph:
    """Post-dfs indexed dataflow of `func_op`; read-only: building it never changes the IR.

    `owner` is kept alive with the graph: pass the `ir.Module` holding `func_op` when
    nothing else holds it (the bindings do not keep a module alive through its ops).
    """

    def __init__(self, func_op: ir.Operation, owner: object = None) -> None:
        self.func_op = func_op.operation
        self.owner = owner
        self.nodes: list[Node] = []
        self.outputs: list[tuple[int, int]] = []  # the return's operands, as (node, result)
        self._build()
        self.op_bits = sum(1 << n.index for n in self.nodes if n.kind is NodeKind.OP)
        self.const_bits = sum(1 << n.index for n in self.nodes if n.kind is NodeKind.CONST)
        self.output_bits = sum(1 << node for node, _ in self.outputs)
        self.downstream = self._reachability()

    # -- construction -------------------------------------------------------------------

    def _build(self) -> None:
        block = self.func_op.regions[0].blocks[0]
        ops = [op.operation for op in block.operations]
        terminator = ops.pop()
        for arg in block.arguments:
            self.nodes.append(Node(len(self.nodes), NodeKind.ARG, None, [arg]))
        where: dict[ir.Value, tuple[int, int]] = {
            arg: (i, 0) for i, arg in enumerate(block.arguments)}
        producer_op = {v: op for op in ops for v in op.results}
        visited: set[ir.Operation] = set()

        def visit(root: ir.Operation) -> None:
            # Iterative post-order DFS so deep graphs do not hit the recursion limit.
            stack: list[tuple[ir.Operation, bool]] = [(root, False)]
            while stack:
                op, ready = stack.pop()
                if ready:
                    self._add_op(op, where)
                    continue
                if op in visited:
                    continue
                visited.add(op)
                stack.append((op, True))
                for v in reversed(list(op.operands)):
                    p = producer_op.get(v)
                    if p is not None and p not in visited:
                        stack.append((p, False))

        for v in terminator.operands:
            if v in producer_op:
                visit(producer_op[v])
        for op in ops:  # ops whose results reach no output still get an index
            visit(op)
        self.outputs = [where[v] for v in terminator.operands]

    def _add_op(self, op: ir.Operation, where: dict[ir.Value, tuple[int, int]]) -> None:
        index = len(self.nodes)
        sources = [where[v] for v in op.operands]
        operands = [None if self.nodes[p].op_type == onnx_view.NONE else (p, r)
                    for p, r in sources]
        op_type = onnx_view.op_type(op) or op.name
        # the `none` placeholder is a producer too: regions must clone it like a constant
        producers = [self.nodes[p] for p, _ in sources]
        constant = op.name == onnx_view.NONE or (
            op_type not in NONDETERMINISTIC_OPS
            and all(p.kind is NodeKind.CONST for p in producers))
        node = Node(index, NodeKind.CONST if constant else NodeKind.OP, op, list(op.results),
                    op_type, operands)
        for p in producers:
            node.preds |= 1 << p.index
            p.succs |= 1 << index
        self.nodes.append(node)
        for r, v in enumerate(op.results):
            where[v] = (index, r)

    def _reachability(self) -> list[int]:
        """downstream[i]: every node reachable from i by one or more edges."""
        down = [0] * len(self.nodes)
        for node in reversed(self.nodes):
            acc = 0
            for s in iter_bits(node.succs):
                acc |= (1 << s) | down[s]
            down[node.index] = acc
        return down

    # -- queries ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.nodes)

    def op_nodes(self) -> list[Node]:
        """The partitionable nodes, in post-dfs order."""
        return [self.nodes[i] for i in iter_bits(self.op_bits)]

    def const_closure(self, bits: int) -> int:
        """The constant nodes feeding `bits`, transitively (what a region must clone)."""
        out, frontier = 0, bits
        while frontier:
            preds = 0
            for i in iter_bits(frontier):
                preds |= self.nodes[i].preds
            frontier = preds & self.const_bits & ~out
            out |= frontier
        return out

    def hull(self, bits: int) -> int:
        """`bits` and every node on a path from one of them to another: the least convex
        set holding them (what a kernel computing them all computes)."""
        below = 0
        for i in iter_bits(bits):
            below |= self.downstream[i]
        return bits | sum(1 << j for j in iter_bits(below & ~bits)
                          if self.downstream[j] & bits)

    def connected(self, bits: int) -> bool:
        """Whether `bits` is one piece along the graph's edges (either way)."""
        seen = frontier = bits & -bits
        while frontier:
            near = 0
            for i in iter_bits(frontier):
                near |= self.nodes[i].preds | self.nodes[i].succs
            frontier = near & bits & ~seen
            seen |= frontier
        return seen == bits

    def node_of(self, op: ir.Operation) -> Node:
        for n in self.nodes:
            if n.op is not None and n.op == op.operation:
                return n
        raise KeyError(op)
