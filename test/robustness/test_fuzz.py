"""Robustness: every command fed damaged inputs ends in one line, never a traceback.

Cases are generated from one small valid model: mutated ONNX files (truncated, bit-flipped,
structurally wrong), mutated MLIR text, mutated placement files, mutated caches and damaged
saved models. Each runs the real command in process (`tools.cli.main` / `collage_opt.main`,
the same code the console scripts call), with stdout and stderr captured, and must:

- not raise (an exception escaping `main` is the traceback a user would see);
- write no "Traceback" to stderr;
- if it fails (exit ≠ 0), say so in exactly one stderr line that names the input file;
- if the input is certainly invalid (`must_fail`), fail.

A bit flip may leave a valid model (a changed weight), so those cases may also succeed. After
all cases the measurement cache the partition cases wrote passes `PRAGMA integrity_check`
with every earlier row intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import runner  # noqa: E402  (the child-process side, beside this file)

SEED = 20261122
RUNNER = os.path.join(os.path.dirname(__file__), "runner.py")


@dataclass(frozen=True)
class Case:
    kind: str
    argv: tuple[str, ...]
    names: str  # a string the error line must contain (the damaged file)
    must_fail: bool
    tool: str = "collage-mlir"

    def __str__(self) -> str:
        return f"{self.kind}: {self.tool} {' '.join(self.argv)}"


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "m"], ["y"], name="matmul")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal((512, 10)).astype(np.float32), "m")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


COSTS = {"per_op": {b: {"Conv": 1.0, "Relu": 0.1, "Flatten": 0.1, "MatMul": 0.5}
                    for b in ("onnxruntime", "openvino")},
         "transition": {"per_byte": 0.0}}


def invoke(case: Case) -> tuple[int, str]:
    """(exit status, stderr) of one command run in this process (setup only)."""
    code, err, escaped = runner.invoke(case.tool, list(case.argv))
    assert not escaped, f"{case}: escaped main: {escaped}"
    return code, err


def run_all(cases: list[Case], work: Path) -> list[dict]:
    """Every case's {code, err, escaped} from child processes running `runner.py`; a case
    that kills its child (a native crash) is recorded with the signal and the rest go on in
    a fresh child."""
    cases_path, results_path = work / "cases.json", work / "results.jsonl"
    cases_path.write_text(json.dumps([{"tool": c.tool, "argv": list(c.argv)} for c in cases]))
    results_path.write_text("")
    done: dict[int, dict] = {}
    while len(done) < len(cases):
        start = len(done)
        proc = subprocess.run([sys.executable, RUNNER, str(cases_path), str(results_path),
                               str(start)], capture_output=True, text=True, timeout=600)
        for line in results_path.read_text().splitlines():
            row = json.loads(line)
            done[row["k"]] = row
        if proc.returncode != 0 and len(done) == start:  # died on case `start`
            done[start] = {"k": start, "code": proc.returncode, "escaped": "",
                           "err": f"process died ({proc.returncode}): {proc.stderr[-300:]}"}
            with open(results_path, "a") as f:
                f.write(json.dumps(done[start]) + "\n")
        elif proc.returncode != 0:
            crashed = max(done) + 1
            if crashed < len(cases):
                done[crashed] = {"k": crashed, "code": proc.returncode, "escaped": "",
                                 "err": f"process died ({proc.returncode}): "
                                        f"{proc.stderr[-300:]}"}
                with open(results_path, "a") as f:
                    f.write(json.dumps(done[crashed]) + "\n")
    return [done[k] for k in range(len(cases))]


# -- case generators -----------------------------------------------------------------------


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def onnx_byte_cases(d: Path, good: bytes, rng: random.Random) -> list[Case]:
    cases = []
    for k, cut in enumerate(sorted(rng.sample(range(1, len(good)), 40))):
        p = _write(d / f"trunc{k}.onnx", good[:cut])
        cases.append(Case("onnx truncated", ("import", p, "-o", str(d / "o.mlir")), p, False))
    for k in range(150):
        data = bytearray(good)
        for _ in range(rng.choice((1, 4, 16))):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        p = _write(d / f"flip{k}.onnx", bytes(data))
        cases.append(Case("onnx bit-flipped", ("import", p, "-o", str(d / "o.mlir")), p, False))
    p = _write(d / "empty.onnx", b"")
    cases.append(Case("onnx empty", ("import", p), p, True))
    p = _write(d / "text.onnx", b"this is not a model\n")
    cases.append(Case("onnx garbage", ("import", p), p, True))
    return cases


def _structural(model: onnx.ModelProto) -> dict[str, Callable[[onnx.ModelProto], None]]:
    def wrong_input_type(m):
        m.graph.input[0].type.tensor_type.elem_type = TensorProto.STRING

    def missing_initializer(m):
        del m.graph.initializer[1]

    def cycle(m):
        m.graph.node[0].input[0] = "r"

    def unknown_op(m):
        m.graph.node[1].op_type = "Frobnicate"

    def unknown_domain(m):
        m.graph.node[1].domain = "com.example.nothing"

    def bad_attribute(m):
        m.graph.node[0].attribute[0].CopyFrom(helper.make_attribute("pads", "wide"))

    def duplicate_output(m):
        m.graph.node[2].output[0] = "c"

    def undefined_output(m):
        m.graph.output[0].name = "nowhere"

    def future_opset(m):
        m.opset_import[0].version = 999

    def wrong_weight_shape(m):
        m.graph.initializer[1].CopyFrom(numpy_helper.from_array(
            np.zeros((7, 10), np.float32), "m"))

    def no_nodes(m):
        del m.graph.node[:]

    def dynamic_input(m):
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"

    return {f.__name__: f for f in (wrong_input_type, missing_initializer, cycle, unknown_op,
                                     unknown_domain, bad_attribute, duplicate_output,
                                     undefined_output, future_opset, wrong_weight_shape,
                                     no_nodes, dynamic_input)}


def onnx_structural_cases(d: Path, model: onnx.ModelProto) -> list[Case]:
    cases = []
    for name, mutate in _structural(model).items():
        m = onnx.ModelProto()
        m.CopyFrom(model)
        mutate(m)
        p = _write(d / f"{name}.onnx", m.SerializeToString())
        cases.append(Case(f"onnx {name}", ("import", p), p, True))
        cases.append(Case(f"onnx {name}", (p,), p, True, tool="collage-opt"))
        cases.append(Case(f"onnx {name}", ("measure", p, "--backends", "onnxruntime",
                                            "--cache", str(d / "struct.sqlite")), p, True))
    return cases


def mlir_cases(d: Path, text: str, rng: random.Random) -> list[Case]:
    cases = []
    lines = text.splitlines(keepends=True)
    body_end = next(i for i, ln in enumerate(lines) if ln.startswith("{-#"))
    for k in range(40):
        cut = rng.randrange(1, len(text))
        p = d / f"cut{k}.mlir"
        p.write_text(text[:cut])
        cases.append(Case("mlir truncated", (str(p),), str(p), False, tool="collage-opt"))
    for k in range(60):
        i = rng.randrange(1, body_end)
        mutated = list(lines)
        choice = rng.randrange(3)
        if choice == 0:
            del mutated[i]
        elif choice == 1:
            mutated[i] = mutated[i].replace("%", "%x", 1)
        else:
            mutated[i], mutated[i - 1] = mutated[i - 1], mutated[i]
        p = d / f"mut{k}.mlir"
        p.write_text("".join(mutated))
        pipeline = "builtin.module(collage-annotate{backends=onnxruntime})"
        cases.append(Case("mlir line mutated", (str(p), f"--pass-pipeline={pipeline}"), str(p),
                          False, tool="collage-opt"))
    p = d / "binary.mlir"
    p.write_bytes(b"\xff\xfe\x00garbage")
    cases.append(Case("mlir not text", (str(p),), str(p), True, tool="collage-opt"))
    cases.append(Case("mlir not text", ("measure", str(p), "--backends", "onnxruntime"),
                      str(p), True))
    return cases


def placement_cases(d: Path, model_path: str, table: str, rng: random.Random) -> list[Case]:
    good = json.dumps({"placement": [
        {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"backend": "openvino"}}}]})
    bad = {
        "not json": "{placement: [",
        "not an object": "[1, 2]",
        "rules not a list": json.dumps({"placement": 3}),
        "rule not an object": json.dumps({"placement": ["Relu"]}),
        "bad regex": json.dumps({"placement": [
            {"pattern": {"match": {"node_type": "(Relu"}, "rewrite": {"backend": "openvino"}}}]}),
        "unknown key": json.dumps({"placement": [
            {"pattern": {"match": {"op": "Relu"}, "rewrite": {"backend": "openvino"}}}]}),
        "no rewrite": json.dumps({"placement": [{"pattern": {"match": {"node_type": "Relu"}}}]}),
        "backend not a string": json.dumps({"placement": [
            {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"backend": 7}}}]}),
        "exclude not a list": json.dumps({"placement": [
            {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"exclude": "iree"}}}]}),
        "pin to an unused backend": json.dumps({"placement": [
            {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"backend": "iree"}}}]}),
        "exclude everything": json.dumps({"placement": [
            {"pattern": {"match": {"node_type": ".*"},
                         "rewrite": {"exclude": ["onnxruntime", "openvino"]}}}]}),
    }
    for k in range(20):
        bad[f"truncated {k}"] = good[:rng.randrange(1, len(good) - 1)]
    cases = []
    for k, (kind, text) in enumerate(bad.items()):
        p = d / f"placement{k}.json"
        p.write_text(text)
        argv = ("partition", model_path, "--backends", "onnxruntime,openvino", "--cost",
                f"table:{table}", "--placement", str(p), "--no-verify", "-o", str(d / "pout"))
        cases.append(Case(f"placement {kind}", argv, str(p), True))
    return cases


def cache_cases(d: Path, cache: Path, rng: random.Random) -> list[Case]:
    good = cache.read_bytes()
    cases = []
    variants: list[tuple[str, bytes, bool]] = [("junk", b"junk\n" * 10, True),
                                               ("empty header", b"\0" * 4096, True)]
    for k in range(30):
        variants.append((f"truncated {k}", good[:rng.randrange(1, len(good))], False))
    for k in range(30):
        data = bytearray(good)
        i = rng.randrange(0, 100) if k % 2 else rng.randrange(len(data))
        data[i] ^= 0xFF
        variants.append((f"bit-flipped {k}", bytes(data), False))
    for k, (kind, data, must) in enumerate(variants):
        p = _write(d / f"cache{k}.sqlite", data)
        cases.append(Case(f"cache {kind}", ("cache", "stats", "--cache", p), p, must))
        cases.append(Case(f"cache {kind}", ("cache", "list", "--cache", p), p, must))
    return cases


def saved_model_cases(d: Path, saved: Path, rng: random.Random) -> list[Case]:
    cases = []
    files = sorted(p.name for p in saved.iterdir())
    manifest = (saved / "manifest.json").read_text()

    def damaged(kind: str, change: Callable[[Path], None], must: bool, names: str) -> None:
        target = d / f"saved_{len(cases)}"
        shutil.copytree(saved, target)
        change(target)
        cases.append(Case(f"saved model {kind}", ("run", str(target)), names, must))

    for name in files:
        damaged(f"{name} deleted", lambda t, n=name: (t / n).unlink(), True, name)
        damaged(f"{name} truncated",
                lambda t, n=name: (t / n).write_bytes((t / n).read_bytes()[:7]), True, name)
        damaged(f"{name} garbage", lambda t, n=name: (t / n).write_bytes(b"garbage"), True, name)

        def flip(t: Path, n: str = name) -> None:
            data = bytearray((t / n).read_bytes())
            data[len(data) // 2] ^= 0x55
            (t / n).write_bytes(bytes(data))
        damaged(f"{name} bit-flipped", flip, True, name)
    for _ in range(20):
        cut = manifest[:rng.randrange(1, len(manifest) - 1)]
        damaged("manifest truncated", lambda t, c=cut: (t / "manifest.json").write_text(c),
                True, "saved_")
    doc = json.loads(manifest)
    for key in ("regions", "format", "entry", "inputs", "checksums"):
        for value in (None, 7, "x", [], {}):
            bad = dict(doc, **{key: value})
            if bad == doc:
                continue
            damaged(f"manifest {key}={value!r}",
                    lambda t, b=bad: (t / "manifest.json").write_text(json.dumps(b)),
                    False, "saved_")
    return cases


# -- the suite -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, list[Case] | Path]:
    d = tmp_path_factory.mktemp("robust")
    rng = random.Random(SEED)
    model = _model()
    model_path = _write(d / "m.onnx", model.SerializeToString())
    table = d / "costs.json"
    table.write_text(json.dumps(COSTS))
    cache = d / "good.sqlite"
    saved = d / "saved"
    setup = [("partition", model_path, "--backends", "onnxruntime", "--cache", str(cache),
              "--no-verify", "-o", str(saved)),
             ("import", model_path, "-o", str(d / "m.mlir"))]
    for argv in setup:
        code, err = invoke(Case("setup", argv, "", False))
        assert code == 0, err
    text = (d / "m.mlir").read_text()
    cases = (onnx_byte_cases(d, model.SerializeToString(), rng)
             + onnx_structural_cases(d, model) + mlir_cases(d, text, rng)
             + placement_cases(d, model_path, str(table), rng) + cache_cases(d, cache, rng)
             + saved_model_cases(d, saved, rng))
    return {"cases": cases, "cache": cache, "dir": d}


def _rows(path: Path) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT * FROM measurements").fetchall())


def test_every_damaged_input_gets_one_line(corpus) -> None:
    cases = corpus["cases"]
    assert len(cases) >= 500
    before = _rows(corpus["cache"])
    failures = []
    outcomes: dict[str, int] = {}
    for case, result in zip(cases, run_all(cases, corpus["dir"]), strict=True):
        code, err = result["code"], result["err"]
        if result["escaped"]:
            err += "\nTraceback (escaped main): " + result["escaped"]
        lines = [ln for ln in err.splitlines() if ln.strip()
                 and not ln.startswith(("collage-mlir: skipping", "collage-mlir: note"))
                 and "Warning" not in ln]
        problem = None
        if code < 0 or "process died" in err:
            problem = "crashed"
        elif "Traceback" in err:
            problem = "traceback"
        elif case.must_fail and code == 0:
            problem = "succeeded on invalid input"
        elif code != 0 and len(lines) != 1:
            problem = f"{len(lines)} stderr lines"
        elif code != 0 and case.names not in lines[0]:
            problem = f"error does not name {case.names!r}"
        elif code != 0 and "internal error" in lines[0]:
            problem = "internal error"
        if problem:
            failures.append(f"{case}\n    -> {problem}: {err.strip()[-400:]}")
        outcomes[case.kind.split()[0]] = outcomes.get(case.kind.split()[0], 0) + (code != 0)
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures[:30])
    with contextlib.closing(sqlite3.connect(corpus["cache"])) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert set(before) <= set(_rows(corpus["cache"]))


if os.environ.get("COLLAGE_FUZZ_LIST"):  # print the cases by kind: COLLAGE_FUZZ_LIST=1 pytest -s
    def test_list_cases(corpus) -> None:
        cases = corpus["cases"]
        for case, result in zip(cases, run_all(cases, corpus["dir"]), strict=True):
            last = result["err"].strip().splitlines()[-1] if result["err"].strip() else ""
            print(f"{case.kind:40s} exit {result['code']}  {last}")
