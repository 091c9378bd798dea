"""The Python pipeline API: `compile(model, backends, cache) -> PartitionedModel`.

The same phases as the passes, in one call, with Python objects in between so a caller can
hand in its own CostEstimator and get a progress bar:
import → annotate (candidates) → [placement] → measure/search → outline → compile
→ [verify: the pick timed end to end against whole-model alternatives].
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import onnx
from iree.compiler import ir

from collage_mlir.backends.registry import available_backends, registered_backends
from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.base import CostEstimator
from collage_mlir.dialects import collage
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraph, SubGraphConfig
from collage_mlir.importer import import_onnx, parse_mlir
from collage_mlir.passes.common import functions
from collage_mlir.paths import user_path
from collage_mlir.progress import ProgressBar
from collage_mlir.runtime.compare import random_inputs, whole_model_runner
from collage_mlir.runtime.model import PartitionedModel, clone_module
from collage_mlir.runtime.report import ReportRow, summarize_op_types
from collage_mlir.runtime.verify import PICK, fastest, rounds_for, whole_alternatives
from collage_mlir.search.partitioning import Choice, Partitioning
from collage_mlir.static_shapes import InputShapes

DEFAULT_MAX_DEPTH = 3
DEFAULT_MAX_EXITS = 1

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Module


def load_module(model: ModelInput, input_shapes: InputShapes | None = None) -> ir.Module:
    """An MLIR module from a path (.onnx or .mlir), a ModelProto or a module (used as is).

    `input_shapes` (name → dims) specialises an ONNX model's dynamic inputs; MLIR input is
    static already (it was imported) and takes none."""
    if isinstance(model, onnx.ModelProto) or (
            not isinstance(model, ir.Module) and user_path(model).suffix != ".mlir"):
        return import_onnx(model, input_shapes=input_shapes)
    if input_shapes:
        raise CollageError("input shapes apply to ONNX models; MLIR input is static already")
    if isinstance(model, ir.Module):
        return model
    path = user_path(model)
    try:
        module = parse_mlir(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise CollageError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    _refuse_partitioned(module, str(path))
    return module


def _refuse_partitioned(module: ir.Module, label: str) -> None:
    """A module already outlined by collage (functions carrying `collage.backend`) is the
    output of partitioning, not an input to it."""
    for op in module.body.operations:
        if collage.BACKEND in op.operation.attributes:
            raise CollageError(f"{label}: already partitioned (it has outlined collage "
                               "regions); partition the original model instead")


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


@contextmanager
def _timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - t0


def compile(model: ModelInput, backends: Sequence[str] | None = None,
            cache: str | os.PathLike | None = None, *, max_depth: int | None = None,
            max_exits: int = DEFAULT_MAX_EXITS, placement: str | os.PathLike | None = None,
            cost: str = "measure", estimator: CostEstimator | None = None,
            progress: bool = False, verify: bool | None = None,
            verify_budget_s: float = 3.0,
            input_shapes: InputShapes | None = None) -> PartitionedModel:
    """Partition `model` across `backends` by measured cost and compile every region.

    `verify` (default: on when costs are measured) times the pick end to end against the
    backends that could run the whole model for a comparable estimate, and keeps the
    fastest (`collage_mlir.runtime.verify`); `verify_budget_s` bounds that timing.
    `input_shapes` (input name → dims) makes a model with dynamic inputs static; the result
    runs on those shapes only.
    """
    from collage_mlir.rules.spec import generate_candidates, specs_for
    from collage_mlir.search.search import search

    timings: dict[str, float] = {}
    with _timed(timings, "import"):
        module = load_module(model, input_shapes)
    names = resolve_backends(backends)
    fns = functions(module.operation)
    if len(fns) != 1:
        raise CollageError(f"expected one public function, found {len(fns)}")
    fn = fns[0]
    with _timed(timings, "annotate"):
        graph = DataflowGraph(fn)
        config = SubGraphConfig(max_exits=max_exits, allow_taps=False,
                                max_depth=DEFAULT_MAX_DEPTH if max_depth is None else max_depth)
        candidates = generate_candidates(graph, specs_for(names), config)
        if placement is not None:
            from collage_mlir.placement import Placement

            candidates = Placement.from_json(placement).filter(graph, candidates)
    own = estimator is None
    if verify is None:
        verify = cost == "measure" and own
    estimator = estimator or make_estimator(cost, names, cache)
    bar = ProgressBar("measuring") if progress else None
    try:
        with _timed(timings, "measure"):
            costs = estimator.estimate(candidates, progress=bar)
            if bar:
                bar.close()
            _measure_hand_offs(estimator, names, ProgressBar("hand-offs") if progress else None)
        with _timed(timings, "search"):
            partitioning = search(graph, candidates, costs, estimator.transition_cost,
                                  reason=estimator.reason)
        alternatives = (whole_alternatives(graph, candidates, costs, partitioning,
                                           estimator.transition_cost) if verify else [])
    finally:
        if own and hasattr(estimator, "close"):
            estimator.close()
    pristine = clone_module(module) if alternatives else None
    with _timed(timings, "compile"):
        result = build(module, graph, partitioning)
    if alternatives:
        with _timed(timings, "verify"):
            result = _verified(result, pristine, alternatives, verify_budget_s)
    result.backends_considered = names
    result.candidates = candidates
    result.timings = timings
    return result


def _measure_hand_offs(estimator: CostEstimator, names: Sequence[str], bar) -> None:
    """Ask for every backend pair's hand-off cost once, before the search: a measuring
    estimator runs its transition experiment here (about a minute on an empty cache) rather
    than lazily inside the search, so the phase timings say where the time went."""
    pairs = [(a, b) for a in names for b in names]
    for k, (a, b) in enumerate(pairs):
        estimator.transition_cost(a, b, 0)
        if bar:
            bar(k + 1, len(pairs))
    if bar:
        bar.close()


def build(module: ir.Module, graph: DataflowGraph, partitioning: Partitioning
          ) -> PartitionedModel:
    """Stamp `partitioning` on the module's function, outline it and compile every region."""
    from collage_mlir.passes.outline import outline_function
    from collage_mlir.passes.search import write_partitioning

    fn = graph.func_op
    rows = report_rows(graph, partitioning, fn)
    write_partitioning(fn, partitioning)
    outline_function(fn)
    result = PartitionedModel.from_module(module, report_rows=rows,
                                          estimated_cost=partitioning.total_cost)
    result.partitioning = partitioning
    return result


