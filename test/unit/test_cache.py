"""The cache key and the cache's contract, on both stores (an SQLite file and a real
PostgreSQL server, `pg_server.py`; the PostgreSQL cases skip with the reason where no server
can be had): round-trip, upserts, claims, stale marks, clear, stats, concurrent writers,
export / import."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import onnx
import onnx.parser
import pytest
from pg_server import pg_server

from collage_mlir.cost.cache import (
    INVALID,
    OK,
    Claimant,
    Measurement,
    MeasurementCache,
    Transition,
    default_cache_path,
    open_cache,
)
from collage_mlir.cost.key import host_fingerprint, measurement_key, region_key
from collage_mlir.cost.records import MEASUREMENT_COLUMNS, TRANSITION_COLUMNS
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


def test_resources_are_read_from_the_last_section_entry_by_entry():
    """Several entries, a quoted key, a `{-#` inside a string earlier in the
    text, and another dialect's resources after builtin's: only builtin's blobs, each
    without its 4-byte alignment prefix."""
    text = ('"x" = {s = "{-# not a section"}\n{-#\n  dialect_resources: {\n    builtin: {\n'
            '      w0: "0x0400000001020304",\n      "w/0:a": "0x08000000AABB"\n    },\n'
            '    other: {\n      z: "0x04000000FF"\n    }\n  }\n#-}\n')
    assert parse_resources(text) == {"w0": bytes.fromhex("01020304"),
                                     "w/0:a": bytes.fromhex("AABB")}
    assert parse_resources('"x" = {s = "{-# no section"}') == {}


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


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request, tmp_path) -> str:
    """Where a new, empty cache goes: a file, or a fresh database on the session's
    PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "c.sqlite")
    server = pg_server()
    if isinstance(server, str):
        pytest.skip(server)
    return server.new_database()


def test_round_trip(location):
    with open_cache(location) as c:
        c.put(_row("a"))
        c.put(_row("b", INVALID, None))
        c.put_transition(Transition("t", "x", "y", "h", OK, 1e-5, 2e-10, [(1024, 1.2e-5)]))
    with open_cache(location) as c:  # a second open sees everything
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
        assert c.integrity_ok()
        assert c.clear() == 2
        assert c.stats()["entries"] == 0 and c.get_transition("t") is None


def test_every_value_reads_back_as_written(location):
    """Floats keep every bit (PostgreSQL's REAL would not: the schema says DOUBLE
    PRECISION), None stays None, `stale` is a bool, a NUL in a crash's output is kept
    readable."""
    row = Measurement("k", "r", "b", "v", "o", "h", "sig", "timeout", 1 / 3, 2 / 3, 0.1, 7,
                      "died\x00here", 1795400000.123456, 2.5, 3, 0.25, True)
    with open_cache(location) as c:
        c.put(row)
        got = c.get("k")
    assert got.error in ("died\x00here", "died\ufffdhere")
    assert got == Measurement(**{**row.__dict__, "error": got.error})
    assert type(got.stale) is bool and type(got.runs) is int


def test_replace_keeps_one_row_and_clear_one_backend(location):
    with open_cache(location) as c:
        c.put(_row("k", median=1.0))
        c.put(_row("k", median=2.0))
        c.put(_row("other", backend="keep"))
        c.put_transition(Transition("t", "b", "keep", "h", OK, 1e-5, 2e-10, []))
        c.put_transition(Transition("u", "keep", "keep", "h", OK, 1e-5, 2e-10, []))
        c.put_capability("cb", "b", 0b101)
        c.put_capability("ck", "keep", 0b11)
        assert c.get("k").median == 2.0
        assert len(c.get_many(["k", "k", "other"])) == 2
        assert c.clear("b") == 1
        assert c.get("other") is not None
        assert [t.key for t in c.transitions()] == ["u"]  # every hand-off to or from b went
        assert (c.get_capability("cb"), c.get_capability("ck")) == (None, 0b11)


def test_clear_one_host_keeps_the_other_hosts_rows_and_every_capability(location):
    """A database a team shares holds every machine's rows: `cache clear --this-host`
    clears one machine's, of one backend or all."""
    from dataclasses import replace
    with open_cache(location) as c:
        c.put_many([_row("mine"), _row("mine_keep", backend="keep"),
                    replace(_row("theirs"), host="other")])
        c.put_transition(Transition("t", "b", "keep", "h", OK, 1e-5, 2e-10, []))
        c.put_transition(Transition("u", "b", "keep", "other", OK, 1e-5, 2e-10, []))
        c.put_capability("cb", "b", 0b101)
        assert c.clear("b", host="h") == 1
        assert c.get("mine") is None and c.get("mine_keep") and c.get("theirs")
        assert [t.key for t in c.transitions()] == ["u"]
        assert c.clear(host="h") == 1 and c.get("theirs") and c.get_capability("cb") == 0b101


