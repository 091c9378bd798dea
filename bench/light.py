"""The onnx package's light model-zoo architectures with random, well-scaled weights.

The light models make every weight with `ConstantOfShape`: one value repeated, which a
compiler can fold (`collage_mlir.weights`). Here each such weight becomes a seeded random
initializer of the same shape (`collage_mlir.weights.with_random_weights`).
"""

from __future__ import annotations

import os

import onnx

from collage_mlir.weights import with_random_weights

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NAMES = ["bvlc_alexnet", "zfnet512", "squeezenet", "shufflenet", "inception_v1",
         "inception_v2", "resnet50", "densenet121", "vgg19"]


def path_of(name: str) -> str:
    """The file of light model `name`; a ValueError naming the known ones otherwise."""
    if name not in NAMES:
        raise ValueError(f"no light model {name!r}; the light zoo has {', '.join(NAMES)}")
    return os.path.join(LIGHT, f"light_{name}.onnx")


def randomized(path: str, seed: int = 0) -> onnx.ModelProto:
    """The model at `path` with every ConstantOfShape weight replaced by random data."""
    return with_random_weights(onnx.load(path), seed)
