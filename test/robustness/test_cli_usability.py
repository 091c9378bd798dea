"""What the commands tell a user without being asked twice (failure-paths issue, items 15
and 16): every option's default in `--help`, the cost-table format in `--help`, the pass
options in `collage-opt --list-passes`, one default for `--backends`, and what `demo` says
while it works."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from collage_mlir.backends import registry
from collage_mlir.check.compare import Timing
from collage_mlir.passes.registry import get_pass_class, pass_names
from collage_mlir.tools import cli, cmd_demo, cmd_partition, collage_opt

BIN = Path(sys.executable).parent


def tool(*argv: str, name: str = "collage-mlir") -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / name), *argv], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """Conv → Relu, and a cost table for it (onnxruntime cheaper than openvino)."""
    d = tmp_path_factory.mktemp("usability")
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              d / "m.onnx")
    (d / "costs.json").write_text(json.dumps({"per_op": {"onnxruntime": {"*": 1e-4},
                                                         "openvino": {"*": 2e-4}}}))
    return d / "m.onnx"


# -- collage-opt --list-passes (item 15) -----------------------------------------------------


def test_every_pass_option_has_a_meaning() -> None:
    for name in pass_names():
        for o in get_pass_class(name).options():
            assert o.help and o.type and o.default, (name, o)


def test_list_passes_shows_each_option_with_type_default_and_meaning() -> None:
    r = tool("--list-passes", name="collage-opt")
    assert r.returncode == 0, r.stderr
    sections = {}
    for line in r.stdout.splitlines():
        if not line.startswith(" "):
            current = sections.setdefault(line.split()[0], [])
        else:
            current.append(line.strip())
    assert sorted(sections) == pass_names()
    for name, lines in sections.items():
        options = get_pass_class(name).options()
        assert len(lines) == len(options), (name, lines)
        for line, o in zip(lines, options, strict=True):
            assert line.startswith(f"{o.name}=<{o.type}>"), line
            assert o.help in line and line.endswith(f"(default: {o.default})"), line
    assert any(ln.startswith("max-depth=<int|none>") and ln.endswith("(default: 3)")
               for ln in sections["collage-annotate"])


def test_partition_pass_options_are_its_stages_options() -> None:
    stage_options: dict = {}  # an option both stages take is described by the first
    for stage in ("collage-annotate", "collage-search"):
        for o in get_pass_class(stage).options():
            stage_options.setdefault(o.name, o)
    for o in get_pass_class("collage-partition").options():
        assert o == stage_options[o.name]


# -- --help (item 15) -------------------------------------------------------------------------


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    top = cli.build_parser()
    yield "collage-mlir", top
    (commands,) = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name, p in commands.choices.items():
        yield f"collage-mlir {name}", p
    yield "collage-opt", collage_opt.build_parser()


def _takes_a_value_that_may_be_left_out(a: argparse.Action) -> bool:
    if a.nargs == 0 or a.required or isinstance(a, argparse._SubParsersAction):
        return False
    return bool(a.option_strings) or a.nargs in ("?", "*")


def test_every_option_help_names_its_default() -> None:
    missing = []
    for prog, p in _parsers():
        formatter = p._get_formatter()
        for a in filter(_takes_a_value_that_may_be_left_out, p._actions):
            if "default" not in formatter._expand_help(a):
                missing.append(f"{prog} {a.option_strings or a.dest}: {a.help}")
    assert not missing, "\n".join(missing)


def test_partition_help_shows_defaults_and_the_cost_table_format() -> None:
    r = tool("partition", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "--max-depth N most ops on a path through a candidate region (default: 3)" in text
    assert "--cost table:FILE reads a JSON cost table" in text
    for key in ('"regions"', '"per_op"', '"per_call"', '"transition"', "seconds"):
        assert key in text, key
    r = tool("demo", "--help")
    assert "--rounds N timed rounds per contender (default: 20)" in " ".join(r.stdout.split())


def test_measure_and_partition_default_backends_alike() -> None:
    parser = cli.build_parser()
    measure = parser.parse_args(["measure", "m.onnx"])
    partition = parser.parse_args(["partition", "m.onnx", "-o", "out"])
    assert measure.backends == partition.backends == ""
    helps = {}
    for prog, p in _parsers():
        for a in p._actions:
            if "--backends" in a.option_strings:
                helps[prog] = a.help
    assert "every backend installed and usable here" in helps["collage-mlir measure"]
    assert helps["collage-mlir partition"] == helps["collage-mlir demo"]


# -- demo (item 16) ---------------------------------------------------------------------------


class _Pipe:
    """A stdout that, like a pipe, shows only what was flushed."""

    def __init__(self) -> None:
        self.pending, self.flushed = "", ""

    def write(self, text: str) -> int:
        self.pending += text
        return len(text)

    def flush(self) -> None:
        self.flushed, self.pending = self.flushed + self.pending, ""


class _Stop(Exception):
    pass


def test_demo_says_what_it_uses_before_it_partitions(model, monkeypatch) -> None:
    pipe = _Pipe()
    seen: list[str] = []

    def partition_stub(path, args, backends=None):
        seen.append(pipe.flushed)
        raise _Stop

    monkeypatch.setattr(sys, "stdout", pipe)
    monkeypatch.setattr(cmd_partition, "compile_from_args", partition_stub)
    args = cli.build_parser().parse_args(["demo", str(model), "--backends", "onnxruntime"])
    with pytest.raises(_Stop):
        cmd_demo.run(args)
    assert f"model: {model}\nbackends: onnxruntime\npartitioning:" in seen[0]


def test_demo_heartbeat_speaks_while_partitioning_and_stops_after(monkeypatch) -> None:
    said: list[str] = []
    spoke = threading.Event()

    def record(text: str = "") -> None:
        said.append(text)
        spoke.set()

    monkeypatch.setattr(cmd_demo, "say", record)
    with cmd_demo.heartbeat("partitioning", every_s=0.001):
        assert spoke.wait(timeout=60)
    after = len(said)
    assert said[0].startswith("  partitioning: ") and said[0].endswith(" s so far ..."), said
    with cmd_demo.heartbeat("partitioning", enabled=False):
        pass
    assert len(said) == after  # joined: no beat after its block, none when disabled


class _Ghost:
    name = "ghost"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return "ghost runtime not installed"


class _Stray(_Ghost):
    name = "stray"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        return None


def test_demo_names_skipped_backends_and_plugins(monkeypatch) -> None:
    monkeypatch.setitem(registry._extra, "ghost", _Ghost)
    monkeypatch.setitem(registry._extra, "stray", _Stray)
    used, skipped = cmd_demo.choose_backends(None)
    assert "stray" in used and "ghost" not in used
    # and the built-in ones this machine cannot use (iree-cuda without a GPU), each once
    unusable = {n: c.unavailable_reason() for n, c in registry.registered_backends().items()}
    assert skipped == {n: why for n, why in unusable.items() if why}
    assert skipped["ghost"] == "ghost runtime not installed"
    line = cmd_demo.backends_line(used, skipped)
    assert f"stray (plugin from {__name__})" in line
    assert "; skipped: " in line and "ghost (ghost runtime not installed)" in line
    assert "onnxruntime (" not in line  # the built-in backends need no origin


def _timings(**ms: float) -> list[Timing]:
    return [Timing(name.replace("_", " "), v / 1e3, v / 1e3) for name, v in ms.items()]


def test_demo_calls_a_difference_within_the_noise_a_tie() -> None:
    lines = cmd_demo.latency_lines(
        _timings(mix=10.2, ort_alone=10.0, ov_alone=12.0, ort_alone_2=10.3),
        ["ort alone", "ov alone"], ("ort alone 2", "ort alone"))
    text = "\n".join(lines)
    assert "×1.02 of best single (tie, noise ±3.0%)" in text
    assert "×1.20 of best single (slower, noise ±3.0%)" in text
    assert "a second instance: ±3.0% from ort alone" in text
    assert lines[-1] == "the run's noise: ±3.0%, how far the control landed from ort alone"
    lines = cmd_demo.latency_lines(_timings(mix=6.4, ort_alone=10.0, ort_alone_2=10.1),
                                   ["ort alone"], ("ort alone 2", "ort alone"))
    assert "×0.64 of best single (faster, noise ±1.0%)" in "\n".join(lines)
    lines = cmd_demo.latency_lines(_timings(mix=6.4, ort_alone=10.0), ["ort alone"], None)
    assert "noise unknown" in lines[2] and "noise is unknown" in lines[-1]


def test_demo_counts_a_mix_that_kept_a_whole_model_as_a_second_control() -> None:
    """The mix that kept onnxruntime's whole model is that model: how far it lands from
    onnxruntime alone is noise, so a 6% gap is a tie when the control landed 1% apart."""
    timings = _timings(mix=10.6, ort_alone=10.0, ov_alone=12.0, ort_alone_2=10.1)
    lines = cmd_demo.latency_lines(timings, ["ort alone", "ov alone"],
                                   ("ort alone 2", "ort alone"), ("mix", "ort alone"))
    text = "\n".join(lines)
    assert "×1.06 of best single (tie, noise ±6.0%; the same model as ort alone)" in text
    assert "×1.20 of best single (slower, noise ±6.0%)" in text
    assert "a second instance: ±1.0% from ort alone" in text
    assert lines[-1] == ("the run's noise: ±6.0%, how far the mix landed from ort alone, "
                         "the same model (the control landed ±1.0% apart)")
    lines = cmd_demo.latency_lines(_timings(mix=10.05, ort_alone=10.0, ort_alone_2=10.3),
                                   ["ort alone"], ("ort alone 2", "ort alone"),
                                   ("mix", "ort alone"))
    assert "×1.00 of best single (tie, noise ±3.0%; the same model as ort alone)" in lines[2]
    assert lines[-1].endswith("how far the control landed from ort alone")


def test_demo_end_to_end_says_what_did_not_run(model) -> None:
    r = tool("demo", str(model), "--backends", "onnxruntime", "--rounds", "3",
             "--cost", f"table:{model.parent / 'costs.json'}", "--cache",
             str(model.parent / "c.sqlite"))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "backends: onnxruntime\n" in out
    assert "end-to-end check: not run (costs came from table:" in out
    assert "collage (= onnxruntime whole)" in out
    assert "control: a second, independent onnxruntime whole model" in out
    ratio = [ln for ln in out.splitlines() if ln.strip().startswith("collage (=")][-1]
    assert " of best single (" in ratio and "noise ±" in ratio, ratio


def test_collage_opt_help_shows_the_cost_table_format() -> None:
    r = tool("--help", name="collage-opt")
    assert r.returncode == 0, r.stderr
    assert "collage-search{cost=table:FILE} reads a JSON cost table" in r.stdout
    assert '"per_op"' in r.stdout and '"transition"' in r.stdout


def test_demo_runs_the_bundled_alexnet_with_random_weights_made_once(model, tmp_path,
                                                                      monkeypatch) -> None:
    from collage_mlir.weights import splat_weights

    said: list[str] = []
    monkeypatch.setattr(cmd_demo, "say", said.append)
    assert cmd_demo.example_model(str(model), tmp_path) == str(model) and said == []
    assert cmd_demo.example_model(str(cmd_demo.EXAMPLE), tmp_path) == str(cmd_demo.EXAMPLE)
    assert said == [] and splat_weights(onnx.load(cmd_demo.EXAMPLE)) == []  # real weights
    assert splat_weights(onnx.load(cmd_demo.SPLAT_EXAMPLE))  # the bundled file: splat stand-ins
    path = Path(cmd_demo.example_model(str(cmd_demo.SPLAT_EXAMPLE), tmp_path))
    assert path.parent == tmp_path and splat_weights(onnx.load(path)) == []
    assert said[0].startswith("weights: the bundled alexnet holds splat stand-ins")
    made = path.stat().st_mtime_ns
    said.clear()
    assert cmd_demo.example_model(str(cmd_demo.SPLAT_EXAMPLE), tmp_path) == str(path)
    assert path.stat().st_mtime_ns == made and len(said) == 1  # reused, and said so
    assert said[0].startswith("weights: seeded random")
