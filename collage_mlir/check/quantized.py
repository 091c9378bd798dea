"""A quantized model's own error: how far its int8 execution lies from its float twin.

Int8 backends round differently, and over a whole model their answers drift apart (13-17%
of the output on a random-weight MobileNetV2). Whether such an answer is right is the
user's call; this gives them the scale to judge it by. The float twin is the model with
every activation QuantizeLinear → DequantizeLinear pair replaced by a Clip to the range the
pair represents: no rounding, but the same saturation — quantizers drop a Relu or Relu6
whose clipping the pair's range already does, so without the Clip the twin would compute
another model. Weights keep their quantized values (their DequantizeLinear has a constant
input), so the twin differs from the model by the activations' rounding and how the int8
kernels compute — the error the model accepted when it was quantized. A pair with
per-channel activation scales stays as it is.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from collage_mlir.check.compare import whole_model_runner
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import public_functions
from collage_mlir.export.onnx_export import Constant, constant_reader
from collage_mlir.export.resources import module_resources
from collage_mlir.runtime.model import clone_module
from collage_mlir.tensors import model_inputs


def float_twin(module: ir.Module) -> ir.Module | None:
    """A copy of `module` with its activation quantize/dequantize pairs as Clips, or None
    when it has none (not a QDQ model: dynamically quantized ones are not)."""
    twin = clone_module(module)
    fn = public_functions(twin)[0]
    constant = constant_reader(lambda: module_resources(module))
    removed = 0
    for dq in onnx_view.ops_of(fn, "DequantizeLinear"):
        q = dq.operands[0].owner
        if isinstance(q, ir.Block) or onnx_view.op_type(q) != "QuantizeLinear":
            continue  # a weight's (constant input) or a model input's
        bounds = _represented(q, constant)
        x = q.operands[0]
        if bounds is None or x.type != dq.results[0].type:
            continue
        with ir.InsertionPoint(dq), dq.location:
            lo, hi = (_scalar(v, x.type) for v in bounds)
            clip = onnx_view.create("Clip", [x, lo, hi], x.type)
        dq.results[0].replace_all_uses_with(clip.result)
        dq.erase()
        removed += 1
    if not removed:
        return None
    for q in onnx_view.ops_of(fn, "QuantizeLinear"):
        if all(not list(r.uses) for r in q.results):
            q.erase()
    return twin


def _represented(q: ir.Operation, constant: Constant) -> tuple[float, float] | None:
    """The float range a per-tensor QuantizeLinear's outputs stand for; None when its scale
    or zero point is not one constant value."""
    scale = constant(q.operands[1])
    zero = (constant(q.operands[2])
            if len(q.operands) > 2 and not onnx_view.is_none(q.operands[2]) else np.zeros(1))
    parsed = onnx_view.tensor_type(q.results[0].type)
    dtype = onnx_view.NUMPY_DTYPES.get(parsed[1]) if parsed else None
    if scale is None or zero is None or scale.size != 1 or zero.size != 1 or dtype is None \
            or dtype.kind not in "iu":
        return None
    info, s, z = np.iinfo(dtype), float(scale.ravel()[0]), float(zero.ravel()[0])
    return (info.min - z) * s, (info.max - z) * s


def _scalar(value: float, like: ir.Type) -> ir.Value:
    """A 0-d onnx.Constant of `like`'s element type holding `value`, at the insertion point."""
    element = onnx_view.tensor_type(like)[1]
    literal = f"{float(np.dtype(onnx_view.NUMPY_DTYPES[element]).type(value))!r}"
    attr = ir.Attribute.parse(f"dense<{literal}> : tensor<{element}>")
    return onnx_view.create("Constant", [], onnx_view.vtensor([], element),
                            {"value": attr}).result


def quantization_error(module: ir.Module, reference: str = "onnxruntime") -> float | None:
    """max |model − float twin| / max |float twin| over the float outputs, both whole on
    `reference`, on the input rule's inputs; None for a model that is not QDQ."""
    twin = float_twin(module)
    if twin is None:
        return None
    inputs = model_inputs(module)
    quantized = whole_model_runner(module, reference)(inputs)
    plain = whole_model_runner(twin, reference)(inputs)
    errors = [float(np.max(np.abs(a.astype(np.float64) - b)) / max(float(np.max(np.abs(b))),
                                                                   1e-30))
              for a, b in zip(quantized, plain, strict=True) if b.dtype.kind == "f" and b.size]
    return max(errors, default=None)
