"""Rewrites for IREE's CPU compile: ONNX ops its llvm-cpu path runs many times slower than
an equivalent spelling, respelled in the text handed to iree-compile only.

Each rewrite computes the same values on every input, decided from the op's attributes,
static shapes and constant operands alone:
- `convolutions_as_2d`: an ungrouped 1-D Conv as Unsqueeze → 2-D Conv (height 1) →
  Squeeze. IREE's img2col rewrite takes ungrouped 2-D convolutions only, and its direct 1-D
  ones ran 20-40x slower than onnxruntime's (wav2vec2's feature encoder); a grouped one ran
  slower as 2-D (wav2vec2's positional convolution: 56 → 84 ms), so those stay.
- `nearest_resizes_as_expands`: a nearest-neighbour Resize by whole factors (what
  `nn.Upsample(scale_factor=2)` exports) as Reshape → Expand → Reshape. IREE lowers Resize
  to a gather per element (64x112x112 → 224: 11.8 ms, onnxruntime 0.42); the broadcast is
  a copy (1.65 ms).
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.export.onnx_export import Constant

TAG = "conv1d=2d,resize=expand"
"""What `rewrite` does, for the cache key of kernels compiled with it."""


def rewrite(fn: ir.Operation, constant: Constant) -> dict[str, int]:
    """Apply every rewrite to `fn` in place; how many ops each rewrote."""
    return {"conv1d": convolutions_as_2d(fn),
            "resize": nearest_resizes_as_expands(fn, constant)}


def _shape(value: ir.Value) -> tuple[tuple[int, ...], str] | None:
    """(static shape, element type) of a value; None when a dim is unknown."""
    parsed = onnx_view.tensor_type(value.type)
    if parsed is None or parsed[0] is None or any(d < 0 for d in parsed[0]):
        return None
    return parsed  # type: ignore[return-value]


def _int64s(values: list[int]) -> ir.Value:
    """An onnx.Constant of si64 values, at the current insertion point."""
    dense = ir.Attribute.parse(f"dense<[{', '.join(map(str, values))}]> : "
                               f"tensor<{len(values)}xsi64>")
    return onnx_view.create("Constant", [], onnx_view.vtensor([len(values)], "si64"),
                            {"value": dense}).result


# -- 1-D convolutions as 2-D ones ------------------------------------------------------------

_AS_2D = {"kernel_shape": lambda v: [1, *v], "strides": lambda v: [1, *v],
          "dilations": lambda v: [1, *v], "pads": lambda v: [0, v[0], 0, v[1]]}
"""How a 1-D convolution's attributes read over a unit height."""


def convolutions_as_2d(fn: ir.Operation) -> int:
    """Rewrite each ungrouped 1-D `onnx.Conv` in `fn` as Unsqueeze → 2-D Conv (height 1) →
    Squeeze; returns how many."""
    convs = [op for op in onnx_view.ops_of(fn, "Conv") if _is_1d_ungrouped(op)]
    for op in convs:
        x, w, *bias = op.operands
        with ir.InsertionPoint(op), op.location:
            axis = onnx_view.create("Constant", [], onnx_view.vtensor([1], "si64"), {
                "value": ir.Attribute.parse("dense<2> : tensor<1xsi64>")}).result
            x2, w2 = (onnx_view.create("Unsqueeze", [v, axis], _unit_height(v.type)).result
                      for v in (x, w))
            attrs = {k: (onnx_view.int_list(_AS_2D[k](onnx_view.attribute_value(v)))
                         if k in _AS_2D else v)
                     for k, v in onnx_view.attributes(op).items()}
            y2 = onnx_view.create("Conv", [x2, w2, *bias], _unit_height(op.results[0].type),
                                  attrs)
            y = onnx_view.create("Squeeze", [y2.result, axis], op.results[0].type)
        op.results[0].replace_all_uses_with(y.result)
        op.operation.erase()
    return len(convs)


