"""A read-only view of the ONNX-in-MLIR form produced by the ONNX importer.

Ops look like `torch.operator "onnx.Conv"(...) {torch.onnx.kernel_shape = [...]}` on
`!torch.vtensor<[dims],dtype>`; omitted optional inputs are `torch.constant.none`.
This module is the single place that knows that spelling.
"""

from __future__ import annotations

import re

from iree.compiler import ir

OPERATOR = "torch.operator"
NONE = "torch.constant.none"
ATTR_PREFIX = "torch.onnx."
META_PREFIX = "torch.onnx_meta."
CONSTANT_OPS = frozenset({"Constant"})
"""Ops that make a value from attributes alone."""
CONSTANT_FOLDABLE_OPS = frozenset({"ConstantOfShape"})
"""Ops that are constant when all their inputs are (the light models' weights come from these)."""

_NAME_LOC = re.compile(r'loc\("(.*)"\)')
_VTENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\],([\w]+)>")


def op_type(op: ir.Operation) -> str | None:
    """The ONNX op type of `op` ("Conv"), or None when it is not an ONNX operator."""
    if op.name != OPERATOR:
        return None
    name = ir.StringAttr(op.attributes["name"]).value
    return name[5:] if name.startswith("onnx.") else name


def node_name(op: ir.Operation) -> str:
    """The ONNX node name the importer kept as the op's location ("" when it had none)."""
    m = _NAME_LOC.fullmatch(str(op.location))
    return m.group(1) if m else ""


def attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    """The op's ONNX attributes, keyed by their ONNX name (without the `torch.onnx.` prefix)."""
    return {
        key[len(ATTR_PREFIX):]: attr
        for key, attr in op.attributes.items()
        if key.startswith(ATTR_PREFIX)
    }


def tensor_type(t: ir.Type) -> tuple[tuple[int, ...] | None, str] | None:
    """Shape (None dims as -1; None when unranked) and element type name of a vtensor type."""
    m = _VTENSOR.fullmatch(str(t))
    if not m:
        return None
    dims = m.group(1).strip()
    shape = tuple(int(d) if d != "?" else -1 for d in dims.split(",")) if dims else ()
    return shape, m.group(2)


def is_none(value: ir.Value) -> bool:
    """True for the placeholder of an omitted optional input."""
    owner = value.owner
    return isinstance(owner, ir.Operation | ir.OpView) and owner.operation.name == NONE
