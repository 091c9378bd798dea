"""The Python pipeline API: `compile(model, backends, cache) -> PartitionedModel`.

The same phases as the passes, in one call, with Python objects in between so a caller can
hand in its own CostEstimator and get a progress bar:
import → annotate (candidates) → [placement] → measure/search → outline → compile.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import onnx
from iree.compiler import ir

from collage_mlir.backends.registry import available_backends, registered_backends
from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.base import CostEstimator
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraphConfig
from collage_mlir.importer import import_onnx, parse_mlir
from collage_mlir.passes.common import functions
from collage_mlir.progress import ProgressBar
from collage_mlir.runtime.model import PartitionedModel
from collage_mlir.runtime.report import ReportRow, summarize_op_types

DEFAULT_MAX_DEPTH = 3
DEFAULT_MAX_EXITS = 1

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Module


def load_module(model: ModelInput) -> ir.Module:
    """An MLIR module from a path (.onnx or .mlir), a ModelProto or a module (used as is)."""
    if isinstance(model, ir.Module):
        return model
    if isinstance(model, onnx.ModelProto):
        return import_onnx(model)
    path = Path(model)
    if path.suffix == ".mlir":
        try:
            return parse_mlir(path.read_text(), str(path))
        except OSError as e:
            raise CollageError(f"{path}: {e.strerror}") from None
    return import_onnx(path)


def resolve_backends(names: Sequence[str] | None, say=print) -> list[str]:
    """The usable backends among `names` (all available ones when None); unusable ones are
    skipped with a message, and having none left is an error."""
    if names is None:
        names = available_backends()
    known = registered_backends()
    usable = []
    for name in names:
        if name not in known:
            raise CollageError(f"unknown backend '{name}' (known: {', '.join(sorted(known))})")
        reason = known[name].unavailable_reason()
        if reason:
            say(f"collage: skipping backend '{name}': {reason}")
        else:
            usable.append(name)
    if not usable:
        raise CollageError("no usable backend")
    return usable


def make_estimator(cost: str, backends: list[str], cache: str | os.PathLike | None
                   ) -> CostEstimator:
    """'measure' → the measuring estimator (real backends + cache); 'table:FILE' → a table."""
    if cost == "measure":
        from collage_mlir.cost.measure import MeasuringEstimator

        return MeasuringEstimator(backends, cache_path=cache)
    if cost.startswith("table:"):
        from collage_mlir.cost.table import TableEstimator

        return TableEstimator.from_json(cost[len("table:"):])
    raise CollageError(f"cost={cost}: expected 'measure' or 'table:FILE'")


def compile(model: ModelInput, backends: Sequence[str] | None = None,
            cache: str | os.PathLike | None = None, *, max_depth: int | None = None,
            max_exits: int = DEFAULT_MAX_EXITS, placement: str | os.PathLike | None = None,
            cost: str = "measure", estimator: CostEstimator | None = None,
            progress: bool = False) -> PartitionedModel:
    """Partition `model` across `backends` by measured cost and compile every region."""
    from collage_mlir.rules.spec import generate_candidates, specs_for
    from collage_mlir.search.search import search

    module = load_module(model)
    names = resolve_backends(backends)
    fns = functions(module.operation)
    if len(fns) != 1:
        raise CollageError(f"expected one public function, found {len(fns)}")
    fn = fns[0]
    graph = DataflowGraph(fn)
    config = SubGraphConfig(max_exits=max_exits, allow_taps=False,
                            max_depth=max_depth or DEFAULT_MAX_DEPTH)
    candidates = generate_candidates(graph, specs_for(names), config)
    if placement is not None:
        from collage_mlir.placement import Placement

        candidates = Placement.from_json(placement).filter(graph, candidates)
    own = estimator is None
    estimator = estimator or make_estimator(cost, names, cache)
    bar = ProgressBar("measuring") if progress else None
    try:
        costs = estimator.estimate(candidates, progress=bar)
        if bar:
            bar.close()
        partitioning = search(graph, candidates, costs, estimator.transition_cost)
    finally:
        if own and hasattr(estimator, "close"):
            estimator.close()
    rows = report_rows(graph, partitioning, fn)
    from collage_mlir.passes.outline import outline_function
    from collage_mlir.passes.search import write_partitioning

    write_partitioning(fn, partitioning)
    outline_function(fn)
    result = PartitionedModel.from_module(module, report_rows=rows,
                                          estimated_cost=partitioning.total_cost)
    result.backends_considered = names
    result.candidates = candidates
    result.partitioning = partitioning
    return result


def report_rows(graph: DataflowGraph, partitioning, fn: ir.Operation) -> list[ReportRow]:
    from collage_mlir.passes.common import function_name

    name = function_name(fn)
    rows = []
    for k, choice in enumerate(partitioning.choices):
        cand: CandidatePartition = choice.candidate
        types = [graph.nodes[i].op_type for i in cand.sub_graph.nodes]
        rows.append(ReportRow(
            region=f"{name}_{cand.backend}_{k}", backend=cand.backend, ops=len(types),
            op_types=summarize_op_types(types), estimated_cost=choice.cost,
            runner_up=choice.runner_up.backend if choice.runner_up else "",
            runner_up_cost=choice.runner_up_cost))
    return rows
