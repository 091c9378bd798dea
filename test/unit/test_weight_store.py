"""The weight store: regions travel to a worker without their large weights, and every
consumer (the ONNX exporter, IREE's whole text) still sees the same values."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from collage_mlir.dialects.collage import WEIGHTS
from collage_mlir.export import export_function
from collage_mlir.export.resources import (
    STORE_MIN_BYTES,
    WeightStore,
    materialize,
    parse_resources,
    portable_text,
)
from collage_mlir.importer import import_onnx, parse_mlir


def _model(tmp_path) -> tuple[str, np.ndarray, np.ndarray]:
    """y = x @ W + b with W well above the store threshold and b (a shape-sized blob) below."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32)  # 16 KiB: stored
    b = rng.standard_normal(64).astype(np.float32)  # 256 B: stays in the text
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, w, b


def _initializers(module) -> dict[str, np.ndarray]:
    model = export_function(module)
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_portable_text_leaves_out_large_blobs_and_export_reads_them_back(tmp_path) -> None:
    path, w, b = _model(tmp_path)
    module = import_onnx(path)
    want = _initializers(module)
    store = WeightStore.write(module, tmp_path / "store")
    assert [n for _, n in store.index.values()] == [w.nbytes]  # only the large blob
    text = portable_text(module, store)
    assert len(text) < w.nbytes  # the 16 KiB weight is not in the text (its hex would be 32 KiB)
    assert len(parse_resources(text)) == 1  # the bias stays inline
    region = parse_mlir(text)  # a fresh context, as in a worker
    got = _initializers(region)
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


def test_materialize_puts_weights_back_into_the_text(tmp_path) -> None:
    path, w, _ = _model(tmp_path)
    module = import_onnx(path)
    region = parse_mlir(portable_text(module, WeightStore.write(module, tmp_path / "s")))
    materialize(region)
    text = str(region)
    assert WEIGHTS not in text
    blobs = {len(v) for v in parse_resources(text).values()}
    assert w.nbytes in blobs
    whole = parse_mlir(text)  # no store needed any more
    np.testing.assert_array_equal(
        sorted(a.size for a in _initializers(whole).values()), [64, 64 * 64])


def test_a_missing_store_is_a_clear_error(tmp_path) -> None:
    path, _, _ = _model(tmp_path)
    module = import_onnx(path)
    text = portable_text(module, WeightStore.write(module, tmp_path / "gone"))
    region = parse_mlir(text.replace(str(tmp_path / "gone"), str(tmp_path / "elsewhere")))
    with pytest.raises(OSError, match="elsewhere"):
        export_function(region)


def test_every_blob_the_printer_leaves_out_is_in_the_store(tmp_path) -> None:
    """Blob sizes around the threshold: each is either in the text or in the store."""
    from iree.compiler import ir

    module = parse_mlir("module {}")
    with module.context, ir.Location.unknown():
        attrs = {}
        for n in range(STORE_MIN_BYTES - 80, STORE_MIN_BYTES + 80, 4):
            attrs[f"a{n}"] = ir.DenseResourceElementsAttr.get_from_buffer(
                np.full(n // 4, n, np.int32), f"b{n}",
                ir.RankedTensorType.get([n // 4], ir.IntegerType.get_signless(32)))
        with ir.InsertionPoint(module.body):
            ir.Operation.create("test.holder", attributes=attrs)
    store = WeightStore.write(module, tmp_path / "s")
    inline = parse_resources(portable_text(module, store))
    names = {f"b{n}" for n in range(STORE_MIN_BYTES - 80, STORE_MIN_BYTES + 80, 4)}
    assert names <= set(inline) | set(store.index)
    assert set(inline) - set(store.index) and set(store.index) - set(inline)  # both used


def test_while_partitioning_exports_refer_to_the_store_and_kernels_outlive_it(tmp_path) -> None:
    from collage_mlir.backends.onnxruntime import OnnxRuntimeBackend
    from collage_mlir.backends.openvino import OpenVinoBackend
    from collage_mlir.driver import entry_graph
    from collage_mlir.export.resources import model_source, store_of, weight_store
    from collage_mlir.graph import SubGraph

    path, w, b = _model(tmp_path)
    module = import_onnx(path)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    kernels = []
    with weight_store(module) as store:
        assert store is not None and WEIGHTS in module.operation.attributes
        graph = entry_graph(module)
        region = SubGraph(graph, graph.op_bits).extract("r")
        assert store_of(region) is store  # a region reads its weights where the model does
        proto = export_function(region, external=True)
        external = [t for t in proto.graph.initializer
                    if t.data_location == onnx.TensorProto.EXTERNAL]
        assert [tuple(t.dims) for t in external] == [w.shape]  # the bias stays inline
        with model_source(proto, store) as source:
            assert isinstance(source, str) and len(open(source, "rb").read()) < w.nbytes
        inline = export_function(region)  # the default still carries every weight
        assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in inline.graph.initializer)
        kernels = [backend().compile(region) for backend in (OnnxRuntimeBackend, OpenVinoBackend)]
        directory = store.path
    assert WEIGHTS not in module.operation.attributes and not directory.exists()
    for kernel in kernels:  # compiled from the store's file, run after it is gone
        np.testing.assert_allclose(kernel.run([x])[0], x @ w + b, rtol=1e-4, atol=1e-4)



def test_a_copy_made_while_partitioning_compiles_once_it_forgets_the_gone_store(
        tmp_path) -> None:
    """The check and refinement build from a copy of the model made while the store lived;
    what `partition` returns forgets the store (`forget_store`), and its regions then carry
    their weights themselves (OpenVINO, saving a kernel whose blob is gone, compiles its
    region again)."""
    from collage_mlir.backends.openvino import OpenVinoBackend
    from collage_mlir.driver import entry_graph
    from collage_mlir.export.resources import forget_store, store_of, weight_store
    from collage_mlir.graph import SubGraph
    from collage_mlir.runtime.model import clone_module

    path, w, b = _model(tmp_path)
    module = import_onnx(path)
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    with weight_store(module) as store:
        copy = clone_module(module)
        assert store_of(copy) is store  # inside, the copy reads the store like the model
    assert WEIGHTS in copy.operation.attributes  # only the model itself forgot it
    forget_store(copy)
    graph = entry_graph(copy)
    region = SubGraph(graph, graph.op_bits).extract("r")
    assert store_of(region) is None and WEIGHTS not in str(region)
    kernel = OpenVinoBackend().compile(region)
    np.testing.assert_allclose(kernel.run([x])[0], x @ w + b, rtol=1e-4, atol=1e-4)
