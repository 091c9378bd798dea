"""collage-mlir partition model.onnx --backends a,b,c -o out/ — search, outline, compile, save."""

from __future__ import annotations

import argparse

from collage_mlir.check.refine import DEFAULT_BUDGET_RUNS, DEFAULT_BUDGET_S
from collage_mlir.driver import DEFAULT_MAX_DEPTH, DEFAULT_TIMEOUT_S
from collage_mlir.tools.args import (
    add_backends_argument,
    add_cache_argument,
    add_input_shape_argument,
    add_inputs_argument,
    add_measure_on_argument,
    add_tolerance_arguments,
    backend_names,
    check_output_file,
    cost_table_format,
    input_shapes,
    load_inputs,
    non_negative_float,
    positive_float,
    positive_int,
    tolerance_of,
)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `partition` and `demo`."""
    add_input_shape_argument(p)
    add_backends_argument(p)
    add_cache_argument(p)
    add_measure_on_argument(p)
    p.add_argument("--max-depth", type=positive_int, default=DEFAULT_MAX_DEPTH, metavar="N",
                   help="most ops on a path through a candidate region")
    p.add_argument("--placement", default=None, metavar="FILE",
                   help="JSON placement file pinning or excluding backends per op "
                        "(default: none, every backend may take every op)")
    p.add_argument("--cost", default="measure",
                   help="'measure' (time candidates on the real backends, cached) or "
                        "'table:FILE' (costs from a JSON table, nothing timed; format below)")
    p.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help="seconds one candidate may take to compile, check and time before it "
                        "is left out as a timeout (retried by a later run)")
    p.add_argument("--budget", type=positive_float, default=None, metavar="S",
                   help="seconds of timing per kernel at most (default 1)")
    p.add_argument("--measure-budget", type=positive_float, default=None, metavar="S",
                   help="seconds the measure phase may take: whole models and single ops "
                        "are always measured, larger candidates until it is spent (the "
                        "report counts those left unmeasured; default: no limit)")
    add_tolerance_arguments(p)
    p.add_argument("--no-prune", dest="prune", action="store_false",
                   help="measure every candidate, also those already shown unable to win")
    p.add_argument("--no-merge", dest="merge", action="store_false",
                   help="keep the search's regions as they are (no joining of adjacent "
                        "regions on one backend after the search)")
    p.add_argument("--no-islands", dest="islands", action="store_false",
                   help="offer the search no archipelago (the ops of one type another "
                        "backend runs cheaper, carved out of the cheapest whole model)")
    p.add_argument("--refine-budget", type=non_negative_float, default=None,
                   metavar="S", help="seconds for timing the pick's neighbours end to end "
                                     "(flips to a runner-up, joined regions, islands, "
                                     "splits); 0 turns it off (default: "
                                     f"{DEFAULT_BUDGET_S:g} s or {DEFAULT_BUDGET_RUNS} runs "
                                     "of the pick, whichever is longer)")
    p.add_argument("--no-verify", dest="verify", action="store_false", default=None,
                   help="keep the search's pick without timing it end to end against the "
                        "backends running the whole model")
    p.epilog = "--cost table:FILE reads a JSON cost table.\n" + cost_table_format()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model or .mlir file")
    p.add_argument("-o", "--output", required=True,
                   help="directory to save the result to: new, empty, or a model saved "
                        "before (replaced whole); one holding other files is refused")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the report as JSON, hand-offs priced as the search priced "
                        "them (schema: collage_mlir/runtime/report.schema.json; default: not "
                        "written)")
    add_inputs_argument(p, "made-up inputs only; when given, the final compile checks the "
                           "pick on them first, and the end-to-end check and refinement "
                           "time on them")
    add_common_arguments(p)


def compile_from_args(model: str, args: argparse.Namespace,
                      backends: list[str] | None = None):
    """`collage_mlir.compile` with the command's options; `backends` overrides
    `--backends` (demo resolves them first to say which it uses)."""
    import collage_mlir

    return collage_mlir.compile(model, backends=backends or backend_names(args),
                                cache=args.cache, max_depth=args.max_depth,
                                placement=args.placement, cost=args.cost, progress=True,
                                verify=args.verify, input_shapes=input_shapes(args),
                                timeout_s=args.timeout, kernel_budget_s=args.budget,
                                measure_budget_s=args.measure_budget, prune=args.prune,
                                merge=args.merge, islands=args.islands,
                                refine_budget_s=args.refine_budget,
                                executor=args.measure_on,
                                tolerance=tolerance_of(args),
                                inputs=load_inputs(args.inputs) if getattr(
                                    args, "inputs", None) else None)


def run(args: argparse.Namespace) -> int:
    from collage_mlir.runtime.model import check_save_target

    target = check_save_target(args.output)  # before any work, as the JSON report's file
    if args.json:
        check_output_file(args.json, replaced=target)
    model = compile_from_args(args.model, args)
    print(model.report())
    out = model.save(args.output)
    print(f"saved to {out}/ (model.mlir, manifest.json, backend artifacts)")
    if args.json:
        from collage_mlir.runtime.report import report_data
        from collage_mlir.tools.report_out import hand_off_prices, write_json

        write_json(report_data(model.module, model.record(),
                               transition=hand_off_prices(args.cost, args.cache)), args.json,
                   getattr(args, "json_stream", None))
    return 0
