"""MLIR → ONNX: turn one ONNX-in-MLIR `func.func` back into a valid `onnx.ModelProto`.

Graph-kind backends (onnxruntime, OpenVINO, TensorRT) take regions as ONNX models, so every
function the pipeline makes — a whole imported model or an extracted region — must export.
Attributes are typed from the ONNX schema of the function's opset, `onnx.Constant` values
become initializers, omitted optional inputs become "" (trailing ones dropped), and node names
are deterministic (`node_name(k)`) so a backend's per-node answers map back to graph nodes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import onnx
from iree.compiler import ir
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from collage_mlir.dialects import func as func_dialect
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import ModuleLike, function_name, io_names
from collage_mlir.export.resources import (
    external_tensor,
    module_resources,
    resource_array,
    store_of,
)
from collage_mlir.graph.bits import iter_bits

if TYPE_CHECKING:
    from collage_mlir.graph.dataflow import DataflowGraph
    from collage_mlir.graph.subgraph import SubGraph

MIN_IR_VERSION = 8
"""onnxruntime 1.31 rejects IR 14 (what onnx 1.23 writes by default); 8 is widely accepted."""

ELEMENT_TYPES: dict[str, int] = {
    "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "f32": TensorProto.FLOAT,
    "f64": TensorProto.DOUBLE, "i1": TensorProto.BOOL, "si8": TensorProto.INT8,
    "si16": TensorProto.INT16, "si32": TensorProto.INT32, "si64": TensorProto.INT64,
    "ui8": TensorProto.UINT8, "ui16": TensorProto.UINT16, "ui32": TensorProto.UINT32,
    "ui64": TensorProto.UINT64, "i8": TensorProto.INT8, "i16": TensorProto.INT16,
    "i32": TensorProto.INT32, "i64": TensorProto.INT64,
}
"""MLIR element type spelling → ONNX TensorProto data type."""


class ExportError(ValueError):
    """The function uses something ONNX cannot express (a non-ONNX op, an unknown type)."""


def node_name(index: int) -> str:
    """The ONNX node name given to op number `index` (its position among the function's ops,
    or the DataflowGraph index when `export_function` is given `op_names`)."""
    return f"n{index}"


def exported_owners(sub: SubGraph) -> dict[str, int]:
    """Each name `export_function` gives the region `sub.extract()` → the graph node behind
    it: node `node_name(k)` is the k-th op of the extracted function (constants included;
    `extract` keeps graph order), and a result's default name (`output_k`) stands for the node
    producing it (OpenVINO names that node after its tensor). What a backend reports by
    these names maps back to `sub`'s graph."""
    ops = list(iter_bits(sub.graph.const_closure(sub.inside) | sub.inside))
    owners = {node_name(k): i for k, i in enumerate(ops)}
    owners.update((f"output_{k}", n) for k, (n, _) in enumerate(sub.output_values))
    return owners


def with_onnx_names(text: str, sub: SubGraph) -> str:
    """`text` (a backend's message about region `sub`, exported) with each node name the
    export gave (`n7`) followed by the ONNX node name behind it, which the user can find:
    "in node (n2 '/encoder/layer.0/LayerNormalization')"."""
    return _named_ops(text, {name: sub.graph.nodes[i].op
                             for name, i in exported_owners(sub).items()})


def with_onnx_names_of(text: str, fn: ir.Operation) -> str:
    """`with_onnx_names` for a message about function `fn` exported on its own (a region
    function of an outlined model: node `node_name(k)` is its k-th op)."""
    ops = [op.operation for op in fn.regions[0].blocks[0].operations]
    return _named_ops(text, {node_name(k): op for k, op in enumerate(ops)})


def _named_ops(text: str, owners: dict[str, ir.Operation | None]) -> str:
    def named(m: re.Match[str]) -> str:
        op = owners.get(m.group(0))
        name = onnx_view.node_name(op) if op is not None else ""
        return f"{m.group(0)} '{name}'" if name else m.group(0)

    return _EXPORTED_NAME.sub(named, text)


