"""A quantized model's own error: how far its int8 execution lies from its float twin.

Int8 backends round differently, and over a whole model their answers drift apart (13-17%
of the output on a random-weight MobileNetV2). Whether such an answer is right is the
user's call; this gives them the scale to judge it by. The float twin is the model with
every activation QuantizeLinear → DequantizeLinear pair removed (the DequantizeLinear's
uses read the QuantizeLinear's float input); weights keep their quantized values (their
DequantizeLinear has a constant input), so the twin differs from the model only by the
activations' rounding — the error the model accepted when it was quantized.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.iree_rewrites import ops_of
from collage_mlir.check.compare import whole_model_runner
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import public_functions
from collage_mlir.runtime.model import clone_module
from collage_mlir.tensors import model_inputs


def float_twin(module: ir.Module) -> ir.Module | None:
    """A copy of `module` without its activation quantize/dequantize pairs, or None when
    it has none (not a QDQ model: dynamically quantized ones are not)."""
    twin = clone_module(module)
    fn = public_functions(twin)[0]
    removed = 0
    for dq in ops_of(fn, "DequantizeLinear"):
        q = dq.operands[0].owner
        if isinstance(q, ir.Block) or onnx_view.op_type(q) != "QuantizeLinear":
            continue  # a weight's (constant input) or a model input's
        x = q.operands[0]
        if x.type != dq.results[0].type:  # a cast on the way (float16 in, float out)
            continue
        dq.results[0].replace_all_uses_with(x)
        dq.erase()
        removed += 1
    if not removed:
        return None
    for q in ops_of(fn, "QuantizeLinear"):
        if all(not list(r.uses) for r in q.results):
            q.erase()
    return twin


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
