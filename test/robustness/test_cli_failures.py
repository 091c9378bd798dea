"""The failure paths of the failure-paths issue, each through the real console script in a
subprocess: exit status ≠ 0 (or 0 where that is right), one line on stderr, no traceback,
and — where the issue asks — no work done before an output path is refused."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

BIN = Path(sys.executable).parent


def cli(*argv: str, tool: str = "collage-mlir", cwd: Path | None = None,
        pipe_to_head: bool = False) -> subprocess.CompletedProcess:
    cmd = [str(BIN / tool), *argv]
    if pipe_to_head:
        return subprocess.run(" ".join(cmd) + " | head -1", shell=True, capture_output=True,
                              text=True, cwd=cwd, timeout=600)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=600)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              d / "m.onnx")
    r = cli("partition", str(d / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(d / "c.sqlite"), "--no-verify", "-o", str(d / "out"))
    assert r.returncode == 0, r.stderr
    return d


def test_corrupt_cache(work) -> None:  # item 1
    bad = work / "junk.sqlite"
    bad.write_text("junk\n")
    r = cli("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache", str(bad),
            "-o", str(work / "o1"))
    one_line_error(r, str(bad), "not a usable measurement cache")
    one_line_error(cli("cache", "stats", "--cache", str(bad)), str(bad))


def test_an_application_database_is_not_made_a_cache(work) -> None:
    """`--cache app.sqlite` holding some application's tables: measuring used to write the
    cache's five tables into it, rc 0."""
    app = work / "app.sqlite"
    with sqlite3.connect(app) as conn:
        conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    r = cli("measure", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache", str(app))
    one_line_error(r, str(app), "an SQLite database of something else (tables: users)")
    with sqlite3.connect(app) as conn:
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == ["users"]


def test_cache_commands_refuse_a_misspelled_backend_and_mark_nothing_first(work) -> None:
    """`--backend onnxrutime` listed, cleared and marked nothing, rc 0; `remeasure --noisy
    --model missing.onnx` marked the noisy rows and only then failed on the path."""
    cache = str(work / "c.sqlite")
    for action in ("list", "clear", "remeasure"):
        extra = ("--noisy",) if action == "remeasure" else ()
        one_line_error(cli("cache", action, "--backend", "onnxrutime", *extra, "--cache",
                           cache), "--backend onnxrutime", "it holds: onnxruntime")
    r = cli("cache", "clear", "--backend", "openvino", "--cache", cache)  # installed, no rows
    assert r.returncode == 0 and "cleared 0" in r.stdout
    one_line_error(cli("cache", "list", "--this-host", "--cache", cache),
                   "cache list takes no --this-host")
    shared = str(work / "shared.sqlite")  # a team's: this host's rows and another's
    shutil.copy(cache, shared)
    with sqlite3.connect(shared) as conn:
        before = conn.execute("SELECT count(*) FROM measurements").fetchone()[0]
        conn.execute("UPDATE measurements SET host = 'another machine' WHERE rowid % 2 = 0")
        theirs = conn.execute("SELECT count(*) FROM measurements WHERE host = "
                              "'another machine'").fetchone()[0]
    r = cli("cache", "clear", "--this-host", "--cache", shared)
    assert r.returncode == 0 and f"cleared {before - theirs} measurements made on this host" \
        in r.stdout
    with sqlite3.connect(shared) as conn:
        assert conn.execute("SELECT count(*) FROM measurements").fetchone()[0] == theirs > 0
    one_line_error(cli("cache", "remeasure", "--noisy", "--max-spread", "0.001", "--model",
                       str(work / "missing.onnx"), "--cache", cache), "missing.onnx")
    with sqlite3.connect(cache) as conn:
        assert conn.execute("SELECT count(*) FROM measurements WHERE stale").fetchone()[0] == 0


def test_cache_actions_refuse_the_options_of_others_and_export_overwrites_no_database(
        work) -> None:
    """`cache clear --noisy` (or `--model M`) cleared every row; `cache export c.sqlite`
    emptied the cache it was exporting; `clear` on a misspelt path made an empty cache."""
    cache = str(work / "c.sqlite")

    def rows() -> int:
        with sqlite3.connect(cache) as conn:
            return conn.execute("SELECT count(*) FROM measurements").fetchone()[0]

    held = rows()
    assert held > 0
    for extra, says in ((("--noisy",), "cache clear takes no --noisy"),
                        (("--model", "m.onnx"), "cache clear takes no --model"),
                        (("--max-depth", "2"), "--max-depth applies to remeasure --model")):
        one_line_error(cli("cache", "clear", *extra, "--cache", cache), says)
    one_line_error(cli("cache", "export", str(work / "x.jsonl"), "--backend", "openvino",
                       "--cache", cache), "cache export takes no --backend")
    one_line_error(cli("cache", "export", cache, "--cache", cache), "is the cache itself")
    assert rows() == held
    one_line_error(cli("cache", "clear", "--cache", str(work / "typo.sqlite")),
                   "no cache here yet")
    assert not (work / "typo.sqlite").exists()


def test_read_only_cache_is_refused_for_measuring_and_read_for_stats(work) -> None:  # item 1
    ro = work / "ro" / "c.sqlite"
    ro.parent.mkdir()
    shutil.copy(work / "c.sqlite", ro)
    os.chmod(ro, 0o444)
    os.chmod(ro.parent, 0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: a read-only file is still writable")
        r = cli("measure", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache", str(ro))
        one_line_error(r, str(ro), "read-only")
        r = cli("cache", "stats", "--cache", str(ro))
        assert r.returncode == 0, r.stderr
    finally:
        os.chmod(ro.parent, 0o755)


def test_cache_stats_reads_without_writing(work) -> None:  # item 1
    before = (work / "c.sqlite").stat().st_mtime_ns
    assert cli("cache", "stats", "--cache", str(work / "c.sqlite")).returncode == 0
    assert (work / "c.sqlite").stat().st_mtime_ns == before


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage"])
def test_damaged_saved_model(work, damage) -> None:  # item 2
    saved = work / f"damaged_{damage}"
    shutil.copytree(work / "out", saved)
    artifact = next(p for p in saved.iterdir() if p.suffix == ".onnx")
    if damage == "delete":
        artifact.unlink()
    elif damage == "truncate":
        artifact.write_bytes(artifact.read_bytes()[:10])
    else:
        artifact.write_bytes(b"garbage")
    one_line_error(cli("run", str(saved)), artifact.name)


def test_tampered_weights_are_caught_by_the_checksum(work) -> None:  # issue 15 item 8
    saved = work / "tampered"
    shutil.copytree(work / "out", saved)
    # Measured noise may split Conv and Relu into two regions; tamper with the one that holds w.
    artifact, model = next((p, m) for p in sorted(saved.glob("*.onnx"))
                           if (m := onnx.load(p)).graph.initializer)
    w = numpy_helper.to_array(model.graph.initializer[0]) * 2
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, model.graph.initializer[0].name))
    onnx.save(model, artifact)
    one_line_error(cli("run", str(saved)), artifact.name, "checksum")


@pytest.mark.parametrize("argv", [
    ("import", "{m}", "-o", "/nonexistent/dir/x.mlir"),
    ("partition", "{m}", "--backends", "onnxruntime", "--cache", "{c}", "-o", "{m}"),
    ("run", "{out}", "--save-outputs", "{m}"),
])
def test_bad_output_paths_fail_before_any_work(work, argv) -> None:  # item 3
    fill = {"m": str(work / "m.onnx"), "c": str(work / "fresh.sqlite"), "out": str(work / "out")}
    r = cli(*[a.format(**fill) for a in argv])
    one_line_error(r)
    assert not (work / "fresh.sqlite").exists()  # nothing was measured


def test_collage_opt_bad_output(work) -> None:  # item 3
    r = cli(str(work / "m.onnx"), "-o", "/nonexistent/x.mlir", tool="collage-opt")
    one_line_error(r, "/nonexistent/x.mlir")


def test_unknown_reference_is_an_error(work) -> None:  # item 4
    r = cli("measure", str(work / "m.onnx"), "--backends", "onnxruntime", "--reference",
            "onnxrt", "--cache", str(work / "ref.sqlite"))
    one_line_error(r, "onnxrt")


@pytest.mark.parametrize("command", ["measure", "partition"])
def test_backend_typo_is_an_error_everywhere(work, command) -> None:  # item 5
    argv = [command, str(work / "m.onnx"), "--backends", "onnxruntime,opnevino", "--cache",
            str(work / "typo.sqlite")]
    if command == "partition":
        argv += ["-o", str(work / "typo_out")]
    one_line_error(cli(*argv), "opnevino")


def test_split_input_file_reports_real_lines_and_goes_on(work) -> None:  # item 7
    good = cli("import", str(work / "m.onnx")).stdout
    text = good.split("{-#")[0] + "\n// -----\n" + "\n" * 15 + "func.func @f( {\n"
    p = work / "split.mlir"
    p.write_text(text)
    r = cli(str(p), "--split-input-file", tool="collage-opt")
    line = one_line_error(r, str(p))
    assert f"{p}:" in line or '"-"' not in line
    bad_line = text.splitlines().index("func.func @f( {") + 1
    assert f":{bad_line}:" in line, line
    assert "func.func @g" in r.stdout  # the good chunk was still processed


def test_partitioned_mlir_is_refused(work) -> None:  # item 8
    p = work / "partitioned.mlir"
    shutil.copy(work / "out" / "model.mlir", p)
    r = cli("partition", str(p), "--backends", "onnxruntime", "--cache",
            str(work / "c.sqlite"), "-o", str(work / "again"))
    one_line_error(r, "already partitioned")


def test_broken_pipe_is_quiet(work) -> None:  # item 9
    r = cli("cache", "list", "--cache", str(work / "c.sqlite"), pipe_to_head=True)
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr


def test_pin_to_an_unused_backend_names_the_rule(work) -> None:  # item 10
    p = work / "pin.json"
    p.write_text(json.dumps({"placement": [
        {"pattern": {"match": {"node_type": "Relu"}, "rewrite": {"backend": "openvino"}}}]}))
    r = cli("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(work / "c.sqlite"), "--placement", str(p), "-o", str(work / "pin_out"))
    one_line_error(r, f"{p}: placement[0]", "openvino")


@pytest.mark.parametrize("argv", [
    ("partition", "{m}", "--max-depth", "0", "-o", "{d}/x"),
    ("partition", "{m}", "--max-depth", "-2", "-o", "{d}/x"),
    ("run", "{d}/out", "--profile", "-3"),
    ("run", "{d}/out", "--inputs"),
    ("measure", "{m}", "--timeout", "0"),
])
def test_bad_values_are_refused(work, argv) -> None:  # item 11
    r = cli(*[a.format(m=work / "m.onnx", d=work) for a in argv])
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "error" in r.stderr


def test_collage_opt_negative_max_depth(work) -> None:  # item 11
    r = cli(str(work / "m.onnx"), "--pass-pipeline",
            "builtin.module(collage-annotate{backends=onnxruntime max-depth=-1})",
            tool="collage-opt")
    one_line_error(r, "max-depth")


@pytest.mark.parametrize("options", ["backends=onnxruntime max-depth",
                                     "max-depth backends=onnxruntime",
                                     "backends=onnxruntime,max-depth",
                                     "backends=onnxruntime max-depth="])
def test_pass_option_without_a_value(work, options) -> None:  # item 11
    r = cli(str(work / "m.onnx"), "--pass-pipeline",
            f"builtin.module(collage-annotate{{{options}}})", tool="collage-opt")
    line = one_line_error(r, "option 'max-depth' needs a value (max-depth=<int|none>)")
    assert "unknown backend" not in line


def test_lossy_input_cast_is_refused_exact_one_accepted(work) -> None:  # item 11
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8))
    np.save(work / "x64.npy", x)  # float64 with more precision than float32
    one_line_error(cli("run", str(work / "out"), "--inputs", str(work / "x64.npy")), "float64")
    np.save(work / "x64ok.npy", x.astype(np.float32).astype(np.float64))
    assert cli("run", str(work / "out"), "--inputs", str(work / "x64ok.npy")).returncode == 0


