"""The cache key and the SQLite cache: key stability, round-trip, concurrent writers."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnx.parser
import pytest

from collage_mlir.cost.cache import (
    INVALID,
    OK,
    Measurement,
    MeasurementCache,
    Transition,
    default_cache_path,
)
from collage_mlir.cost.key import host_fingerprint, measurement_key, region_key
from collage_mlir.dialects.func import find_function
from collage_mlir.export.resources import SMALL_CONSTANT_BYTES, parse_resources
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.importer import import_onnx, parse_mlir

# -- keys ----------------------------------------------------------------------------------

CONV = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1,3,8,8] x) => (float[1,4,{out},{out}] y)
<float[4,3,3,3] w = {w}, int64[2] shape = {{1, -1}}> {{
  y = Conv <kernel_shape = [3, 3], pads = [{pad}, {pad}, {pad}, {pad}]> (x, w)
}}
"""


def conv_key(pad: int = 1, w: str = "{" + ", ".join(["0.5"] * 108) + "}") -> str:
    out = 8 if pad == 1 else 6
    model = onnx.parser.parse_model(CONV.format(pad=pad, out=out, w=w))
    return region_key(_whole_region(import_onnx(model))).digest


def _whole_region(module):
    graph = DataflowGraph(find_function(module))
    return SubGraph(graph, graph.op_bits).extract("region")


def test_same_structure_same_key():
    assert conv_key() == conv_key()


def test_changed_attribute_changes_key():
    assert conv_key(pad=1) != conv_key(pad=0)


def test_changed_small_constant_changes_key():
    other = "{" + ", ".join(["0.25"] * 108) + "}"
    assert conv_key() != conv_key(w=other)


RELU_CHAIN = """
module {{
  func.func @{fn}(%{a}: !torch.vtensor<[{n},8],f32>) -> !torch.vtensor<[{n},8],f32>
      attributes {{torch.onnx_meta.opset_version = 17 : si64{extra}}} {{
    %{b} = torch.operator "onnx.Relu"(%{a}) : (!torch.vtensor<[{n},8],f32>) -> !torch.vtensor<[{n},8],f32>
    %{c} = torch.operator "onnx.Neg"(%{b}) {{collage.node = {node} : i64}} : (!torch.vtensor<[{n},8],f32>) -> !torch.vtensor<[{n},8],f32>
    return %{c} : !torch.vtensor<[{n},8],f32>
  }}
}}
"""


def chain_key(fn="f", a="x", b="y", c="z", n=4, extra="", node=1) -> str:
    text = RELU_CHAIN.format(fn=fn, a=a, b=b, c=c, n=n, extra=extra, node=node)
    return region_key(parse_mlir(text)).digest


def test_ssa_names_function_name_and_collage_attributes_do_not_matter():
    base = chain_key()
    assert chain_key(fn="other", a="in0", b="t", c="out") == base
    assert chain_key(node=7, extra=', collage.region = 3 : i64') == base


def test_shape_and_meta_change_key():
    assert chain_key(n=5) != chain_key()
    assert chain_key(extra=", torch.onnx_meta.ir_version = 9 : si64") != chain_key()


def test_resource_blob_values_not_names_matter():
    def text(name: str, hexdata: str) -> str:
        return textwrap.dedent(f"""
        module {{
          func.func @f() -> !torch.vtensor<[2],si64> attributes {{torch.onnx_meta.opset_version = 17 : si64}} {{
            %0 = torch.operator "onnx.Constant"() {{torch.onnx.value = dense_resource<{name}> : tensor<2xsi64>}} : () -> !torch.vtensor<[2],si64>
            return %0 : !torch.vtensor<[2],si64>
          }}
        }}
        {{-#
          dialect_resources: {{
            builtin: {{
              {name}: "0x08000000{hexdata}"
            }}
          }}
        #-}}
        """)
    one = "0100000000000000FFFFFFFFFFFFFFFF"
    two = "0200000000000000FFFFFFFFFFFFFFFF"
    a = region_key(parse_mlir(text("shape_a", one))).digest
    assert a == region_key(parse_mlir(text("shape_b", one))).digest
    assert a != region_key(parse_mlir(text("shape_a", two))).digest
    assert parse_resources(text("shape_a", one)) == {"shape_a": bytes.fromhex(one)}