def test_many_keys_in_one_call(location):
    """More keys than one statement binds (SQLite: 500 per chunk)."""
    rows = [_row(f"k{i:04d}", median=float(i)) for i in range(1203)]
    with open_cache(location) as c:
        c.put_many(rows)
        got = c.get_many([r.key for r in rows] + ["absent"])
        assert len(got) == 1203 and got["k1202"].median == 1202.0
        assert c.mark_stale([r.key for r in rows[::2]]) == 602
        assert sum(m.stale for m in c.measurements()) == 602
        assert [m.key for m in c.measurements()][:2] == ["k0000", "k0001"]


def test_stale_marks_only_ok_rows_and_a_new_row_clears_it(location):
    with open_cache(location) as c:
        c.put_many([_row("ok1"), _row("bad", INVALID, None)])
        assert c.mark_stale(["ok1", "bad", "missing"]) == 1
        assert c.get("ok1").stale and not c.get("bad").stale
        c.put(_row("ok1"))  # measured again
        assert not c.get("ok1").stale


def test_capabilities_round_trip(location):
    with open_cache(location) as c:
        big = (1 << 200) | 1  # one bit per op: wider than any integer column
        c.put_capability("f", "ov", big)
        c.put_capability("f", "ov", big | 2)
        assert c.get_capability("f") == big | 2 and c.get_capability("g") is None
        assert [cap[:3] for cap in c.capabilities()] == [("f", "ov", format(big | 2, "x"))]


def test_claims(location):
    """A key is claimed once; another live claimant's claim stands, a dead or silent one's
    is taken over; a row written since `fresh_since` is not claimed; a row ends its claim;
    release ends only one's own."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    here = Claimant.here()
    other = Claimant("other", os.getpid(), here.host, here.boot)  # alive: this process
    gone = Claimant("gone", dead.pid, here.host, here.boot)
    remote = Claimant("remote", dead.pid, "elsewhere", "")
    with open_cache(location) as c:
        assert c.claim(["a", "b", "a"], here, 600, 0.0) == ["a", "b"]
        assert c.claim(["a", "b", "c"], other, 600, 0.0) == ["c"]
        assert c.claim(["a"], here, 600, 0.0) == ["a"]  # one's own again
        c.put(_row("b"))  # measured: the claim ends with the row
        assert [k for k, _, _ in c.claims()] == ["a", "c"]
        assert c.claim(["b"], other, 600, 0.0) == []  # its row is fresh
        assert c.claim(["b"], other, 600, time.time() + 60) == ["b"]  # older than the run
        c.release(["a", "c"], other)  # a is not other's: it stays
        assert [(k, who) for k, who, _ in c.claims()] == [("a", here.token), ("b", "other")]
        c.release(["a", "b"], here)
        assert [(k, who) for k, who, _ in c.claims()] == [("b", "other")]
        assert c.claim(["d"], gone, 600, 0.0) == ["d"]
        assert c.claim(["d"], here, 600, 0.0) == ["d"]  # its process ended
        assert c.claim(["e"], remote, 600, 0.0) == ["e"]
        assert c.claim(["e"], here, 600, 0.0) == []  # another host's: its beat stands
        c.beat(remote)
        assert c.claim(["e"], here, -1.0, 0.0) == ["e"]  # not beaten for too long
        assert {k: pid for k, _, pid in c.claims()} == {"b": os.getpid(), "d": os.getpid(),
                                                       "e": os.getpid()}


def test_same_schema_and_version_on_both_stores(location):
    from collage_mlir.cost.storage import SCHEMA_VERSION

    with open_cache(location) as c:
        assert c._rows("SELECT value FROM meta WHERE name = 'schema'") == [
            (str(SCHEMA_VERSION),)]
        for table, columns in (("measurements", MEASUREMENT_COLUMNS),
                               ("transitions", TRANSITION_COLUMNS),
                               ("capabilities", ("key", "backend", "bits", "created")),
                               ("claims", ("key", "owner", "host", "boot", "pid", "beat"))):
            assert c._columns(table) == set(columns)


def test_a_cache_of_a_newer_schema_is_refused_for_writing(location):
    from collage_mlir.errors import CollageError

    with open_cache(location) as c:
        c.put(_row("a"))
        with c._write():
            c._run("UPDATE meta SET value = '3' WHERE name = 'schema'")
    with pytest.raises(CollageError, match="newer collage-mlir.*schema 3"):
        open_cache(location)
    with open_cache(location, readonly=True) as c:  # reading still works
        assert c.get("a").status == OK


def test_readonly_writes_nothing_and_needs_a_cache(location):
    from collage_mlir.errors import CollageError

    with pytest.raises(CollageError, match="no cache here"):
        open_cache(location, readonly=True)
    with open_cache(location) as c:
        c.put(_row("a"))
    with open_cache(location, readonly=True) as c:
        assert c.get("a") is not None
        with pytest.raises(CollageError, match="read-only|cannot write"):
            c.put(_row("b"))


def test_default_path_follows_environment(monkeypatch, tmp_path):
    from collage_mlir.cost.cache import default_cache_location

    monkeypatch.setenv("COLLAGE_CACHE", str(tmp_path / "x.sqlite"))
    assert default_cache_path() == tmp_path / "x.sqlite"
    monkeypatch.setenv("COLLAGE_CACHE", "postgresql://u@h/db")
    assert default_cache_location() == "postgresql://u@h/db"
    monkeypatch.delenv("COLLAGE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_path() == tmp_path / "collage_mlir" / "cache.sqlite"
    assert default_cache_location() == default_cache_path()


def test_a_location_is_a_path_or_a_postgresql_url():
    from collage_mlir.cost.cache import is_cache_url
    from collage_mlir.errors import CollageError

    assert is_cache_url("postgresql://u@h/db") and is_cache_url("POSTGRES://u@h/db")
    assert not is_cache_url("dir/c.sqlite") and not is_cache_url(None)
    with pytest.raises(CollageError, match="mysql://…: not a cache location"):
        is_cache_url("mysql://u:pw@h/db")  # the password is not echoed either
    with pytest.raises(CollageError, match="a URL, not a file"):
        MeasurementCache("postgresql://u@h/db")


WRITER = """
import sys
from collage_mlir.cost.cache import open_cache, Measurement
cache = open_cache(sys.argv[1])
who = sys.argv[2]
for i in range(300):
    key = f"k{i % 200}" if i % 2 else f"{who}{i}"
    cache.put(Measurement(key, f"r-{who}-{i}", who, "v", "o", "h", "sig", "ok", float(i),
                          float(i), 0.0, i))