def _is_1d_ungrouped(conv: ir.Operation) -> bool:
    group = onnx_view.attributes(conv).get("group")
    parsed = onnx_view.tensor_type(conv.operands[0].type)
    return ((group is None or onnx_view.attribute_value(group) == 1)
            and parsed is not None and len(parsed[0] or ()) == 3)


def _unit_height(t: ir.Type) -> ir.Type:
    shape, element = onnx_view.tensor_type(t)
    return onnx_view.vtensor([*shape[:2], 1, *shape[2:]], element)


# -- nearest resizes by whole factors as broadcasts ------------------------------------------

_NEAREST_EXACT = {("asymmetric", "floor"),
                  *((mode, rounding) for mode in ("half_pixel", "pytorch_half_pixel")
                    for rounding in ("round_prefer_floor", "round_prefer_ceil"))}
"""(coordinate_transformation_mode, nearest_mode) pairs under which output index i reads
input index i // k for a whole factor k: asymmetric maps i to i/k (floor: i // k); the
half-pixel modes map it to i // k + (i % k + 0.5)/k - 0.5, whose fraction lies strictly
inside (-0.5, 0.5), so either rounding gives i // k."""


def nearest_resizes_as_expands(fn: ir.Operation, constant: Constant) -> int:
    """Rewrite each `onnx.Resize` in `fn` that picks nearest neighbours by whole factors as
    Reshape (a unit axis after each scaled one) → Expand (the unit axes to the factors) →
    Reshape (to the output); returns how many."""
    done = 0
    for op in onnx_view.ops_of(fn, "Resize"):
        factors = _whole_factors(op, constant)
        if factors is None:
            continue
        (shape, element), out = _shape(op.operands[0]), op.results[0]
        pairs = list(zip(shape, factors, strict=True))
        spread = [d for n, k in pairs for d in ((n, 1) if k > 1 else (n,))]
        wide = [d for n, k in pairs for d in ((n, k) if k > 1 else (n,))]
        with ir.InsertionPoint(op), op.location:
            x = onnx_view.create("Reshape", [op.operands[0], _int64s(spread)],
                                 onnx_view.vtensor(spread, element)).result
            x = onnx_view.create("Expand", [x, _int64s(wide)],
                                 onnx_view.vtensor(wide, element)).result
            y = onnx_view.create("Reshape", [x, _int64s(list(_shape(out)[0]))], out.type)
        out.replace_all_uses_with(y.result)
        op.operation.erase()
        done += 1
    return done


def _whole_factors(op: ir.Operation, constant: Constant) -> list[int] | None:
    """Each axis's whole factor when `op` is a Resize this rewrite keeps exact; else None."""
    attrs = {k: onnx_view.attribute_value(v) for k, v in onnx_view.attributes(op).items()}
    modes = (attrs.get("coordinate_transformation_mode", "half_pixel"),
             attrs.get("nearest_mode", "round_prefer_floor"))
    if (attrs.get("mode", "nearest") != "nearest" or modes not in _NEAREST_EXACT
            or attrs.get("antialias", 0) or "axes" in attrs
            or attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch"):
        return None
    x, out = _shape(op.operands[0]), _shape(op.results[0])
    if x is None or out is None or len(x[0]) != len(out[0]) or 0 in x[0]:
        return None
    if any(m % n for n, m in zip(x[0], out[0], strict=True)):
        return None
    factors = [m // n for n, m in zip(x[0], out[0], strict=True)]
    operands = list(op.operands)
    sizes = operands[3] if len(operands) > 3 and not onnx_view.is_none(operands[3]) else None
    if sizes is None:  # output = floor(input x scale) and i reads floor(i / scale): exact k
        scales = constant(operands[2]) if len(operands) > 2 else None
        if scales is None or list(np.asarray(scales, np.float64)) != [float(k) for k in factors]:
            return None
    # with sizes, the scale is output / input by definition: the shapes say it
    return factors if any(k > 1 for k in factors) else None
