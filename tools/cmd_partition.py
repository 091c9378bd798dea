"""collage-mlir partition model.onnx --backends a,b,c -o out/ — search, outline, compile, save."""

from __future__ import annotations

import argparse

from collage_mlir.tools.args import (
    add_input_shape_argument,
    check_output_dir,
    input_shapes,
    positive_int,
)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `partition` and `demo`."""
    add_input_shape_argument(p)
    p.add_argument("--backends", default="",
                   help="comma-separated backends (default: every available one)")
    p.add_argument("--cache", default=None,
                   help="measurement cache (default $COLLAGE_CACHE or "
                        "~/.cache/collage_mlir/cache.sqlite)")
    p.add_argument("--max-depth", type=positive_int, default=None,
                   help="candidate depth limit (default 3)")
    p.add_argument("--placement", default=None,
                   help="JSON placement file pinning or excluding backends per op")
    p.add_argument("--cost", default="measure",
                   help="'measure' (real backends) or 'table:FILE' (a cost table)")
    p.add_argument("--no-verify", dest="verify", action="store_false", default=None,
                   help="keep the search's pick without timing it end to end against the "
                        "backends running the whole model")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model or .mlir file")
    p.add_argument("-o", "--output", required=True, help="directory to save the result to")
    add_common_arguments(p)


def compile_from_args(model: str, args: argparse.Namespace):
    import collage_mlir

    backends = [b for b in args.backends.split(",") if b] or None
    return collage_mlir.compile(model, backends=backends, cache=args.cache,
                                max_depth=args.max_depth, placement=args.placement,
                                cost=args.cost, progress=True, verify=args.verify,
                                input_shapes=input_shapes(args))


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.output)
    model = compile_from_args(args.model, args)
    print(model.report())
    out = model.save(args.output)
    print(f"saved to {out}/ (model.mlir, manifest.json, backend artifacts)")
    return 0
