"""collage_mlir: Collage-style automated integration of deep-learning backends on MLIR.

import → annotate → search → outline → run. See README.md for the map.
"""

from collage_mlir.api import compile
from collage_mlir.errors import CollageError
from collage_mlir.importer import import_onnx, parse_mlir
from collage_mlir.runtime.model import PartitionedModel, load

__all__ = ["CollageError", "PartitionedModel", "compile", "import_onnx", "load", "parse_mlir"]
