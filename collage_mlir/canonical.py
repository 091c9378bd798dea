"""Rewrites at import that keep every value and let more backends run a model.

Exporters spell some ops in ways only some backends take. Each rewrite here replaces such a
node by standard ops that compute the same values on every input, and only where that
follows from the node's attributes and static shapes alone (so `canonicalize` runs after
`static_shapes.make_static`, which records a static type for every value). `respell` fixes
spellings with one meaning that ONNX's checker, shape inference or reference evaluator
refuse (local functions, sparse tensors, unsorted nodes ...), so it runs first and needs no
shapes.
"""

from __future__ import annotations

import heapq

import numpy as np
import onnx
from onnx import helper, numpy_helper


def respell(proto: onnx.ModelProto) -> list[str]:
    """Fix, in place, spellings with one meaning that ONNX's shape inference, its reference
    evaluator (which folds constants) or onnxruntime's loader refuse; the names of the
    nodes and initializers changed. Needs no shapes."""
    fixed = local_functions_inlined(proto) + default_domain_spelled_out(proto.graph)
    return fixed + dense_sparse_tensors(proto.graph) + negative_transpose_perms(proto.graph) \
        + sorted_nodes(proto.graph)


def local_functions_inlined(proto: onnx.ModelProto) -> list[str]:
    """Calls of the model's own functions (torch's dynamo exporter writes them) replaced by
    the functions' bodies, which the backends run (`onnx.inliner`, attribute references
    and defaults resolved)."""
    if not proto.functions:
        return []
    local = {(f.domain, f.name): f for f in proto.functions}
    called = [_label(n) for n in proto.graph.node if (n.domain, n.op_type) in local]
    for node in [*proto.graph.node, *(n for f in proto.functions for n in f.node)]:
        f = local.get((node.domain, node.op_type))
        if f is not None:  # onnx 1.23's inliner drops attribute defaults: pass them in
            given = {a.name for a in node.attribute}
            node.attribute.extend(a for a in f.attribute_proto if a.name not in given)
    from onnx import inliner

    try:  # convert_version: a function written at another opset than the model's
        inlined = inliner.inline_local_functions(proto, convert_version=True)
    except Exception:  # a malformed function: its calls stay, for the checks to name
        return []
    proto.CopyFrom(inlined)
    if not any((n.domain, n.op_type) in local for n in proto.graph.node):
        del proto.functions[:]
    return called


def default_domain_spelled_out(graph: onnx.GraphProto) -> list[str]:
    """Nodes whose domain is spelled "ai.onnx" get "", its other spelling, which ONNX's
    schema lookup knows."""
    fixed = []
    for node in graph.node:
        if node.domain == "ai.onnx":
            node.domain = ""
            fixed.append(_label(node))
    return fixed


def sorted_nodes(graph: onnx.GraphProto) -> list[str]:
    """The nodes in an order where each comes after the nodes it reads (ONNX requires it,
    onnxruntime does not), the written order kept wherever it can be; the names of the
    nodes moved. A cycle is left for the checker to name."""
    made = {o: k for k, n in enumerate(graph.node) for o in n.output if o}
    needs = [{made[i] for i in n.input if i in made} - {k} for k, n in enumerate(graph.node)]
    if all(d < k for k, ds in enumerate(needs) for d in ds):
        return []
    readers: list[list[int]] = [[] for _ in needs]
    for k, ds in enumerate(needs):
        for d in ds:
            readers[d].append(k)
    waiting = [len(ds) for ds in needs]
    ready = [k for k, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for r in readers[k]:
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(order) < len(needs):
        return []
    nodes = [graph.node[k] for k in order]
    moved = [_label(n) for pos, (k, n) in enumerate(zip(order, nodes, strict=True)) if pos != k]
    del graph.node[:]
    graph.node.extend(nodes)
    return moved


def dense_sparse_tensors(graph: onnx.GraphProto) -> list[str]:
    """Sparse initializers and Constants holding a `sparse_value` become their dense
    tensors (what every backend reads; folding could not evaluate them)."""
    fixed = []
    kept = []
    for t in graph.sparse_initializer:
        dense = _dense(t)
        if dense is None:
            kept.append(t)
        else:
            graph.initializer.append(numpy_helper.from_array(dense, t.values.name))
            fixed.append(t.values.name)
    del graph.sparse_initializer[:]
    graph.sparse_initializer.extend(kept)
    for node in graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
            continue
        sparse = next((a for a in node.attribute if a.name == "sparse_value"), None)
        dense = None if sparse is None else _dense(sparse.sparse_tensor)
        if dense is not None:
            node.attribute.remove(sparse)
            node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(dense)))
            fixed.append(_label(node))
    return fixed


def _dense(sparse: onnx.SparseTensorProto) -> np.ndarray | None:
    """The dense array of `sparse`: its values at its indices (flat, or one row of
    coordinates per value), zero elsewhere; None when its indices do not fit its values
    and shape (left for the checker to name)."""
    try:
        values = numpy_helper.to_array(sparse.values)
        out = np.zeros(tuple(sparse.dims), values.dtype)
        if values.size:
            indices = numpy_helper.to_array(sparse.indices)
            flat = indices if indices.ndim == 1 else np.ravel_multi_index(indices.T,
                                                                          out.shape)
            if flat.shape != (values.size,) or flat.min() < 0 or flat.max() >= out.size:
                return None
            out.reshape(-1)[flat] = values.reshape(-1)
    except (ValueError, IndexError, TypeError):
        return None
    return out


def _label(node: onnx.NodeProto) -> str:
    """How messages name `node`: its name, else its first output's, else its op type."""
    return node.name or next((o for o in node.output if o), node.op_type)


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
        fixed.append(_label(node))
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
