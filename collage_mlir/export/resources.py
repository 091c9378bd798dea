"""Reading `dense_resource` blobs back out of a module, and keeping large ones out of its text.

The MLIR Python bindings can create `dense_resource` attributes but cannot read their bytes.
The printed module carries them in its `{-# dialect_resources: { builtin: {...} } #-}`
section as hex strings whose first 4 bytes are the blob's alignment, so we print once, parse
that section, and cache the table per module (printing a large model is the costly part).

A region sent to a measuring worker as text would carry its weights as hex (twice their size),
and each process would parse and keep its own copy. A `WeightStore` holds a module's large blobs
once, in a file every process maps read-only (the OS shares the pages, and reads only what a
region uses). `portable_text` prints a region with those blobs elided and the store's path in
`collage.weights`; `module_resources` of such a module reads the elided blobs from the store,
and `materialize` puts them back into the IR for a consumer that needs whole text (IREE).
"""

from __future__ import annotations

import functools
import hashlib
import json
import mmap
import re
import tempfile
import uuid
from collections import ChainMap, OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from iree.compiler import ir

from collage_mlir.dialects.collage import BLOB_TOKENS, WEIGHTS
from collage_mlir.dialects.onnx import NUMPY_DTYPES
from collage_mlir.scratch import ScratchDir

_SECTION_HEAD = re.compile(r"\{-#\s*dialect_resources:\s*\{\s*builtin:\s*\{")
_ENTRY_KEY = r'\s*("(?:[^"\\]|\\.)*"|[\w.$-]+)\s*:\s*"0x'
RESOURCE_ENTRY = re.compile(_ENTRY_KEY + r'([0-9A-Fa-f]*)"\s*,?')
_ENTRY_HEAD = re.compile(_ENTRY_KEY)
_ENTRY_TAIL = re.compile(r'"\s*,?')
_HANDLE = re.compile(r'dense_resource<("(?:[^"\\]|\\.)*"|[^>]+)>\s*:\s*tensor<([^>]*)>')
_CACHE_SIZE = 2  # each table holds a module's weights: a few regions of one model at a time
_cache: OrderedDict[int, tuple[ir.Module, dict[str, bytes]]] = OrderedDict()


def unquote_key(key: str) -> str:
    return key[1:-1].encode().decode("unicode_escape") if key.startswith('"') else key


def parse_resources(text: str) -> dict[str, bytes]:
    """Blob key → raw bytes (alignment prefix removed) from printed module text.

    The section is the printer's last `{-#` block; its entries are read one after another,
    each hex string found with `str.find` (a regular expression stepping over a model's
    200 MB of hex took seconds)."""
    start = text.rfind("{-#")
    head = _SECTION_HEAD.match(text, start) if start >= 0 else None
    out: dict[str, bytes] = {}
    pos = head.end() if head else len(text)
    while entry := _ENTRY_HEAD.match(text, pos):
        end = text.find('"', entry.end())
        if end < 0:
            break
        out[unquote_key(entry.group(1))] = bytes.fromhex(text[entry.end():end])[4:]
        pos = _ENTRY_TAIL.match(text, end).end()
    return out


SMALL_CONSTANT_BYTES = 4096
"""Blobs up to this size are keyed by content (shapes, axes, small tables change what a
region computes); larger ones by size and splat-ness only (weights do not change its cost)."""


def blob_token(data: bytes) -> str:
    """What stands for a resource blob in the canonical text (see the module docstring)."""
    if len(data) <= SMALL_CONSTANT_BYTES:
        return "v" + hashlib.sha256(data).hexdigest()[:32]
    return f"large{len(data)}" + ("splat" if _is_splat(data) else "")


def _is_splat(data: bytes) -> bool:
    """True when the blob repeats one element of 1, 2, 4 or 8 bytes (equal to itself shifted
    by one element). The head is checked first: weights fail fast."""
    head = data[:2048]
    return any(len(data) % w == 0 and head[w:] == head[:-w] and data[w:] == data[:-w]
               for w in (1, 2, 4, 8))


def module_blob_tokens(module: ir.Module | ir.Operation | None) -> dict[str, str]:
    """The import's blob-token table of a module ({} when it has none)."""
    if module is None:
        return {}
    op = module.operation if isinstance(module, ir.Module) else module
    if BLOB_TOKENS not in op.attributes:
        return {}
    table = ir.DictAttr(op.attributes[BLOB_TOKENS])
    return {table[k].name: ir.StringAttr(table[k].attr).value for k in range(len(table))}


def module_resources(module: ir.Module | ir.Operation) -> Mapping[str, bytes | memoryview]:
    """The blob table of `module`, printed and parsed once per module (small LRU cache);
    blobs the text leaves out come from the module's weight store, if it has one."""
    key = id(module)
    hit = _cache.get(key)
    if hit is not None and hit[0] is module:
        _cache.move_to_end(key)
        return hit[1]
    store = store_of(module)
    if store is None:
        table: Mapping[str, bytes | memoryview] = parse_resources(str(module))
    else:
        table = ChainMap(parse_resources(_elided_text(module)), store.blobs())
    _cache[key] = (module, table)  # holding the module keeps id(module) from being reused
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return table


