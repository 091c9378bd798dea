"""Shared pytest fixtures: the light models shipped with onnx, and a parsed-function helper."""

from __future__ import annotations

import os
import sys

import onnx
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # test helpers (dags.py, test doubles)

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = sorted(f[len("light_"):-len(".onnx")] for f in os.listdir(LIGHT_DIR)
                      if f.endswith(".onnx"))


def light_model_path(name: str) -> str:
    return os.path.join(LIGHT_DIR, f"light_{name}.onnx")


@pytest.fixture(params=LIGHT_MODELS)
def light_model(request) -> str:
    """Path of each of the nine light model-zoo architectures."""
    return light_model_path(request.param)
