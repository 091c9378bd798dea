"""Seeded random, well-scaled weights in place of splat ones.

The onnx package's light model zoo, and the bundled example (its alexnet), make every
weight with `ConstantOfShape`: one value repeated, a stand-in for weights that are not
shipped. Results on such a model are artifacts: a compiler can fold a product with a splat
(IREE turns alexnet's Gemms into reductions, ~1 ms against ~5 ms dense), and the outputs
barely depend on the kernels. `with_random_weights` gives each such weight a random value
of the same shape, chosen by how it is used: normal(0, 1/fan_in) for weights of rank >= 2
(Kaiming with unit gain: residual stacks saturate the softmax with gain 2), batch-norm
scale ~1, variance in [0.5, 1.5], small means and biases.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def splat_weights(model: onnx.ModelProto) -> list[str]:
    """The outputs of the model's `ConstantOfShape` nodes whose shape is an initializer:
    its splat weights."""
    shapes = {i.name for i in model.graph.initializer}
    return [n.output[0] for n in model.graph.node
            if n.op_type == "ConstantOfShape" and n.input and n.input[0] in shapes]


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of `model` with every splat weight (`splat_weights`) an initializer of random
    data (module docstring); the shape initializers only those nodes read are dropped."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rng = np.random.default_rng(seed)
    shapes = {i.name: numpy_helper.to_array(i) for i in out.graph.initializer}
    uses = {name: (n.op_type, k) for n in out.graph.node for k, name in enumerate(n.input)}
    splats = set(splat_weights(out))
    kept, recipes = [], set()
    for node in out.graph.node:
        if node.op_type == "ConstantOfShape" and node.output[0] in splats:
            dims = [int(d) for d in shapes[node.input[0]]]
            use = uses.get(node.output[0], ("", 0))
            out.graph.initializer.append(
                numpy_helper.from_array(_weight(use, dims, rng), node.output[0]))
            recipes.add(node.input[0])
        else:
            kept.append(node)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    recipes -= {name for n in kept for name in n.input}
    for init in [i for i in out.graph.initializer if i.name in recipes]:
        out.graph.initializer.remove(init)
    inputs = [i for i in out.graph.input if i.name not in recipes]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    # IR 3 requires every initializer to be a graph input too; from IR 4 on the new random
    # weights are plain initializers (as inputs they would be the model's to feed)
    out.ir_version = max(out.ir_version, 4)
    return out


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
