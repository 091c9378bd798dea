"""A view of the ONNX-in-MLIR form produced by the ONNX importer, and the few constructors
a backend's rewrite of that form needs (`create`, `vtensor`, `int_list`).

Ops look like `torch.operator "onnx.Conv"(...) {torch.onnx.kernel_shape = [...]}` on
`!torch.vtensor<[dims],dtype>`; omitted optional inputs are `torch.constant.none`.
This module is the single place that knows that spelling.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from iree.compiler import ir

OPERATOR = "torch.operator"
NONE = "torch.constant.none"
ATTR_PREFIX = "torch.onnx."
META_PREFIX = "torch.onnx_meta."

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "si8": np.dtype(np.int8), "si16": np.dtype(np.int16), "si32": np.dtype(np.int32),
    "si64": np.dtype(np.int64), "ui8": np.dtype(np.uint8), "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32), "ui64": np.dtype(np.uint64), "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8), "i16": np.dtype(np.int16), "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}
"""Element type spelling → numpy dtype, the one table (signless ints read as signed). Types
numpy lacks (bf16, f8*) are absent: no input, blob or slot can be made of them here."""

_NAME_LOC = re.compile(r'loc\("(.*)"\)')
_VTENSOR = re.compile(r"!torch\.vtensor<\[([^\]]*)\],([\w]+)>")


def op_type(op: ir.Operation) -> str | None:
    """The ONNX op type of `op` ("Conv"), or None when it is not an ONNX operator."""
    if op.name != OPERATOR:
        return None
    name = ir.StringAttr(op.attributes["name"]).value
    return name[5:] if name.startswith("onnx.") else name


def ops_of(fn: ir.Operation, kind: str) -> list[ir.Operation]:
    """The ops of `fn`'s body (a `func.func`) of ONNX op type `kind` ("Conv")."""
    return [op for op in fn.regions[0].blocks[0].operations if op_type(op) == kind]


def node_name(op: ir.Operation) -> str:
    """The ONNX node name the importer kept as the op's location ("" when it had none)."""
    m = _NAME_LOC.fullmatch(str(op.location))
    return _unescaped(m.group(1)) if m else ""


def _unescaped(text: str) -> str:
    """A string as MLIR prints it, read back: `\\XX` is a byte in hex (non-ASCII text is
    printed as its UTF-8 bytes), `\\\\` and `\\"` the characters themselves."""
    if "\\" not in text:
        return text
    out, i = bytearray(), 0
    while i < len(text):
        hexed = text[i + 1:i + 3]
        if text[i] == "\\" and len(hexed) == 2 and all(c in "0123456789abcdefABCDEF"
                                                        for c in hexed):
            out.append(int(hexed, 16))
            i += 3
        elif text[i] == "\\" and i + 1 < len(text):
            out += text[i + 1].encode()
            i += 2
        else:
            out += text[i].encode()
            i += 1
    return out.decode("utf-8", errors="replace")


def attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    """The op's ONNX attributes, keyed by their ONNX name (without the `torch.onnx.` prefix)."""
    return {
        key[len(ATTR_PREFIX):]: attr
        for key, attr in op.attributes.items()
        if key.startswith(ATTR_PREFIX)
    }


def attribute_value(attr: ir.Attribute) -> Any:
    """An ONNX attribute as a plain Python value (int, float, str, list)."""
    attr = attr.maybe_downcast() if hasattr(attr, "maybe_downcast") else attr
    if isinstance(attr, ir.BoolAttr | ir.IntegerAttr | ir.FloatAttr | ir.StringAttr):
        return attr.value
    if isinstance(attr, ir.ArrayAttr):
        return [attribute_value(a) for a in attr]
    return str(attr)


def tensor_type(t: ir.Type) -> tuple[tuple[int, ...] | None, str] | None:
    """Shape (None dims as -1; None when unranked) and element type name of a vtensor type."""
    m = _VTENSOR.fullmatch(str(t))
    if not m:
        return None
    dims = m.group(1).strip()
    shape = tuple(int(d) if d != "?" else -1 for d in dims.split(",")) if dims else ()
    return shape, m.group(2)


def element(value: ir.Value) -> str:
    """A value's element type ("f32", "si64", …); "" for a non-tensor (an omitted input)."""
    parsed = tensor_type(value.type)
    return parsed[1] if parsed is not None else ""


def element_bytes(element: str) -> int:
    """Bytes per element of an element type, numpy-less ones included (bf16: 2, f8E5M2: 1);
    4 when the spelling carries no width."""
    if element in NUMPY_DTYPES:
        return NUMPY_DTYPES[element].itemsize
    bits = "".join(c for c in element.split("E")[0] if c.isdigit())
    return max(1, (int(bits) + 7) // 8) if bits else 4


def tensor_nbytes(t: ir.Type) -> int:
    """Bytes of a vtensor value (unknown dims count as 1, so a dynamic value costs at least
    one element; 0 for a non-tensor type or a dim of 0)."""
    parsed = tensor_type(t)
    if parsed is None:
        return 0
    shape, element = parsed
    return math.prod(1 if d < 0 else d for d in shape or ()) * element_bytes(element)


def is_none(value: ir.Value) -> bool:
    """True for the placeholder of an omitted optional input."""
    owner = value.owner
    return isinstance(owner, ir.Operation | ir.OpView) and owner.operation.name == NONE


# -- constructors -----------------------------------------------------------------------

def vtensor(shape: Sequence[int], element: str) -> ir.Type:
    """The value type of a static tensor (in the current context)."""
    return ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>")


def int_list(values: Sequence[int]) -> ir.Attribute:
    """An ONNX ints attribute ([1 : si64, 2 : si64])."""
    si64 = ir.IntegerType.get_signed(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(si64, v) for v in values])


def create(op_type: str, operands: Sequence[ir.Value], result: ir.Type,
           attrs: Mapping[str, ir.Attribute] | None = None) -> ir.Operation:
    """A new ONNX op at the current insertion point and location; `attrs` by ONNX name."""
    named = {ATTR_PREFIX + k: v for k, v in (attrs or {}).items()}
    return ir.Operation.create(OPERATOR, results=[result], operands=list(operands),
                               attributes={"name": ir.StringAttr.get(f"onnx.{op_type}"),
                                           **named}, regions=0)
