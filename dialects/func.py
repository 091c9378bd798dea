"""A read-only view of the `func` dialect: which functions a module holds, and their names.

The one place that knows how a model's entry point, an outlined region and an extracted
region are told apart: entry points are public `func.func`s with a body, outlined regions
are private.
"""

from __future__ import annotations

from iree.compiler import ir

from collage_mlir.dialects import collage

ModuleLike = ir.Module | ir.Operation
"""An `ir.Module`, or the `builtin.module` operation (`func_op.parent`)."""


def _body(module: ModuleLike) -> ir.Block:
    return module.body if isinstance(module, ir.Module) else module.regions[0].blocks[0]


def function_name(fn: ir.Operation) -> str:
    return ir.StringAttr(fn.attributes["sym_name"]).value


def is_private(fn: ir.Operation) -> bool:
    vis = fn.attributes["sym_visibility"] if "sym_visibility" in fn.attributes else None
    return vis is not None and ir.StringAttr(vis).value == "private"


def public_functions(module: ModuleLike) -> list[ir.Operation]:
    """The public `func.func`s with a body: the model entry points (outlined regions are
    private and are skipped)."""
    out = []
    for op in _body(module).operations:
        op = op.operation
        if op.name == "func.func" and op.regions[0].blocks and not is_private(op):
            out.append(op)
    return out


def find_function(module: ModuleLike, name: str | None = None) -> ir.Operation:
    """The `func.func` called `name`, or the first one when `name` is None (an extracted
    region holds exactly one). ValueError when there is none."""
    for op in _body(module).operations:
        op = op.operation
        if op.name == "func.func" and (name is None or function_name(op) == name):
            return op
    raise ValueError(f"no function '{name or '<any>'}' in module")


def result_count(fn: ir.Operation) -> int:
    """How many values `fn` returns."""
    return len(ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value).results)


def io_names(fn: ir.Operation) -> tuple[list[str], list[str]]:
    """The input and output names the import recorded on `fn` (`collage.input_names` /
    `collage.output_names`), else input_k / output_k. ValueError when a recorded list does
    not match the signature."""
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    n_in, n_out = len(ftype.inputs), len(ftype.results)
    ins = _strings(fn, collage.INPUT_NAMES) or [f"input_{k}" for k in range(n_in)]
    outs = _strings(fn, collage.OUTPUT_NAMES) or [f"output_{k}" for k in range(n_out)]
    if len(ins) != n_in or len(outs) != n_out:
        raise ValueError(f"@{function_name(fn)}: {collage.INPUT_NAMES} / "
                         f"{collage.OUTPUT_NAMES} do not match the signature")
    return ins, outs


def _strings(fn: ir.Operation, key: str) -> list[str] | None:
    if key not in fn.attributes:
        return None
    return [ir.StringAttr(a).value for a in ir.ArrayAttr(fn.attributes[key])]