_EXPORTED_NAME = re.compile(r"(?<![\w/.'])n\d+(?![\w/.'])")


def find_function(module: ModuleLike, func_name: str | None = None) -> ir.Operation:
    """The `func.func` named `func_name` in `module`, or its first one."""
    try:
        return func_dialect.find_function(module, func_name)
    except ValueError as e:
        raise ExportError(str(e)) from None


class _Namer:
    """Unique, deterministic value names that never shadow a user-given name."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self.used = set(reserved)

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def _meta(func_op: ir.Operation, key: str) -> ir.Attribute | None:
    full = onnx_view.META_PREFIX + key
    return func_op.attributes[full] if full in func_op.attributes else None


def value_info(name: str, t: ir.Type) -> onnx.ValueInfoProto:
    """A typed ValueInfoProto for a `!torch.vtensor` (unknown dims stay symbolic-free)."""
    parsed = onnx_view.tensor_type(t)
    if parsed is None:
        raise ExportError(f"value '{name}' has non-tensor type {t}")
    shape, elem = parsed
    if elem not in ELEMENT_TYPES:
        raise ExportError(f"value '{name}' has unsupported element type {elem}")
    dims = None if shape is None else [d if d >= 0 else None for d in shape]
    return helper.make_tensor_value_info(name, ELEMENT_TYPES[elem], dims)


def attr_array(attr: ir.Attribute,
               resources: Callable[[], Mapping[str, bytes | memoryview]]) -> np.ndarray:
    """Numpy value of a dense / dense_resource elements attribute."""
    if isinstance(attr, ir.DenseElementsAttr):
        elem = str(ir.ShapedType(attr.type).element_type)
        arr = np.array(attr)
        return arr.astype(onnx_view.NUMPY_DTYPES[elem]) if elem in onnx_view.NUMPY_DTYPES else arr
    return resource_array(attr, resources())


Constant = Callable[[ir.Value], "np.ndarray | None"]
"""The value of an operand an onnx.Constant op defines; None for any other operand."""

_LIST_VALUES = {"value_int": np.int64, "value_ints": np.int64,
                "value_float": np.float32, "value_floats": np.float32}
"""onnx.Constant's other numeric spellings, with the element type ONNX gives each."""


def constant_value(op: ir.Operation,
                   resources: Callable[[], Mapping[str, bytes | memoryview]]) -> np.ndarray | None:
    """The value an onnx.Constant op gives its result, whichever attribute spells it
    (`value`, `value_int(s)`, `value_float(s)`); None for a string or sparse one.
    `resources` is called only when the value is a blob; a blob it lacks raises KeyError."""
    attrs = onnx_view.attributes(op)
    if "value" in attrs:
        return attr_array(attrs["value"], resources)
    for key, dtype in _LIST_VALUES.items():
        if key in attrs:
            listed = key.endswith("s")
            values = [_scalar(a) for a in (ir.ArrayAttr(attrs[key]) if listed else [attrs[key]])]
            return np.array(values if listed else values[0], dtype=dtype)
    return None


def constant_reader(resources: Callable[[], Mapping[str, bytes | memoryview]]) -> Constant:
    """A `Constant` over one module (`resources`: its blob table, read on first need); a
    blob not at hand reads as None, like any operand whose value is unknown."""
    def read(value: ir.Value) -> np.ndarray | None:
        owner = value.owner
        if not isinstance(owner, ir.Operation | ir.OpView) or \
                onnx_view.op_type(owner.operation) != "Constant":
            return None
        try:
            return constant_value(owner.operation, resources)
        except (KeyError, ValueError):
            return None
    return read


def graph_constants(graph: DataflowGraph) -> Constant:
    """The `Constant` reader of `graph`'s module (its blob table read on first need)."""
    return constant_reader(lambda: module_resources(graph.func_op.parent))


def _scalar(attr: ir.Attribute) -> int | float | str:
    if isinstance(attr, ir.BoolAttr):
        return int(attr.value)
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    if isinstance(attr, ir.FloatAttr):
        return attr.value
    if isinstance(attr, ir.StringAttr):
        return attr.value
    raise ExportError(f"unsupported attribute {attr}")


