"""collage_mlir: Collage-style automated integration of deep-learning backends on MLIR.

import → annotate → search → outline → run. See README.md for the map.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from collage_mlir.api import compile
from collage_mlir.errors import CollageError
from collage_mlir.importer import import_onnx, parse_mlir
from collage_mlir.runtime.model import PartitionedModel, load

try:
    __version__ = _version("collage-mlir")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__", "CollageError", "PartitionedModel", "compile", "import_onnx", "load", "parse_mlir"]