def test_large_constants_keyed_by_size_not_values():
    n = SMALL_CONSTANT_BYTES // 4 + 16  # f32 elements: just above the small-constant limit
    ones = "{" + ", ".join(str(i % 7) for i in range(n)) + "}"  # not splat: a resource blob
    twos = "{" + ", ".join(str(i % 5) for i in range(n)) + "}"

    def key(values: str, count: int = n) -> str:
        model = onnx.parser.parse_model(f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[{count}] x) => (float[{count}] y) <float[{count}] b = {values}> {{
          y = Add(x, b)
        }}""")
        return region_key(_whole_region(import_onnx(model))).digest

    assert key(ones) == key(twos)
    assert key(ones) != key("{" + ", ".join(["1.0"] * (n + 1)) + "}", n + 1)
    assert key("{" + ", ".join(["1.0"] * n) + "}") == key("{" + ", ".join(["2.0"] * n) + "}")
    # a splat may be folded by a compiler: it is not keyed like dense weights of its size
    assert key("{" + ", ".join(["1.0"] * n) + "}") != key(ones)


def test_splat_blobs_are_marked():
    from collage_mlir.cost.key import blob_token

    size = 2 * SMALL_CONSTANT_BYTES
    assert blob_token(bytes.fromhex("3F800000") * (size // 4)) == f"large{size}splat"
    assert blob_token(bytes(size)) == f"large{size}splat"
    almost = bytes.fromhex("0000803F") * (size // 4 - 1) + bytes.fromhex("00000040")
    assert blob_token(almost) == f"large{size}"
    assert blob_token(bytes(i % 256 for i in range(size))) == f"large{size}"


def test_import_token_table_gives_the_keys_the_printed_blobs_give():
    """Keys read blob tokens from the import's table instead of printing the weights; both
    ways must agree, or a model would key differently as .onnx and as .mlir."""
    from collage_mlir.cost.key import module_blob_tokens

    rng = np.random.default_rng(0)
    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[1,64] x) => (float[1,64] y) {
          a = MatMul(x, w)
          b = Add(a, bias)
          y = Relu(b)
        }""")
    model.graph.initializer.extend([
        onnx.numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w"),
        onnx.numpy_helper.from_array(np.full(64, 0.5, np.float32), "bias")])
    module = import_onnx(model)
    table = module_blob_tokens(module)
    assert set(table) == {"w", "bias"} and table["w"] == f"large{64 * 64 * 4}"
    graph = DataflowGraph(find_function(module))
    for n in graph.op_nodes():
        region = SubGraph(graph, 1 << n.index).extract()  # a new module: no table of its own
        assert not module_blob_tokens(region)
        assert region_key(region, tokens=table) == region_key(region)


def test_repeated_blocks_of_resnet_share_keys():
    from conftest import light_model_path

    module = import_onnx(light_model_path("resnet50"))  # keep alive: the graph points into it
    graph = DataflowGraph(find_function(module))
    keys = {region_key(SubGraph(graph, 1 << n.index).extract()).digest
            for n in graph.op_nodes()}
    assert len(keys) < len(graph.op_nodes()) // 2  # 16 bottlenecks, 4 distinct stages


def test_measurement_key_covers_backend_version_options_host():
    base = measurement_key("r", "ort", "1.0", "threads=2", "hostA")
    assert measurement_key("r", "ort", "1.0", "threads=2", "hostA") == base
    for changed in (("r2", "ort", "1.0", "threads=2", "hostA"),
                    ("r", "ov", "1.0", "threads=2", "hostA"),
                    ("r", "ort", "1.1", "threads=2", "hostA"),
                    ("r", "ort", "1.0", "threads=1", "hostA"),
                    ("r", "ort", "1.0", "threads=2", "hostB")):
        assert measurement_key(*changed) != base
    assert "cores:" in host_fingerprint()
    # hot and cold timings of one region must not share a row
    from collage_mlir.cost.protocol import MeasureSettings

    cold, hot = MeasureSettings().method, MeasureSettings(cold_bytes=0).method
    assert cold != hot
    keys = {measurement_key("r", "ort", "1.0", "threads=2", "hostA", method=m)
            for m in (cold, hot)}
    assert len(keys) == 2 and base not in keys