def make_attribute(name: str, attr: ir.Attribute, want: int | None,
                   resources: Callable[[], dict[str, bytes]]) -> onnx.AttributeProto:
    """One ONNX attribute; `want` is the schema's AttrType (None: infer from the MLIR attr)."""
    if want == AttributeProto.TENSOR or isinstance(attr, ir.DenseElementsAttr) or (
            want is None and str(attr).startswith("dense_resource<")):
        return helper.make_attribute(name, numpy_helper.from_array(attr_array(attr, resources)))
    if isinstance(attr, ir.ArrayAttr):
        items = [_scalar(a) for a in attr]
        if want == AttributeProto.FLOATS:
            items = [float(x) for x in items]
        elif want == AttributeProto.INTS:
            items = [int(x) for x in items]
        return helper.make_attribute(name, items, attr_type=want)
    value = _scalar(attr)
    if want == AttributeProto.FLOAT:
        value = float(value)
    elif want == AttributeProto.INT:
        value = int(value)
    elif want in (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS):
        value = [value]
    return helper.make_attribute(name, value, attr_type=want)


def _schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return None


def export_function(module: ModuleLike, func_name: str | None = None, *,
                    op_names: Callable[[ir.Operation, int], str] | None = None,
                    external: bool = False) -> onnx.ModelProto:
    """Export one ONNX-in-MLIR function of `module` as a checked-valid ModelProto.

    `op_names(op, k)` names the k-th op's ONNX node (default `node_name(k)`); callers that
    hold a DataflowGraph pass one naming nodes by post-dfs index. With `external`, weights
    that the module's weight store holds stay there (ONNX external data relative to the
    store's directory: load the model through `resources.model_source`); otherwise the
    model carries all its weights.
    """
    func_op = find_function(module, func_name)
    opset_attr = _meta(func_op, "opset_version")
    opset = ir.IntegerAttr(opset_attr).value if opset_attr is not None else \
        onnx.defs.onnx_opset_version()
    block = func_op.regions[0].blocks[0]
    terminator = list(block.operations)[-1].operation
    try:
        in_names, out_names = io_names(func_op)
    except ValueError as e:
        raise ExportError(str(e)) from None
    body = _Body(module, opset, [*in_names, *out_names], external)
    body.names.update(zip(block.arguments, in_names, strict=True))
    # A returned op result takes its output name directly (first return of it wins).
    for value, out in zip(terminator.operands, out_names, strict=True):
        if value not in body.names and not _is_constant(value):
            body.names[value] = out
    for k, op in enumerate(block.operations):
        op = op.operation
        if op == terminator:
            break
        body.add(op, k, op_names(op, k) if op_names else node_name(k))
    outputs = body.return_values(terminator.operands, out_names)
    inputs = [value_info(n, a.type) for n, a in zip(in_names, block.arguments, strict=True)]
    graph = helper.make_graph(body.nodes, function_name(func_op), inputs, outputs,
                              initializer=body.used_initializers())
    return _make_model(func_op, graph, opset)


