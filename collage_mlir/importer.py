"""ONNX → MLIR import, in process, into the ONNX-in-MLIR form (`torch.operator "onnx.X"`).

Every value gets a static type first (`static_shapes`: inputs specialised, shape
computations folded), then a few value-keeping rewrites apply (`canonical`). Initializers become
`onnx.Constant` ops with `dense_resource` blobs that live in the module's resource section;
`collage_mlir.export.resources` reads them back for the exporter.
"""

from __future__ import annotations

import os
import re
import warnings

import onnx
from iree.compiler import ir
from iree.compiler.extras import onnx_importer

from collage_mlir.canonical import canonicalize, respell
from collage_mlir.context import make_context
from collage_mlir.dialects import collage
from collage_mlir.errors import CollageError, first_line
from collage_mlir.export.resources import RESOURCE_ENTRY, blob_token, unquote_key
from collage_mlir.legacy import after_upgrade, before_upgrade, default_opset
from collage_mlir.paths import user_path
from collage_mlir.static_shapes import InputShapes, SampleShapes, make_static

ModelLike = str | os.PathLike | onnx.ModelProto


def load_model(model: ModelLike) -> tuple[onnx.ModelProto, str]:
    """Load and check an ONNX model; returns it with a label (its path) for messages."""
    if isinstance(model, onnx.ModelProto):
        _require_known_opset(model, model.graph.name or "<model>")
        return model, model.graph.name or "<model>"
    path = user_path(model)
    if path.is_dir():
        raise CollageError(f"{path}: is a directory, not an ONNX model")
    if not path.is_file():
        raise CollageError(f"{path}: no such file")
    try:
        proto = onnx.load(str(path))
    except Exception as e:  # protobuf gives a long message with no location; onnx's own
        detail = first_line(e) if not type(e).__module__.startswith("google") else ""
        raise CollageError(f"{path}: not a readable ONNX model ({type(e).__name__}"
                           f"{': ' + detail if detail else ''})") from None
    _require_known_opset(proto, str(path))
    return proto, str(path)


def _require_known_opset(proto: onnx.ModelProto, label: str) -> None:
    """Refuse an opset newer than the installed onnx knows: its ops have no schema here (and
    shape inference on such a model has crashed the process later on)."""
    known = onnx.defs.onnx_opset_version()
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > known:
            raise CollageError(f"{label}: opset {entry.version} is newer than this onnx "
                               f"({onnx.__version__}) knows (up to {known})")


def check_model(proto: onnx.ModelProto, label: str) -> None:
    """Reject malformed models and ops no ONNX schema knows, naming the node."""
    for node in proto.graph.node:
        domain = node.domain or ""
        if domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, domain):
            raise CollageError(
                f"{label}: node '{node.name or node.output[0]}' has unsupported op '{node.op_type}'"
            )
        if domain not in ("", "ai.onnx"):
            hint = (" (onnxruntime's QOperator quantization: quantize with "
                    "quant_format=QuantFormat.QDQ, which every backend reads)"
                    if domain == "com.microsoft" and node.op_type.startswith("Q") else "")
            raise CollageError(
                f"{label}: node '{node.name or node.output[0]}' op '{domain}.{node.op_type}' "
                f"is from a custom domain, which no backend here can run{hint}"
            )
    _infer_unshaped_outputs(proto)
    weights = {i.name for i in proto.graph.initializer}
    for kind, values in (("input", proto.graph.input), ("output", proto.graph.output)):
        for v in values:
            if v.name in weights or not v.type.HasField("tensor_type"):
                continue
            if v.type.tensor_type.elem_type == onnx.TensorProto.STRING:
                raise CollageError(f"{label}: {kind} '{v.name}' holds strings, which no "
                                   "backend here takes")
            if _unshaped(v):
                raise CollageError(f"{label}: {kind} '{v.name}' declares no shape, not even "
                                   "a rank (ONNX requires one; its dims may be named)")
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0]
        node = _CHECKER_NODE.search(str(e))
        where = "" if not node else (f"node '{node.group(1)}' ({node.group(2)}): " if node.group(1)
                                     else f"an unnamed {node.group(2)} node: ")
        raise CollageError(f"{label}: malformed model: {where}{first}") from None


_CHECKER_NODE = re.compile(r"Bad node spec for node\. Name: (.*?) OpType: (\S+)")
"""Where onnx's checker names the node at fault: on a later line of its message."""


def _unshaped(value: onnx.ValueInfoProto) -> bool:
    return value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape")


