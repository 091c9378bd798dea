"""Runtime: an outlined module runs end to end, matches numpy, saves and loads."""

from __future__ import annotations

import numpy as np
import pytest

import collage_mlir
from collage_mlir.backends.registry import available_backends
from collage_mlir.errors import CollageError
from collage_mlir.passes.pipeline import run_pipeline
from collage_mlir.runtime import PartitionedModel, load

T = "!torch.vtensor<[2,4],f32>"
STAMPED = """
func.func @f(%arg0: {T}, %arg1: {T}) -> ({T}, {T}) attributes {{collage.input_names = ["x", "y"], collage.output_names = ["sum", "neg"], torch.onnx_meta.opset_version = 17 : si64}} {{
  %a = torch.operator "onnx.Relu"(%arg0) {{collage.region = 0 : i64, collage.backend = "onnxruntime"}} : ({T}) -> {T}
  %b = torch.operator "onnx.Abs"(%a) {{collage.region = 1 : i64, collage.backend = "{B1}"}} : ({T}) -> {T}
  %c = torch.operator "onnx.Mul"(%a, %arg1) {{collage.region = 0 : i64, collage.backend = "onnxruntime"}} : ({T}, {T}) -> {T}
  %d = torch.operator "onnx.Add"(%b, %c) {{collage.region = 2 : i64, collage.backend = "{B2}"}} : ({T}, {T}) -> {T}
  %e = torch.operator "onnx.Neg"(%c) {{collage.region = 2 : i64, collage.backend = "{B2}"}} : ({T}) -> {T}
  return %d, %e : {T}, {T}
}}
"""


def expected(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    a = np.maximum(x, 0)
    c = a * y
    return [np.abs(a) + c, -c]


MIXED = [b for b in ("openvino", "iree") if b in available_backends()]


def stamped(b1: str = "onnxruntime", b2: str = "onnxruntime") -> str:
    return STAMPED.format(T=T, B1=b1, B2=b2)


@pytest.fixture
def model() -> PartitionedModel:
    return partitioned(stamped())


def partitioned(text: str) -> PartitionedModel:
    module = collage_mlir.parse_mlir(text)
    run_pipeline(module, "builtin.module(collage-outline)")
    return PartitionedModel.from_module(module)


def test_runs_and_matches_numpy(model):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, 2, 4)).astype(np.float32)
    by_name = model.run({"x": x, "y": y})
    by_order = model.run([x, y])
    for got in (by_name, by_order):
        for g, e in zip(got, expected(x, y), strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-6)
    assert model.output_names == ["sum", "neg"]
    assert [s.callee for s in model.plan.steps] == ["f_onnxruntime_0", "f_onnxruntime_1",
                                                     "f_onnxruntime_2"]


def test_bad_inputs_are_named(model):
    with pytest.raises(collage_mlir.CollageError, match="^inputs: missing 'y'; the model takes"):
        model.run({"x": np.zeros((2, 4), np.float32)})
    with pytest.raises(collage_mlir.CollageError, match=r"input 'x' has shape \[3,4\]; this model was built for \[2,4\]"):
        model.run([np.zeros((3, 4), np.float32), np.zeros((2, 4), np.float32)])


@pytest.mark.parametrize("backends", [("onnxruntime", "onnxruntime"), tuple(MIXED)],
                         ids=["onnxruntime", "mixed"])