# -- the cache -----------------------------------------------------------------------------


def _row(key: str, status: str = OK, median: float | None = 1e-3, backend: str = "b") -> Measurement:
    return Measurement(key=key, region="r" + key, backend=backend, version="v", options="o",
                       host="h", signature=f"Relu {key}", status=status, median=median,
                       p90=None if median is None else median * 1.1, spread=0.05, runs=10,
                       error="" if status == OK else "boom")


def test_round_trip(tmp_path):
    path = tmp_path / "c.sqlite"
    with MeasurementCache(path) as c:
        c.put(_row("a"))
        c.put(_row("b", INVALID, None))
        c.put_transition(Transition("t", "x", "y", "h", OK, 1e-5, 2e-10, [(1024, 1.2e-5)]))
    with MeasurementCache(path) as c:  # a second open sees everything
        a, b = c.get("a"), c.get("b")
        assert a == _row("a").__class__(**{**a.__dict__})
        assert (a.status, a.median, a.runs, a.signature) == (OK, 1e-3, 10, "Relu a")
        assert b.status == INVALID and math.isinf(b.cost) and b.error == "boom"
        assert c.get("missing") is None
        t = c.get_transition("t")
        assert t.points == [(1024, 1.2e-5)]
        assert t.cost(1000) == pytest.approx(1e-5 + 2e-7)
        stats = c.stats()
        assert stats["backends"]["b"] == {"ok": 1, "invalid": 1, "error": 0, "timeout": 0}
        assert stats["transitions"] == 1 and stats["bytes"] > 0
        assert c.clear() == 2
        assert c.stats()["entries"] == 0 and c.get_transition("t") is None


def test_replace_keeps_one_row_and_clear_one_backend(tmp_path):
    with MeasurementCache(tmp_path / "c.sqlite") as c:
        c.put(_row("k", median=1.0))
        c.put(_row("k", median=2.0))
        c.put(_row("other", backend="keep"))
        assert c.get("k").median == 2.0
        assert len(c.get_many(["k", "k", "other"])) == 2
        assert c.clear("b") == 1
        assert c.get("other") is not None


def test_default_path_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path / "x.sqlite"))
    assert default_cache_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("COLLAGE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "collage_mlir" / "cache.sqlite"


WRITER = """
import sys
from collage_mlir.cost.cache import MeasurementCache, Measurement
cache = MeasurementCache(sys.argv[1])
who = sys.argv[2]
for i in range(300):
    key = f"k{i % 200}" if i % 2 else f"{who}{i}"
    cache.put(Measurement(key, "r", who, "v", "o", "h", "sig", "ok", float(i), float(i), 0.0, 1))
"""


def test_two_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "c.sqlite")
    MeasurementCache(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, path, who]) for who in "AB"]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with MeasurementCache(path) as c:
        assert c.integrity_ok()
        rows = {m.key: m for m in c.measurements()}
    own = {f"{w}{i}" for w in "AB" for i in range(0, 300, 2)}
    shared = {f"k{i % 200}" for i in range(1, 300, 2)}
    assert set(rows) == own | shared
    assert all(rows[k].backend in "AB" and rows[k].status == "ok" for k in shared)


SCHEMA_1 = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE measurements (
    key TEXT PRIMARY KEY, region TEXT NOT NULL, backend TEXT NOT NULL, version TEXT NOT NULL,
    options TEXT NOT NULL, host TEXT NOT NULL, signature TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error')),
    median REAL, p90 REAL, spread REAL, runs INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '', created REAL NOT NULL);
CREATE INDEX measurements_backend ON measurements (backend, status);
CREATE TABLE transitions (
    key TEXT PRIMARY KEY, src TEXT NOT NULL, dst TEXT NOT NULL, host TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error')),
    per_call REAL, per_byte REAL, points TEXT NOT NULL DEFAULT '[]',
    error TEXT NOT NULL DEFAULT '', created REAL NOT NULL);
