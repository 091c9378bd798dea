"""MLIR passes written in Python, one per file, found by name through `registry`."""

from collage_mlir.passes.registry import CollagePass, get_pass_class, pass_names, register

__all__ = ["CollagePass", "get_pass_class", "pass_names", "register"]
