"""collage-mlir: the user-facing command line.

Each sub-command lives in its own module `collage_mlir.tools.cmd_<name>` with
`add_arguments(parser)` and `run(args) -> int`. A CollageError anywhere becomes one line on
stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

from collage_mlir import __version__

COMMANDS = {
    "import": "import an ONNX model into MLIR (ONNX-in-MLIR form)",
    "measure": "measure every single-op candidate on each backend",
    "cache": "inspect or clear the measurement cache",
    "partition": "partition a model across backends and save it",
    "run": "run a partitioned model saved by `partition`",
    "explain": "draw a saved partitioned model as one self-contained HTML page",
    "demo": "run the whole pipeline on the bundled example",
}


def _module(name: str):
    return importlib.import_module(f"collage_mlir.tools.cmd_{name}")


def build_parser() -> argparse.ArgumentParser:
    from collage_mlir.tools.args import HelpFormatter

    parser = argparse.ArgumentParser(prog="collage-mlir", formatter_class=HelpFormatter,
                                     description="Collage on MLIR: mix inference backends.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        module = _module(name)
        p = sub.add_parser(name, help=help_text, description=help_text,
                           formatter_class=HelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    from collage_mlir.tools.guard import guarded

    args = build_parser().parse_args(argv)
    return guarded("collage-mlir", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    """The command; with `--json -` its text goes to stderr, so stdout is the JSON alone
    (`report_out.write_json` writes it to the stdout kept here)."""
    from collage_mlir.tools.args import STDOUT

    if STDOUT not in (getattr(args, "json", None), getattr(args, "html", None)):
        return args._run(args)
    args.json_stream = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        return args._run(args)


if __name__ == "__main__":
    sys.exit(main())
