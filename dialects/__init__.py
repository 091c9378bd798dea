"""Dialect views: the ONNX-in-MLIR form we read and the `collage.` attribute vocabulary we write."""
