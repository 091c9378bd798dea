"""Arguments several commands share, parsed the same way everywhere."""

from __future__ import annotations

import argparse

from collage_mlir.static_shapes import parse_input_shape


def add_input_shape_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="static shape for a dynamic model input, e.g. input=1x3x224x224 "
                        "(repeatable; only for .onnx models)")


def input_shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]] | None:
    """The `--input-shape` options as the API's `input_shapes` (None when none given)."""
    pairs = [parse_input_shape(a) for a in getattr(args, "input_shape", None) or []]
    return dict(pairs) or None
