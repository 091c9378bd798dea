"""Per-call dispatch cost of each backend's Kernel.run on a 1x8 Relu, side by side.

The fixed cost of one call decides whether handing a small region to another backend can
pay, so it is measured through exactly the call path the runtime uses between regions
(Kernel.run_borrowed: outputs in the kernel's own reused buffers).
Usage: python bench/dispatch.py [--repeat N] [--backends a,b]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx.parser

from collage_mlir.backends.registry import available_backends, get_backend
from collage_mlir.importer import import_onnx

RELU = '''<ir_version: 8, opset_import: ["" : 17]>
g (float[1,8] x) => (float[1,8] y) { y = Relu(x) }'''


def measure(kernel, x: np.ndarray, repeat: int) -> tuple[float, float]:
    """Median and p90 of `repeat` calls, in microseconds (after a warm-up)."""
    run = kernel.run_borrowed
    for _ in range(max(10, repeat // 20)):
        run([x])
    times = np.empty(repeat)
    for i in range(repeat):
        t0 = time.perf_counter()
        run([x])
        times[i] = time.perf_counter() - t0
    return float(np.median(times) * 1e6), float(np.percentile(times, 90) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5000)
    parser.add_argument("--backends", default=",".join(available_backends()))
    args = parser.parse_args()
    module = import_onnx(onnx.parser.parse_model(RELU))
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    print("| backend | version | median µs | p90 µs |")
    print("|---|---|---|---|")
    for name in args.backends.split(","):
        try:
            backend = get_backend(name)
            kernel = backend.compile(module)
            np.testing.assert_allclose(kernel.run([x])[0], np.maximum(x, 0))
            med, p90 = measure(kernel, x, args.repeat)
            print(f"| {name} | {backend.version} | {med:.1f} | {p90:.1f} |", flush=True)
        except Exception as e:
            print(f"| {name} | – | failed: {str(e).splitlines()[0][:100]} | |", flush=True)


if __name__ == "__main__":
    main()
