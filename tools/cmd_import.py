"""collage-mlir import model.onnx -o model.mlir"""

from __future__ import annotations

import argparse
import sys

from collage_mlir.tools.args import add_input_shape_argument, check_output_file, input_shapes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", default="-", help="output .mlir file (default: -, stdout)")
    add_input_shape_argument(p)


def run(args: argparse.Namespace) -> int:
    from collage_mlir.importer import import_onnx, print_mlir

    if args.output != "-":
        check_output_file(args.output)
    # with locations: they carry the node names that placement rules and reports go by
    text = print_mlir(import_onnx(args.model, input_shapes=input_shapes(args)), locations=True)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0
