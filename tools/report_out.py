"""The report outputs the commands share: hand-off prices as the search priced them, their
consistency check, and writing the JSON report."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import TextIO

from collage_mlir.errors import CollageError

Price = Callable[[str, str, int], float]
"""(src backend, dst backend, bytes) → seconds; NaN where unknown."""


def hand_off_prices(cost: str | None, cache: str | None, required: bool = True
                    ) -> Price | None:
    """The search's hand-off price under `cost` ('measure' or 'table:FILE'): a table's own,
    or the measuring cache's fitted hand-offs, read only (NaN for a pair it lacks; 0 to or
    from the host, as the measuring estimator charges); None when `cost` is None, or when
    the cache does not exist and prices are not `required`."""
    if cost is None:
        return None
    if cost.startswith("table:"):
        from collage_mlir.cost.table import TableEstimator

        return TableEstimator.from_json(cost[len("table:"):]).transition_cost
    if cost != "measure":
        raise CollageError(f"--cost {cost}: expected 'measure' or 'table:FILE'")
    from collage_mlir.backends.registry import get_backend
    from collage_mlir.cost.cache import cache_exists, open_cache
    from collage_mlir.cost.transition import transition_key

    store = open_cache(cache, readonly=True) if required or cache_exists(cache) else None
    if store is None:
        return None
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


def consistent(data: dict) -> bool:
    """Whether the report's hand-off prices add up to the search's hand-off total, an
    unknown price counting 0 as the measuring estimator charged it (a report priced from
    another cost than the model was partitioned with fails; one without prices passes)."""
    costs = [h["cost_s"] for h in data["handoffs"]]
    total = data["totals"]["handoffs_s"]
    if total is None or all(c is None for c in costs):
        return True
    return math.isclose(math.fsum(c or 0.0 for c in costs), total, rel_tol=1e-6,
                        abs_tol=1e-12)


def unpriced(data: dict) -> None:
    """Drop the report's hand-off prices."""
    for h in data["handoffs"]:
        h["cost_s"] = None
    for r in data["regions"]:
        r["handoffs_in_s"] = None


def write_json(data: dict, path: str, stream: TextIO | None = None) -> None:
    """Write report `data` as JSON to `path` (one-line error when it cannot); `STDOUT`
    means `stream` (the command's real stdout: `cli._run`), else sys.stdout."""
    from collage_mlir.paths import user_path
    from collage_mlir.tools.args import STDOUT

    if path == STDOUT:
        out = stream or sys.stdout
        out.write(json.dumps(data, indent=1) + "\n")
        out.flush()
        return
    out = user_path(path)
    try:
        out.write_text(json.dumps(data, indent=1))
    except OSError as e:
        raise CollageError(f"{out}: cannot write the JSON report ({e.strerror})") from None
    print(f"wrote {out}")
