"""The phase driver: import → annotate → measure → search → outline → compile → check.

One function per phase, on Python objects, and `partition` running them in order. The
Python API (`collage_mlir.compile`), the command line and the passes (`passes/`, thin
wrappers that read and write the `collage.*` attributes) all call these; no phase reaches
back into a later one.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import numpy as np
import onnx
from iree.compiler import ir

from collage_mlir.annotate import generate_candidates, specs_for
from collage_mlir.backends.registry import available_backends, registered_backends
from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.isolated import Probed, probe_final
from collage_mlir.check.quantized import quantization_error
from collage_mlir.check.refine import build_neighbour, refine
from collage_mlir.check.verify import check_pick, drifted
from collage_mlir.cost.base import CostEstimator
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.cost.remote import RemoteExecutor
from collage_mlir.dialects import collage
from collage_mlir.dialects.func import function_name, io_names, public_functions, result_count
from collage_mlir.errors import CollageError
from collage_mlir.export.resources import forget_store, weight_store
from collage_mlir.graph import DataflowGraph, SubGraphConfig
from collage_mlir.graph.outline import outline_placed, region_name
from collage_mlir.importer import check_blobs_present, import_onnx, parse_mlir
from collage_mlir.paths import user_path
from collage_mlir.placement import Placement
from collage_mlir.progress import ProgressBar
from collage_mlir.runtime.model import PartitionedModel, clone_module
from collage_mlir.runtime.report import (
    Rejection,
    ReportRow,
    Trial,
    Verdict,
    run_notes,
    summarize_op_types,
)
from collage_mlir.scratch import sweep
from collage_mlir.search.islands import (
    ESTIMATE_SLACK,
    ISLAND_RULE,
    TIMING_SLACK,
    Archipelago,
    island_types,
    parts,
    repriced,
    scaled_guess,
    union,
    whole_archipelagos,
)
from collage_mlir.search.merge import Merge, coalesce
from collage_mlir.search.partitioning import Partitioning
from collage_mlir.search.prune import (
    by_backend,
    dominated,
    floor_cover,
    interleave,
    ranking_ops,
    stages,
    stop_above,
)
from collage_mlir.search.search import (
    STATE_LIMIT_NOTE,
    Uncovered,
    cannot_run,
    first_uncovered,
    search,
)
from collage_mlir.static_shapes import InputShapes, SampleShapes
from collage_mlir.tensors import (
    Inputs,
    TensorSpec,
    Tolerance,
    argument_specs,
    arrange_inputs,
    compare,
    index_limits,
    model_inputs,
    quantized_results,
)

DEFAULT_MAX_DEPTH = 3
"""Measured with onnxruntime, openvino and iree (max-exits=1): light_resnet50 has 177/340/
498/639 candidates per graph backend at depth 1/2/3/4 (iree 169 to 185), light_densenet121
669/1278/1828/2319 (iree 366). Each level adds about 30%; 3 takes Conv+BN+Relu and
Conv+Add+Relu whole, and deeper groups stay reachable through the maximal regions."""
DEFAULT_MAX_EXITS = 1
DEFAULT_TIMEOUT_S = 60.0

ModelInput = str | os.PathLike | onnx.ModelProto | ir.Module
Say = Callable[[str], None]


@dataclass(frozen=True)
class PartitionOptions:
    """Everything `partition` takes besides the model (see `collage_mlir.compile`)."""

    backends: Sequence[str] | None = None
    cache: str | os.PathLike | None = None
    max_depth: int = DEFAULT_MAX_DEPTH
    max_exits: int = DEFAULT_MAX_EXITS
    placement: str | os.PathLike | None = None
    cost: str = "measure"
    verify: bool | None = None
    verify_budget_s: float | None = None
    """Seconds for timing the pick against the whole models (None: `verify.default_budget`,
    scaled to one run of the pick)."""
    input_shapes: InputShapes | None = None
    progress: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    """Longest one candidate may take to compile, check and time before it is a timeout."""
    kernel_budget_s: float | None = None
    """Seconds of timing per kernel at most (None: `MeasureSettings`' default)."""
    tolerance: tuple[float, float] | None = None
    """(rtol, atol_scale) outputs are checked to against the reference (`tensors.compare`;
    None: `MeasureSettings`' default)."""
    measure_budget_s: float | None = None
    """Seconds the measure phase may take before it stops measuring multi-op candidates
    (None: no limit)."""
    prune: bool = True
    """Skip multi-op candidates that cannot win given what was measured before them, and
    measure the rest along the lower bound (`search.prune`); False measures everything."""
    merge: bool = True
    """Merge adjacent chosen regions on one backend where the union measures no slower."""
    islands: bool = True
    """Before the search, carve the ops another backend runs cheaper out of the cheapest
    whole model, and offer its measured parts to the search (`carve_islands`)."""
    refine_budget_s: float | None = None
    """Seconds for timing the pick's neighbours end to end (None: `refine.default_budget`,
    scaled to one run of the pick; 0: off; only when verifying)."""
    executor: str | RemoteExecutor | None = None
    """Where candidates are measured (`cost.executor`: None or "local" here, "ray",
    "ray://HOST:PORT", or a `RemoteExecutor`)."""
    inputs: Inputs | None = None
    """The model's inputs (by name or in order): the final compile checks the pick on them
    before the made-up ones, and the end-to-end check and refinement time on them (None:
    made-up inputs only, `tensors.make_inputs`)."""

    def __post_init__(self) -> None:
        """Refuse, before any work, what the command line's flags would refuse."""
        if isinstance(self.backends, str):
            raise CollageError(f"backends: give a list of names, not the string "
                               f"{self.backends!r}")
        for name in ("max_depth", "max_exits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise CollageError(f"{name} must be a positive integer, got {value!r}")
        for name, zero in (("timeout_s", False), ("verify_budget_s", False),
                           ("kernel_budget_s", False), ("measure_budget_s", False),
                           ("refine_budget_s", True)):
            value = getattr(self, name)
            if value is None and name != "timeout_s":
                continue
            if not _seconds(value, zero):
                what = "0 or a positive" if zero else "a positive"
                raise CollageError(f"{name} must be {what} number of seconds, got {value!r}")


def _seconds(value: object, zero: bool) -> bool:
    """Whether `value` is a finite number of seconds above 0 (or 0 itself, if `zero`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return (0 <= value if zero else 0 < value) and math.isfinite(value)


# -- import ---------------------------------------------------------------------------------


def load(model: ModelInput, input_shapes: InputShapes | None = None,
         inputs: Inputs | None = None) -> ir.Module:
    """An MLIR module from a path (.onnx or .mlir), a ModelProto or a module (used as is).

    `input_shapes` (name → dims) specialises an ONNX model's dynamic inputs; MLIR input is
    static already (it was imported) and takes none."""
    if not isinstance(model, onnx.ModelProto | ir.Module | str | os.PathLike):
        hint = (" (onnx.load_from_string(data) makes one of its bytes)"
                if isinstance(model, bytes | bytearray) else "")
        raise CollageError(f"model: expected a path (.onnx or .mlir), an onnx.ModelProto or "
                           f"an ir.Module, got {type(model).__name__}{hint}")
    if isinstance(model, onnx.ModelProto) or (
            not isinstance(model, ir.Module) and user_path(model).suffix != ".mlir"):
        return import_onnx(model, input_shapes=input_shapes, samples=_shapes_of(inputs))
    if input_shapes:
        raise CollageError("input shapes apply to ONNX models; MLIR input is static already")
    if isinstance(model, ir.Module):
        return model
    path = user_path(model)
    try:
        text = path.read_text()
        check_blobs_present(text, str(path))
        module = parse_mlir(text, str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise CollageError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    refuse_partitioned(module, str(path))
    return module


def _shapes_of(inputs: Inputs | None) -> SampleShapes | None:
    """The shapes of the user's inputs (by name or in order), for a dynamic model's
    inputs; None when there are none (or they are of a kind `given_inputs` refuses)."""
    try:
        if isinstance(inputs, Mapping):
            return {k: np.shape(v) for k, v in inputs.items()}
        if isinstance(inputs, Sequence) and not isinstance(inputs, str | bytes):
            return [np.shape(v) for v in inputs]
    except ValueError:  # a ragged list: `given_inputs` says what is wrong with it
        pass
    return None


def refuse_partitioned(module: ir.Module, label: str) -> None:
    """A module already outlined by collage (functions carrying `collage.backend`) is the
    output of partitioning, not an input to it."""
    for op in module.body.operations:
        if collage.BACKEND in op.operation.attributes:
            raise CollageError(f"{label}: already partitioned (it has outlined collage "
                               "regions); partition the original model instead")


def entry_graph(module: ir.Module) -> DataflowGraph:
    """The DataflowGraph of the module's one public function (kept alive with the module)."""
    fns = public_functions(module)
    if len(fns) != 1:
        raise CollageError(f"expected one public function, found {len(fns)}")
    refuse_no_outputs(fns[0])
    refuse_unrunnable_inputs(fns[0])
    return DataflowGraph(fns[0], owner=module)


def refuse_unrunnable_inputs(fn: ir.Operation) -> None:
    """Every input needs a static shape and an element type inputs can be made of (they
    are measured and checked on made-up ones): a CollageError naming the first that has not."""
    names = io_names(fn)[0]
    for name, arg in zip(names, fn.regions[0].blocks[0].arguments, strict=True):
        try:
            TensorSpec.of(arg.type)
        except ValueError as e:
            hint = (" (import the .onnx with --input-shape)" if "dynamic" in str(e) else "")
            raise CollageError(f"@{function_name(fn)}: input '{name}': {e}{hint}") from None


def refuse_no_outputs(fn: ir.Operation) -> None:
    """A function that returns nothing has nothing to compute: a CollageError naming it."""
    if not result_count(fn):
        raise CollageError(f"@{function_name(fn)} returns nothing: there is no output to "
                           "compute")


# -- annotate -------------------------------------------------------------------------------


def usable_backends(names: Sequence[str] | None, say: Say = print) -> list[str]:
    """The usable backends among `names` (all available ones when None); unusable ones are
    skipped with a message, an unknown name is an error, and having none left is an error."""
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


def annotate(graph: DataflowGraph, backends: Sequence[str], config: SubGraphConfig,
             placement: Placement | None = None) -> list[CandidatePartition]:
    """Every backend's candidates (RFC phases 1-2), less those a placement forbids."""
    candidates = generate_candidates(graph, specs_for(backends), config)
    if placement is None:
        return candidates
    return placement.filter(graph, candidates)


def require_offered(graph: DataflowGraph, backends: Sequence[str],
                    candidates: Sequence[CandidatePartition],
                    placement: Placement | None = None) -> None:
    """Every op node of `graph` in some candidate, checked before anything is measured; else
    an error naming the first node left out and why: the placement rule behind it, or each
    backend's own reason."""
    i = first_uncovered(graph, candidates)
    if i is None:
        return
    said = placement.says_of(graph.nodes[i]) if placement else None
    if said is None:
        said = "; ".join(
            f"{spec.backend_name}: " + (spec.resolve_backend().refusal(graph, i)
                                        if not spec.supported(graph) >> i & 1
                                        else "formed no region holding it")
            for spec in specs_for(backends))
    raise CollageError(cannot_run(graph, i, said))


def given_inputs(fn: ir.Operation, inputs: Inputs) -> list[np.ndarray]:
    """The user's inputs for the entry point `fn`, arranged in its order and checked
    against its (static) argument types: a bad one is an error before anything is
    measured."""
    try:
        names, specs = io_names(fn)[0], argument_specs(fn)
    except ValueError as e:
        raise CollageError(f"inputs cannot be given for this model: {e}") from None
    return arrange_inputs(names, specs, inputs, limits=index_limits(fn))


# -- measure --------------------------------------------------------------------------------


def tolerance(rtol: float | None, atol_scale: float | None) -> tuple[float, float] | None:
    """(rtol, atol_scale) from options of which either may be left out (None: both were,
    the default tolerance)."""
    if rtol is None and atol_scale is None:
        return None
    return (MeasureSettings.rtol if rtol is None else rtol,
            MeasureSettings.atol_scale if atol_scale is None else atol_scale)


def measure_settings(kernel_budget_s: float | None = None,
                     tolerance: tuple[float, float] | None = None) -> MeasureSettings:
    """The measuring settings with a kernel budget and a tolerance where given."""
    fields: dict[str, float] = {}
    if kernel_budget_s is not None:
        fields["budget_s"] = kernel_budget_s
    if tolerance is not None:
        fields["rtol"], fields["atol_scale"] = tolerance
    return MeasureSettings(**fields)


def make_estimator(cost: str, backends: Sequence[str], cache: str | os.PathLike | None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, kernel_budget_s: float | None = None,
                   executor: str | RemoteExecutor | None = None,
                   tolerance: tuple[float, float] | None = None) -> CostEstimator:
    """'measure' → the measuring estimator (real backends + cache; `timeout_s` per
    candidate, `kernel_budget_s` of timing per kernel, outputs checked to `tolerance`
    (rtol, atol_scale), measured where `executor` says); 'table:FILE' → a table."""
    if not 0 < timeout_s < math.inf:
        raise CollageError(f"timeout {timeout_s}: must be a positive number of seconds")
    if kernel_budget_s is not None and not 0 < kernel_budget_s < math.inf:
        raise CollageError(f"kernel budget {kernel_budget_s}: must be a positive number "
                           "of seconds")
    if tolerance is not None and not all(0 <= t < math.inf for t in tolerance):
        raise CollageError(f"tolerance {tolerance}: rtol and atol scale must be finite "
                           "numbers ≥ 0")
    if cost == "measure":
        from collage_mlir.cost.measure import MeasuringEstimator

        return MeasuringEstimator(list(backends), cache_path=cache, timeout_s=timeout_s,
                                  settings=measure_settings(kernel_budget_s, tolerance),
                                  executor=executor)
    if cost.startswith("table:"):
        from collage_mlir.cost.table import TableEstimator

        return TableEstimator.from_json(cost[len("table:"):])
    raise CollageError(f"cost={cost}: expected 'measure' or 'table:FILE'")


def price_hand_offs(estimator: CostEstimator, backends: Sequence[str],
                    progress: bool = False) -> None:
    """Every backend pair's hand-off cost, asked for once before measuring: a measuring
    estimator runs its hand-off experiment here (20-30 s for three backends on an empty
    cache), not lazily inside the search, so the phase timings say where the time went."""
    pairs = [(a, b) for a in backends for b in backends]
    bar = ProgressBar("hand-offs") if progress else None
    for k, (a, b) in enumerate(pairs):
        estimator.transition_cost(a, b, 0)
        if bar:
            bar(k + 1, len(pairs))
    if bar:
        bar.close()


def measure(estimator: CostEstimator, candidates: Sequence[CandidatePartition],
            progress: bool = False, *,
            graph: DataflowGraph | None = None, budget_s: float | None = None,
            prune: bool = True, bound: bool = True) -> tuple[list[float], dict[int, str]]:
    """The candidates' costs in stages (`search.prune.stages`: single ops, whole models,
    the rest largest first; fastest backend first, `by_backend`, the backends that time
    region by region taking turns, `interleave`), and why
    some were not measured (index → reason): dominated given what was measured before them
    (`prune`), bounded out (`bound`, below) or left when `budget_s` seconds were spent.
    Single ops and whole models are always measured, so a cover exists whatever the budget.
    With `prune`, a candidate is also told where it loses to what is known
    (`search.prune.stop_above`) and timed less beyond it, and with `bound` as well the rest
    is measured along the lower bound (`search.prune.floor_cover`): only the regions on the
    least-cost cover with every unmeasured region at its floor, round after round, until
    that cover holds none. Pruning prices hand-offs: `price_hand_offs` first."""
    with estimator.session():  # each backend's worker kept from stage to stage
        return _measure_stages(estimator, candidates, progress, graph, budget_s, prune,
                               bound and prune and graph is not None)


def _measure_stages(estimator: CostEstimator, candidates: Sequence[CandidatePartition],
                    progress: bool, graph: DataflowGraph | None, budget_s: float | None,
                    prune: bool, bound: bool) -> tuple[list[float], dict[int, str]]:
    """`measure` inside its estimator session."""
    start = time.perf_counter()
    costs = [math.nan] * len(candidates)
    left: dict[int, str] = {}
    bar = ProgressBar("measuring") if progress else None
    done = 0

    def known() -> dict[int, float]:
        return {k: cost for k, cost in enumerate(costs) if not math.isnan(cost)}

    def run(n: int, stage: list[int]) -> bool:
        """Measures `stage` (of stage `n`) batch by batch; fills `costs` and `left`. True
        when the budget ran out on it."""
        nonlocal done
        spent = False
        later = n >= 2  # after single ops and whole models: prunable, within the budget
        for group in _batches(graph, candidates, n, stage, known, prune,
                              estimator.reference_backend, estimator.alternates):
            if later and prune:
                out = dominated(graph, candidates, group, known(), estimator.transition_cost)
                left.update(out)
                group = [k for k in group if k not in out]
                done += len(out)
            for chunk in _chunks(group, MEASURE_CHUNK if later and budget_s else len(group)):
                if later and budget_s is not None and time.perf_counter() - start > budget_s:
                    left.update(dict.fromkeys(chunk, _budget_note(budget_s)))
                    done += len(chunk)
                    spent = True
                    continue
                bounds = (stop_above(graph, candidates, chunk, known(),
                                     estimator.transition_cost)
                          if prune and graph is not None else [None] * len(chunk))
                got = estimator.estimate_bounded(
                    [candidates[k] for k in chunk], bounds, progress=(
                        (lambda d, _t, base=done: bar(base + d, len(candidates))) if bar
                        else None))
                for k, cost in zip(chunk, got, strict=True):
                    costs[k] = cost
                done += len(chunk)
        return spent

    groups = stages(graph, candidates) if graph is not None else [list(range(len(candidates)))]
    for n, stage in enumerate(groups):
        if not stage:
            continue
        if n >= 2 and bound:
            left.update(_measure_bounded(graph, candidates, stage, known, run, estimator,
                                         budget_s))
            if bar:
                bar(len(candidates), len(candidates))
        else:
            run(n, stage)
    if bar:
        bar.close()
    for k in left:
        costs[k] = math.inf
    return costs, left


def _measure_bounded(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                     stage: list[int], known: Callable[[], dict[int, float]],
                     run: Callable[[int, list[int]], bool], estimator: CostEstimator,
                     budget_s: float | None) -> dict[int, str]:
    """The rest measured along the lower bound (`floor_cover`), round by round: each round
    measures (`run`) the unmeasured regions on the floor cover and the regions on the same
    nodes on the backends that take turns (`estimator.alternates`), so that contenders
    for the same nodes are timed close together. Returns why the regions never measured
    were not: the floor cover's cost then is the least-cost cover's."""
    pending = set(stage)
    same_nodes: dict[int, list[int]] = {}
    for k in stage:
        same_nodes.setdefault(candidates[k].inside, []).append(k)
    floor_s, exact = math.inf, True
    while pending:
        try:
            wanted, floor_s, exact = floor_cover(graph, candidates, known(), pending,
                                                 estimator.transition_cost, exact)
        except Uncovered:  # no cover at all: measure everything, so the search can say why
            wanted = sorted(pending)
        if not wanted:
            break
        chosen = set(wanted) | {j for k in wanted for j in same_nodes[candidates[k].inside]
                                if j in pending and estimator.alternates(candidates[j].backend)}
        batch = [k for k in stage if k in chosen]
        pending -= chosen
        if run(2, batch):
            return dict.fromkeys(pending, _budget_note(budget_s))
    return dict.fromkeys(pending, _bounded_note(floor_s, exact))


def _bounded_note(floor_s: float, exact: bool) -> str:
    """Why a region was bounded out; a beam's cover is only the cheapest it found."""
    found = f"{floor_s * 1e3:.4g} ms"
    how = (f"no cover through it beats the one found ({found})" if exact else
           f"the search's beam found no cover through it below the one found ({found}; not "
           "proven: the exact search ran out of states)")
    return f"bounded out: at its floor (half its dearest op alone) {how}"


def _budget_note(budget_s: float | None) -> str:
    return f"not measured: the measure budget ({budget_s:g} s) was spent"


def _batches(graph: DataflowGraph | None, candidates: Sequence[CandidatePartition], n: int,
             stage: list[int], known: Callable[[], dict[int, float]], prune: bool,
             prefer: str | None = None,
             alternates: Callable[[str], bool] = lambda _: False) -> Iterator[list[int]]:
    """Stage `n`'s candidates in the batches they are measured in, each batch chosen when
    the one before is measured: whole models in one (timed side by side); with pruning,
    single ops first on a few nodes on every backend (`ranking_ops`); then (single ops and
    the rest) fastest backend first (`by_backend`), so that the later ones are timed
    against the earlier ones' costs, the backends that `alternates` taking turns in
    windows of a few node sets (`interleave`)."""
    if graph is None or n == 1 or (n == 0 and not prune):
        yield stage
        return
    if n == 0:
        first = ranking_ops(graph, candidates, stage)
        if first:
            yield first
        ranked = set(first)
        stage = [k for k in stage if k not in ranked]
    yield from interleave(candidates, by_backend(graph, candidates, stage, known(), prefer),
                          alternates)


MEASURE_CHUNK = 64
"""Candidates measured per call once a budget is set: the budget is checked between calls."""


def _chunks(items: Sequence[int], size: int) -> Iterator[list[int]]:
    for i in range(0, len(items), max(size, 1)):
        yield list(items[i:i + size])


def rejections(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
               costs: Sequence[float], estimator: CostEstimator,
               unmeasured: Mapping[int, str] | None = None) -> list[Rejection]:
    """The candidates out of the search (+inf) or unknown (NaN), grouped per backend and
    reason (numbers in the reason do not split a group), most frequent first. `unmeasured`:
    index → why a candidate was not measured (pruned, out of budget)."""
    groups: dict[tuple[str, str], Rejection] = {}
    for k, (c, cost) in enumerate(zip(candidates, costs, strict=True)):
        if not (math.isinf(cost) or math.isnan(cost)):
            continue
        reason = ((unmeasured or {}).get(k) or estimator.reason(c)
                  or ("unknown cost" if math.isnan(cost) else "invalid"))
        g = groups.setdefault((c.backend, _reason_group(reason)),
                              Rejection(c.backend, reason.splitlines()[0]))
        g.count += 1
        for i in c.sub_graph.nodes:
            t = graph.nodes[i].op_type
            if t not in g.op_types:
                g.op_types.append(t)
    return sorted(groups.values(), key=lambda g: (g.backend, -g.count, g.reason))


def _reason_group(reason: str) -> str:
    """A reason with its numbers blanked: "wrong numbers: max abs err 0.5" and "… 0.7" are
    one group."""
    return re.sub(r"\d+(\.\d+)?([eE][+-]?\d+)?", "#", reason.splitlines()[0] if reason else "")


# -- islands --------------------------------------------------------------------------------

ISLANDS = "islands"
"""`Trial.phase` of the archipelago carved before the search."""


@dataclass
class Carved:
    """The archipelago `carve_islands` offered the search: its label, its cover once
    measured (None when it was dropped), the whole model's estimate, why it was dropped,
    and the cover's regions among the candidates."""

    what: str
    cover: Partitioning | None
    whole_s: float
    why: str = ""
    indices: list[int] = field(default_factory=list)
    """The cover's regions as indices into the candidates (the search's `covers`)."""

    @property
    def label(self) -> str:
        """Its name among refinement's neighbours."""
        return f"{self.what}, carved before the search"

    @property
    def contender(self) -> str:
        """Its name among the end-to-end check's contenders."""
        return f"carved {island_types(self.cover)}" if self.cover is not None else ""

    def trial(self, pick: Partitioning) -> Trial:
        """The report's line; kept when the search took every part."""
        if self.cover is None:
            return Trial(ISLANDS, self.what, None, None, False, self.why)
        mine = {(ch.candidate.backend, ch.candidate.inside) for ch in self.cover.choices
                if ch.candidate.rule_name == ISLAND_RULE}
        took = len(mine & {(ch.candidate.backend, ch.candidate.inside)
                           for ch in pick.choices})
        return Trial(ISLANDS, self.what, self.cover.total_cost, None, took == len(mine),
                     f"estimated {self.cover.total_cost * 1e3:.4g} ms with its {len(mine)} "
                     f"parts measured, the whole model {self.whole_s * 1e3:.4g}; the search "
                     f"took {took} of the parts")


def carve_islands(graph: DataflowGraph, candidates: list[CandidatePartition],
                  costs: list[float], estimator: CostEstimator, progress: bool = False,
                  left_s: float = math.inf) -> list[Carved]:
    """Offer the search the cheapest whole model's archipelagos (`search.islands`, at most
    WHOLE_ARCHIPELAGOS) and the two of them estimated cheapest carved at once, when each
    of those two came out no more than ESTIMATE_SLACK above the whole model: the parts
    around each one's islands are measured, largest first, and appended to `candidates`
    and `costs` (in place); none when no archipelago qualifies. The search covers the
    nodes around an island with rule-sized candidates only, a call each, so it cannot
    price such a cover otherwise. `left_s`: what the measure budget leaves (spent:
    nothing more is measured)."""
    found = whole_archipelagos(graph, candidates, costs, estimator.transition_cost)
    if found is None:
        return []
    whole, ranked = found
    start = time.perf_counter()

    def offered(a: Archipelago) -> Carved:
        spent = left_s - (time.perf_counter() - start) <= 0
        return _carve_one(f"{a.label}'s whole model", a.carved(whole, estimator.transition_cost),
                          whole.total_cost, candidates, costs, estimator, progress, spent)

    out = [offered(a) for a in ranked]
    close = sorted((c.cover.total_cost, k) for k, c in enumerate(out)
                   if c.cover is not None and c.cover.total_cost
                   <= c.whole_s * (1 + ESTIMATE_SLACK))
    if len(close) >= 2:
        out.append(offered(union([ranked[k] for k in sorted(k for _, k in close[:2])])))
    return out


def _carve_one(what: str, nb: Partitioning, whole_s: float,
               candidates: list[CandidatePartition], costs: list[float],
               estimator: CostEstimator, progress: bool, spent: bool) -> Carved:
    """One archipelago `nb` of the whole model (estimated `whole_s`) measured and offered
    (`carve_islands`). The parts are measured largest first, in batches doubling in size
    (1, 2, 4, ...): when, the others scaled as the measured ones came out, the cover lies
    more than TIMING_SLACK above the whole model, nothing is added and nothing more is
    measured (small parts pay a call each, which the largest alone does not show; a part
    that cannot run drops it too); with the budget `spent`, nothing is measured."""
    if spent:
        return Carved(what, None, whole_s, "not measured: the measure budget was spent")
    order = parts(nb)
    bar = ProgressBar(ISLANDS) if progress else None
    measured: dict[int, float] = {}
    for chunk in _doubling(order):
        got = estimator.estimate([nb.choices[k].candidate for k in chunk])
        bad = next((k for k, cost in zip(chunk, got, strict=True) if not math.isfinite(cost)),
                   None)
        if bad is not None:
            c = nb.choices[bad].candidate
            return Carved(what, None, whole_s, f"dropped: a part around its islands: "
                          f"{estimator.reason(c) or 'not measurable'}")
        measured.update(zip(chunk, got, strict=True))
        if bar:
            bar(len(measured), len(order))
        guess = scaled_guess(nb, measured, estimator.transition_cost)
        above = guess.total_cost / whole_s - 1
        if above > TIMING_SLACK:
            if bar:
                bar.close()
            return Carved(what, None, whole_s, (
                f"dropped: estimated {above:.0%} above the whole model with {len(measured)} "
                f"of its {len(order)} parts measured (past what the check times, "
                f"{TIMING_SLACK:.0%})"))
    if bar:
        bar.close()
    cover = repriced(nb, measured, 1.0, estimator.transition_cost)
    have: dict[tuple[str, int], int] = {}  # (backend, nodes) → its cheapest valid candidate
    for k, (c, cost) in enumerate(zip(candidates, costs, strict=True)):
        key = (c.backend, c.inside)
        if math.isfinite(cost) and (key not in have or cost < costs[have[key]]):
            have[key] = k
    for k in order:
        c = cover.choices[k].candidate
        if (c.backend, c.inside) not in have:
            have[c.backend, c.inside] = len(candidates)
            candidates.append(c)
            costs.append(measured[k])
    indices = [have[ch.candidate.backend, ch.candidate.inside] for ch in cover.choices]
    return Carved(what, cover, whole_s, indices=indices)


def _doubling(items: Sequence[int]) -> Iterator[list[int]]:
    """`items` in consecutive batches of 1, 2, 4, ... (the last one what is left)."""
    start, size = 0, 1
    while start < len(items):
        yield list(items[start:start + size])
        start, size = start + size, 2 * size


# -- search ---------------------------------------------------------------------------------


def choose(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
           costs: Sequence[float], estimator: CostEstimator, unknown: str = "raise",
           carved: Sequence[Carved] = (), placement: Placement | None = None) -> Partitioning:
    """The least-cost cover (RFC phase 3) under the estimator's hand-off prices, no dearer
    than any `carved` cover; says so on stderr when the search ran out of states (the cover
    is then not proven least-cost). An op left to no backend is an error that names the
    placement rule behind it, if one is, and for a quantized model the tolerance that
    would take the whole models left out for their numbers (`tolerance_hint`)."""
    try:
        pick = search(graph, candidates, costs, estimator.transition_cost, unknown,
                      estimator.reason, covers=[c.indices for c in carved if c.indices])
    except Uncovered as e:
        said = placement.says_of(graph.nodes[e.node]) if placement else None
        hint = tolerance_hint(refused_for_numbers(graph, candidates, costs, estimator))
        if said is None and hint is None:
            raise
        raise CollageError("; ".join(t for t in (str(e), said, hint) if t)) from None
    if not pick.exact:
        print(f"collage: search: {STATE_LIMIT_NOTE}", file=sys.stderr, flush=True)
    return pick


def merge(partitioning: Partitioning, estimator: CostEstimator
          ) -> tuple[Partitioning, list[Merge]]:
    """Adjacent chosen regions on one backend merged where the union, costed by the
    estimator, keeps the cover's estimate from rising (TVM Collage's MaxCoalesce)."""
    return coalesce(partitioning, estimator.estimate, estimator.transition_cost)


# -- outline and compile --------------------------------------------------------------------


def outline(partitioning: Partitioning) -> list[ir.Operation]:
    """Rewrite the partitioned function into calls to one private function per chosen
    region (RFC phase 4); returns the calls in execution order."""
    return outline_placed(partitioning.graph, [
        (k, c.candidate.sub_graph, c.candidate.backend, c.cost)
        for k, c in enumerate(partitioning.choices)])


def report_rows(partitioning: Partitioning) -> list[ReportRow]:
    """One report row per chosen region, named as `outline` names its function."""
    graph = partitioning.graph
    name = function_name(graph.func_op)
    rows = []
    for k, choice in enumerate(partitioning.choices):
        cand = choice.candidate
        types = [graph.nodes[i].op_type for i in cand.sub_graph.nodes]
        rows.append(ReportRow(
            region=region_name(name, cand.backend, k), backend=cand.backend, ops=len(types),
            op_types=summarize_op_types(types), estimated_cost=choice.cost,
            runner_up=choice.runner_up.backend if choice.runner_up else "",
            runner_up_cost=choice.runner_up_cost))
    return rows


def build(module: ir.Module, partitioning: Partitioning,
          saved: dict[str, str] | None = None) -> PartitionedModel:
    """Outline `partitioning` in `module` (which holds its graph) and compile every region
    (or load its kernel from `saved`: region → file stem, as a probe left them)."""
    rows = report_rows(partitioning)
    outline(partitioning)
    return PartitionedModel.from_module(module, saved=saved, report_rows=rows,
                                        estimated_cost=partitioning.total_cost,
                                        partitioning=partitioning)


# -- the whole run --------------------------------------------------------------------------


@contextmanager
def _timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[phase] = timings.get(phase, 0.0) + time.perf_counter() - t0


def ready_scratch() -> None:
    """Before a run compiles anything: refuse a TMPDIR where no folder can be made (Python
    falls back to /tmp, iree-compile, its own process, does not: every region it compiled
    failed, counted and cached as one IREE cannot run), and remove the temporary folders
    that killed runs left (`scratch.sweep`), saying so on stderr (a run killed for memory
    leaves the model's weights behind)."""
    given = os.environ.get("TMPDIR")
    if given:
        try:
            os.rmdir(tempfile.mkdtemp(prefix="collage-probe-", dir=given))
        except OSError as e:
            raise CollageError(f"TMPDIR={given}: no folder can be made there "
                               f"({e.strerror}); point TMPDIR at a writable folder or "
                               "unset it") from None
    swept, size = sweep()
    if swept:
        print(f"collage: removed {swept} temporary folder(s) that killed runs left "
              f"({size / 1e6:.1f} MB)", file=sys.stderr, flush=True)


def partition(model: ModelInput, options: PartitionOptions = PartitionOptions(),
              estimator: CostEstimator | None = None) -> PartitionedModel:
    """Every phase in order. A given `estimator` stays open (its owner closes it); by
    default the end-to-end check runs only when costs are measured here."""
    timings: dict[str, float] = {}
    ready_scratch()
    with ExitStack() as stack:
        with _timed(timings, "import"):
            module = load(model, options.input_shapes, options.inputs)
            stack.enter_context(weight_store(module))
        result = _partition_module(module, options, estimator, timings)
        # a model the check or refinement kept is built from a copy of `module`, which
        # names the store: gone once we return
        forget_store(result.module)
        return result


def _partition_module(module: ir.Module, options: PartitionOptions,
                      estimator: CostEstimator | None, timings: dict[str, float]
                      ) -> PartitionedModel:
    """`partition` after the import, while the model's weights are in a store that every
    export refers to (`export.resources.weight_store`) rather than copies."""
    names = usable_backends(options.backends)
    with _timed(timings, "annotate"):
        graph = entry_graph(module)
        config = SubGraphConfig(max_exits=options.max_exits, allow_taps=False,
                                max_depth=options.max_depth)
        placement = None if options.placement is None else Placement.from_json(
            options.placement)
        candidates = annotate(graph, names, config, placement)
        require_offered(graph, names, candidates, placement)
    given = None if options.inputs is None else given_inputs(graph.func_op, options.inputs)
    owns_estimator = estimator is None
    if options.measure_budget_s is not None and not 0 < options.measure_budget_s < math.inf:
        raise CollageError(f"measure budget {options.measure_budget_s}: must be a positive "
                           "number of seconds")
    verify = options.verify
    if verify is None:
        verify = options.cost == "measure" and owns_estimator
    estimator = estimator or make_estimator(options.cost, names, options.cache,
                                            options.timeout_s, options.kernel_budget_s,
                                            executor=options.executor,
                                            tolerance=options.tolerance)
    try:
        with _timed(timings, "hand-offs"):
            price_hand_offs(estimator, names, options.progress)
        with estimator.session():  # the islands' parts measured by the same workers
            with _timed(timings, "measure"):
                costs, unmeasured = measure(estimator, candidates, options.progress,
                                            graph=graph, budget_s=options.measure_budget_s,
                                            prune=options.prune)
            left = (options.measure_budget_s or math.inf) - timings["measure"]
            carved: list[Carved] = []
            if options.islands:
                with _timed(timings, ISLANDS):
                    carved = carve_islands(graph, candidates, costs, estimator,
                                           options.progress, left)
        rejected = rejections(graph, candidates, costs, estimator, unmeasured)
        with _timed(timings, "search"):
            partitioning = choose(graph, candidates, costs, estimator, carved=carved,
                                  placement=placement)
        judged = [(c, c.trial(partitioning)) for c in carved]
        trials = [t for _, t in judged]
        untaken = [(c, t) for c, t in judged if c.cover is not None and not t.kept]
        # taken, a cover is the pick the check times
        if options.merge:
            with _timed(timings, "merge"):
                partitioning, merges = merge(partitioning, estimator)
                trials += [merge_trial(m) for m in merges]
        with _timed(timings, "probe"):
            probed = probe_final(module, candidates, costs, partitioning, estimator,
                                 verify=verify, timeout_s=options.timeout_s, inputs=given)
        notes = run_notes(graph, candidates, probed.costs, estimator, options.backends, names,
                          timings, probed.partitioning)
        refused = refused_for_numbers(graph, candidates, probed.costs, estimator)
        hint = tolerance_hint(refused, own_quantization_error(module) if refused else None)
        if hint:
            print(f"collage: {hint}", file=sys.stderr, flush=True)
        return _finish(module, options, estimator, timings, verify, candidates, probed,
                       names, rejected, notes, trials, given, untaken)
    finally:
        if owns_estimator:  # open until refinement has measured what it builds
            estimator.close()


def _finish(module: ir.Module, options: PartitionOptions, estimator: CostEstimator,
            timings: dict[str, float], verify: bool, candidates: list[CandidatePartition],
            probed: Probed, names: list[str], rejected: list[Rejection], notes: list[str],
            trials: list[Trial], given: list[np.ndarray] | None,
            untaken: Sequence[tuple[Carved, Trial]] = ()) -> PartitionedModel:
    """Compile the probed pick, check it end to end (the measured carved covers the search
    did not take, `untaken`, among the contenders), refine what the check kept (on the
    `given` inputs, arranged, where there are some; carved covers the check could not time
    are among its neighbours, those it timed no faster than what it kept are not, those it
    timed faster without keeping them go first)."""
    partitioning, alternatives = probed.partitioning, probed.alternatives
    covers = [(c.label, c.cover) for c, _ in untaken]
    refining = verify and options.refine_budget_s != 0
    pristine = clone_module(module) if alternatives or refining else None
    refine_base = pristine  # the module refinement builds its neighbours from
    with _timed(timings, "compile"):
        result = build(module, partitioning, probed.saved)
    verdict, settled, faster = None, [], []
    if alternatives:
        with _timed(timings, "verify"):
            challengers, covers = carved_contenders(result, pristine, untaken, given,
                                                    estimator.tolerance)
            verdict, kept = check_pick(result, pristine, alternatives, options.verify_budget_s,
                                       probed.whole, given, challengers)
            if verdict is not None:
                remeasure_drifted(estimator, verdict, partitioning, alternatives)
                _record_carved(untaken, verdict)
                settled = settled_covers(untaken, verdict)
                faster = faster_covers(untaken, verdict)
            if kept is not None and verdict.kept in challengers:
                result = challengers[verdict.kept]  # built and checked already
            elif kept is not None:
                result = None  # the pick's kernels go before the kept model is compiled
                refine_base = clone_module(pristine) if refining else None
                result = build(pristine, kept, probed.saved_for(kept))
            challengers = {}  # a carved cover that lost frees its kernels before refining
    refinement = None
    if refining:
        with _timed(timings, "refine"):
            better, refinement = refine(result, refine_base, candidates, probed.costs,
                                        estimator.transition_cost, options.refine_budget_s,
                                        report_rows, estimator, [
                                            (b.name, b.partitioning) for b in notes.baselines
                                            if b.partitioning is not None], given, covers,
                                        settled, faster)
            result = better or result
    probed.close()  # the saved kernels (on an error, when `probed` is collected)
    out = result.with_record(verdict=verdict, candidates=candidates,
                             backends_considered=names, timings=timings,
                             rejected=rejected + probed.rejected, notes=notes)
    out.trials = trials + (
        refinement.report(refinement.estimate_s) if refinement else [])
    out.refinement = refinement
    return out


MAX_CARVED_TIMED = 2
CARVED_TIE = 0.05
"""Carved covers estimated within this of the cheapest are timed by the check too (at most
MAX_CARVED_TIMED): between two so close, the estimate's noise would choose (the demo's
"3 x CumSum" and its union with "3 x Expand", 31.31 and 31.87 ms, at stop 63)."""
MAX_CHECKED_REGIONS = 64
"""A carved cover of more regions is left to refinement (its budget bounds the build): the
check builds its contenders unbounded."""


def carved_contenders(pick: PartitionedModel, pristine: ir.Module,
                      untaken: Sequence[tuple[Carved, Trial]],
                      given: list[np.ndarray] | None, tolerance: Tolerance
                      ) -> tuple[dict[str, PartitionedModel], list[tuple[str, Partitioning]]]:
    """The cheapest by estimate of the measured carved covers the search did not take, and
    a second estimated within CARVED_TIE of it, built from `pristine` (sharing the pick's
    kernels where regions agree) and checked against the pick's numbers, as challengers for
    the end-to-end check (`Carved.contender` → model; few: each costs the check a build and
    a share of its rounds, 30 s on bert_base); and the covers left to refinement: the
    others, and one the check cannot time (too many regions, a build that fails or wrong
    numbers: its islands trial says so)."""
    out: dict[str, PartitionedModel] = {}
    left = []
    inputs = given if given is not None else model_inputs(pristine)
    first = math.inf  # the estimate of the cheapest cover timed
    for carved, trial in sorted(untaken, key=lambda ct: ct[0].cover.total_cost):
        why = ""
        if len(out) >= MAX_CARVED_TIMED or carved.cover.total_cost > first * (1 + CARVED_TIE):
            why = "a cheaper carved cover was timed"
        elif len(carved.cover.choices) > MAX_CHECKED_REGIONS:
            why = (f"{len(carved.cover.choices)} regions, more than the check builds "
                   f"({MAX_CHECKED_REGIONS})")
        else:
            try:
                model = build_neighbour(pristine, carved.cover, pick, report_rows)
                why = compare(model.run(inputs), pick.run(inputs), tolerance,
                              quantized_results(public_functions(pristine)[0])) or ""
            except Exception as e:  # a cover that fails here is not a contender
                why = f"failed: {str(e).strip().splitlines()[0] if str(e) else repr(e)}"
        if why:
            left.append((carved.label, carved.cover))
            trial.why += f"; not timed by the end-to-end check: {why}"
        else:
            out[carved.contender] = model
            first = min(first, carved.cover.total_cost)
    return out, left


def _record_carved(untaken: Sequence[tuple[Carved, Trial]], verdict: Verdict) -> None:
    """Each carved cover's islands trial gets its end-to-end time, kept when the check kept
    it."""
    for carved, trial in untaken:
        timed = verdict.timings.get(carved.contender)
        if timed is not None:
            trial.measured_s, trial.kept = timed, verdict.kept == carved.contender
            trial.why += (f"; the end-to-end check timed it at {timed * 1e3:.4g} ms and "
                          + ("kept it" if trial.kept else f"kept {verdict.kept}"))


def settled_covers(untaken: Sequence[tuple[Carved, Trial]], verdict: Verdict
                   ) -> list[tuple[Partitioning, str]]:
    """The carved covers the check timed no faster than what it kept, each with what it found:
    refinement does not build them again. One it timed faster, short of the noise, is not
    settled: a second timing is how such a win lands."""
    kept_s = verdict.timings.get(verdict.kept)
    out = []
    for carved, _ in untaken:
        timed = verdict.timings.get(carved.contender)
        if timed is not None and kept_s is not None and timed >= kept_s \
                and carved.contender != verdict.kept:
            out.append((carved.cover, f"the end-to-end check timed it at {timed * 1e3:.4g} "
                                      f"ms, {verdict.kept} at {kept_s * 1e3:.4g} ms"))
    return out


def faster_covers(untaken: Sequence[tuple[Carved, Trial]], verdict: Verdict
                  ) -> list[tuple[str, Partitioning]]:
    """The carved covers the check timed faster than what it kept and did not keep (short
    of the noise, or not confirmed), labelled as the check named them: refinement times them
    again first, whatever their estimate says."""
    kept_s = verdict.timings.get(verdict.kept)
    out = []
    for carved, _ in untaken:
        timed = verdict.timings.get(carved.contender)
        if timed is not None and kept_s is not None and timed < kept_s \
                and carved.contender != verdict.kept:
            out.append((carved.contender, carved.cover))
    return out


QUANTIZING = {"QuantizeLinear", "DynamicQuantizeLinear"}
"""Ops that make a model quantized: what follows them runs on integers, rounded per backend."""
WRONG_NUMBERS = re.compile(r"wrong numbers: max abs err ([-+.\deE]+) in output \d+ "
                           r"\(max \|ref\| ([-+.\deE]+)")


def refused_for_numbers(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                        costs: Sequence[float], estimator: CostEstimator) -> dict[str, float]:
    """For a quantized model (QUANTIZING ops): each backend whose whole model ran but with
    numbers outside the tolerance, and its error relative to the output's magnitude. Int8
    backends round differently and the difference grows with depth."""
    if not any(n.op_type in QUANTIZING for n in graph.op_nodes()):
        return {}
    errors = {}
    for c, cost in zip(candidates, costs, strict=True):
        if c.inside == graph.op_bits and math.isinf(cost):
            found = WRONG_NUMBERS.search(estimator.reason(c) or "")
            if found and float(found[2]) > 0:
                errors[c.backend] = float(found[1]) / float(found[2])
    return errors


def tolerance_hint(errors: dict[str, float], own_error: float | None = None) -> str | None:
    """What `refused_for_numbers` found, the absolute tolerance that would accept it and,
    where known, the model's own quantization error (`check.quantized`) to judge it by:
    which execution of a quantized model is right is the user's call."""
    if not errors:
        return None
    off = ", ".join(f"{b}'s {e:.1%}" for b, e in sorted(errors.items()))
    needed = float(f"{1.25 * max(errors.values()):.2g}")  # a margin for other inputs
    own = ""
    if own_error is not None:
        within = "within" if max(errors.values()) <= own_error else "beyond"
        own = (f"; {within} the model's own quantization error: onnxruntime's int8 run is "
               f"{own_error:.1%} off the model with its activations unrounded")
    return (f"quantized model: whole models left out for their numbers ({off} of the "
            f"output's magnitude off the reference; int8 kernels round differently and the "
            f"difference grows with depth{own}); --atol-scale {needed:g} (Python: tolerance="
            f"(rtol, {needed:g})) accepts them, if such answers are right for you")


def own_quantization_error(module: ir.Module) -> float | None:
    """`check.quantized.quantization_error` of the model, None where it cannot be had (the
    hint then goes without it: it is context, not a decision)."""
    try:
        return quantization_error(module)
    except Exception:  # a backend failing on the twin must not cost the run its result
        return None


def remeasure_drifted(estimator: CostEstimator, verdict: Verdict, pick: Partitioning,
                      alternatives: list[Partitioning]) -> None:
    """Whole models whose cached cost the check found far off: measured again by the next
    run (`check.verify.drifted`), and said so on stderr."""
    for candidate, cached, timed in drifted(verdict, pick, alternatives):
        said = (f"collage: {candidate.backend}'s whole model ran {timed * 1e3:.3f} ms end to "
                f"end, its cached cost says {cached * 1e3:.3f} ms")
        try:
            if estimator.remeasure([candidate]):
                print(f"{said}: measured again by the next run", file=sys.stderr, flush=True)
        except CollageError as e:  # the cache went away since: the run's result stands
            print(f"{said}; not marked to be measured again: {e}", file=sys.stderr, flush=True)


def merge_trial(m: Merge) -> Trial:
    """A merge as the report lists it."""
    sizes = (" and ".join(f"{len(p)}-op" for p in m.parts) if len(m.parts) == 2 else
             f"{len(m.parts)} adjacent ({sum(map(len, m.parts))} ops)")
    why = (f"estimate {m.before_s * 1e3:.4g} -> {m.after_s * 1e3:.4g} ms" if math.isfinite(m.after_s)
           else "the union does not run (measured invalid)")
    return Trial("merge", f"join {sizes} regions on {m.backend}", m.after_s
                 if math.isfinite(m.after_s) else None, None, m.kept, why)
