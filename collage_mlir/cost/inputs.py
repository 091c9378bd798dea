"""Inputs for measuring a region, made from its function's argument types alone.

The rule (deterministic: the generator is seeded from the types, so every backend and the
reference see the same arrays):
- floating point: standard normal;
- bool: fair coin;
- integers: uniform in 0..n-1, where n is the smallest dimension (≥ 1) of the region's other
  inputs, capped at 16 (and 16 when there is none). Integer inputs of a region are almost
  always indices (Gather, GatherElements, OneHot) or small counts; an index below every
  dimension is valid on any axis, so the kernel does real work instead of failing a bounds
  check. Regions that need other integer values (a Reshape target fed at run time) would
  fail on every backend alike, so they cost the same everywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
from iree.compiler import ir

from collage_mlir.dialects import onnx as onnx_view

INDEX_CAP = 16

DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "si8": np.dtype(np.int8), "si16": np.dtype(np.int16), "si32": np.dtype(np.int32),
    "si64": np.dtype(np.int64), "ui8": np.dtype(np.uint8), "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32), "ui64": np.dtype(np.uint64), "i1": np.dtype(np.bool_),
}


def tensor_spec(t: ir.Type) -> tuple[tuple[int, ...], np.dtype]:
    """Static shape and numpy dtype of a `!torch.vtensor` type (ValueError when not static)."""
    parsed = onnx_view.tensor_type(t)
    if parsed is None or parsed[0] is None:
        raise ValueError(f"cannot make an input for type {t}")
    shape, name = parsed
    if any(d < 0 for d in shape):
        raise ValueError(f"dynamic shape {t}: measure needs static shapes")
    if name not in DTYPES:
        raise ValueError(f"no input rule for element type {name}")
    return tuple(shape), DTYPES[name]


def make_inputs_for_specs(specs: Sequence[tuple[tuple[int, ...], np.dtype]],
                          seed: int | None = None) -> list[np.ndarray]:
    """Arrays following the module rule; seeded from the specs unless `seed` is given."""
    if seed is None:
        seed = int.from_bytes(hashlib.sha256(repr(specs).encode()).digest()[:8], "little")
    rng = np.random.default_rng(seed)
    dims = [d for shape, dt in specs if dt.kind not in "iu" for d in shape if d >= 1]
    high = min([INDEX_CAP, *dims])
    out: list[np.ndarray] = []
    for shape, dt in specs:
        if dt.kind == "f":
            out.append(rng.standard_normal(shape, dtype=np.float32).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(np.bool_))
        else:
            out.append(rng.integers(0, high, size=shape).astype(dt))
    return out


def make_inputs(fn: ir.Operation, seed: int | None = None) -> list[np.ndarray]:
    """Inputs for every argument of `fn` (a `func.func`), by the module rule."""
    args = fn.regions[0].blocks[0].arguments
    return make_inputs_for_specs([tensor_spec(a.type) for a in args], seed)
