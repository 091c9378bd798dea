"""collage_mlir: Collage-style automated integration of deep-learning backends on MLIR.

import → annotate → search → outline → run. See README.md for the map.

The public names are imported on first use (PEP 562): a measuring worker, which imports
`collage_mlir.cost.worker` and a backend, then does not load the pipeline behind `compile`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collage_mlir.api import compile
    from collage_mlir.errors import CollageError
    from collage_mlir.importer import import_onnx, parse_mlir
    from collage_mlir.runtime.model import PartitionedModel, load

try:
    __version__ = _version("collage-mlir")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

_PUBLIC = {
    "compile": "collage_mlir.api",
    "CollageError": "collage_mlir.errors",
    "import_onnx": "collage_mlir.importer",
    "parse_mlir": "collage_mlir.importer",
    "PartitionedModel": "collage_mlir.runtime.model",
    "load": "collage_mlir.runtime.model",
}

__all__ = ["__version__", "CollageError", "PartitionedModel", "compile", "import_onnx", "load",
           "parse_mlir"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'collage_mlir' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])
