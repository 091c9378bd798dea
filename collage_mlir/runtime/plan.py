"""The execution plan of an outlined module: a straight line of region calls over slots.

After collage-outline the public function holds only `func.call`s to per-backend region
functions (plus a return). We number every value (function arguments first), and turn each
call into a Step reading and writing slot numbers; running is then a short Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.dialects import collage
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import function_name, public_functions
from collage_mlir.errors import CollageError
from collage_mlir.tensors import TensorSpec, argument_specs


@dataclass(frozen=True)
class Step:
    """One region call: run `callee` (on `backend`) reading slots `args`, writing `results`."""

    callee: str
    backend: str
    args: tuple[int, ...]
    results: tuple[int, ...]


@dataclass
class Plan:
    entry: str
    inputs: list[TensorSpec]
    input_names: list[str]
    output_names: list[str]
    steps: list[Step]
    outputs: list[int]
    slot_count: int


def region_functions(module: ir.Module) -> dict[str, ir.Operation]:
    """The private region functions by symbol name."""
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and collage.BACKEND in op.attributes:
            out[function_name(op)] = op
    return out


def build_plan(module: ir.Module) -> Plan:
    entries = public_functions(module)
    if len(entries) != 1:
        raise CollageError(f"expected one public function, found {len(entries)}")
    fn = entries[0]
    regions = region_functions(module)
    block = fn.regions[0].blocks[0]
    slot: dict[ir.Value, int] = {a: k for k, a in enumerate(block.arguments)}
    steps = []
    ops = [op.operation for op in block.operations]
    for op in ops[:-1]:
        if op.name == onnx_view.NONE and not _used(op):
            continue
        if op.name != "func.call":
            raise CollageError(f"@{function_name(fn)}: op {onnx_view.op_type(op) or op.name} "
                               "is outside every region; run collage-outline first")
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee not in regions:
            raise CollageError(f"call to @{callee}, which is not a region function")
        backend = ir.StringAttr(regions[callee].attributes[collage.BACKEND]).value
        for r in op.results:
            slot[r] = len(slot)
        steps.append(Step(callee, backend, tuple(slot[v] for v in op.operands),
                          tuple(slot[r] for r in op.results)))
    ret = ops[-1]
    n_in = len(block.arguments)
    return Plan(
        entry=function_name(fn),
        inputs=_specs(fn),
        input_names=_names(fn, collage.INPUT_NAMES, "input", n_in),
        output_names=_names(fn, collage.OUTPUT_NAMES, "output", len(ret.operands)),
        steps=steps,
        outputs=[slot[v] for v in ret.operands],
        slot_count=len(slot),
    )


def _specs(fn: ir.Operation) -> list[TensorSpec]:
    try:
        return argument_specs(fn)
    except ValueError as e:
        raise CollageError(f"@{function_name(fn)}: {e}") from None


def _used(op: ir.Operation) -> bool:
    return any(list(r.uses) for r in op.results)


def _names(fn: ir.Operation, key: str, prefix: str, n: int) -> list[str]:
    if key in fn.attributes:
        return [ir.StringAttr(a).value for a in ir.ArrayAttr(fn.attributes[key])]
    return [f"{prefix}_{k}" for k in range(n)]
