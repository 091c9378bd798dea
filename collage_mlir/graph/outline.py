"""Outlining: replace SubGraphs of a function by calls to new private functions.

This is the only rewrite of the model (RFC phase 4). All regions are extracted from the
untouched graph first; then each region, in dependency order, becomes a `func.call` whose
operands go through a value map (an input may be an earlier region's result); the original
ops are erased and the block is put back in topological order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from iree.compiler import ir
from iree.compiler.dialects import func

from collage_mlir.dialects import collage
from collage_mlir.dialects.func import function_name
from collage_mlir.errors import CollageError
from collage_mlir.graph.bits import iter_bits
from collage_mlir.graph.dataflow import DataflowGraph
from collage_mlir.graph.subgraph import SubGraph, execution_order


@dataclass
class Region:
    """One SubGraph to outline as function `name`, with attributes for the new function."""

    sub_graph: SubGraph
    name: str
    attributes: dict[str, ir.Attribute] = field(default_factory=dict)


def region_name(function: str, backend: str, k: int) -> str:
    """The symbol of region `k` of `function` run on `backend`: `<function>_<backend>_<k>`,
    both names spelled as identifiers (`onnxruntime-gpu` → `onnxruntime_gpu`). Reports and
    profiles join on this name, and a saved model names its files after it: a graph named
    `../x` or `a/b` must not reach a path."""
    return f"{_identifier(function)}_{_identifier(backend)}_{k}"


def _identifier(name: str) -> str:
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in name)


Placed = tuple[int, SubGraph, str, float | None]
"""A region to outline: (region number k, its SubGraph, backend, estimated seconds or None)."""


def outline_placed(graph: DataflowGraph, placed: Sequence[Placed]) -> list[ir.Operation]:
    """Outline each placed region as `region_name(function, backend, k)` carrying `collage.backend` and `collage.estimated_cost`, and drop
    the annotate / search attributes from the function. Returns the call ops in order."""
    fn = graph.func_op
    name = function_name(fn)
    taken = _symbols(fn.parent)
    regions = []
    with fn.context:
        for k, sub_graph, backend, cost in placed:
            attrs = {collage.BACKEND: ir.StringAttr.get(backend)}
            if cost is not None:
                attrs[collage.ESTIMATED_COST] = ir.FloatAttr.get_f64(cost)
            symbol = region_name(name, backend, k)
            if symbol in taken:
                raise CollageError(f"@{name}: its region {k} on {backend} would be @{symbol}, "
                                   "a name the module already holds (two functions whose "
                                   "names differ only in punctuation, or a function named "
                                   "so): rename one")
            taken.add(symbol)
            regions.append(Region(sub_graph, symbol, attrs))
    try:
        calls = outline(graph, regions)
    except ValueError as e:
        raise CollageError(f"@{name}: cannot outline: {e}") from None
    for key in (collage.CANDIDATES, collage.REGION_COSTS):
        if key in fn.attributes:
            del fn.attributes[key]
    return calls


def _symbols(module_op: ir.Operation) -> set[str]:
    """The symbol names of the ops directly in `module_op`."""
    return {ir.StringAttr(op.attributes["sym_name"]).value
            for op in (o.operation for o in module_op.regions[0].blocks[0].operations)
            if "sym_name" in op.attributes}


def outline(graph: DataflowGraph, regions: list[Region]) -> list[ir.Operation]:
    """Outline `regions` (disjoint SubGraphs of `graph`); returns the call ops in order."""
    ordered = [regions[k] for k in execution_order([r.sub_graph for r in regions])]
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
