"""How the benchmarks name models: a zoo name (`models.py`, exported on first use),
`light:NAME` (`light.py`: a light model-zoo architecture, random weights unless splat), or
an `.onnx` path."""

from __future__ import annotations

import os

import light
import models
import onnx


def known_model(name: str) -> bool:
    """Whether `resolve` can find `name`: checked before the first model is benchmarked."""
    if name.endswith(".onnx"):
        return os.path.exists(name)
    if name.startswith("light:"):
        return name[len("light:"):] in light.NAMES
    return name in models.names()


def resolve(name: str, splat: bool = False) -> tuple[str, str | onnx.ModelProto]:
    """(label, model) for a zoo name, 'light:NAME' or an .onnx path."""
    if name.endswith(".onnx"):
        return os.path.basename(name), name
    if name.startswith("light:"):
        path = light.path_of(name[len("light:"):])
        return name, path if splat else light.randomized(path)
    return name, str(models.export(name))


def help_text() -> str:
    """What a model name may be, with the names known here."""
    return (f"a zoo name ({', '.join(models.names())}), light:NAME "
            f"({', '.join(light.NAMES)}) or an existing .onnx path")
