"""The onnx package's light model-zoo architectures with random, well-scaled weights.

The light models make every weight with `ConstantOfShape`: one value repeated. A compiler
can fold a product with a splat into a reduction (IREE's alexnet Gemms: ~1 ms against ~5 ms
dense), and outputs barely depend on the kernels, so results on them say little. Here each
such weight becomes a random initializer of the same shape, chosen by how it is used:
normal(0, 1/fan_in) for weights of rank >= 2 (Kaiming with unit gain: residual stacks
saturate the softmax with gain 2), batch-norm scale ~1, variance in [0.5, 1.5], small
means and biases.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import numpy_helper

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NAMES = ["bvlc_alexnet", "zfnet512", "squeezenet", "shufflenet", "inception_v1",
         "inception_v2", "resnet50", "densenet121", "vgg19"]


def path_of(name: str) -> str:
    """The file of light model `name`; a ValueError naming the known ones otherwise."""
    if name not in NAMES:
        raise ValueError(f"no light model {name!r}; the light zoo has {', '.join(NAMES)}")
    return os.path.join(LIGHT, f"light_{name}.onnx")


def _weight(use: tuple[str, int], shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """A value for a weight read by op `use[0]` as its input number `use[1]`."""
    op, position = use
    if op == "BatchNormalization" and position == 4:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)  # variance
    if (op == "BatchNormalization" and position == 1) or (op == "Mul" and len(shape) <= 1):
        return rng.normal(1.0, 0.1, shape).astype(np.float32)  # scales
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:])) or 1
        if op == "Gemm":  # light models' Gemms read B as [out, in] (transB=1) or [in, out]
            fan_in = min(shape)
        return rng.normal(0.0, np.sqrt(1.0 / fan_in), shape).astype(np.float32)
    return rng.normal(0.0, 0.05, shape).astype(np.float32)  # biases, means, shifts


def randomized(path: str, seed: int = 0) -> onnx.ModelProto:
    """The model at `path` with every ConstantOfShape weight replaced by random data."""
    model = onnx.load(path)
    rng = np.random.default_rng(seed)
    shapes = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    uses = {name: (n.op_type, k) for n in model.graph.node for k, name in enumerate(n.input)}
    kept, recipes = [], set()
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            dims = [int(d) for d in shapes[node.input[0]]]
            use = uses.get(node.output[0], ("", 0))
            model.graph.initializer.append(
                numpy_helper.from_array(_weight(use, dims, rng), node.output[0]))
            recipes.add(node.input[0])
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    still_read = {name for n in kept for name in n.input}
    recipes -= still_read
    for init in [i for i in model.graph.initializer if i.name in recipes]:
        model.graph.initializer.remove(init)
    inputs = [i for i in model.graph.input if i.name not in recipes]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    # IR 3 requires every initializer to be a graph input too; from IR 4 on the new random
    # weights are plain initializers (as inputs they would be the model's to feed)
    model.ir_version = max(model.ir_version, 4)
    return model