def test_save_and_load_round_trip(backends, tmp_path):
    if len(backends) < 2:
        pytest.skip("openvino and iree unavailable")
    model = partitioned(stamped(*backends))
    model.save(tmp_path / "out")
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert "f_onnxruntime_0.onnx" in files  # each backend wrote its compiled artifact
    if "openvino" in backends:
        assert "f_openvino_1.ovblob" in files
    if "iree" in backends:
        assert any(f.endswith(".vmfb") for f in files) and "f_iree_2.iree.json" in files
    again = load(tmp_path / "out")
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.full((2, 4), 3, np.float32)
    for a, b in zip(model.run([x, y]), again.run([x, y]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert again.mlir == model.mlir
    for a, e in zip(again.run([x, y]), expected(x, y), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-6)


@pytest.mark.parametrize("name", MIXED)
def test_regions_saved_for_another_cpu_are_compiled_again(name, tmp_path, monkeypatch, capsys):
    """IREE compiles for the host's CPU, and OpenVINO's blob keeps what it chose for it: on
    a CPU without the same instructions IREE's code would die of an illegal instruction.
    Loaded where the CPU differs, the region is compiled again (and said so); where it is
    the same, its artifact is loaded."""
    from collage_mlir.backends.registry import registered_backends

    cls = registered_backends()[name]
    model = partitioned(stamped("onnxruntime", name))
    model.save(tmp_path / "out")
    loaded_from: list[str] = []
    real = cls.load_kernel
    monkeypatch.setattr(cls, "load_kernel", lambda self, m, stem: (
        loaded_from.append(stem), real(self, m, stem))[1])
    x, y = np.ones((2, 4), np.float32), np.full((2, 4), 2, np.float32)
    load(tmp_path / "out")
    assert len(loaded_from) == 1 and "recompiling" not in capsys.readouterr().out
    monkeypatch.setattr(cls, "artifact_target", property(lambda self: "another CPU"))
    again = load(tmp_path / "out")
    assert len(loaded_from) == 1
    out = capsys.readouterr().out
    assert f"region f_{name}_2 was compiled for" in out and "another CPU; recompiling" in out
    for a, e in zip(again.run([x, y]), expected(x, y), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_load_rejects_other_directories(tmp_path):
    with pytest.raises(collage_mlir.CollageError, match="not a saved partitioned model"):
        load(tmp_path)


def test_profile_times_every_region_and_the_report_shows_it(model):
    from collage_mlir.runtime.report import ReportRow

    model.report_rows = [ReportRow(s.callee, s.backend, 1, "X", 1e-3) for s in model.plan.steps]
    x = np.ones((2, 4), np.float32)
    measured = model.profile([x, x], rounds=3)
    assert list(measured) == [s.callee for s in model.plan.steps]
    assert all(t > 0 for t in measured.values())
    report = model.report(measured=measured)
    assert "measured ms" in report.splitlines()[0]
    assert f"{measured['f_onnxruntime_2'] * 1e3:.3f}" in report
    assert "measured sum of region calls" in report
    assert "measured ms" not in model.report()
    for rounds in (0, -1, 2.5, True):  # 0 gave NaN for every region, with numpy's warnings
        with pytest.raises(CollageError, match="rounds must be a positive int"):
            model.profile([x, x], rounds=rounds)


def test_cli_run_profile(model, tmp_path):
    import subprocess
    import sys

    model.save(tmp_path / "out")
    proc = subprocess.run([sys.executable, "-m", "collage_mlir.tools.cli", "run",
                           str(tmp_path / "out"), "--profile", "3"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "measured ms" in proc.stdout


def test_a_backend_name_with_a_dash_joins_report_and_profile(tmp_path):
    """Region functions spell the backend as an identifier (`ort-copy` → `ort_copy`); the
    report rows and the profile must name regions the same way, or the measured column of
    such a backend stays empty."""
    import json

    from collage_mlir.backends.onnxruntime import OnnxRuntimeBackend
    from collage_mlir.backends.registry import _extra, register_backend
    from collage_mlir.cost.table import TableEstimator

    class DashedBackend(OnnxRuntimeBackend):
        """Test double: onnxruntime under a name that is not an identifier."""

        name = "ort-copy"

    register_backend(DashedBackend)
    try:
        costs = tmp_path / "costs.json"
        costs.write_text(json.dumps({"per_op": {"onnxruntime": {"Relu": 1.0, "Abs": 2.0},
                                                "ort-copy": {"Relu": 2.0, "Abs": 1.0}}}))
        module = collage_mlir.parse_mlir(ABS_RELU)
        model = collage_mlir.compile(module, backends=["onnxruntime", "ort-copy"],
                                     estimator=TableEstimator.from_json(str(costs)))
        assert [s.backend for s in model.plan.steps] == ["onnxruntime", "ort-copy"]
        measured = model.profile([np.ones((2, 4), np.float32)], rounds=2)
        assert [r.region for r in model.report_rows] == list(measured)
        row = next(line for line in model.report(measured=measured).splitlines()
                   if line.startswith("f_ort_copy_1 "))
        assert f"{measured['f_ort_copy_1'] * 1e3:.3f}" in row
    finally:
        _extra.pop(DashedBackend.name, None)


ABS_RELU = f"""
func.func @f(%arg0: {T}) -> {T} attributes {{torch.onnx_meta.opset_version = 17 : si64}} {{
  %a = torch.operator "onnx.Relu"(%arg0) : ({T}) -> {T}
  %b = torch.operator "onnx.Abs"(%a) : ({T}) -> {T}
  return %b : {T}
}}
"""


def test_a_manifest_without_an_artifacts_checksum_is_refused(model, tmp_path):
    import json

    from collage_mlir.runtime.model import MANIFEST_DIGEST, _manifest_digest

    out = model.save(tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    artifact = manifest["regions"][0]["artifacts"][0]
    (out / artifact).write_bytes((out / artifact).read_bytes() + b" ")  # tampered ...
    for sums in ({}, {k: v for k, v in manifest["checksums"].items() if k != artifact}):
        changed = dict(manifest, checksums=sums)
        (out / "manifest.json").write_text(json.dumps(changed))
        with pytest.raises(collage_mlir.CollageError, match="manifest.json: changed since"):
            load(out)  # ... and its checksum dropped: the manifest's own checksum says so
        changed[MANIFEST_DIGEST] = _manifest_digest(changed)
        (out / "manifest.json").write_text(json.dumps(changed))
        with pytest.raises(collage_mlir.CollageError, match="has no checksum in the manifest"):
            load(out)  # ... even re-signed: refused, not run


def test_a_manifest_naming_an_unknown_backend_names_the_manifest(model, tmp_path):
    import json

    from collage_mlir.runtime.model import MANIFEST_DIGEST, _manifest_digest

    out = model.save(tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["regions"][0]["backend"] = "tvm"
    manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(collage_mlir.CollageError,
                       match=r"out/manifest.json: unknown backend 'tvm' \(known: "):
        load(out)


def test_a_save_inside_a_saved_model_is_refused(model, tmp_path):
    """`save` into a folder of a saved model was written (breaking its checksums, and the
    model could no longer be saved over); --save-outputs, --json and explain refused it."""
    out = model.save(tmp_path / "out")
    with pytest.raises(collage_mlir.CollageError, match=r"inner: inside the saved model "):
        model.save(out / "inner")
    assert not (out / "inner").exists()
    load(out)


def test_saves_racing_to_one_folder_all_succeed_and_the_last_stays(model, tmp_path):
    """Each save moves the folder there away and its own in: two at once raised a bare
    FileNotFoundError when one moved the folder the other was about to move."""
    import threading

    errors: list[BaseException] = []

    def save_many() -> None:
        for _ in range(15):
            try:
                model.save(tmp_path / "m")
            except BaseException as e:  # noqa: BLE001 - any failure is the finding
                errors.append(e)
    threads = [threading.Thread(target=save_many) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no moved-away folder left
    load(tmp_path / "m")


def test_a_region_saved_with_no_target_is_taken_at_its_word():
    from collage_mlir.backends.openvino import OpenVinoBackend
    from collage_mlir.runtime.model import _same_target

    if "openvino" not in available_backends():
        pytest.skip("openvino unavailable")
    backend = OpenVinoBackend()
    assert _same_target({}, backend) and _same_target({"target": ""}, backend)
    assert _same_target({"target": backend.artifact_target}, backend)
    assert not _same_target({"target": "another CPU"}, backend)


def test_a_flipped_byte_in_a_manifest_string_is_refused(model, tmp_path):
    out = model.save(tmp_path / "out")
    text = (out / "manifest.json").read_text()
    at = text.index('"', text.index('"backends_considered": [') + 24) + 1  # a name in a list
    (out / "manifest.json").write_text(text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1:])
    with pytest.raises(collage_mlir.CollageError, match="manifest.json: changed since"):
        load(out)


def test_save_replaces_only_a_saved_model_or_an_empty_directory(model, tmp_path,
                                                                 monkeypatch):
    """Saving replaces the target directory whole: one holding anything but a saved model
    (the input model beside it, notes) is refused, untouched; an empty one, a model saved
    before and a symlink's target are written; the folder is as readable as the umask says."""
    import os
    import stat

    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "model.onnx").write_bytes(b"the user's input")
    with pytest.raises(collage_mlir.CollageError, match=r"holds files that are not a saved "
                                                        r"model \(model.onnx\)"):
        model.save(mixed)
    assert sorted(p.name for p in mixed.iterdir()) == ["model.onnx"]
    empty = tmp_path / "empty"
    empty.mkdir()
    old = os.umask(0o022)
    try:
        out = model.save(empty)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert model.save(out) == out  # a saved model is replaced ...
    (out / "notes.txt").write_text("mine")
    with pytest.raises(collage_mlir.CollageError, match="notes.txt"):
        model.save(out)  # ... but not once something else is in it
    assert (out / "notes.txt").read_text() == "mine"
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target", target_is_directory=True)
    (tmp_path / "target").mkdir()
    assert model.save(link) == tmp_path / "target" and link.is_symlink()
    load(link)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch left
    with pytest.raises(collage_mlir.CollageError, match="does not exist"):
        model.save(tmp_path / "missing" / "out")
    monkeypatch.chdir(empty)
    with pytest.raises(collage_mlir.CollageError, match="the current directory"):
        model.save(".")


@pytest.mark.skipif("openvino" not in available_backends(), reason="openvino unavailable")
def test_a_loaded_model_saves_again_and_loads(tmp_path):
    """OpenVINO cannot export a model it imported (the blob would not read back): a loaded
    kernel is saved as its blob, or compiled again once that blob is gone."""
    import shutil

    model = partitioned(stamped("openvino", "openvino"))
    first = load(model.save(tmp_path / "a"))
    shutil.rmtree(tmp_path / "a")
    second = load(first.save(tmp_path / "b"))  # the blob is gone: compiled again
    third = load(second.save(tmp_path / "c"))  # the blob is there: copied
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    y = np.full((2, 4), 3, np.float32)
    for loaded in (second, third):
        for a, e in zip(loaded.run([x, y]), expected(x, y), strict=True):
            np.testing.assert_allclose(a, e, rtol=1e-6)


CHAINS = [("onnxruntime", "onnxruntime"), ("openvino", "iree"), ("iree", "openvino")]
"""Region 0 on onnxruntime feeds region 1 (B1) and region 2 (B2), region 1 feeds region 2:
with these every backend hands a buffer to every other."""


@pytest.mark.parametrize("backends", CHAINS, ids=["-".join(c) for c in CHAINS])
def test_results_are_the_callers_own_and_inputs_are_read_afresh(backends):
    """Regions hand each other their own reused buffers (`run_borrowed`); what `run` returns
    must still belong to the caller, and every run must compute on the values its inputs
    hold then (a new array, or the same array updated in place)."""
    missing = [b for b in backends if b not in available_backends()]
    if missing:
        pytest.skip(f"{missing} unavailable")
    model = partitioned(stamped(*backends))
    rng = np.random.default_rng(7)
    x1, y1, x2, y2 = rng.standard_normal((4, 2, 4)).astype(np.float32)
    first = model.run([x1, y1])
    second = model.run([x2, y2])
    for got, want in ((first, expected(x1, y1)), (second, expected(x2, y2))):
        for g, e in zip(got, want, strict=True):
            np.testing.assert_allclose(g, e, rtol=1e-6)
    arrays = [*first, *second, x1, y1, x2, y2]
    assert not any(np.shares_memory(a, b) for k, a in enumerate(arrays) for b in arrays[k + 1:])
    second[0][...] = 99  # writing a result changes nothing inside the model
    x2[...] = x1  # the same input arrays, updated in place
    third = model.run([x2, y2])
    for g, e in zip(third, expected(x1, y2), strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6)
    for g, e in zip(first, expected(x1, y1), strict=True):  # the first results stand
        np.testing.assert_allclose(g, e, rtol=1e-6)


@pytest.mark.parametrize("backends", CHAINS, ids=["-".join(c) for c in CHAINS])
def test_threads_sharing_one_model_get_their_own_answers(backends):
    """Kernels reuse their buffers and requests: two runs at once would write each other's
    values (and OpenVINO refuses a busy request). Runs take turns instead."""
    import threading

    missing = [b for b in backends if b not in available_backends()]
    if missing:
        pytest.skip(f"{missing} unavailable")
    model = partitioned(stamped(*backends))
    rng = np.random.default_rng(3)
    given = [list(rng.standard_normal((2, 2, 4)).astype(np.float32) * (k + 1))
             for k in range(4)]
    faults: list[str] = []

    def worker(x: np.ndarray, y: np.ndarray) -> None:
        want = expected(x, y)
        for _ in range(100):
            try:
                got = model.run([x, y])
            except Exception as e:  # noqa: BLE001 - every failure is a finding here
                faults.append(f"{type(e).__name__}: {e}")
                continue
            if not all(np.allclose(g, w, rtol=1e-6) for g, w in zip(got, want, strict=True)):
                faults.append("wrong numbers")

    threads = [threading.Thread(target=worker, args=xy) for xy in given]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert faults == []


def test_a_model_says_how_to_keep_it_instead_of_pickling(model):
    import copy
    import pickle

    with pytest.raises(collage_mlir.CollageError, match=r"save\(\) it and collage_mlir.load"):
        pickle.dumps(model)
    with pytest.raises(collage_mlir.CollageError, match=r"cannot be deep-copied.*copy.copy"):
        copy.deepcopy(model)
    twin = copy.copy(model)  # a shallow copy (`with_record`) shares the kernels and turns
    assert twin.kernels is model.kernels and twin._turn is model._turn


@pytest.mark.parametrize("operand, says", [
    ("%k", "from constants alone, which the import could not fold"),
    ("%arg0", "run collage-outline first"),
])
def test_an_op_left_outside_the_regions_is_refused_saying_why(operand, says):
    from collage_mlir.errors import CollageError
    from collage_mlir.runtime.plan import build_plan

    module = collage_mlir.parse_mlir(f"""
func.func @f(%arg0: {T}) -> {T} {{
  %k = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<1.0> : tensor<2x4xf32>}} : () -> {T}
  %n = torch.operator "onnx.Neg"({operand}) : ({T}) -> {T}
  return %n : {T}
}}""")
    with pytest.raises(CollageError, match="op Neg is outside every region") as e:
        build_plan(module)
    assert says in str(e.value)


def test_a_returned_constant_fills_its_slot_read_only():
    from collage_mlir.runtime.plan import build_plan

    module = collage_mlir.parse_mlir(f"""
func.func @f(%arg0: {T}) -> ({T}, {T}) {{
  %k = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>}} : () -> {T}
  return %arg0, %k : {T}, {T}
}}""")
    plan = build_plan(module)
    (slot, constant), = plan.constants.items()
    assert plan.outputs == [0, slot] and constant.type == T
    assert constant.value.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert not constant.value.flags.writeable


def test_a_returned_constant_of_value_ints_is_read():
    # Constant<value_ints> returned as a model output had "no tensor value" in the plan
    from collage_mlir.runtime.plan import build_plan

    module = collage_mlir.parse_mlir(f"""
func.func @f(%arg0: {T}) -> ({T}, !torch.vtensor<[2],si64>) {{
  %k = torch.operator "onnx.Constant"() {{torch.onnx.value_ints = [3000000000 : si64, -1 : si64]}} : () -> !torch.vtensor<[2],si64>
  return %arg0, %k : {T}, !torch.vtensor<[2],si64>
}}""")
    (slot, constant), = build_plan(module).constants.items()
    assert constant.value.dtype == np.int64 and constant.value.tolist() == [3_000_000_000, -1]


def test_a_kernel_raising_at_run_time_is_named_by_region_and_onnx_node(model):
    """A backend's exception while running (a saved model's kernel, new inputs) reached the
    command line as an internal error quoting only the exported node name."""
    class Raising:
        def run_borrowed(self, inputs):
            raise RuntimeError("Non-zero status code returned while running Abs node. "
                               "Name:'n0'\nmore")

    [abs_region] = [s.callee for s in model.plan.steps if s.callee.endswith("_1")]
    broken = PartitionedModel(model.module, {**model.kernels, abs_region: Raising()},
                              model.backends)
    x = np.ones((2, 4), np.float32)
    with pytest.raises(collage_mlir.CollageError) as err:
        broken.run([x, x])
    assert str(err.value).startswith(f"region @{abs_region} on onnxruntime failed: "
                                     "RuntimeError: Non-zero status")
    assert "Name:'n0'" in str(err.value) and "more" not in str(err.value)
