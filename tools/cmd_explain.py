"""collage-mlir explain out/ -o partition.html — the partition of a saved model as one HTML page."""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

from collage_mlir.errors import CollageError
from collage_mlir.tools.args import add_cache_argument

Price = Callable[[str, str, int], float]


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
    p.add_argument("--cost", default=None, metavar="measure|table:FILE",
                   help="price each hand-off as the search did: 'table:FILE' (the table the "
                        "model was partitioned with) or 'measure' (the hand-off experiments in "
                        "--cache, read only) (default: hand-offs shown without prices)")
    add_cache_argument(p)


def hand_off_prices(cost: str | None, cache: str | None) -> Price | None:
    """The search's hand-off price under `cost` ('measure' or 'table:FILE'): a table's own,
    or the measuring cache's fitted hand-offs, read only (NaN for a pair it lacks; 0 to or
    from the host, as the measuring estimator charges); None when `cost` is None."""
    if cost is None:
        return None
    if cost.startswith("table:"):
        from collage_mlir.cost.table import TableEstimator

        return TableEstimator.from_json(cost[len("table:"):]).transition_cost
    if cost != "measure":
        raise CollageError(f"--cost {cost}: expected 'measure' or 'table:FILE'")
    from collage_mlir.backends.registry import get_backend
    from collage_mlir.cost.cache import MeasurementCache
    from collage_mlir.cost.transition import transition_key

    store = MeasurementCache(cache, readonly=True)
    versions: dict[str, str | None] = {}

    def version(name: str) -> str | None:
        if name not in versions:
            try:
                versions[name] = get_backend(name).version
            except CollageError:  # "host", or a backend not installed here
                versions[name] = None
        return versions[name]

    def price(src: str, dst: str, nbytes: int) -> float:
        a, b = version(src), version(dst)
        if a is None or b is None:
            return 0.0
        fitted = store.get_transition(transition_key(src, a, dst, b))
        return fitted.cost(nbytes) if fitted is not None else math.nan

    return price


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
    from collage_mlir.runtime.explain import write_explain

    if args.profile < 0:
        raise CollageError(f"--profile {args.profile}: must be 0 or more runs")
    data = report_of(args.model_dir, args.profile, hand_off_prices(args.cost, args.cache))
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
