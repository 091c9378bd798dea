"""Old ops whose meaning onnx's version converter changes, kept as they were written.

`importer.upgrade_opset` runs onnx's version converter, which for these ops changes the
version and not what it computes (onnx 1.23; measured against onnxruntime running the
original model):

- Hardmax before opset 13 works on its input flattened to 2-D at `axis`; from 13 on it works
  along `axis` alone. It is rewritten first as Flatten → Hardmax(axis=1) → Reshape, which
  means the same at either version.
- Resize before opset 11, and Upsample (which the converter turns into it), use asymmetric
  coordinates, and for nearest they truncate (scaling up) or round up (scaling down); the
  converted Resize takes half_pixel coordinates and rounds to the nearest. The converted
  node is told what the old one did.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from collage_mlir.errors import CollageError

OLD_RESIZES = {"Resize": 11, "Upsample": 10}
"""Op → the first opset whose form the converter keeps meaning the same."""
FLAT_HARDMAX = 13


def default_opset(proto: onnx.ModelProto) -> int:
    """The model's opset of the default (ai.onnx) domain."""
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
               default=0)


def before_upgrade(proto: onnx.ModelProto, label: str) -> dict[str, str]:
    """Rewrite the ops the converter would change and cannot be told about (Hardmax), in
    place; returns the old resizes to fix after it: output name → node name."""
    opset = default_opset(proto)
    if opset < FLAT_HARDMAX:
        _flatten_hardmaxes(proto, opset, label)
    return {n.output[0]: n.name or n.output[0] for n in proto.graph.node
            if n.domain in ("", "ai.onnx") and opset < OLD_RESIZES.get(n.op_type, 0)}


def after_upgrade(proto: onnx.ModelProto, resizes: dict[str, str], label: str) -> None:
    """Give each converted Resize that `before_upgrade` listed the coordinates and rounding
    of the op it was, and its name back."""
    if not resizes:
        return
    constants = _constants(proto)
    for node in proto.graph.node:
        if node.op_type != "Resize" or not node.output or node.output[0] not in resizes:
            continue
        node.name = resizes[node.output[0]]
        mode = _string_attr(node, "mode", "nearest")
        _set(node, "coordinate_transformation_mode", "asymmetric")
        if mode == "nearest":
            _set(node, "nearest_mode", _old_nearest(node, constants, label))


def _old_nearest(node: onnx.NodeProto, constants: dict[str, np.ndarray], label: str) -> str:
    """The rounding that matches the old nearest: truncation up, ceil down; the scales
    must be constants that do not scale one axis up and another down."""
    scales = constants.get(node.input[2]) if len(node.input) > 2 else None
    if scales is None:
        raise CollageError(f"{label}: node '{node.name}' (opset-10 nearest Resize or Upsample) "
                           "takes computed scales, whose rounding the current Resize cannot "
                           "be told; export the model at opset 11 or later")
    up, down = bool(np.any(scales > 1)), bool(np.any(scales < 1))
    if up and down:
        raise CollageError(f"{label}: node '{node.name}' (opset-10 nearest Resize or Upsample) "
                           "scales one axis up and another down, which rounds in a way the "
                           "current Resize cannot express; export the model at opset 11 or "
                           "later")
    return "ceil" if down else "floor"


def _flatten_hardmaxes(proto: onnx.ModelProto, opset: int, label: str) -> None:
    """Each Hardmax as Flatten(axis) → Hardmax(axis=1) → Reshape to the input's shape (a
    Reshape that takes its shape as an input: opset 5 on)."""
    graph = proto.graph
    taken = _value_names(proto)
    names = {n.name for n in graph.node if n.name}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type != "Hardmax" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        name = node.name or _fresh(node.output[0], names)
        if opset < 5:
            raise CollageError(f"{label}: node '{name}' (Hardmax, opset {opset}) would "
                               "change its meaning when upgraded; export the model at "
                               "opset 5 or later")
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        flat, hard, shape = (_fresh(f"{node.output[0]}_{s}", taken)
                             for s in ("flat", "hardmax", "shape"))
        nodes += [helper.make_node("Flatten", [node.input[0]], [flat], axis=axis,
                                   name=_fresh(f"{name}/flatten", names)),
                  helper.make_node("Hardmax", [flat], [hard], axis=1, name=name),
                  helper.make_node("Shape", [node.input[0]], [shape],
                                   name=_fresh(f"{name}/shape", names)),
                  helper.make_node("Reshape", [hard, shape], [node.output[0]],
                                   name=_fresh(f"{name}/reshape", names))]
    del graph.node[:]
    graph.node.extend(nodes)


def _constants(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    graph = proto.graph
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _value_names(proto: onnx.ModelProto) -> set[str]:
    graph = proto.graph
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    names |= {t.name for t in graph.initializer}
    return names | {o for n in graph.node for o in (*n.input, *n.output)}


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _string_attr(node: onnx.NodeProto, name: str, default: str) -> str:
    return next((a.s.decode() for a in node.attribute if a.name == name), default)


def _set(node: onnx.NodeProto, name: str, value: str) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)])
