"""Reading `dense_resource` blobs back out of a module.

The MLIR Python bindings can create `dense_resource` attributes but cannot read their bytes.
The printed module carries them in its `{-# dialect_resources: { builtin: {...} } #-}`
section as hex strings whose first 4 bytes are the blob's alignment, so we print once, parse
that section, and cache the table per module (printing a large model is the costly part).
"""

from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np
from iree.compiler import ir

ELEMENT_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "si8": np.dtype(np.int8), "si16": np.dtype(np.int16), "si32": np.dtype(np.int32),
    "si64": np.dtype(np.int64), "ui8": np.dtype(np.uint8), "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32), "ui64": np.dtype(np.uint64), "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8), "i16": np.dtype(np.int16), "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
}
"""MLIR element type spelling → numpy dtype (signless ints read as signed)."""

_SECTION = re.compile(r"\{-#\s*dialect_resources:\s*\{\s*builtin:\s*\{(.*?)\}\s*\}\s*#-\}", re.S)
_ENTRY = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[\w.$-]+)\s*:\s*"0x([0-9A-Fa-f]*)"\s*,?')
_HANDLE = re.compile(r'dense_resource<("(?:[^"\\]|\\.)*"|[^>]+)>\s*:\s*tensor<([^>]*)>')
_CACHE_SIZE = 2  # each table holds a module's weights: a few regions of one model at a time
_cache: OrderedDict[int, tuple[ir.Module, dict[str, bytes]]] = OrderedDict()


def _unquote(key: str) -> str:
    return key[1:-1].encode().decode("unicode_escape") if key.startswith('"') else key


def parse_resources(text: str) -> dict[str, bytes]:
    """Blob key → raw bytes (alignment prefix removed) from printed module text."""
    m = _SECTION.search(text)
    if not m:
        return {}
    out: dict[str, bytes] = {}
    for entry in _ENTRY.finditer(m.group(1)):
        raw = bytes.fromhex(entry.group(2))
        out[_unquote(entry.group(1))] = raw[4:]
    return out


def module_resources(module: ir.Module | ir.Operation) -> dict[str, bytes]:
    """The blob table of `module`, printed and parsed once per module (small LRU cache)."""
    key = id(module)
    hit = _cache.get(key)
    if hit is not None and hit[0] is module:
        _cache.move_to_end(key)
        return hit[1]
    table = parse_resources(str(module))
    _cache[key] = (module, table)  # holding the module keeps id(module) from being reused
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return table


def resource_key(attr: ir.Attribute) -> str | None:
    """The blob key of a `dense_resource<key> : tensor<...>` attribute, else None."""
    m = _HANDLE.fullmatch(str(attr).strip())
    return _unquote(m.group(1)) if m else None


def resource_array(attr: ir.Attribute, table: dict[str, bytes]) -> np.ndarray:
    """The numpy value of a `dense_resource` attribute, shaped and typed from its tensor type."""
    m = _HANDLE.fullmatch(str(attr).strip())
    if not m:
        raise ValueError(f"not a dense_resource attribute: {attr}")
    key = _unquote(m.group(1))
    if key not in table:
        raise KeyError(f"resource blob '{key}' is not in the module (elided or missing)")
    *dims, elem = m.group(2).split("x") if m.group(2) else [""]
    if elem not in ELEMENT_DTYPES:
        raise ValueError(f"unsupported element type '{elem}' in {attr}")
    shape = tuple(int(d) for d in dims if d)
    dtype = ELEMENT_DTYPES[elem]
    data = np.frombuffer(table[key], dtype=dtype)
    if data.size != int(np.prod(shape, dtype=np.int64)) and data.size == 1:
        data = np.broadcast_to(data, shape)  # a splat blob
    return np.array(data.reshape(shape))
