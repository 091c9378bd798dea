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
from collage_mlir.importer import import_onnx, parse_mlir, print_mlir
from collage_mlir.passes.pipeline import Pipeline
from collage_mlir.passes.registry import get_pass_class, pass_names
from collage_mlir.tools.args import (
    HelpFormatter,
    add_input_shape_argument,
    check_output_file,
    cost_table_format,
    input_shapes,
)
from collage_mlir.tools.guard import guarded

SPLIT_MARKER = "// -----"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="collage-opt", description=__doc__.splitlines()[0],
                                formatter_class=HelpFormatter,
                                epilog="collage-search{cost=table:FILE} reads a JSON cost "
                                       "table.\n" + cost_table_format())
    p.add_argument("input", nargs="?", default="-",
                   help="input .mlir or .onnx file (default: -, stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: -, stdout)")
    p.add_argument("--pass-pipeline", default="",
                   help="textual pipeline, builtin.module(...); see --list-passes (default: "
                        "none, the input is printed back)")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each chunk between '{SPLIT_MARKER}' lines on its own")
    p.add_argument("--mlir-print-debuginfo", action="store_true",
                   help="print op locations: the ONNX node names placement rules and "
                        "reports go by (text printed without them has none)")
    p.add_argument("--list-passes", action="store_true", help="list the collage passes with their options")
    add_input_shape_argument(p)
    return p


def list_passes(out: TextIO) -> None:
    """Each pass, its summary, then one line per option: `name=<type>`, meaning, default."""
    for name in pass_names():
        cls = get_pass_class(name)
        out.write(f"{name}  {cls.summary}\n")
        spelled = [(f"{o.name}=<{o.type}>", o) for o in cls.options()]
        width = max((len(s) for s, _ in spelled), default=0)
        for s, o in spelled:
            out.write(f"    {s.ljust(width)}  {o.help} (default: {o.default})\n")


def process(text: str, label: str, pipeline: Pipeline | None, locations: bool = False) -> str:
    module = parse_mlir(text, label)
    if pipeline:
        pipeline.run(module)
    return print_mlir(module, locations)


def split_chunks(text: str) -> list[tuple[int, str]]:
    """The `// -----` chunks of `text` with the file line each starts on (1-based)."""
    chunks, start, lines = [], 1, []
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        if line.rstrip("\n") == SPLIT_MARKER:
            chunks.append((start, "".join(lines)))
            start, lines = lineno + 1, []
        else:
            lines.append(line)
    chunks.append((start, "".join(lines)))
    return chunks


def process_split(text: str, label: str, pipeline: Pipeline | None,
                  locations: bool = False) -> tuple[str, list[str]]:
    """Each chunk on its own, as mlir-opt does: a failing chunk reports its error at the real
    file line and the others still run. Returns (joined output, errors)."""
    outputs, errors = [], []
    for start, chunk in split_chunks(text):
        # pad with newlines so the parser's line numbers are the file's
        try:
            outputs.append(process("\n" * (start - 1) + chunk, label, pipeline, locations))
        except CollageError as e:
            errors.append(str(e))
    return f"\n{SPLIT_MARKER}\n".join(outputs), errors


def _read_input(path: str, stdin: TextIO | None) -> str:
    try:
        if path == "-":
            text = (stdin or sys.stdin).read()
            text.encode("utf-8")  # stdin decodes bad bytes to surrogates, the parser refuses
            return text
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeError) as e:
        label = "<stdin>" if path == "-" else path
        why = ("not UTF-8 text" if isinstance(e, UnicodeError)
               else getattr(e, "strerror", None) or e)
        hint = " (stdin takes MLIR text; give an .onnx model as a path)" if path == "-" else ""
        raise CollageError(f"{label}: {why}{hint}") from None


def run(args: argparse.Namespace, stdin: TextIO | None, stdout: TextIO) -> int:
    if args.list_passes:
        list_passes(stdout)
        return 0
    if args.output != "-":
        check_output_file(args.output)
    pipeline = Pipeline(args.pass_pipeline) if args.pass_pipeline else None
    errors: list[str] = []
    if args.input.endswith(".onnx"):
        module = import_onnx(args.input, input_shapes=input_shapes(args))
        if pipeline:
            pipeline.run(module)
        result = print_mlir(module, args.mlir_print_debuginfo)
    else:
        if input_shapes(args):
            raise CollageError(f"{args.input}: --input-shape applies to an .onnx model; MLIR "
                               "input is static already")
        label = "<stdin>" if args.input == "-" else args.input
        text = _read_input(args.input, stdin)
        if args.split_input_file:
            result, errors = process_split(text, label, pipeline, args.mlir_print_debuginfo)
        else:
            result = process(text, label, pipeline, args.mlir_print_debuginfo)
    if args.output == "-":
        stdout.write(result)
    else:
        with open(args.output, "w") as f:
            f.write(result)
    for error in errors:
        sys.stderr.write(f"collage-opt: error: {error}\n")
    return 1 if errors else 0


def main(argv: list[str] | None = None, stdin: TextIO | None = None,
         stdout: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return guarded("collage-opt", lambda: run(args, stdin, stdout or sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
