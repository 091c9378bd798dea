"""The Python pipeline API: `compile(model, backends, cache) -> PartitionedModel`.

The phases of `collage_mlir.driver` in one call, with Python objects in between, so a caller
can hand in its own CostEstimator and get a progress bar.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from collage_mlir.cost.base import CostEstimator
from collage_mlir.cost.remote import RemoteExecutor
from collage_mlir.driver import (
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_EXITS,
    DEFAULT_TIMEOUT_S,
    ModelInput,
    PartitionOptions,
    partition,
)
from collage_mlir.errors import CollageError
from collage_mlir.runtime.model import PartitionedModel
from collage_mlir.static_shapes import InputShapes
from collage_mlir.tensors import Inputs


def compile(model: ModelInput, backends: Sequence[str] | None = None,
            cache: str | os.PathLike | None = None, *, max_depth: int | None = None,
            max_exits: int = DEFAULT_MAX_EXITS, placement: str | os.PathLike | None = None,
            cost: str = "measure", estimator: CostEstimator | None = None,
            progress: bool = False, verify: bool | None = None,
            verify_budget_s: float | None = None,
            input_shapes: InputShapes | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
            kernel_budget_s: float | None = None, measure_budget_s: float | None = None,
            prune: bool = True, merge: bool = True, islands: bool = True,
            refine_budget_s: float | None = None,
            executor: str | RemoteExecutor | None = None,
            tolerance: tuple[float, float] | None = None,
            inputs: Inputs | None = None) -> PartitionedModel:
    """Partition `model` across `backends` by measured cost and compile every region.

    `model`: an .onnx or .mlir path, an `onnx.ModelProto` or an imported `ir.Module`.
    `backends`: backend names (default: every available one). `cache`: the measurement
    cache, a file or a `postgresql://` URL (default: the user's cache). `cost`: "measure" or "table:FILE". A given
    `estimator` replaces `cost` and stays open. `verify` (default: on when costs are
    measured) times the pick end to end against the backends that could run the whole
    model for a comparable estimate and keeps the fastest (`collage_mlir.check.verify`);
    `verify_budget_s` bounds that timing (None: 3 s or 60 runs of the pick, whichever is
    longer). `input_shapes` (input name → dims) makes a model
    with dynamic inputs static; the result runs on those shapes only. `timeout_s`: longest
    one candidate may take to compile, check and time (past it the candidate is out of this
    run, cached as a retryable timeout); `kernel_budget_s`: seconds of timing per kernel at
    most (default 1). `measure_budget_s`: seconds the measure phase may take — whole models
    and single ops are always measured, then larger candidates until the budget is spent
    (default: no limit); `prune` skips larger candidates that cannot win given what was
    measured before them, and those no cover cheaper than the one found could hold even at
    their floor (`collage_mlir.search.prune`). `merge` joins adjacent chosen regions on one backend
    where the union measures no slower (`collage_mlir.search.merge`). `islands`: before the
    search, carve the ops another backend runs cheaper out of the cheapest whole model and
    offer the measured parts around them to the search (`collage_mlir.search.islands`).
    `refine_budget_s`:
    seconds for timing the pick's neighbours end to end after the check (None:
    `collage_mlir.check.refine.default_budget`, a few seconds or a number of runs of the
    pick, whichever is longer; 0: off;
    `collage_mlir.check.refine`). `executor`: where candidates are measured: None or "local" on this
    machine, "ray" on this machine's Ray cluster (or a local one started for the run),
    "ray://HOST:PORT" through Ray Client, or a `cost.remote.RemoteExecutor` (kept open).
    `tolerance`: (rtol, atol_scale): every output element within `atol_scale * max|ref| +
    rtol * |ref|` of the reference backend's (default (0.01, 0.003); `tensors.compare`):
    a quantized model's backends round differently, and their difference grows with
    depth. `inputs`: the model's inputs (name → array, or arrays in order), of the shapes
    it is partitioned for: the final compile checks the pick on them before its made-up
    inputs, and the end-to-end check and refinement time on them (default: made-up inputs
    only). The report lists the candidates left out, per backend and reason.
    """
    if estimator is not None and not isinstance(estimator, CostEstimator):
        hint = " (a cost table is cost='table:FILE')" if isinstance(estimator, str) else ""
        raise CollageError(f"estimator: expected a CostEstimator, got "
                           f"{type(estimator).__name__}{hint}")
    if isinstance(backends, str):  # "onnxruntime,openvino", as the command line takes them
        backends = [b.strip() for b in backends.split(",") if b.strip()]
    options = PartitionOptions(
        backends=backends, cache=cache,
        max_depth=DEFAULT_MAX_DEPTH if max_depth is None else max_depth,
        max_exits=max_exits, placement=placement, cost=cost, verify=verify,
        verify_budget_s=verify_budget_s, input_shapes=input_shapes, progress=progress,
        timeout_s=timeout_s, kernel_budget_s=kernel_budget_s,
        measure_budget_s=measure_budget_s, prune=prune, merge=merge, islands=islands,
        refine_budget_s=refine_budget_s, executor=executor, tolerance=tolerance,
        inputs=inputs)
    return partition(model, options, estimator)