print(i + 1)
"""
WRITERS = "ABCD"


def test_four_writers_lose_nothing(location):
    """Four processes write 300 rows each into one cache, 150 of them on keys all four
    write: every key is there once, and each shared key holds one writer's whole row."""
    open_cache(location).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, location, who],
                              stdout=subprocess.PIPE, text=True) for who in WRITERS]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(WRITERS)
    assert sum(int(o) for o in outs) == 300 * len(WRITERS)
    with open_cache(location) as c:
        assert c.integrity_ok()
        rows = {m.key: m for m in c.measurements()}
        assert len(c.measurements()) == len(rows)  # no key twice
    own = {f"{w}{i}" for w in WRITERS for i in range(0, 300, 2)}
    shared = {f"k{i % 200}" for i in range(1, 300, 2)}
    assert set(rows) == own | shared  # 600 + 100 rows
    for key, m in rows.items():  # not torn: every value of a row from the one write
        i = int(m.median)
        assert m.backend in WRITERS and m.region == f"r-{m.backend}-{i}" and m.runs == i
        assert key == (f"k{i % 200}" if i % 2 else f"{m.backend}{i}") and m.status == "ok"


def test_export_import_round_trip_between_stores(tmp_path, location):
    """SQLite → export → import into `location` → export again: the same rows."""
    import io

    from collage_mlir.cost.cache_export import export_cache, import_cache

    with open_cache(tmp_path / "source.sqlite") as c:
        c.put_many([_row("a"), _row("b", INVALID, None),
                    Measurement(**{**_row("s").__dict__, "stale": True, "load": 0.7,
                                   "timeout_s": 30.0, "median": 1 / 3})])
        c.put_transition(Transition("t", "x", "y", "h", OK, 1e-5, 2e-10, [(1024, 1.2e-5)]))
        c.put_capability("cap", "b", 0xff)
        first = io.StringIO()
        assert export_cache(c, first) == {"measurements": 3, "transitions": 1,
                                          "capabilities": 1}
    with open_cache(location) as c:
        read, written = import_cache(c, first.getvalue().splitlines(), "x.jsonl")
        assert read == written == {"measurements": 3, "transitions": 1, "capabilities": 1}
        again = io.StringIO()
        export_cache(c, again)
    assert again.getvalue().splitlines()[1:] == first.getvalue().splitlines()[1:]
    assert json.loads(again.getvalue().splitlines()[0])["source"] == c.location