def _verified(pick: PartitionedModel, pristine: ir.Module, alternatives: list[Partitioning],
              budget_s: float) -> PartitionedModel:
    """`pick`, or the whole-model alternative that ran faster end to end (built on
    `pristine`, a copy of the module taken before outlining)."""
    inputs = random_inputs(pristine)
    runners = {PICK: pick.run}
    regions = {PICK: len(pick.plan.steps)}
    by_name = {}
    for alt in alternatives:
        backend = alt.choices[0].candidate.backend
        name = f"{backend} whole"
        try:
            runner = whole_model_runner(pristine, backend)
            runner(inputs)
        except Exception:  # measured fine in the worker, fails here: not a contender
            continue
        runners[name] = runner
        by_name[name], regions[name] = alt, 1
    if not by_name:
        return pick
    rounds = rounds_for([pick.estimated_cost or 0.0] +
                        [a.total_cost for a in by_name.values()], budget_s)
    verdict = fastest(runners, inputs, rounds, regions)
    if verdict.kept == PICK:
        pick.verdict = verdict
        return pick
    alt = by_name[verdict.kept]
    graph = DataflowGraph(functions(pristine.operation)[0])
    cand = alt.choices[0].candidate
    whole = CandidatePartition(SubGraph(graph, graph.op_bits), cand.backend, cand.rule_name)
    lost = pick.partitioning.choices if pick.partitioning else ()
    runner_up = lost[0] if len(lost) == 1 else None  # a one-region pick: the same nodes
    rebased = Partitioning(graph, (Choice(
        whole, alt.choices[0].cost, runner_up.candidate if runner_up else None,
        runner_up.cost if runner_up else None),), alt.total_cost, alt.transition_cost)
    result = build(pristine, graph, rebased)
    result.verdict = verdict
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
