"""Command-line tools: `collage-opt` (mlir-opt style) and `collage-mlir` (the user CLI)."""
