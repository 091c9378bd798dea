"""Whole-model median latency of each backend on the light model-zoo models, side by side.

Each backend compiles the whole imported function (graph-kind backends through the ONNX
exporter) and runs it through Kernel.run. A backend that fails on a model prints a one-line
reason. `--opset N` upgrades the models first (IREE lowers several opset-9 ops only from
later opsets: MaxPool from 12, Softmax from 13).
Usage: python bench/backends.py [--models a,b] [--repeat N] [--backends a,b] [--opset N]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnx
import onnx.version_converter

from collage_mlir.backends.registry import available_backends, get_backend
from collage_mlir.importer import import_onnx

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512")


def load(name: str, opset: int | None) -> onnx.ModelProto:
    model = onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))
    return onnx.version_converter.convert_version(model, opset) if opset else model


def median_ms(kernel, inputs: list[np.ndarray], repeat: int) -> float:
    kernel.run(inputs)  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        kernel.run(inputs)
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def one_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"failed: {(text[0] if text else type(error).__name__)[:70]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--backends", default=",".join(available_backends()))
    parser.add_argument("--opset", type=int, default=None)
    args = parser.parse_args()
    backends = {n: get_backend(n) for n in args.backends.split(",")}
    print("| model | " + " | ".join(backends) + " |")
    print("|---|" + "---|" * len(backends))
    for name in args.models.split(","):
        module = import_onnx(load(name, args.opset))
        func_op = module.body.operations[0]
        shapes = [[int(d) for d in str(a.type).split("[")[1].split("]")[0].split(",")]
                  for a in func_op.regions[0].blocks[0].arguments]
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        cells = []
        for backend in backends.values():
            try:
                cells.append(f"{median_ms(backend.compile(module), inputs, args.repeat):.2f} ms")
            except Exception as e:
                cells.append(one_line(e))
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
