"""MLIR context creation, in one place so every module and extracted region agrees."""

from __future__ import annotations

import sys
import types

from iree.compiler import ir

# The bindings look for a Python module per dialect each time an op is wrapped, and never
# remember a miss. The torch dialect has none in this wheel, so every `op.results` on a
# `torch.operator` paid a failed import (12x slower graph construction). An empty stand-in
# module makes the miss a hit.
sys.modules.setdefault("iree.compiler.dialects.torch", types.ModuleType("iree.compiler.dialects.torch"))


DIALECTS = ("builtin", "func", "torch")
"""The dialects of the ONNX-in-MLIR form, loaded when a context is made. Loading every
dialect the compiler registers instead costs ~10 ms per context, and a measuring worker
makes one per region it parses (a shared one would rename the regions' weight blobs)."""


def make_context() -> ir.Context:
    """A context that can parse the ONNX-in-MLIR form (torch dialect) and the func dialect;
    other registered dialects load when IR names them.

    Unregistered dialects are allowed so that IR from other tools (onnx-mlir) parses too.
    """
    ctx = ir.Context(load_on_create_dialects=list(DIALECTS))
    ctx.allow_unregistered_dialects = True
    return ctx