class _Body:
    """The nodes and initializers of the graph being exported, and the ONNX name of every
    MLIR value so far ("" for an omitted optional input)."""

    def __init__(self, module: ModuleLike, opset: int, reserved: Iterable[str],
                 external: bool = False) -> None:
        self.module, self.opset = module, opset
        self.store = store_of(module) if external else None
        self.namer = _Namer(reserved)
        self.names: dict[ir.Value, str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._resources: dict[str, bytes] | None = None

    def resources(self) -> dict[str, bytes]:
        """The module's blob table, read on first need (most regions have no constants)."""
        if self._resources is None:
            self._resources = module_resources(self.module)
        return self._resources

    def add(self, op: ir.Operation, k: int, node: str) -> None:
        """Export the k-th op of the function as node `node` (or as an initializer)."""
        if op.name == onnx_view.NONE:
            self.names[op.results[0]] = ""
            return
        op_type = onnx_view.op_type(op)
        if op_type is None:
            raise ExportError(f"op '{op.name}' is not an ONNX operator")
        attrs = onnx_view.attributes(op)
        if op_type == "Constant" and set(attrs) == {"value"}:
            name = self.namer.fresh(f"const{k}")
            tensor = self.store and external_tensor(name, attrs["value"], self.store)
            tensor = tensor or numpy_helper.from_array(attr_array(attrs["value"],
                                                                  self.resources), name)
            self.names[op.results[0]] = tensor.name
            self.initializers.append(tensor)
            return
        for r, v in enumerate(op.results):
            if v not in self.names:
                self.names[v] = self.namer.fresh(f"v{k}" if len(op.results) == 1 else f"v{k}_{r}")
        self.nodes.append(_make_node(op, op_type, attrs, self.opset, self.names,
                                     self.resources, node))

    def return_values(self, values: Sequence[ir.Value], out_names: list[str]
                      ) -> list[onnx.ValueInfoProto]:
        """The graph outputs; an input, a constant or a value returned twice is copied to
        its output name by an Identity node."""
        outputs, taken = [], set()
        for value, out in zip(values, out_names, strict=True):
            if out in taken:  # a model listing one output twice: ONNX names are unique
                out = self.namer.fresh(out)
            taken.add(out)
            if self.names[value] != out:
                self.nodes.append(helper.make_node("Identity", [self.names[value]], [out],
                                                   name=self.namer.fresh(f"identity_{out}")))
            outputs.append(value_info(out, value.type))
        return outputs

    def used_initializers(self) -> list[TensorProto]:
        """Initializers some node reads (folded shape constants may be left unread)."""
        used = {i for n in self.nodes for i in n.input}
        return [t for t in self.initializers if t.name in used]


def export_graph(graph: DataflowGraph, external: bool = False) -> onnx.ModelProto:
    """Export a DataflowGraph's function with node k named `node_name(k)` (post-dfs index),
    so a backend's per-node answer (OpenVINO's query_model) maps straight back to nodes."""
    index = {n.op: n.index for n in graph.nodes if n.op is not None}
    func_op = graph.func_op
    name = function_name(func_op)
    return export_function(func_op.parent, name, op_names=lambda op, k: node_name(index[op]),
                           external=external)


def _is_constant(value: ir.Value) -> bool:
    owner = value.owner
    if not isinstance(owner, ir.Operation | ir.OpView):
        return False
    op = owner.operation
    return op.name == onnx_view.NONE or (
        onnx_view.op_type(op) == "Constant" and set(onnx_view.attributes(op)) == {"value"})


def _make_node(op: ir.Operation, op_type: str, attrs: dict[str, ir.Attribute], opset: int,
               names: dict[ir.Value, str], resources: Callable[[], dict[str, bytes]],
               name: str) -> onnx.NodeProto:
    inputs = [names[v] for v in op.operands]
    while inputs and inputs[-1] == "":
        inputs.pop()
    schema = _schema(op_type, opset)
    typed = {a: schema.attributes[a].type for a in attrs} if schema else {}
    node = helper.make_node(op_type, inputs, [names[v] for v in op.results], name=name)
    node.attribute.extend(
        make_attribute(a, attr, typed.get(a), resources) for a, attr in sorted(attrs.items()))
    return node


def _make_model(func_op: ir.Operation, graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    opsets = [helper.make_opsetid("", opset)]
    ir_version = max(MIN_IR_VERSION, helper.find_min_ir_version_for(opsets, True))
    model = helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)
    for key, field in (("producer_name", "producer_name"),
                       ("producer_version", "producer_version"),
                       ("domain", "domain"), ("doc_string", "doc_string")):
        attr = _meta(func_op, key)
        if attr is not None and isinstance(attr, ir.StringAttr):
            setattr(model, field, attr.value)
    model_version = _meta(func_op, "model_version")
    if model_version is not None:
        model.model_version = ir.IntegerAttr(model_version).value
    return model