@pytest.mark.parametrize(("arrays", "needles"), [
    ({"z": np.zeros((1, 3, 8, 8), np.float32)}, ("inputs: missing 'x'; unexpected 'z'",)),
    ({"x": np.zeros((1, 3, 4, 4), np.float32)},
     ("input 'x' has shape [1,3,4,4]; the model takes [1,3,8,8]", "--input-shape x=1x3x4x4")),
    ({"x": np.full((1, 3, 8, 8), 0.1)}, ("input 'x' is float64", "would change its values")),
])
def test_given_inputs_are_checked_against_the_model_before_anything_is_measured(
        work, arrays, needles) -> None:
    np.savez(work / "given.npz", **arrays)
    r = cli("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(work / "empty.sqlite"), "--inputs", str(work / "given.npz"),
            "-o", str(work / "given_out"))
    one_line_error(r, *needles)
    assert not (work / "empty.sqlite").exists()  # the cache was never opened


def test_partition_and_run_take_inputs_as_one_npz(work) -> None:
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(work / "x.npz", x=x)
    r = cli("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(work / "c.sqlite"), "--inputs", str(work / "x.npz"), "-o", str(work / "npz"))
    assert r.returncode == 0, r.stderr
    r = cli("run", str(work / "npz"), "--inputs", str(work / "x.npz"), "--save-outputs",
            str(work / "npz_out"))
    assert r.returncode == 0, r.stderr
    assert (np.load(work / "npz_out" / "y.npy") >= 0).all()


def test_partition_replaces_the_output_directory(work) -> None:  # item 12
    """A model saved there before is replaced whole (its artifacts the new one lacks are
    gone); a folder holding anything else (the input model, notes) is refused untouched."""
    out = work / "replace"
    args = ("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(work / "c.sqlite"), "--no-verify", "-o", str(out))
    assert cli(*args).returncode == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["checksums"]["stale_from_before.onnx"] = "0" * 64  # an older model's artifact
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / "stale_from_before.onnx").write_text("old")
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert not (out / "stale_from_before.onnx").exists()
    assert (out / "manifest.json").is_file()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".replace")]
    (out / "notes.txt").write_text("mine")
    one_line_error(cli(*args), "holds files that are not a saved model (notes.txt)")
    assert (out / "notes.txt").read_text() == "mine"