def _resource_ref(attr: ir.Attribute) -> tuple[str, tuple[int, ...], str] | None:
    """(blob key, shape, element type) of a `dense_resource` attribute; None otherwise."""
    m = _HANDLE.fullmatch(str(attr).strip())
    if not m:
        return None
    *dims, elem = m.group(2).split("x") if m.group(2) else [""]
    return unquote_key(m.group(1)), tuple(int(d) for d in dims if d), elem


def resource_array(attr: ir.Attribute, table: Mapping[str, bytes | memoryview]) -> np.ndarray:
    """The numpy value of a `dense_resource` attribute, shaped and typed from its tensor type."""
    ref = _resource_ref(attr)
    if ref is None:
        raise ValueError(f"not a dense_resource attribute: {attr}")
    key, shape, elem = ref
    if key not in table:
        raise KeyError(f"resource blob '{key}' is not in the module (elided or missing)")
    if elem not in NUMPY_DTYPES:
        raise ValueError(f"unsupported element type '{elem}' in {attr}")
    dtype = NUMPY_DTYPES[elem]
    data = np.frombuffer(table[key], dtype=dtype)
    if data.size != int(np.prod(shape, dtype=np.int64)) and data.size == 1:
        data = np.broadcast_to(data, shape)  # a splat blob
    return np.array(data.reshape(shape))


# -- the weight store ----------------------------------------------------------------------

STORE_MIN_BYTES = 4096
"""Blobs larger than this live in the store; smaller ones (shapes, axes, scalars) stay in the
text, where cache keys and rules read them."""
_ELIDE_CHARS = 2 * (STORE_MIN_BYTES + 4) + 2  # the printer's limit counts a blob's hex digits
_DATA, _INDEX = "weights.bin", "weights.json"
_ALIGN = 64
"""Alignment of the blobs given back to MLIR (`materialize`)."""
_PAGE = mmap.ALLOCATIONGRANULARITY
"""Blob offset alignment in `weights.bin`: onnxruntime and OpenVINO map page-aligned
external data instead of reading it."""


