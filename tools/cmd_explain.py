"""collage-mlir explain out/ -o partition.html — the partition of a saved model as one HTML page."""

from __future__ import annotations

import argparse
import json
import time

from collage_mlir.errors import CollageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", help="directory written by `collage-mlir partition -o`")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="HTML file to write (self-contained: opens offline in any browser)")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the JSON report the page shows (default: not written)")
    p.add_argument("--layout", choices=["auto", "dot", "layered"], default="auto",
                   help="'dot': Graphviz (needs `dot`); 'layered': built in; 'auto': dot when "
                        "installed and the model has at most 600 ops")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="also load the kernels and time each region's call over N runs, shown "
                        "beside the estimates (default: 0, nothing run)")


def report_of(model_dir: str, profile: int) -> dict:
    """The JSON report of a saved model: read without loading kernels, or, with `profile`,
    loaded and profiled over that many runs."""
    from collage_mlir.runtime.model import describe, load
    from collage_mlir.runtime.report import report_data
    from collage_mlir.tensors import model_inputs

    if profile:
        model = load(model_dir)
        measured = model.profile(model_inputs(model.module), rounds=profile)
        return json.loads(model.report(measured, format="json", rounds=profile))
    module, record = describe(model_dir)
    return report_data(module, record)


def run(args: argparse.Namespace) -> int:
    from collage_mlir.runtime.explain import write_explain

    if args.profile < 0:
        raise CollageError(f"--profile {args.profile}: must be 0 or more runs")
    data = report_of(args.model_dir, args.profile)
    t0 = time.perf_counter()
    out = write_explain(data, args.output, None if args.layout == "auto" else args.layout)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {data['totals']['ops']} ops in "
          f"{data['totals']['regions']} regions, {time.perf_counter() - t0:.2f} s)")
    if args.json:
        write_json(data, args.json)
    return 0


def write_json(data: dict, path: str) -> None:
    """Write report `data` as JSON to `path` (one-line error when it cannot)."""
    from collage_mlir.paths import user_path

    out = user_path(path)
    try:
        out.write_text(json.dumps(data, indent=1))
    except OSError as e:
        raise CollageError(f"{out}: cannot write the JSON report ({e.strerror})") from None
    print(f"wrote {out}")
