"""Outlining: replace SubGraphs of a function by calls to new private functions.

This is the only rewrite of the model (RFC phase 4). All regions are extracted from the
untouched graph first; then each region, in dependency order, becomes a `func.call` whose
operands go through a value map (an input may be an earlier region's result); the original
ops are erased and the block is put back in topological order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iree.compiler import ir
from iree.compiler.dialects import func

from collage_mlir.graph.bits import iter_bits
from collage_mlir.graph.dataflow import DataflowGraph
from collage_mlir.graph.subgraph import SubGraph


@dataclass
class Region:
    """One SubGraph to outline as function `name`, with attributes for the new function."""

    sub_graph: SubGraph
    name: str
    attributes: dict[str, ir.Attribute] = field(default_factory=dict)


def region_order(regions: list[Region]) -> list[Region]:
    """Regions sorted so that every region comes after the regions it reads from.

    Raises ValueError when the regions depend on each other in a cycle (each convex on its
    own, but not schedulable as calls).
    """
    g = regions[0].sub_graph.graph if regions else None
    owner = {}
    for k, r in enumerate(regions):
        for i in r.sub_graph.nodes:
            owner[i] = k
    deps = [set() for _ in regions]
    for k, r in enumerate(regions):
        for i in r.sub_graph.nodes:
            for p in iter_bits(g.nodes[i].preds):
                if p in owner and owner[p] != k:
                    deps[k].add(owner[p])
    order, state = [], [0] * len(regions)  # 0 new, 1 on stack, 2 done

    def visit(k: int) -> None:
        stack = [(k, iter(sorted(deps[k])))]
        state[k] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                state[node] = 2
                order.append(node)
            elif state[nxt] == 1:
                raise ValueError("regions form a cycle")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(deps[nxt]))))

    for k in sorted(range(len(regions)), key=lambda k: regions[k].sub_graph.first):
        if state[k] == 0:
            visit(k)
    return [regions[k] for k in order]


def outline(graph: DataflowGraph, regions: list[Region]) -> list[ir.Operation]:
    """Outline `regions` (disjoint SubGraphs of `graph`); returns the call ops in order."""
    ordered = region_order(regions)
    fn_op = graph.func_op
    block = fn_op.regions[0].blocks[0]
    terminator = list(block.operations)[-1].operation
    ctx = fn_op.context
    value_map: dict[ir.Value, ir.Value] = {}
    calls = []
    with ctx, ir.Location.unknown():
        for r in ordered:
            extracted = r.sub_graph.extract(r.name)
            new_fn = extracted.body.operations[0].operation
            new_fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            for key, attr in r.attributes.items():
                new_fn.attributes[key] = attr
            _append_to_module(new_fn, fn_op)
            inputs = [graph.nodes[n].values[k] for n, k in r.sub_graph.input_values]
            outputs = [graph.nodes[n].values[k] for n, k in r.sub_graph.output_values]
            with ir.InsertionPoint(terminator):
                call = func.CallOp([v.type for v in outputs], ir.FlatSymbolRefAttr.get(r.name),
                                   [value_map.get(v, v) for v in inputs])
            for old, new in zip(outputs, call.results, strict=True):
                value_map[old] = new
            calls.append(call.operation)
        for old, new in value_map.items():
            old.replace_all_uses_with(new)
        _erase(graph, sum(r.sub_graph.inside for r in regions))
    topological_sort(block)
    return calls


def _append_to_module(new_fn: ir.Operation, fn_op: ir.Operation) -> None:
    """Place the new function at the end of the module that holds `fn_op`."""
    last = list(fn_op.parent.regions[0].blocks[0].operations)[-1].operation
    new_fn.move_after(last)


def _erase(graph: DataflowGraph, inside: int) -> None:
    """Erase outlined ops, then constants left without uses (consumers before producers)."""
    for i in reversed(list(iter_bits(inside))):
        graph.nodes[i].op.erase()
    for i in reversed(list(iter_bits(graph.const_bits))):
        op = graph.nodes[i].op
        if all(not list(v.uses) for v in op.results):
            op.erase()


def topological_sort(block: ir.Block) -> None:
    """Reorder `block`'s ops so every op follows its operands' producers (stable)."""
    ops = [op.operation for op in block.operations]
    terminator = ops.pop()
    position = {op: k for k, op in enumerate(ops)}
    producer = {v: op for op in ops for v in op.results}
    placed: set[ir.Operation] = set()
    order: list[ir.Operation] = []

    def place(root: ir.Operation) -> None:
        stack = [root]
        while stack:
            op = stack[-1]
            if op in placed:
                stack.pop()
                continue
            pending = [producer[v] for v in op.operands
                       if v in producer and producer[v] not in placed]
            if pending:
                stack.extend(sorted(pending, key=position.get, reverse=True))
            else:
                stack.pop()
                placed.add(op)
                order.append(op)

    for op in ops:
        place(op)
    if order != ops:
        for op in order:
            op.move_before(terminator)
