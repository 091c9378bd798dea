"""Where an iree-cuda call's time goes, side by side in one process (needs a CUDA GPU).

For a Relu over 1 KiB, 256 KiB and 4 MiB of f32: the kernel's `run` as the runtime calls it,
IREE's own copy of a host array to the device (`asdevicearray`), a copy into a reused
pinned host buffer (what the kernel does), the call on device-resident data, and bringing
a result back (`to_host`). Microseconds per call, mean of ROUNDS after two warm-up calls.

Usage: python bench/iree_cuda_calls.py [--rounds N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import onnx.parser

from collage_mlir.backends.registry import get_backend
from collage_mlir.errors import CollageError
from collage_mlir.graph.dataflow import DataflowGraph
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.importer import import_onnx

SIZES = (256, 65_536, 1_048_576)


def per_call_us(fn: Callable[[], object], rounds: int) -> float:
    fn()
    fn()
    start = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - start) / rounds * 1e6


def relu_kernel(backend, n: int):
    module = import_onnx(onnx.parser.parse_model(
        f'<ir_version: 8, opset_import: ["" : 17]>\n'
        f'g (float[{n}] x) => (float[{n}] y) {{ y = Relu(x) }}'))
    graph = DataflowGraph(module.body.operations[0])
    return backend.compile(SubGraph(graph, graph.op_bits).extract("relu")), module


def row(backend, n: int, rounds: int) -> list[float]:
    """The table's cells for a Relu over `n` f32 values."""
    import iree.runtime as rt

    kernel, _module = relu_kernel(backend, n)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    device = kernel._device
    on_device = rt.asdevicearray(device, x)
    kernel.run([x])  # allocates the pinned buffer
    view = kernel._staging[0][1]
    call = per_call_us(lambda: kernel._fn(on_device), rounds)
    return [per_call_us(lambda: kernel.run([x]), rounds),
            per_call_us(lambda: rt.asdevicearray(device, x), rounds),
            per_call_us(lambda: np.copyto(view, x), rounds),
            call,
            per_call_us(lambda: kernel._fn(on_device).to_host(), rounds) - call]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    try:
        backend = get_backend("iree-cuda")
    except CollageError as e:
        raise SystemExit(str(e)) from None
    print("| bytes | run | IREE's upload | pinned copy | call on device data | to_host |")
    print("|---|---|---|---|---|---|")
    for n in SIZES:
        cells = row(backend, n, args.rounds)
        print(f"| {4 * n} | " + " | ".join(f"{c:.1f}" for c in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