def test_import_keeps_the_newest_row_of_each_key(location):
    import io

    from collage_mlir.cost.cache_export import export_cache, import_cache

    old, new = (Measurement(**{**_row("a", median=m).__dict__, "created": t})
                for m, t in ((1.0, 100.0), (2.0, 200.0)))
    with open_cache(location) as c:
        c.put(new)
        c.put(_row("b"))
        exported = io.StringIO()
        export_cache(c, exported)
        c.put(old)  # an older row replaced the newer meanwhile
        lines = exported.getvalue().splitlines()
        assert import_cache(c, lines, "x")[1]["measurements"] == 1  # b is held as it is
        assert c.get("a") == new
        c.put(Measurement(**{**new.__dict__, "created": 300.0}))
        assert import_cache(c, lines, "x")[1]["measurements"] == 0
        assert c.get("a").created == 300.0
        c.put(Measurement(**{**c.get("b").__dict__, "stale": True}))  # marked to remeasure
        import_cache(c, lines, "x")  # the same row again does not undo the mark
        assert c.get("b").stale


@pytest.mark.parametrize("line, error", [
    ('{"format": "other"}', "x.jsonl:1: not a `collage-mlir cache export` file"),
    ('{"format": "collage-mlir-cache", "version": 3, "schema": 2}', "version 3"),
    ('{"table": "measurements", "row": {"key": "a"}}', "x.jsonl:2: measurements row: missing"),
    ('{"table": "claims", "row": {}}', "x.jsonl:2: expected"),
    ("not json", "x.jsonl:2: not JSON"),
    (json.dumps({"table": "measurements", "row": {
        "key": "a", "region": "r", "backend": "b", "version": "1", "options": "", "host": "h",
        "signature": "Relu", "status": "ok", "median": -1.0, "p90": -1.0, "spread": 0.0,
        "runs": 5, "error": "", "created": 1.0, "timeout_s": None, "attempts": 0,
        "load": None, "stale": False}}),
     "x.jsonl:2: measurements row: status ok with median = -1.0"),
    (json.dumps({"table": "measurements", "row": {  # PostgreSQL's INTEGER refused it late
        "key": "a", "region": "r", "backend": "b", "version": "1", "options": "", "host": "h",
        "signature": "Relu", "status": "ok", "median": 1.0, "p90": 1.0, "spread": 0.0,
        "runs": 2**40, "error": "", "created": 1.0, "timeout_s": None, "attempts": 0,
        "load": None, "stale": False}}),
     "x.jsonl:2: measurements row: runs = 1099511627776 is not a count"),
])
def test_import_refuses_a_malformed_file_whole(tmp_path, line, error):
    from collage_mlir.cost.cache_export import import_cache
    from collage_mlir.errors import CollageError

    header = '{"format": "collage-mlir-cache", "version": 1, "schema": 2}'
    good = json.dumps({"table": "capabilities",
                       "row": {"key": "c", "backend": "b", "bits": "ff", "created": 1.0}})
    lines = [line] if line.startswith('{"format"') else [header, line]
    with open_cache(tmp_path / "c.sqlite") as c:
        with pytest.raises(CollageError, match=error.replace("`", ".").replace("(", ".")):
            import_cache(c, [*lines, good] if lines[0] is header else lines, "x.jsonl")
        assert c.capabilities() == []  # nothing written


def test_an_export_cut_short_is_refused_and_an_old_one_without_an_end_reads(tmp_path):
    """A file cut at a line boundary imported the rows before the cut, rc 0; version 2 ends
    with the rows it holds per table."""
    import io

    from collage_mlir.cost.cache_export import export_cache, import_cache
    from collage_mlir.errors import CollageError

    with open_cache(tmp_path / "a.sqlite") as c:
        c.put(_row("a"))
        c.put(_row("b"))
        exported = io.StringIO()
        export_cache(c, exported)
    lines = exported.getvalue().splitlines()
    assert json.loads(lines[-1]) == {"end": {"measurements": 2, "transitions": 0,
                                             "capabilities": 0}}
    with open_cache(tmp_path / "b.sqlite") as c:
        for cut, says in ((lines[:-1], "no end line: the file was cut short"),
                          (lines[:-2] + lines[-1:], "the end line counts"),
                          (lines + lines[1:2], "a line after the end line")):
            with pytest.raises(CollageError, match=says):
                import_cache(c, cut, "x.jsonl")
        assert c.measurements() == []
        old = [lines[0].replace('"version": 2', '"version": 1'), *lines[1:-1]]
        assert import_cache(c, old, "x.jsonl")[1]["measurements"] == 2


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


def test_a_refused_import_creates_no_cache(tmp_path, capsys):
    """`cache import` of a malformed file into a new cache left an empty cache file behind."""
    from collage_mlir.tools.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "collage-mlir-cache", "version": 2, "schema": 2}\nnot json\n')
    cache = tmp_path / "new.sqlite"
    assert main(["cache", "import", str(bad), "--cache", str(cache)]) == 1
    assert "bad.jsonl:2: not JSON" in capsys.readouterr().err
    assert not cache.exists()
