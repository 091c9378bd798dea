"""Rewrites at import that keep every value and let more backends run a model.

Exporters spell some ops in ways only some backends take. Each rewrite here replaces such a
node by standard ops that compute the same values on every input, and only where that
follows from the node's attributes and static shapes alone (so `canonicalize` runs after
`static_shapes.make_static`, which records a static type for every value). `respell` fixes
spellings that shape inference itself refuses, so it runs first and needs no shapes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def respell(proto: onnx.ModelProto) -> list[str]:
    """Fix, in place, spellings with one meaning that ONNX's shape inference (and
    onnxruntime's loader) refuse; the names of the nodes changed. Needs no shapes."""
    return negative_transpose_perms(proto.graph)


def negative_transpose_perms(graph: onnx.GraphProto) -> list[str]:
    """A Transpose whose `perm` counts axes from the end (`x.permute(0, -2, -1, 1)`, which
    torch's TorchScript exporter writes as given: transformers' Mamba2 since 5.x) gets them
    counted from the start. The perm lists every axis once, so its length is the rank and
    each negative entry has one meaning. Graphs inside control-flow nodes are fixed too."""
    fixed = []
    for node in graph.node:
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                fixed += negative_transpose_perms(sub)
        if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
            continue
        perm = next((a for a in node.attribute if a.name == "perm"), None)
        if perm is None or all(p >= 0 for p in perm.ints):
            continue
        rank = len(perm.ints)
        perm.ints[:] = [p + rank if p < 0 else p for p in perm.ints]
        fixed.append(node.name or node.output[0])
    return fixed


def canonicalize(proto: onnx.ModelProto) -> list[str]:
    """Apply every rewrite to `proto` in place; the names of the nodes rewritten."""
    return whole_window_average_pools(proto)


def whole_window_average_pools(proto: onnx.ModelProto) -> list[str]:
    """An AveragePool whose one window covers its whole input becomes a ReduceMean over the
    spatial axes. transformers' EfficientNet pools this way (a 1280x1280 window, ceil mode,
    over a 7x7 map): OpenVINO cannot compile that pool, and IREE computes it wrong, slowly.

    Only without padding and dilation: then no padded element is inside the window, and the
    part of the window beyond the input counts for nothing in onnxruntime's (and torch's)
    average, so it divides by the input's size, as the mean does."""
    graph = proto.graph
    shapes = _static_shapes(graph)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    rewritten = []
    for k, node in enumerate(graph.node):
        if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx"):
            continue
        shape_in, shape_out = shapes.get(node.input[0]), shapes.get(node.output[0])
        if shape_in is None or shape_out is None or not _covers_whole_input(node, shape_in,
                                                                             shape_out):
            continue
        axes = list(range(2, len(shape_in)))
        name = node.name or node.output[0]
        if opset >= 18:  # axes became an input
            axes_name = f"{name}__mean_axes"
            graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64),
                                                             axes_name))
            mean = helper.make_node("ReduceMean", [node.input[0], axes_name],
                                    list(node.output), name=node.name, keepdims=1)
        else:
            mean = helper.make_node("ReduceMean", [node.input[0]], list(node.output),
                                    name=node.name, axes=axes, keepdims=1)
        graph.node.remove(node)
        graph.node.insert(k, mean)
        rewritten.append(name)
    return rewritten


def _covers_whole_input(node: onnx.NodeProto, shape_in: list[int],
                        shape_out: list[int]) -> bool:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    spatial = shape_in[2:]
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    kernel = list(attrs.get("kernel_shape", []))
    return (len(shape_in) >= 3 and auto_pad in (b"NOTSET", b"VALID")
            and not any(attrs.get("pads", []))
            and all(d == 1 for d in attrs.get("dilations", []))
            and len(kernel) == len(spatial)
            and all(k >= n for k, n in zip(kernel, spatial, strict=True))
            and shape_out == [*shape_in[:2], *[1] * len(spatial)])


def _static_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Static shapes by value name, from the types the graph records."""
    shapes = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        t = value.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[value.name] = [d.dim_value for d in t.shape.dim]
    return shapes