def test_partition_refuses_a_folder_it_cannot_make_before_any_work(work) -> None:
    """/proc takes no new folders. Root passes the permission check there (and under /sys),
    so the save used to fail after all the work; making a folder beside the target is the
    check that tells."""
    r = cli("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(work / "c.sqlite"), "--no-verify", "-o", "/proc/collage-out")
    line = one_line_error(r, "/proc/collage-out: ")
    assert ("cannot make a folder" if os.geteuid() == 0 else "not writable") in line
    assert "estimated total" not in r.stdout


def test_reports_are_not_written_into_a_saved_model_and_dash_is_stdout(work) -> None:
    """A report written into a saved model's folder broke it (a replaced manifest.json:
    "unknown format None"; an extra file: the next `-o` there refused), rc 0. `--json -`
    made a file named "-", and then printed the text report before the JSON."""
    part = ("partition", str(work / "m.onnx"), "--backends", "onnxruntime", "--cache",
            str(work / "c.sqlite"), "--no-verify")
    one_line_error(cli(*part, "-o", str(work / "j"), "--json", str(work / "j" / "r.json")),
                   "the folder the model is saved to")
    assert not (work / "j").exists()
    saved = work / "out"
    before = {p.name: p.read_bytes() for p in saved.iterdir()}
    one_line_error(cli("run", str(saved), "--json", str(saved / "manifest.json")),
                   "inside the saved model")
    one_line_error(cli("explain", str(saved), "-o", str(saved / "model.mlir")),
                   "inside the saved model")
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before
    r = cli("run", str(saved), "--json", "-", "--profile", "2", cwd=work)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["regions"]  # the JSON alone: the text goes to stderr
    assert "shape=[1, 4, 8, 8]" in r.stderr and "est. ms" in r.stderr
    assert not (work / "-").exists()


def test_outputs_are_not_saved_into_a_saved_model_and_a_failed_save_is_one_line(work) -> None:
    """`run --save-outputs` into the saved model itself was accepted (the next `-o` there
    refused the folder); a folder standing where an output file goes ended in "internal
    error: IsADirectoryError"."""
    saved = work / "out"
    before = {p.name: p.read_bytes() for p in saved.iterdir()}
    one_line_error(cli("run", str(saved), "--save-outputs", str(saved)), "a saved model")
    one_line_error(cli("run", str(saved), "--save-outputs", str(saved / "o")),
                   "inside the saved model")
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before
    (work / "blocked" / "y.npy").mkdir(parents=True)
    one_line_error(cli("run", str(saved), "--save-outputs", str(work / "blocked")),
                   "y.npy: cannot save the output")


def test_outputs_never_replace_the_given_input_files(work) -> None:
    """`run --inputs io/y.npy --save-outputs io` wrote the output y over the input file."""
    io = work / "io"
    io.mkdir()
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(io / "y.npy", x)
    for given in (str(io / "y.npy"), f"x={work / 'io' / '..' / 'io' / 'y.npy'}"):
        one_line_error(cli("run", str(work / "out"), "--inputs", given, "--save-outputs",
                           str(io)), "output 'y' would overwrite the input file")
    np.testing.assert_array_equal(np.load(io / "y.npy"), x)
    r = cli("run", str(work / "out"), "--inputs", str(io / "y.npy"), "--save-outputs",
            str(work / "io_out"))
    assert r.returncode == 0, r.stderr
    assert (np.load(work / "io_out" / "y.npy") >= 0).all()  # a Relu's output


@pytest.mark.parametrize(("files", "args", "says"), [
    ({"x.npz": "npy"}, ["x.npz"], "holds one array (.npy), not an .npz archive"),
    ({"x.npz": b"PK\x03\x04garbage"}, ["x.npz"], "cannot read .npz inputs: BadZipFile"),
    ({"a.npy": "npy", "b.npy": "npy"}, ["x=a.npy", "x=b.npy"], "'x' given more than once"),
    ({"m.json": b'{"not": "numpy"}'}, ["m.json"], "m.json: not a NumPy file (.npy or .npz"),
    ({"e.npy": b""}, ["e.npy"], "e.npy: is empty, not a NumPy file"),
    ({"x.npy": "complex"}, ["x.npy"], "input 'x' is complex64 (complex); the model takes "
                                      "float32"),
])
def test_inputs_a_run_cannot_read_are_named(work, tmp_path, files, args, says) -> None:
    """A .npy named .npz and a damaged .npz ended in internal errors; an input named
    twice silently took the last file; a JSON file was "pickled data" to allow."""
    x = np.zeros((1, 3, 8, 8), np.float32)
    for name, content in files.items():
        if content in ("npy", "complex"):  # a complex one warned and ran, rc 0
            with open(tmp_path / name, "wb") as f:
                np.save(f, x if content == "npy" else x + 0j)
        else:
            (tmp_path / name).write_bytes(content)
    one_line_error(cli("run", str(work / "out"), "--inputs", *args, cwd=tmp_path), says)


def test_a_damaged_model_text_is_named_as_such(work) -> None:
    """One byte of model.mlir that is not UTF-8 was reported as "manifest.json: not valid
    JSON"."""
    saved = work / "bad_utf8"
    shutil.copytree(work / "out", saved)
    text = bytearray((saved / "model.mlir").read_bytes())
    text[text.index(b"func.func") + 3] = 0xCC
    (saved / "model.mlir").write_bytes(bytes(text))
    line = one_line_error(cli("run", str(saved)), "model.mlir: changed since it was saved")
    assert "manifest" not in line


def test_import_of_a_directory(work) -> None:  # item 13
    one_line_error(cli("import", str(work)), "is a directory")


def test_version() -> None:  # item 15
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("collage-mlir ")


def test_cache_integrity_after_all_of_it(work) -> None:
    with sqlite3.connect(work / "c.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("argv, says", [
    (["handoff.py", "--rounds", "0"], "--rounds: must be a positive integer"),
    (["handoff.py", "--sizes", "abc"], "--sizes: 'abc' is not an integer"),
    (["handoff.py", "--backends", "onnxruntime,nosuch"], "unknown backend 'nosuch'"),
    (["handoff.py", "--json", "/nonexistent/x.json"], "folder '/nonexistent' does not exist"),
    (["carve.py", "{model}", "--ceiling", "0"], "--ceiling: must be a positive integer"),
    (["carve.py", "{model}", "--islands", "x", "--outer", "nosuch"], "unknown backend 'nosuch'"),
    (["ceiling.py", "--rounds", "-1"], "--rounds: must be a positive integer"),
    (["e2e.py", "--backends", "onnxruntime,nosuch"], "unknown backend 'nosuch'"),
])
def test_the_bench_tools_the_readme_names_answer_a_mistake_in_one_line(argv, says) -> None:
    """They printed tracebacks (or ran on and answered with zeros) for a bad flag."""
    bench = Path(__file__).parents[2] / "bench"
    model = Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"
    script, *args = argv
    args = [a.replace("{model}", str(model)) for a in args]
    r = subprocess.run([sys.executable, str(bench / script), *args], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert says in r.stderr.strip().splitlines()[-1]


def test_a_tmpdir_where_nothing_can_be_made_is_refused_before_measuring(work, monkeypatch
                                                                         ) -> None:
    """Python falls back to /tmp; iree-compile did not, and every IREE region failed,
    cached as one IREE cannot run (later runs with a good TMPDIR still left IREE out)."""
    cache = work / "tmpdir.sqlite"
    monkeypatch.setenv("TMPDIR", str(work / "no such folder"))
    for argv in (("partition", str(work / "m.onnx"), "-o", str(work / "never")),
                 ("measure", str(work / "m.onnx"))):
        one_line_error(cli(*argv, "--backends", "onnxruntime", "--cache", str(cache)),
                       "TMPDIR=", "no such folder: no folder can be made there")
    assert not cache.exists() and not (work / "never").exists()
