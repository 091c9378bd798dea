"""The compiled-artifact store: a compile met again is not run again, and gives the same
kernel; what differs (flags), what failed, and a store turned off or unwritable compile."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx.parser
import pytest

from collage_mlir.backends import artifacts
from collage_mlir.backends import iree as iree_backend
from collage_mlir.backends.iree import IreeBackend
from collage_mlir.graph.dataflow import DataflowGraph
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.importer import import_onnx

MODEL = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[2,8] x) => (float[2,8] y) {
  a = Sigmoid(x)
  y = Mul(a, x)
}'''


@pytest.fixture
def store(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "artifacts"
    monkeypatch.setenv("COLLAGE_ARTIFACTS", str(root))
    return root


@pytest.fixture
def compiles(monkeypatch) -> list[list[str]]:
    """The iree-compile command lines run."""
    run = iree_backend.subprocess.run
    calls: list[list[str]] = []

    def counted(command, *args, **kw):
        if "iree-compile" in str(command[0]):
            calls.append(list(command))
        return run(command, *args, **kw)

    monkeypatch.setattr(iree_backend.subprocess, "run", counted)
    return calls


def _backend(**options) -> IreeBackend:
    reason = IreeBackend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    return IreeBackend(**options)


def _module():
    module = import_onnx(onnx.parser.parse_model(MODEL))
    graph = DataflowGraph(module.body.operations[0])
    return SubGraph(graph, graph.op_bits).extract("r"), module


def _swish(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def test_a_compile_met_again_comes_from_the_store(store: Path, compiles) -> None:
    (region, _keep), x = _module(), np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    first = _backend().compile(region)
    assert len(compiles) == 1 and len(list(store.glob("*.vmfb"))) == 1
    again = _backend().compile(_module()[0])  # another backend, another module, same text
    assert len(compiles) == 1
    np.testing.assert_allclose(again.run([x])[0], _swish(x), rtol=1e-5, atol=1e-6)
    assert bytes(again.vmfb) == bytes(first.vmfb)


def test_a_damaged_artifact_is_compiled_again_and_replaced(store: Path, compiles) -> None:
    region, _keep = _module()
    _backend().compile(region)
    (stored,) = store.glob("*.vmfb")
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(_backend().compile(region).run([x])[0], _swish(x), rtol=1e-5)
    assert len(compiles) == 2
    assert stored.read_bytes() != bytes(data)  # the compile's output kept again
    _backend().compile(region)
    assert len(compiles) == 2


def test_other_flags_are_another_artifact(store: Path, compiles) -> None:
    region, _keep = _module()
    backend = _backend()
    backend.compile(region)
    _backend(flags=[f for f in backend.flags if f not in iree_backend.RETRY_DROPPING]
             ).compile(region)
    assert len(compiles) == 2 and len(list(store.glob("*.vmfb"))) == 2


def test_a_failed_compile_is_not_kept(store: Path, compiles) -> None:
    region, _keep = _module()
    backend = _backend(flags=["--iree-no-such-flag"])
    for _ in range(2):
        with pytest.raises(Exception, match="no-such-flag"):
            backend.compile(region)
    assert len(compiles) >= 2 and not list(store.glob("*.vmfb"))


def test_off_keeps_nothing(tmp_path: Path, monkeypatch, compiles) -> None:
    monkeypatch.setenv("COLLAGE_ARTIFACTS", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    region, _keep = _module()
    for _ in range(2):
        _backend().compile(region)
    assert len(compiles) == 2 and not list(tmp_path.rglob("*.vmfb"))


def test_an_unwritable_store_only_costs_a_compile(tmp_path: Path, monkeypatch,
                                                  compiles) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("COLLAGE_ARTIFACTS", str(blocked / "artifacts"))
    region, _keep = _module()
    x = np.ones((2, 8), np.float32)
    for _ in range(2):
        np.testing.assert_allclose(_backend().compile(region).run([x])[0], _swish(x),
                                   rtol=1e-5)
    assert len(compiles) == 2


def test_the_store_keeps_its_newest_within_its_size(store: Path, tmp_path: Path,
                                                    monkeypatch) -> None:
    monkeypatch.setattr(artifacts, "MAX_BYTES", 2500)
    made = tmp_path / "made.bin"
    for k, key in enumerate(["a", "b", "c"]):
        made.write_bytes(bytes([k]) * 1000)
        artifacts.keep(key, made, ".bin")
        past = time.time() - 100 + k
        os.utime(store / f"{key}.bin", (past, past))
    assert sorted(p.name for p in store.iterdir()) == ["b.bin", "c.bin"]  # a was oldest
    out = tmp_path / "out.bin"
    assert artifacts.fetch("b", out, ".bin") and out.read_bytes() == bytes([1]) * 1000
    made.write_bytes(b"d" * 1000)
    artifacts.keep("d", made, ".bin")  # b was used since c was made: c goes
    assert sorted(p.name for p in store.iterdir()) == ["b.bin", "d.bin"]
    assert not artifacts.fetch("c", out, ".bin")


def test_a_copy_a_killed_run_left_is_removed_after_its_grace(store: Path,
                                                             tmp_path: Path) -> None:
    store.mkdir()
    old, young = store / ".partial-old", store / ".partial-young"
    for p in (old, young):
        p.write_bytes(b"half")
    past = time.time() - 2 * artifacts.PARTIAL_GRACE_S
    os.utime(old, (past, past))
    made = tmp_path / "made.bin"
    made.write_bytes(b"x")
    artifacts.keep("k", made, ".bin")
    assert sorted(p.name for p in store.iterdir()) == [".partial-young", "k.bin"]


def test_cache_stats_says_what_the_store_holds(store: Path, tmp_path: Path, monkeypatch,
                                               capsys) -> None:
    from collage_mlir.cost.cache import open_cache
    from collage_mlir.tools.cli import main

    made = tmp_path / "made.bin"
    made.write_bytes(b"x" * 2048)
    artifacts.keep("a", made, ".vmfb")
    artifacts.keep("b", made, ".vmfb")
    cache = str(tmp_path / "c.sqlite")
    open_cache(cache).close()
    assert main(["cache", "stats", "--cache", cache]) == 0
    assert f"compiled artifacts: {store}: 2 files, 0.0 MiB" in capsys.readouterr().out
    monkeypatch.setenv("COLLAGE_ARTIFACTS", "off")
    assert main(["cache", "stats", "--cache", cache]) == 0
    assert "compiled artifacts: off" in capsys.readouterr().out
