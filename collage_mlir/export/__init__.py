"""Export of ONNX-in-MLIR functions to ONNX models (for graph-kind backends)."""

from collage_mlir.export.onnx_export import (
    ExportError,
    export_function,
    export_graph,
    exported_owners,
    node_name,
    with_onnx_names,
    with_onnx_names_of,
)
from collage_mlir.export.resources import module_resources, parse_resources

__all__ = ["ExportError", "export_function", "export_graph", "exported_owners", "module_resources",
           "node_name", "parse_resources", "with_onnx_names", "with_onnx_names_of"]