CREATE TABLE capabilities (key TEXT PRIMARY KEY, backend TEXT NOT NULL, bits TEXT NOT NULL,
    created REAL NOT NULL);
INSERT INTO meta VALUES ('schema', '1');
INSERT INTO measurements VALUES ('a', 'ra', 'b', 'v', 'o', 'h', 'Relu', 'ok', 0.001, 0.0011,
    0.05, 10, '', 100.0);
INSERT INTO measurements VALUES ('c', 'rc', 'b', 'v', 'o', 'h', 'Conv', 'invalid', NULL, NULL,
    NULL, 0, 'compile failed: boom', 101.0);
INSERT INTO measurements VALUES ('t', 'rt', 'iree', 'v', 'o', 'h', 'Gemm', 'invalid', NULL,
    NULL, NULL, 0, 'timed out after 60 s while measuring', 102.0);
INSERT INTO transitions VALUES ('x', 'b', 'iree', 'h', 'ok', 1e-05, 2e-10, '[[1024, 1.2e-05]]',
    '', 103.0);
"""


def test_a_schema_1_cache_is_migrated_with_every_row_kept(tmp_path):
    """Opening an old cache for writing rebuilds its tables: every row and value stays, the
    new columns take their defaults, and a v1 timeout (kept as `invalid` for good) becomes
    a retryable `timeout` with the timeout it had. Reading only never migrates."""
    import shutil
    import sqlite3

    from collage_mlir.cost.cache import SCHEMA_VERSION, TIMEOUT

    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.executescript(SCHEMA_1)
    old = {r[0]: r for r in sqlite3.connect(path).execute("SELECT * FROM measurements")}
    shutil.copy(path, tmp_path / "copy.sqlite")
    with MeasurementCache(tmp_path / "copy.sqlite", readonly=True) as c:  # as it was
        assert c.get("t").status == INVALID and c.get("a").load is None
    with MeasurementCache(path) as c:
        assert c.integrity_ok()
        rows = {m.key: m for m in c.measurements()}
        assert set(rows) == set(old)
        for key in ("a", "c"):
            assert tuple(rows[key].__dict__.values())[:14] == old[key]
            assert (rows[key].timeout_s, rows[key].attempts, rows[key].load,
                    rows[key].stale) == (None, 0, None, False)
        t = rows["t"]
        assert (t.status, t.timeout_s, t.attempts) == (TIMEOUT, 60.0, 1)
        assert tuple(t.__dict__.values())[:14] == old["t"][:7] + (TIMEOUT,) + old["t"][8:]
        assert c.get_transition("x").points == [(1024, 1.2e-5)]
        c.put(_row("new"))  # the new columns are writable
        assert c.get("new").status == OK
    with MeasurementCache(path) as c:  # a second open does not migrate again
        assert len(c.measurements()) == 4
    schema = sqlite3.connect(path).execute("SELECT value FROM meta WHERE name = 'schema'")
    assert schema.fetchone()[0] == str(SCHEMA_VERSION) == "2"


def test_a_damaged_text_value_is_read_not_an_internal_error(tmp_path):
    """A flipped bit that leaves a TEXT value invalid UTF-8 (the robustness suite's
    bit-flipped caches) reads as U+FFFD; an unreadable value is one CollageError."""
    import sqlite3

    from collage_mlir.errors import CollageError

    path = tmp_path / "c.sqlite"
    with MeasurementCache(path) as c:
        c.put(_row("a"))
        c.put_transition(Transition("t", "x", "y", "h", OK, 1e-5, 2e-10, [(1024, 1.2e-5)]))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE measurements SET signature = CAST(X'52656c75ff' AS TEXT)")
        conn.execute("UPDATE transitions SET points = '[[1024, '")
    with MeasurementCache(path, readonly=True) as c:
        assert c.get("a").signature == "Relu\ufffd"
        with pytest.raises(CollageError, match="damaged measurement cache"):
            c.transitions()
