"""collage-mlir explain out/ -o partition.html — a partition as one HTML page: of a model saved
by `partition`, or of a model file partitioned here first (with `partition`'s options; nothing
saved)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from collage_mlir.errors import CollageError
from collage_mlir.paths import user_path
from collage_mlir.tools.args import STDOUT, check_output_file
from collage_mlir.tools.cmd_partition import add_common_arguments, compile_from_args
from collage_mlir.tools.report_out import (
    Price,
    consistent,
    hand_off_prices,
    unpriced,
    write_json,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="directory written by `collage-mlir partition -o`, or an "
                                 "ONNX / .mlir model to partition first (nothing is saved)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", dest="html",
                   help="HTML file to write (self-contained: opens offline in any browser; "
                        "'-': standard output)")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the JSON report the page shows (default: not written)")
    p.add_argument("--layout", choices=["auto", "dot", "layered"], default="auto",
                   help="'dot': Graphviz (needs `dot`); 'layered': built in; 'auto': dot when "
                        "installed and the model has at most 600 ops")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also load the kernels and time each region's call over N runs, shown "
                        "beside the estimates (default: 0, nothing run)")
    add_common_arguments(p)
    p.description = (
        "Draw a partition as one self-contained HTML page.\n\n"
        "A saved model is read without loading kernels or weights. Its hand-offs are priced\n"
        "from --cost as the search priced them ('measure': the hand-off experiments in\n"
        "--cache, read only; 'table:FILE': the table), and shown without prices when those\n"
        "do not add up to the search's total (pass the --cost it was partitioned with).\n"
        "A model file is partitioned first with the options below, as `partition` would.")


def report_of(model_dir: str, profile: int, price: Price | None = None) -> dict:
    """The JSON report of a saved model: read without loading kernels, or, with `profile`,
    loaded and profiled over that many runs; hand-offs priced by `price` when given."""
    from collage_mlir.runtime.model import describe, load
    from collage_mlir.runtime.report import report_data
    from collage_mlir.tensors import model_inputs

    if profile:
        model = load(model_dir)
        measured = model.profile(model_inputs(model.module), rounds=profile)
        return report_data(model.module, model.record(), measured, profile, price)
    module, record = describe(model_dir)
    return report_data(module, record, transition=price)


def run(args: argparse.Namespace) -> int:
    from collage_mlir.runtime.explain import explain_html, write_explain

    if args.profile < 0:
        raise CollageError(f"--profile {args.profile}: must be 0 or more runs")
    for path in (args.html, args.json):
        if path:
            check_output_file(path)
    if args.json and (args.json == args.html if STDOUT in (args.json, args.html) else
                      user_path(args.json).resolve() == user_path(args.html).resolve()):
        raise CollageError(f"-o {args.html} and --json {args.json}: the page and the report "
                           "need two files")
    data = report_for(args)
    t0 = time.perf_counter()
    layout = None if args.layout == "auto" else args.layout
    if args.html == STDOUT:
        args.json_stream.write(explain_html(data, layout))
        args.json_stream.flush()
    else:
        out = write_explain(data, args.html, layout)
        print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {data['totals']['ops']} "
              f"ops in {data['totals']['regions']} region"
              f"{'s' if data['totals']['regions'] != 1 else ''}, "
              f"{time.perf_counter() - t0:.2f} s)")
    if args.json:
        write_json(data, args.json, getattr(args, "json_stream", None))
    return 0


def _refuse_partition_options(args: argparse.Namespace, path: Path) -> None:
    """A saved model is drawn as it was partitioned: the options that only partitioning
    reads were silently ignored for it (`--cost` and `--cache` price its hand-offs)."""
    parser = argparse.ArgumentParser()
    add_common_arguments(parser)
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    given = [flags[k] for k, default in vars(parser.parse_args([])).items()
             if k not in ("cost", "cache") and getattr(args, k, default) != default]
    if given:
        raise CollageError(f"{path}: a saved model is drawn as it was partitioned; "
                           f"{', '.join(given)} only applies to a model file explain "
                           "partitions first")


def report_for(args: argparse.Namespace) -> dict:
    """The report the page draws: of the saved model `args.model`, or of the model file
    partitioned here with the command's options."""
    path = Path(args.model).expanduser()
    if not path.exists():
        raise CollageError(f"{path}: not found (expected a directory written by `partition -o`, "
                           "or a model file)")
    if path.is_dir():
        _refuse_partition_options(args, path)
        data = report_of(args.model, args.profile,
                         hand_off_prices(args.cost, args.cache, required=False))
        if not consistent(data):
            unpriced(data)
            print(f"note: the hand-off prices of --cost {args.cost} do not add up to the "
                  "search's total; shown without prices (pass the --cost the model was "
                  "partitioned with)")
        return data
    from collage_mlir.runtime.report import report_data
    from collage_mlir.tensors import model_inputs

    model = compile_from_args(args.model, args)
    measured = (model.profile(model_inputs(model.module), rounds=args.profile)
                if args.profile else None)
    return report_data(model.module, model.record(), measured, args.profile or None,
                       hand_off_prices(args.cost, args.cache))