class WeightStore:
    """The large blobs of one module: `<dir>/weights.bin`, indexed by `<dir>/weights.json`
    (blob name → [offset, nbytes]), read through one shared read-only map."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        index = json.loads((self.path / _INDEX).read_text())
        self.index: dict[str, tuple[int, int]] = {k: (int(o), int(n)) for k, (o, n) in index.items()}
        self._map: mmap.mmap | None = None

    @classmethod
    def write(cls, module: ir.Module | ir.Operation, directory: str | Path) -> WeightStore:
        """Copy `module`'s large blobs into a new store in `directory`. The module is printed
        to a scratch file and read a line (one blob) at a time, never whole in memory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        index: dict[str, tuple[int, int]] = {}
        with tempfile.TemporaryFile("w+", dir=directory) as text, \
                open(directory / _DATA, "wb") as data:
            module.operation.print(file=text, assume_verified=True)
            text.seek(0)
            in_resources = False
            for line in text:
                in_resources = in_resources or line.startswith("{-#")
                m = RESOURCE_ENTRY.match(line) if in_resources else None
                if m is None or len(m.group(2)) <= 2 * (STORE_MIN_BYTES + 4) - 128:
                    continue  # margin below the limit: whatever the printer elides is stored
                blob = bytes.fromhex(m.group(2))[4:]
                data.seek(-data.tell() % _PAGE, 1)
                index[unquote_key(m.group(1))] = (data.tell(), len(blob))
                data.write(blob)
        (directory / _INDEX).write_text(json.dumps(index))
        return cls(directory)

    def blob(self, name: str) -> memoryview:
        offset, nbytes = self.index[name]
        if self._map is None:
            with open(self.path / _DATA, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return memoryview(self._map)[offset:offset + nbytes]

    def blobs(self) -> Mapping[str, memoryview]:
        """Every blob by name, each mapped only when read."""
        return _LazyBlobs(self)


class _LazyBlobs(Mapping[str, memoryview]):
    def __init__(self, store: WeightStore) -> None:
        self.store = store

    def __getitem__(self, name: str) -> memoryview:
        return self.store.blob(name)

    def __iter__(self):
        return iter(self.store.index)

    def __len__(self) -> int:
        return len(self.store.index)


@contextmanager
def weight_store(module: ir.Module) -> Iterator[WeightStore | None]:
    """Write `module`'s large blobs to a store in a scratch directory and name it in the
    module's `collage.weights` for the duration: meanwhile every export of the module or of
    a region extracted from it can refer to the weights in that file (`external_tensor`)
    instead of copying them. Afterwards the attribute is gone (the module prints
    self-contained again) and so is the directory; kernels that mapped the file keep their
    pages. Yields None, and changes nothing, when the module has no such blob or the store
    cannot be written."""
    if store_of(module) is not None:
        yield store_of(module)
        return
    scratch = ScratchDir("weights")
    directory = Path(scratch.name)
    try:
        store = _write_store(module, directory)
        if store is not None:
            module.operation.attributes[WEIGHTS] = ir.StringAttr.get(str(directory),
                                                                     module.context)
            _cache.pop(id(module), None)
        yield store
    finally:
        forget_store(module)
        scratch.cleanup()
        _cache.clear()  # copies of the model made meanwhile may have tables reading the store
        open_store.cache_clear()  # and its file's pages, mapped


def _write_store(module: ir.Module, directory: Path) -> WeightStore | None:
    """The store of `module`'s large blobs in `directory` (the one `store_of` opens), or
    None when there is no such blob or it cannot be written."""
    try:
        store = open_store(str(WeightStore.write(module, directory).path))
    except OSError:
        return None
    return store if store.index else None


def external_tensor(name: str, attr: ir.Attribute, store: WeightStore) -> onnx.TensorProto | None:
    """An ONNX initializer `name` whose data stays in `store`'s file (ONNX external data,
    located relative to the store's directory), when `attr` is a `dense_resource` blob the
    store holds; None otherwise."""
    ref = _resource_ref(attr) if _is_resource(attr) else None
    if ref is None or ref[0] not in store.index or ref[2] not in NUMPY_DTYPES:
        return None
    key, shape, elem = ref
    offset, nbytes = store.index[key]
    tensor = onnx.TensorProto(name=name, dims=shape,
                              data_type=onnx.helper.np_dtype_to_tensor_dtype(NUMPY_DTYPES[elem]),
                              data_location=onnx.TensorProto.EXTERNAL)
    for field, value in (("location", _DATA), ("offset", offset), ("length", nbytes)):
        tensor.external_data.add(key=field, value=str(value))
    return tensor


@contextmanager
def model_source(proto: onnx.ModelProto, store: WeightStore | None) -> Iterator[bytes | str]:
    """What a backend loads `proto` from: its bytes, or — when it refers to `store`'s file
    for its weights — the path of a copy written next to that file (external data is found
    relative to the model's own path), removed afterwards."""
    if store is None or not any(t.data_location == onnx.TensorProto.EXTERNAL
                                for t in proto.graph.initializer):
        yield proto.SerializeToString()
        return
    path = store.path / f"region-{uuid.uuid4().hex}.onnx"
    try:
        path.write_bytes(proto.SerializeToString())
        yield str(path)
    finally:
        path.unlink(missing_ok=True)


@functools.lru_cache(maxsize=4)
def open_store(path: str) -> WeightStore:
    return WeightStore(path)


def store_of(module: ir.Module | ir.Operation) -> WeightStore | None:
    """The weight store named by the module's `collage.weights`, if any."""
    attrs = module.operation.attributes
    if WEIGHTS not in attrs:
        return None
    return open_store(ir.StringAttr(attrs[WEIGHTS]).value)


def forget_store(module: ir.Module) -> None:
    """Drop `module`'s `collage.weights`: it prints self-contained again."""
    attrs = module.operation.attributes
    if WEIGHTS in attrs:
        del attrs[WEIGHTS]
        _cache.pop(id(module), None)


def share_store(source: ir.Module | ir.Operation, target: ir.Module) -> None:
    """Let `target` (a module made from part of `source`) read `source`'s weight store."""
    attrs = source.operation.attributes
    if WEIGHTS in attrs:
        target.operation.attributes[WEIGHTS] = attrs[WEIGHTS]


def _elided_text(module: ir.Module | ir.Operation) -> str:
    return module.operation.get_asm(large_resource_limit=_ELIDE_CHARS, assume_verified=True)


def portable_text(module: ir.Module, store: WeightStore) -> str:
    """`module` printed without the blobs `store` holds, naming the store instead: what a
    worker parses. Sets `collage.weights` on `module`."""
    module.operation.attributes[WEIGHTS] = ir.StringAttr.get(str(store.path), module.context)
    return _elided_text(module)


def materialize(module: ir.Module) -> None:
    """Give every blob that `module`'s text leaves out back to its IR, mapped from the store
    (no copy), and drop `collage.weights`: afterwards `str(module)` is whole."""
    store = store_of(module)
    if store is None:
        return

    def visit(op: ir.Operation) -> ir.WalkResult:
        attrs = op.attributes
        for name, attr in [(attrs[i].name, attrs[i].attr) for i in range(len(attrs))]:
            m = _HANDLE.fullmatch(str(attr).strip()) if _is_resource(attr) else None
            if m and unquote_key(m.group(1)) in store.index:
                array = np.frombuffer(store.blob(unquote_key(m.group(1))), np.uint8)
                attrs[name] = ir.DenseResourceElementsAttr.get_from_buffer(
                    array, unquote_key(m.group(1)), attr.type, alignment=_ALIGN,
                    context=module.context)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    del module.operation.attributes[WEIGHTS]
    _cache.pop(id(module), None)


def _is_resource(attr: ir.Attribute) -> bool:
    try:
        ir.DenseResourceElementsAttr(attr)
    except ValueError:
        return False
    return True