def _infer_unshaped_outputs(proto: onnx.ModelProto) -> None:
    """Outputs declared with no shape (onnxruntime runs them; ONNX's checker refuses them)
    take the type shape inference gives them, where it gives one."""
    if not any(_unshaped(v) for v in proto.graph.output):
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph.output
    except Exception:  # left for the checks that follow to name
        return
    for value, known in zip(proto.graph.output, inferred, strict=True):
        if _unshaped(value) and not _unshaped(known):
            value.type.CopyFrom(known.type)


def refuse_subgraphs(proto: onnx.ModelProto, label: str) -> None:
    """Refuse control flow (If, Loop, Scan): its branches read values of the graph around
    them that the dataflow graph does not see as operands, and regions cannot carry them to
    a backend, so no backend could run the model (its first such node is named)."""
    graphs = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    for node in proto.graph.node:
        if any(a.type in graphs for a in node.attribute):
            raise CollageError(
                f"{label}: node '{node.name or node.output[0]}' ({node.op_type}) holds "
                "subgraphs (control flow), which collage_mlir cannot partition yet; export "
                "the model without it (trace one branch) or run it on one backend")


MIN_OPSET = 17
"""Older models are upgraded to this opset on import: IREE's ONNX input conversion only knows
the modern forms of many ops (opset-9 MaxPool, BatchNormalization, Add ... are refused),
while onnxruntime and openvino take either. Where onnx's converter changes what an op
computes, `legacy` keeps its old meaning."""


def name_unnamed_nodes(proto: onnx.ModelProto) -> None:
    """Give each node without a name its first output's name, as this module's errors call
    it: the importer keeps node names as op locations, which reports, error messages and
    placement rules (`onnx_node_name`) go by, and an empty one names nothing."""
    used = {node.name for node in proto.graph.node if node.name}
    for node in proto.graph.node:
        if not node.name:
            name = next((o for o in node.output if o), node.op_type)
            while name in used:  # another node's own name: a rule by it must not match this
                name = f"{name} ({node.op_type})"
            node.name = name
            used.add(name)


def upgrade_opset(proto: onnx.ModelProto, target: int, label: str = "<model>"
                  ) -> onnx.ModelProto:
    """`proto` converted to opset `target` when it is older (the ops whose meaning onnx's
    converter changes kept as they were: `legacy`, which rewrites `proto` in place first);
    as written, less those rewrites, when the converter fails."""
    if default_opset(proto) >= target:
        return proto
    resizes = before_upgrade(proto, label)
    try:
        from onnx import version_converter

        converted = version_converter.convert_version(proto, target)
    except Exception:  # an op without an adapter: keep the model as written
        return proto
    after_upgrade(converted, resizes, label)
    return converted


def import_onnx(model: ModelLike, context: ir.Context | None = None,
                min_opset: int | None = MIN_OPSET,
                input_shapes: InputShapes | None = None,
                samples: SampleShapes | None = None) -> ir.Module:
    """Import an ONNX model (path or ModelProto) as an MLIR module with one `func.func`.

    Every value gets a static shape: dynamic inputs take `input_shapes` (name → dims), else
    the shapes of the user's `samples` (an input left dynamic is an error naming it), and
    shape computations are folded
    (`collage_mlir.static_shapes`). The function carries the ONNX input and output names as
    `collage.input_names` / `collage.output_names`, and the opset as
    `torch.onnx_meta.opset_version` (models older than `min_opset` are upgraded first; None
    keeps the model's own opset). A ModelProto passed in is not modified.
    """
    proto, label = load_model(model)
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    respell(proto)
    check_model(proto, label)
    if min_opset is not None:
        proto = upgrade_opset(proto, min_opset, label)
    proto = make_static(proto, label, input_shapes, samples)
    canonicalize(proto)
    refuse_subgraphs(proto, label)
    name_unnamed_nodes(proto)
    context = context or make_context()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # untyped unused outputs (Dropout masks) are fine
            info = onnx_importer.ModelInfo(proto)
            module = info.create_module(context=context)
            importer = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation)
            importer.import_all()
    except onnx_importer.OnnxImportError as e:
        raise CollageError(f"{label}: {str(e).strip().splitlines()[0]}") from None
    func_op = module.body.operations[0]
    with context:
        initializers = {i.name for i in proto.graph.initializer}
        inputs = [i.name for i in proto.graph.input if i.name not in initializers]
        func_op.attributes[collage.INPUT_NAMES] = ir.ArrayAttr.get(
            [ir.StringAttr.get(n) for n in inputs])
        func_op.attributes[collage.OUTPUT_NAMES] = ir.ArrayAttr.get(
            [ir.StringAttr.get(o.name) for o in proto.graph.output])
        module.operation.attributes[collage.BLOB_TOKENS] = ir.DictAttr.get(
            {name: ir.StringAttr.get(token) for name, token in blob_tokens(proto).items()})
    if not module.operation.verify():
        raise CollageError(f"{label}: imported IR does not verify")
    return module


