"""collage_mlir: Collage-style automated integration of deep-learning backends on MLIR.

import → annotate → search → outline → run. See README.md for the map.
"""

from collage_mlir.errors import CollageError
from collage_mlir.importer import import_onnx, parse_mlir

__all__ = ["CollageError", "import_onnx", "parse_mlir"]
