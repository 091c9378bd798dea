"""Cache keys: a structural hash of an extracted region, plus who measures it and where.

Two candidates share a measurement when they compute the same thing the same way: same ops,
attributes, operand structure, types, and the same values of small constants. So the region
key walks the function and writes a canonical text in which SSA values are numbered by
position (SSA names, the function name and `collage.*` attributes never matter), and each
`dense_resource` blob is replaced by what it holds:

- a blob of at most `SMALL_CONSTANT_BYTES` (shapes, axes, scalars) by a digest of its bytes,
  because those values change what the region computes and how fast;
- a bigger blob (weights) by its size only — its shape and dtype are already in the attribute's
  type. Weight values do not change a dense kernel's latency, and keying on them would make
  every residual block of a real ResNet a separate measurement instead of one. Except one
  kind: a splat (one value repeated) is marked as such, since a compiler may fold it — IREE
  turns a Gemm with splat weights into a reduction, 7x faster than the dense product.

The blobs are only visible in the printed module's `dialect_resources` section (the Python
bindings cannot read them back). The importer therefore records each blob's token on the
module (`collage.blob_tokens`), computed from the ONNX initializers, and keys read that
table; only a blob missing from it (a hand-written .mlir) makes the key print the module.

The full measurement key adds the backend's name, version and `cache_options()` and a host
fingerprint (CPU model, flags, core count): a number measured elsewhere is not reused.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.backends.base import cpu_identity, usable_cores
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import find_function
from collage_mlir.export.resources import (
    SMALL_CONSTANT_BYTES,
    blob_token,
    module_blob_tokens,
    module_resources,
    unquote_key,
)
from collage_mlir.tensors import index_bounds, sequence_lengths

KEY_VERSION = "2"  # bump when the canonical form changes, so old cache rows stop matching

_RESOURCE_REF = re.compile(r'dense_resource<("(?:[^"\\]|\\.)*"|[^>\s]+)>')
_SKIPPED_FUNC_ATTRS = frozenset({
    "sym_name", "function_type", "sym_visibility",
    onnx_view.META_PREFIX + "producer_name", onnx_view.META_PREFIX + "producer_version",
})
_CONSTANT_TYPES = frozenset({"Constant", "ConstantOfShape"})


@dataclass(frozen=True)
class RegionKey:
    """The identity of an extracted region: `digest` (hex) and a human-readable `signature`."""

    digest: str
    signature: str


def module_text(module: ir.Module) -> str:
    """The module as the worker will re-parse it (resources included, no locations)."""
    return module.operation.get_asm(assume_verified=True)


class _Tokens:
    """Blob name → token: from the import's table, else from the module's own blobs (read
    at most once, and only when a blob is missing from the table; through the weight store
    when the module has one, so no weights are printed as hex)."""

    def __init__(self, fn: ir.Operation, table: dict[str, str]) -> None:
        self.fn, self.table = fn, table
        self.blobs: Mapping[str, bytes | memoryview] | None = None

    def __call__(self, name: str) -> str:
        if name in self.table:
            return self.table[name]
        if self.blobs is None:
            parent = self.fn.parent
            self.blobs = module_resources(parent) if parent is not None else {}
        blob = self.blobs.get(name)
        return "missing" if blob is None else blob_token(blob)


def _nbytes(t: ir.Type) -> int:
    shaped = ir.ShapedType(t)
    if not shaped.has_static_shape:
        return 0
    element = shaped.element_type
    width = getattr(element, "width", 32)
    return math.prod(shaped.shape) * max(1, width) // 8


class _Canonicalizer:
    """Writes a function as position-numbered canonical lines."""

    def __init__(self, token: _Tokens) -> None:
        self.token = token
        self.names: dict[ir.Value, str] = {}
        self.lines: list[str] = []

    def attr(self, attr: ir.Attribute) -> str:
        if isinstance(attr, ir.DenseElementsAttr) and _nbytes(attr.type) > SMALL_CONSTANT_BYTES:
            splat = " splat" if attr.is_splat else ""  # size only, like blobs (see above)
            return f"dense<large{splat}> : {attr.type}"
        text = str(attr)
        if "dense_resource<" not in text:
            return text
        return _RESOURCE_REF.sub(
            lambda m: f"dense_resource<{self.token(unquote_key(m.group(1)))}>",
            text)

    def attrs(self, op: ir.Operation, skip: frozenset[str] = frozenset()) -> str:
        items = sorted((k, self.attr(a)) for k, a in op.attributes.items()
                       if k not in skip and not k.startswith("collage."))
        return "{" + ", ".join(f"{k}={v}" for k, v in items) + "}"

    def name(self, value: ir.Value) -> str:
        return self.names.get(value, "?")

    def block(self, block: ir.Block, depth: int) -> None:
        args = []
        for arg in block.arguments:
            self.names[arg] = f"%{len(self.names)}"
            args.append(f"{self.names[arg]}:{arg.type}")
        self.lines.append(f"{'  ' * depth}^({', '.join(args)})")
        for op in block.operations:
            self.op(op.operation, depth + 1)

    def op(self, op: ir.Operation, depth: int) -> None:
        operands = ", ".join(self.name(v) for v in op.operands)
        results = []
        for r in op.results:
            self.names[r] = f"%{len(self.names)}"
            results.append(f"{self.names[r]}:{r.type}")
        self.lines.append(f"{'  ' * depth}{', '.join(results)} = {op.name}({operands}) "
                          f"{self.attrs(op)}")
        for region in op.regions:
            self.lines.append(f"{'  ' * depth}region")
            for block in region.blocks:
                self.block(block, depth + 1)


def region_key(module: ir.Module, tokens: dict[str, str] | None = None) -> RegionKey:
    """Structural key of the region in `module`; `tokens` is the blob-token table of the
    model it came from (`module_blob_tokens`)."""
    return function_key(find_function(module), tokens)


def function_key(fn: ir.Operation, tokens: dict[str, str] | None = None) -> RegionKey:
    """Structural key of a `func.func`; blobs are read from `tokens`, else from the table of
    its own module, else from its printed module."""
    if tokens is None:
        tokens = module_blob_tokens(fn.parent)
    canon = _Canonicalizer(_Tokens(fn, tokens))
    canon.lines.append(f"key{KEY_VERSION} func {canon.attrs(fn, _SKIPPED_FUNC_ATTRS)}")
    for block in fn.regions[0].blocks:
        canon.block(block, 0)
    bounds = index_bounds(fn)
    if bounds:  # its inputs differ from the general rule's, and so may its numbers
        canon.lines.append(f"inputs below {sorted(bounds.items())}")
    lengths = sequence_lengths(fn)
    if lengths:
        canon.lines.append(f"sequences of {sorted(lengths.items())}")
    digest = hashlib.sha256("\n".join(canon.lines).encode()).hexdigest()
    return RegionKey(digest, signature(fn))


def _short_type(t: ir.Type) -> str:
    parsed = onnx_view.tensor_type(t)
    if parsed is None:
        return str(t)
    shape, dtype = parsed
    if shape is None:
        return f"*x{dtype}"
    return "x".join([*("?" if d < 0 else str(d) for d in shape), dtype])


def signature(fn: ir.Operation) -> str:
    """"Conv (1x3x224x224xf32, 64x3x7x7xf32) -> (1x64x112x112xf32)", for tables and listings."""
    body = fn.regions[0].blocks[0]
    real = [op.operation for op in body.operations
            if onnx_view.op_type(op.operation) not in (None, *_CONSTANT_TYPES)]
    ops = [onnx_view.op_type(op) for op in real]
    # One op: show every operand (weights too); several: the region's arguments.
    values = list(real[0].operands) if len(real) == 1 else list(body.arguments)
    ins = ", ".join(_short_type(v.type) for v in values if not onnx_view.is_none(v))
    ret = list(body.operations)[-1].operation
    outs = ", ".join(_short_type(v.type) for v in ret.operands)
    return f"{'+'.join(ops) or '(constants)'} ({ins}) -> ({outs})"


@functools.cache
def host_fingerprint() -> str:
    """CPU model, a digest of its flags, core count and machine: what timings depend on."""
    return f"{cpu_identity()}|cores:{usable_cores()}"


def measurement_key(region: RegionKey | str, backend: str, version: str, options: str,
                    host: str | None = None, method: str = "") -> str:
    """The cache key of measuring `region` on one backend build on this host; `method`
    names how it was timed (`MeasureSettings.method`): numbers taken another way differ."""
    digest = region.digest if isinstance(region, RegionKey) else region
    host = host_fingerprint() if host is None else host
    parts = [KEY_VERSION, digest, backend, version, options, host] + ([method] if method else [])
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
