"""The execution plan of an outlined module: a straight line of region calls over slots.

After collage-outline the public function holds only `func.call`s to per-backend region
functions (plus a return), and the constants the model returns as they are (no region
computes them). We number every value (function arguments first), turn each call into a
Step reading and writing slot numbers, and keep each such constant's value for its slot;
running is then a short Python loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from collage_mlir.dialects import collage
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import function_name, io_names, public_functions
from collage_mlir.errors import CollageError
from collage_mlir.export.onnx_export import constant_value
from collage_mlir.export.resources import module_resources
from collage_mlir.tensors import IndexLimit, TensorSpec, argument_specs, index_limits


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
    constants: dict[int, Constant] = field(default_factory=dict)
    """Slots filled before any step: constants outside every region, which the model returns
    as they are (torch's `zeros_like`, a returned parameter, a size the import folded)."""
    index_limits: dict[int, IndexLimit] = field(default_factory=dict)
    """Inputs (by position) whose values index a table inside some region (`tensors`)."""


class Constant:
    """A value the plan holds itself, read on first use (a model loaded without its weights,
    to be drawn, never reads it), and its type's text (`!torch.vtensor<...>`)."""

    def __init__(self, read: Callable[[], np.ndarray], type: str) -> None:
        self._read = read
        self.type = type

    @functools.cached_property
    def value(self) -> np.ndarray:
        """The value, read-only: every run hands out this one array (`run` copies it)."""
        value = np.array(self._read())
        value.flags.writeable = False
        return value


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
    steps, constants = [], {}
    ops = [op.operation for op in block.operations]
    for op in ops[:-1]:
        if op.name == onnx_view.NONE and not _used(op):
            continue
        if onnx_view.op_type(op) == "Constant":
            slot[op.results[0]] = len(slot)
            constants[slot[op.results[0]]] = _constant(op, module)
            continue
        if op.name != "func.call":
            raise CollageError(f"@{function_name(fn)}: op {onnx_view.op_type(op) or op.name} "
                               f"is outside every region ({_why_outside(op)})")
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee not in regions:
            raise CollageError(f"call to @{callee}, which is not a region function")
        backend = ir.StringAttr(regions[callee].attributes[collage.BACKEND]).value
        for r in op.results:
            slot[r] = len(slot)
        steps.append(Step(callee, backend, tuple(slot[v] for v in op.operands),
                          tuple(slot[r] for r in op.results)))
    ret = ops[-1]
    try:
        names = io_names(fn)
    except ValueError as e:
        raise CollageError(str(e)) from None
    return Plan(
        entry=function_name(fn),
        inputs=_specs(fn),
        input_names=names[0],
        output_names=names[1],
        steps=steps,
        outputs=[slot[v] for v in ret.operands],
        slot_count=len(slot),
        constants=constants,
        index_limits=index_limits(fn),
    )


def _constant(op: ir.Operation, module: ir.Module) -> Constant:
    """An `onnx.Constant` outside the regions, as a plan constant."""
    where = f"constant {onnx_view.node_name(op) or op.results[0].get_name()}"

    def read() -> np.ndarray:
        try:
            value = constant_value(op, lambda: module_resources(module))
        except (KeyError, ValueError) as e:
            raise CollageError(f"{where} cannot be read: {e}") from None
        if value is None:
            raise CollageError(f"{where} has no numeric value")
        return value
    return Constant(read, str(op.results[0].type))


def _why_outside(op: ir.Operation) -> str:
    """What leaves an op outside the regions: a value computed from constants alone that
    the import could not fold (no region computes those), or a module not outlined."""
    if all(isinstance(v.owner, ir.Operation | ir.OpView)
           and onnx_view.op_type(v.owner.operation) == "Constant" for v in op.operands):
        return ("it computes a model output from constants alone, which the import could "
                "not fold; fold it in the ONNX file")
    return "run collage-outline first"


def _specs(fn: ir.Operation) -> list[TensorSpec]:
    try:
        return argument_specs(fn)
    except ValueError as e:
        raise CollageError(f"@{function_name(fn)}: {e}") from None


def _used(op: ir.Operation) -> bool:
    return any(list(r.uses) for r in op.results)


