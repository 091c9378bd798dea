"""collage-opt: an mlir-opt style driver for the collage passes and upstream MLIR passes.

    collage-opt model.mlir --pass-pipeline='builtin.module(collage-annotate{backends=iree})'
    collage-opt model.onnx -o out.mlir          # .onnx inputs are imported first
    collage-opt --split-input-file tests.mlir   # chunks separated by `// -----`

`main(argv, stdin, stdout)` runs in process, so tests call it directly.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from collage_mlir.errors import CollageError
from collage_mlir.importer import import_onnx, parse_mlir
from collage_mlir.passes.pipeline import Pipeline
from collage_mlir.passes.registry import get_pass_class, pass_names
from collage_mlir.tools.args import add_input_shape_argument, input_shapes

SPLIT_MARKER = "// -----"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="collage-opt", description=__doc__.splitlines()[0])
    p.add_argument("input", nargs="?", default="-", help="input .mlir or .onnx file (- = stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (- = stdout)")
    p.add_argument("--pass-pipeline", default="", help="textual pipeline, builtin.module(...)")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each chunk between '{SPLIT_MARKER}' lines on its own")
    p.add_argument("--list-passes", action="store_true", help="list the collage passes")
    add_input_shape_argument(p)
    return p


def list_passes(out: TextIO) -> None:
    for name in pass_names():
        cls = get_pass_class(name)
        opts = ", ".join(cls.option_names()) if cls else ""
        out.write(f"{name}{{{opts}}}  {cls.summary if cls else ''}\n")


def process(text: str, label: str, pipeline: Pipeline | None) -> str:
    module = parse_mlir(text, label)
    if pipeline:
        pipeline.run(module)
    return str(module)


def main(argv: list[str] | None = None, stdin: TextIO | None = None,
         stdout: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    stdout = stdout or sys.stdout
    try:
        if args.list_passes:
            list_passes(stdout)
            return 0
        pipeline = Pipeline(args.pass_pipeline) if args.pass_pipeline else None
        if args.input.endswith(".onnx"):
            module = import_onnx(args.input, input_shapes=input_shapes(args))
            if pipeline:
                pipeline.run(module)
            result = str(module)
        else:
            label = "<stdin>" if args.input == "-" else args.input
            try:
                text = (stdin or sys.stdin).read() if args.input == "-" else open(args.input).read()
            except OSError as e:
                raise CollageError(f"{args.input}: {e.strerror}") from None
            chunks = text.split(SPLIT_MARKER + "\n") if args.split_input_file else [text]
            result = f"\n{SPLIT_MARKER}\n".join(process(c, label, pipeline) for c in chunks)
        if args.output == "-":
            stdout.write(result)
        else:
            with open(args.output, "w") as f:
                f.write(result)
        return 0
    except CollageError as e:
        sys.stderr.write(f"collage-opt: error: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
