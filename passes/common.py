"""Small helpers shared by the passes: node stamps, the regions collage-search stamped."""

from __future__ import annotations

import math
from collections import defaultdict

from iree.compiler import ir

from collage_mlir.dialects import collage
from collage_mlir.dialects.func import find_function, function_name
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, NodeKind


def stamp_nodes(graph: DataflowGraph) -> None:
    """Write `collage.node = <post-dfs index>` on every op node (not on constants)."""
    with graph.func_op.context:
        i64 = ir.IntegerType.get_signless(64)
        for node in graph.nodes:
            if node.kind is NodeKind.OP:
                node.op.attributes[collage.NODE] = ir.IntegerAttr.get(i64, node.index)


def check_node_stamps(graph: DataflowGraph) -> None:
    """Refuse a graph whose ops' `collage.node` stamps (where present) are not their
    indices: the IR was edited after collage-annotate (operands swapped, ops moved), so the
    candidates, which name nodes by index, would cover other ops than annotate matched."""
    for node in graph.op_nodes():
        if collage.NODE not in node.op.attributes:
            continue
        attr = node.op.attributes[collage.NODE]
        try:
            stamp = ir.IntegerAttr(attr).value
        except ValueError:
            stamp = None
        if stamp != node.index:
            raise CollageError(
                f"op {node.op_type} (node {node.index}) is stamped {collage.NODE} = "
                f"{stamp if stamp is not None else attr}: the IR changed after "
                "collage-annotate (run it again)")


def forget_decision(graph: DataflowGraph) -> None:
    """Remove what collage-search stamped (regions, backends, costs): annotating again
    makes new candidates, and a later pass must not read the old decision as theirs."""
    fn = graph.func_op
    for node in graph.op_nodes():
        for name in (collage.REGION, collage.BACKEND):
            if name in node.op.attributes:
                del node.op.attributes[name]
    for name in (collage.REGION_COSTS, collage.ESTIMATED_COST):
        if name in fn.attributes:
            del fn.attributes[name]


def refuse_outlined(fn: ir.Operation, pass_name: str, takes: str) -> None:
    """A CollageError when `fn` is outlined already (it calls region functions): the
    passes up to collage-outline work on the model's own ops (`takes`: which form)."""
    block = fn.regions[0].blocks[0]
    calls = [op.operation for op in block.operations if op.operation.name == "func.call"]
    if not calls:
        return
    callee = ir.FlatSymbolRefAttr(calls[0].attributes["callee"]).value
    try:
        region = collage.BACKEND in find_function(fn.parent, callee).attributes
    except ValueError:
        region = False
    if region:
        raise CollageError(f"@{function_name(fn)} is outlined already (it calls region "
                           f"functions): {pass_name} takes {takes}")
    raise CollageError(f"@{function_name(fn)} calls @{callee}: {pass_name} takes one "
                       "function of ONNX ops (inline the calls first: "
                       "--pass-pipeline='builtin.module(inline,...)')")


def stamped_regions(fn: ir.Operation, pass_name: str
                    ) -> tuple[DataflowGraph, dict[int, list[int]], dict[int, str]]:
    """The graph of `fn` and the regions collage-search stamped on its ops: region →
    its nodes, region → its backend (for `pass_name`'s messages)."""
    refuse_outlined(fn, pass_name, "the model as collage-search leaves it")
    graph = DataflowGraph(fn)
    name = function_name(fn)
    members: dict[int, list[int]] = defaultdict(list)
    backend: dict[int, str] = {}
    for node in graph.op_nodes():
        attrs = node.op.attributes
        if collage.REGION not in attrs or collage.BACKEND not in attrs:
            raise CollageError(f"@{name}: op {node.op_type} (node {node.index}) has no "
                               f"{collage.REGION}/{collage.BACKEND}; run collage-search first")
        try:
            k = ir.IntegerAttr(attrs[collage.REGION]).value
            b = ir.StringAttr(attrs[collage.BACKEND]).value
        except ValueError:
            raise CollageError(
                f"@{name}: op {node.op_type} (node {node.index}): expected {collage.REGION} "
                f"= <integer> and {collage.BACKEND} = \"<name>\", got "
                f"{attrs[collage.REGION]} and {attrs[collage.BACKEND]}") from None
        members[k].append(node.index)
        if backend.setdefault(k, b) != b:
            raise CollageError(f"@{name}: region {k} mixes backends {backend[k]} and {b}")
    if sorted(members) != list(range(len(members))):
        raise CollageError(f"@{name}: regions numbered {sorted(members)}; collage-search "
                           f"numbers them 0..{len(members) - 1}")
    return graph, members, backend


def region_costs(fn: ir.Operation, regions: int) -> list[float] | None:
    """collage-search's `collage.region_costs` on `fn` (one cost in seconds, finite and not
    negative, per region), or None when it has none."""
    if collage.REGION_COSTS not in fn.attributes:
        return None
    attr = fn.attributes[collage.REGION_COSTS]
    where = f"@{function_name(fn)}: {collage.REGION_COSTS}"
    try:
        costs = [ir.FloatAttr(a).value for a in ir.ArrayAttr(attr)]
    except ValueError:
        raise CollageError(f"{where}: expected an array of seconds, got {attr}") from None
    if len(costs) != regions:
        raise CollageError(f"{where}: {len(costs)} costs for {regions} regions")
    bad = next((c for c in costs if not (math.isfinite(c) and c >= 0)), None)
    if bad is not None:
        raise CollageError(f"{where}: {bad} is not a cost (seconds, 0 or more)")
    return costs