def blob_tokens(proto: onnx.ModelProto) -> dict[str, str]:
    """Initializer name → its cache-key token (`export.resources.blob_token`), from the ONNX bytes:
    the importer names each `dense_resource` blob after its initializer."""
    from onnx import numpy_helper

    out = {}
    for init in proto.graph.initializer:
        data = init.raw_data if init.HasField("raw_data") else numpy_helper.to_array(
            init).tobytes()
        out[init.name] = blob_token(data)
    return out


def check_resource_section(text: str, label: str) -> None:
    """Refuse a damaged `{-# dialect_resources ... #-}` section (a truncated file, a broken
    hex blob) before MLIR parses it: the bindings' parser has crashed the process on the
    second such file."""
    start = _section_start(text)
    if start < 0:
        return
    first_line = text.count("\n", 0, start) + 1
    end = text.find("#-}", start)
    if end < 0:
        raise CollageError(f"{label}:{first_line}: the resource section opened here is never "
                           "closed (a truncated file?)")
    for k, line in enumerate(text[start:end].splitlines()):
        if '"0x' in line:
            m = RESOURCE_ENTRY.fullmatch(line.rstrip())
            if m is None or len(m.group(2)) % 2:
                raise CollageError(f"{label}:{first_line + k}: malformed resource blob "
                                   f"(expected name: \"0x<hex>\")")


def check_blobs_present(text: str, label: str) -> None:
    """Refuse a user's MLIR text whose `dense_resource<KEY>` names no blob of its resource
    section (a hand edit, or IR printed with its blobs elided): the constant would fail
    later in whichever backend read it first, which would be blamed."""
    start = _section_start(text)
    body, section = (text, "") if start < 0 else (text[:start], text[start:])
    keys = {unquote_key(m.group(1)) for line in section.splitlines() if '"0x' in line
            and (m := RESOURCE_ENTRY.match(line))}
    for k, line in enumerate(body.splitlines(), 1):
        if "dense_resource<" not in line or line.lstrip().startswith(("//", "#loc")):
            continue
        for m in _BLOB_REF.finditer(_LOC_TEXT.sub("", line)):  # not in a node's name
            if unquote_key(m.group(1)) not in keys:
                raise CollageError(f"{label}:{k}: dense_resource<{m.group(1)}> names no blob "
                                   "in the file's resource section (printed with its blobs "
                                   "elided?)")


_LOC_TEXT = re.compile(r'loc\("(?:[^"\\]|\\.)*"')


def _section_start(text: str) -> int:
    """Where the `{-# ... #-}` resource section opens (a line of its own, after the
    module and its `#loc` lines, whose node names may hold "{-#"), or -1."""
    if text.startswith("{-#"):
        return 0
    at = text.find("\n{-#")
    return at + 1 if at >= 0 else -1


_BLOB_REF = re.compile(r'dense_resource<("(?:[^"\\]|\\.)*"|[^>]+)>')


def parse_mlir(text: str, label: str = "<input>", context: ir.Context | None = None) -> ir.Module:
    """Parse MLIR text, turning the parser's diagnostics into a one-line CollageError."""
    check_resource_section(text, label)
    context = context or make_context()
    try:
        return ir.Module.parse(text, context)
    except ir.MLIRError as e:
        diag = e.error_diagnostics[0] if e.error_diagnostics else None
        msg = diag.message if diag else str(e)
        at = _TEXT_LOCATION.fullmatch(str(diag.location)) if diag else None
        if at:  # the parser names its text "-": give the label's line and column
            raise CollageError(f"{label}:{at.group(1)}: {msg}") from None
        where = f"{diag.location}: " if diag else ""
        raise CollageError(f"{label}: {where}{msg}") from None


_TEXT_LOCATION = re.compile(r'loc\("-":(\d+:\d+)\)')


def print_mlir(module: ir.Module, locations: bool = False) -> str:
    """`module` as MLIR text. With `locations`, ops keep theirs: the ONNX node names the
    import recorded, which placement rules and reports go by (mlir-opt's
    --mlir-print-debuginfo); without, text parsed back has no node names."""
    return module.operation.get_asm(enable_debug_info=locations)
