"""End-to-end refinement (Collage's second level, bounded): neighbours of the pick, timed.

The search trusts an additive estimate; what runs is a chain whose hand-offs, caches and
thread pools the estimate only approximates. Starting from the model the check kept, this
tries a bounded set of neighbours, splits first (their estimate is only known once merged,
and they compile nothing no worker ran), then the others cheapest estimate first:

- **flip**: one region moved to its runner-up backend (the same nodes, the next-cheapest
  measured candidate);
- **join**: two adjacent regions replaced by one measured candidate covering exactly both
  (so a boundary whose hand-off costs more in the chain than estimated can disappear);
- **island**: a measured candidate inside a region, on another backend that beats the
  region's own backend on those nodes, carved out of it — the rest of the region split in
  two, upstream of the island and the remainder. This is how a whole model the check kept
  gets its per-op winners back one at a time.
- **islands**: every single op of one type that another backend runs cheaper, carved out
  at once the same way (a model repeating an op its backend runs slowly).
- **split**: a region re-cut on its own backend, as the search covers its nodes with that
  backend's measured candidates alone, then merged after the search (`search.merge`) as a
  pick is. A backend compiling a whole model does not always do best by it (alexnet on
  OpenVINO: its 4-region cover ran 5% faster than the whole model, side by side), and the
  check only times whole models.
- **carved**: a measured cover the search did not take, handed over by the caller (the
  archipelago carved before the search, `search.islands`): the check times whole models
  only, and the search may have preferred a cover its estimates put lower. A neighbour
  with the same regions as one before it is not built twice, nor one the end-to-end check
  already timed no faster than what it kept (`settled`: the archipelago of the whole model
  it kept is often the cover it timed; on bert_base, building it again cost 20 s).
- **baseline**: the cheapest greedy baseline of several regions (`search.greedy`: what a
  user gets without Collage, e.g. `partition_for_openvino`, OpenVINO wherever it can with
  onnxruntime for the rest) whose regions differ from the incumbent's, when the caller hands
  them over. The check
  times whole models only; where a backend cannot run the whole model, its greedy partition
  is the single-backend deployment the mix must beat (the RFC's "apparent loss").

Islands never cut what one of the incumbent's kernels computes as one step (`Kernel.fused`:
OpenVINO's fused Conv+activation, its attention): the measure table prices the parts alone,
not the fusion a cut loses (MobileViT's attention carved onto onnxruntime ran 22% slower,
though its parts alone were faster). The report says which fused kernels kept islands out.

An island's remainder parts are the only regions of a neighbour no measuring worker has
compiled and run; given the estimator, they are measured first, in its isolated workers, so
a backend that crashes on one costs that neighbour, not the run (and the neighbour's
estimate becomes a measured one); estimated then more than ESTIMATE_SLACK above the pick,
it is not built (checked every REST_CHUNK parts, the parts not yet measured scaled as the
measured ones came out; flips, joins, splits and baselines are tried above the pick's
estimate: testing it is what they are for). Each neighbour is built on a copy of the un-outlined
module, reusing the incumbent's compiled kernels for every region it shares, run once and
compared with the incumbent's outputs, then timed side by side, interleaved, with the
incumbent — which is timed twice, and once more as a second build of its own regions
(compiled afresh: builds of one model differ by a few percent; up to CONTROL_REGIONS
regions, while half the budget is left), so the run measures its own noise, builds
included. A neighbour replaces the incumbent only when it is faster than the
faster incumbent build by more than that noise (and by at least NOISE_FLOOR), and again in a
second timing of the two alone. Compiling stops when half the budget is spent, or when
what is left of it would not time one more neighbour (`timing_s`); with no budget given it
is `default_budget`. A winner's neighbours are not tried (one step: the budget is seconds).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.base import Kernel
from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.compare import (
    CONFIRM_ROUNDS,
    NOISE_FLOOR,
    time_side_by_side,
    wins_again,
)
from collage_mlir.check.verify import MARGIN
from collage_mlir.cost.base import CostEstimator
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.cost.worker import resident_bytes
from collage_mlir.dialects.func import function_name, io_names, public_functions
from collage_mlir.errors import CollageError
from collage_mlir.export import exported_owners
from collage_mlir.export import node_name as node_name_k
from collage_mlir.graph import DataflowGraph, SubGraph, iter_bits
from collage_mlir.graph.outline import outline_placed, region_name
from collage_mlir.placement import node_name
from collage_mlir.runtime.model import PartitionedModel, PastDeadline, clone_module
from collage_mlir.runtime.report import ReportRow, Trial
from collage_mlir.search.islands import (
    ESTIMATE_SLACK,
    ISLAND_RULE,
    ByNodes,
    archipelagos,
    by_nodes,
    carve,
    parts,
    repriced,
    scaled_guess,
)
from collage_mlir.search.merge import coalesce
from collage_mlir.search.partitioning import (
    Choice,
    Partitioning,
    TransitionCost,
    adjacent_regions,
    replaced,
)
from collage_mlir.search.search import search
from collage_mlir.tensors import Tolerance, compare, model_inputs, quantized_results

DEFAULT_BUDGET_S = 5.0
DEFAULT_BUDGET_RUNS = 250
"""With no budget given, refinement may take DEFAULT_BUDGET_S or this many runs of the
incumbent, whichever is longer: timing one neighbour takes ~125 runs (`timing_s`), so a
fixed few seconds times nothing on a model whose one run takes a second."""
MIN_ROUNDS, MAX_ROUNDS = 10, 15
"""Rounds of the side-by-side timing: as many as the budget left fits, within these (at 5,
the medians of three builds of one model spread 12-15% on a noisy VM, hiding a 10% gain)."""
MAX_NEIGHBOURS = 6
CONTROL_REGIONS = 8
"""The incumbent is built a second time (the control) only up to this many regions, and
only while half the budget is left: each of its regions is compiled again."""
LEAK_BYTES = 64 << 20
"""A second run of the incumbent growing the process by more than this stops refinement."""
MAX_BASELINES = 1
"""Greedy baselines tried at most (the cheapest by estimate that differs from the pick)."""
BASELINE = "baseline"
MAX_ISLANDS = 4
"""Island neighbours at most (each compiles most of the model again on its backend)."""
MAX_SPLITS = 2
"""Split neighbours at most, for the regions with the most ops (each is a search)."""
MAX_SPLIT_MERGES = 16
"""Unions a split's parts may be merged by (`search.merge.coalesce`), each measured."""
REST_CHUNK = 8
"""Island remainder parts measured at a time at most (`_measured_rests`): a neighbour of
many islands whose first parts already put it past ESTIMATE_SLACK is dropped before the rest
are measured (each is a compile and a timing in a worker)."""
CLEARLY_SLOWER, MIN_SLOWER_S = 1.5, 1e-3
"""A built neighbour whose run takes this many times the pick's, twice, and at least
MIN_SLOWER_S more, is not timed side by side: far past the ±5-20% noise of these VMs, and
timing a much slower model spends the budget the others need."""
SPLIT = "split"
PHASE = "refine"

Rows = Callable[[Partitioning], list[ReportRow]]
INCUMBENT, AGAIN, REBUILT = "incumbent", "incumbent again", "incumbent rebuilt"


@dataclass
class Refinement:
    """What refinement did: the incumbent's median, the run's noise (relative difference of
    the incumbent's two timings), every neighbour tried (`report.Trial`, phase "refine"),
    and the seconds it took."""

    incumbent_s: float | None = None
    estimate_s: float | None = None
    noise: float | None = None
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0
    budget_s: float | None = None
    run_s: float | None = None
    """One run of the incumbent (its second, untimed by the side-by-side timing)."""
    building_s: float = 0.0
    """Of `seconds`, measuring island remainders, compiling and checking neighbours."""

    @property
    def gain(self) -> float:
        """Incumbent over kept median (1.0: nothing gained)."""
        kept = [t.measured_s for t in self.trials if t.kept and t.measured_s]
        return self.incumbent_s / kept[0] if kept and self.incumbent_s else 1.0

    def report(self, estimate_s: float | None) -> list[Trial]:
        """The incumbent as the first trial, then the neighbours: what the report lists."""
        if not self.trials:
            return []
        kept = any(t.kept for t in self.trials)
        noise = f"noise ±{self.noise:.1%}; " if self.noise is not None else ""
        budget = f" of a {self.budget_s:.1f} s budget" if self.budget_s is not None else ""
        first = Trial(PHASE, "incumbent", estimate_s, self.incumbent_s,
                      not kept, f"{noise}{self.seconds:.1f} s{budget} (building "
                                f"{self.building_s:.1f} s)")
        return [first, *self.trials]


Fusion = tuple[str, int]
"""(backend, node bits): nodes one kernel of the incumbent computes as one step."""


def neighbours(pick: Partitioning, candidates: Sequence[CandidatePartition],
               costs: Sequence[float], transition: TransitionCost | None,
               fused: Sequence[Fusion] = ()) -> list[tuple[str, Partitioning]]:
    """The pick's flips, joins, islands and splits (see the module docstring): splits first,
    then cheapest estimate first; no island cuts a group in `fused`. `pick` must be over a
    live graph (not outlined)."""
    graph = pick.graph
    measured = by_nodes(candidates, costs)
    out = []
    for k, ch in enumerate(pick.choices):
        whole = ch.candidate.inside == graph.op_bits  # the check timed the other whole models
        if ch.runner_up is not None and ch.runner_up_cost is not None and not whole:
            swapped = replaced(pick, {k}, [Choice(ch.runner_up, ch.runner_up_cost)],
                                transition)
            out.append((f"flip {_label(graph, k, ch.candidate)} to {ch.runner_up.backend}",
                        swapped))
    for a, b in adjacent_regions(pick.choices):
        union = pick.choices[a].candidate.inside | pick.choices[b].candidate.inside
        for cost, c in sorted(measured.get(union, []), key=lambda t: (t[0], t[1].backend)):
            joined = replaced(pick, {a, b}, [Choice(c, cost)], transition)
            out.append((f"join {_label(graph, a, pick.choices[a].candidate)} and "
                        f"{_label(graph, b, pick.choices[b].candidate)} on {c.backend}",
                        joined))
            break
    whole = {inside: rivals for inside, rivals in measured.items() if not _cut(inside, fused)}
    out += _islands(pick, whole, transition)
    out += archipelagos(pick, whole, transition)
    out += _splits(pick, candidates, costs, transition)
    return _unique(sorted(out, key=_order))


def _cut(inside: int, fused: Sequence[Fusion]) -> list[Fusion]:
    """The groups of `fused` that nodes `inside` take part of but not all of."""
    return [f for f in fused if f[1] & inside and f[1] & ~inside]


def fusions(model: PartitionedModel, pick: Partitioning) -> list[Fusion]:
    """What `model`'s kernels each compute as one step (`Kernel.fused`), two or more op
    nodes a group, over `pick` (`model`'s partitioning on a live copy of its graph).

    A region's kernel names ops by their place in the function it was compiled from: an
    outlined region (graph order), or, for a whole model the check kept, the model's own
    function (its block order, which differs). For a whole region both readings are taken
    and the one least like a misreading kept (`_misread`): a real fusion's named ops are
    connected and lie next to each other, and each export has its own result names."""
    kernels = _kernels_by_region(model)
    out = []
    for ch in pick.choices:
        kernel = kernels.get((ch.candidate.backend, ch.candidate.inside))
        if kernel is None or not kernel.fused():
            continue
        readings = [exported_owners(ch.candidate.sub_graph)]
        if ch.candidate.inside == pick.graph.op_bits:
            readings.append(_function_owners(pick.graph))
        fused = kernel.fused()
        owners = min(readings, key=lambda o: _misread(pick.graph, fused, o))
        out += [(ch.candidate.backend, hull) for _, hull in _groups(pick.graph, fused, owners)]
    return out


def _misread(graph: DataflowGraph, fused: Sequence[tuple[str, ...]],
             owners: Mapping[str, int]) -> tuple[int, int, int]:
    """How unlike fusions `fused` read through `owners` is: its groups that are not
    connected, the names it cannot place, the nodes hulls add to what they name."""
    groups = _groups(graph, fused, owners)
    return (sum(not graph.connected(hull) for _, hull in groups),
            sum(n not in owners for names in fused for n in names),
            sum(hull.bit_count() - named.bit_count() for named, hull in groups))


def _groups(graph: DataflowGraph, fused: Sequence[tuple[str, ...]],
            owners: Mapping[str, int]) -> list[tuple[int, int]]:
    """(named op nodes, their hull) of each group of two or more (the names can skip a
    member: a fused Swish does not name its Sigmoid)."""
    out = []
    for names in fused:
        named = sum(1 << owners[n] for n in set(names) if n in owners) & graph.op_bits
        if named.bit_count() > 1:
            out.append((named, graph.hull(named) & graph.op_bits))
    return out


def _function_owners(graph: DataflowGraph) -> dict[str, int]:
    """`exported_owners` for `graph`'s whole function exported as it is: node `node_name(k)`
    is its k-th op in block order, a result's name stands for the node producing it."""
    index = {n.op: n.index for n in graph.nodes if n.op is not None}
    block = [op.operation for op in graph.func_op.regions[0].blocks[0].operations]
    owners = {node_name_k(k): index[op] for k, op in enumerate(block[:-1]) if op in index}
    producer = {v: n.index for n in graph.nodes for v in n.values}
    _, outs = io_names(graph.func_op)
    owners.update((name, producer[v]) for name, v in zip(outs, block[-1].operands, strict=True)
                  if v in producer)
    return owners


def kept_whole(pick: Partitioning, candidates: Sequence[CandidatePartition],
               fused: Sequence[Fusion]) -> Trial | None:
    """The report's line for the fused groups some candidate would have cut as an island
    (on another backend than the region around it), by op types; None when none was."""
    regions = [(ch.candidate.inside, ch.candidate.backend) for ch in pick.choices]
    cut: dict[int, str] = {}
    for c in candidates:
        if any(not c.inside & ~r and c.backend != b for r, b in regions):
            cut.update((bits, backend) for backend, bits in _cut(c.inside, fused))
    if not cut:
        return None
    graph = pick.graph
    kinds = Counter(f"{backend}'s " + "+".join(graph.nodes[i].op_type for i in iter_bits(bits))
                    for bits, backend in cut.items())
    listed = ", ".join(f"{n} x {k}" for k, n in sorted(kinds.items(), key=lambda t: (-t[1], t[0])))
    return Trial(PHASE, "islands inside fused kernels", None, None, False,
                 f"not proposed: they would cut these fused kernels: {listed}")


def _unique(labelled: list[tuple[str, Partitioning]]) -> list[tuple[str, Partitioning]]:
    """The neighbours with a repeated label numbered (#2, #3, ...): refinement keys what it
    built by label, and a report naming two neighbours alike says nothing."""
    seen: dict[str, int] = {}
    out = []
    for what, p in labelled:
        seen[what] = seen.get(what, 0) + 1
        out.append((what if seen[what] == 1 else f"{what} #{seen[what]}", p))
    return out


def _order(t: tuple[str, Partitioning]) -> tuple[int, float, str]:
    """Splits first, then baselines, then the rest; cheapest estimate first within each."""
    what, p = t
    return (0 if what.startswith(SPLIT) else 1 if what.startswith(BASELINE) else 2,
            p.total_cost, what)


def _regions(p: Partitioning) -> frozenset[tuple[str, int]]:
    """What makes two covers the same: their regions' backends and nodes."""
    return frozenset((ch.candidate.backend, ch.candidate.inside) for ch in p.choices)


def baseline_neighbours(pick: Partitioning,
                        baselines: Sequence[tuple[str, Partitioning]]
                        ) -> list[tuple[str, Partitioning]]:
    """Of `baselines` (name, partitioning with the same node numbers as `pick`'s graph),
    the MAX_BASELINES cheapest with several regions (one region is a whole model: the
    check's) and an estimate within MARGIN of the pick's (as the check's whole models)
    whose regions differ from `pick`'s, over `pick`'s graph."""
    own = _regions(pick)
    rivals = sorted(((name, p) for name, p in baselines
                     if len(p.choices) > 1 and p.total_cost <= MARGIN * pick.total_cost
                     and _regions(p) != own),
                    key=lambda t: (t[1].total_cost, t[0]))
    return [(f"{BASELINE} {name}", _rebased(p, pick.graph))
            for name, p in rivals[:MAX_BASELINES]]


def _first_of_each(pick: Partitioning, labelled: Sequence[tuple[str, Partitioning]]
                   ) -> list[tuple[str, Partitioning]]:
    """`labelled` without the covers that are the pick or an earlier one (a cover handed
    over is also the archipelago refinement proposes of the whole model the check kept)."""
    seen, out = {_regions(pick)}, []
    for what, p in labelled:
        if _regions(p) not in seen:
            seen.add(_regions(p))
            out.append((what, p))
    return out


def _unsettled(labelled: Sequence[tuple[str, Partitioning]],
               settled: Sequence[tuple[Partitioning, str]], record: Refinement
               ) -> list[tuple[str, Partitioning]]:
    """`labelled` without the covers the end-to-end check settled (`refine`), each of those
    recorded in `record` as not tried, with what the check found."""
    found = {_regions(p): why for p, why in settled}
    out = []
    for what, p in labelled:
        why = found.get(_regions(p))
        if why is None:
            out.append((what, p))
        else:
            record.trials.append(Trial(PHASE, what, p.total_cost, None, False,
                                       f"not tried: {why}"))
    return out


def _islands(pick: Partitioning, measured: ByNodes,
             transition: TransitionCost | None) -> list[tuple[str, Partitioning]]:
    """For each region R on backend X, the MAX_ISLANDS measured candidates inside R on
    another backend that gain most on X's own candidate for the same nodes: R becomes the
    part of R upstream of the island, the island, and the rest of R (both parts convex, and
    the cover stays acyclic: nothing downstream of the island reaches back upstream)."""
    graph = pick.graph
    found = []
    for k, ch in enumerate(pick.choices):
        region, backend = ch.candidate.inside, ch.candidate.backend
        for inside, rivals in measured.items():
            if inside & ~region or inside == region:
                continue
            own = min((cost for cost, c in rivals if c.backend == backend), default=None)
            if own is None:
                continue
            for cost, c in rivals:
                if c.backend != backend and cost < own:
                    found.append((own - cost, k, c, cost, own))
    out = []
    for _, k, island, cost, own in sorted(found, key=lambda t: (-t[0], t[1], t[2].sort_key())
                                          )[:MAX_ISLANDS]:
        where = node_name(graph.nodes[island.sub_graph.nodes[0]])
        out.append((f"island {island.backend}: {_ops(graph, island)}"
                    + (f" at {where}" if where else "") + " in "
                    f"{_label(graph, k, pick.choices[k].candidate)}",
                    carve(pick, k, island, cost, own, transition)))
    return out


def _splits(pick: Partitioning, candidates: Sequence[CandidatePartition],
            costs: Sequence[float], transition: TransitionCost | None
            ) -> list[tuple[str, Partitioning]]:
    """For the MAX_SPLITS regions with the most ops: the region replaced by the cheapest
    cover of its nodes by its own backend's measured candidates inside it (the other
    regions held fixed), when that cover has more than one part."""
    graph = pick.graph
    fixed = [(ch.candidate, ch.cost) for ch in pick.choices]
    largest = sorted(range(len(pick.choices)),
                     key=lambda k: -pick.choices[k].candidate.inside.bit_count())
    out = []
    for k in largest[:MAX_SPLITS]:
        region, backend = pick.choices[k].candidate.inside, pick.choices[k].candidate.backend
        own = [(c, cost) for c, cost in zip(candidates, costs, strict=True)
               if c.backend == backend and not c.inside & ~region and math.isfinite(cost)]
        pool = [t for j, t in enumerate(fixed) if j != k] + own
        try:
            cover = search(graph, [c for c, _ in pool], [cost for _, cost in pool], transition)
        except CollageError:  # some node inside has no measured candidate of its own
            continue
        pieces = [ch for ch in cover.choices if ch.candidate.inside & region]
        if len(pieces) > 1:
            out.append((f"{SPLIT} {_label(graph, k, pick.choices[k].candidate)}",
                        replaced(pick, {k}, pieces, transition)))
    return out


def timing_s(neighbours: int, run_s: float, control: bool, rounds: int = MIN_ROUNDS
             ) -> float:
    """Seconds that timing `neighbours` side by side with the incumbent (twice, and its
    `control` build) takes in `rounds`, with the confirming timing of a winner, for
    contenders that each run in about `run_s`: every timed call follows an untimed one
    (`time_side_by_side`'s rewarm) after one warm-up round."""
    contenders = neighbours + (3 if control else 2)
    return run_s * ((1 + 2 * rounds) * contenders
                    + (1 + 2 * max(rounds, CONFIRM_ROUNDS)) * 2)


def default_budget(run_s: float) -> float:
    """Refinement's budget when none is given, for an incumbent whose one run takes `run_s`
    (DEFAULT_BUDGET_RUNS)."""
    return max(DEFAULT_BUDGET_S, DEFAULT_BUDGET_RUNS * run_s)


def refine(incumbent: PartitionedModel, pristine: ir.Module,
           candidates: Sequence[CandidatePartition], costs: Sequence[float],
           transition: TransitionCost | None, budget_s: float | None, rows: Rows,
           estimator: CostEstimator | None = None,
           baselines: Sequence[tuple[str, Partitioning]] = (),
           inputs: list[np.ndarray] | None = None,
           covers: Sequence[tuple[str, Partitioning]] = (),
           settled: Sequence[tuple[Partitioning, str]] = (),
           faster: Sequence[tuple[str, Partitioning]] = ()
           ) -> tuple[PartitionedModel | None, Refinement]:
    """A neighbour of `incumbent` (built from `pristine`, the module before outlining) that
    ran faster beyond the noise, or None; and the record of what was tried. With
    `estimator`, island remainders are measured before they are built (module docstring);
    without, they are built unmeasured. `baselines`: the greedy baselines (name,
    partitioning), tried as neighbours (`baseline_neighbours`). `covers` (label,
    partitioning over the same node numbers): measured covers the search did not take (the
    archipelago carved before it), tried as the others are. `settled` (partitioning over the
    same node numbers, what was found): covers the end-to-end check timed no faster than what
    it kept; a neighbour with the same regions is reported, not built. `faster` (label,
    partitioning): covers the check timed faster than what it kept without keeping them;
    they go first and are built whatever their estimate (a timing outweighs an estimate).
    Neighbours are timed and checked on `inputs` (the model's, arranged) where given, else
    on made-up ones."""
    start = time.perf_counter()
    record = Refinement(estimate_s=incumbent.estimated_cost)
    if incumbent.partitioning is None or (budget_s is not None and budget_s <= 0):
        return None, record
    # the incumbent's graph was outlined away: price the neighbours on the pristine one
    graph = DataflowGraph(public_functions(pristine)[0], owner=pristine)
    pick = _rebased(incumbent.partitioning, graph)
    candidates = [_moved(c, graph) for c in candidates]
    inputs = inputs if inputs is not None else model_inputs(pristine)
    incumbent.run(inputs)  # the first run may allocate; a second that grows memory leaks
    before = resident_bytes()
    ran = time.perf_counter()
    reference = incumbent.run(inputs)
    record.run_s = time.perf_counter() - ran
    grown = resident_bytes() - before
    if before and grown > LEAK_BYTES:  # timing it dozens of times more could exhaust memory
        record.trials.append(Trial(PHASE, "refinement", None, None, False,
                                   f"not refined: one run grew this process by "
                                   f"{grown >> 20} MiB (a kernel that leaks?)"))
        return None, record
    budget_s = default_budget(record.run_s) if budget_s is None else budget_s
    record.budget_s = budget_s
    tol = estimator.tolerance if estimator is not None else MeasureSettings()
    built: dict[str, tuple[PartitionedModel, Partitioning]] = {}
    fused = fusions(incumbent, pick)
    timed_faster = {_regions(p) for _, p in faster}
    tried = _first_of_each(pick, sorted(
        [(what, _rebased(p, graph)) for what, p in [*faster, *covers]]
        + neighbours(pick, candidates, costs, transition, fused)
        + baseline_neighbours(pick, baselines),
        key=lambda t: (_regions(t[1]) not in timed_faster, *_order(t))))
    tried = _unsettled(tried, settled, record)
    note = kept_whole(pick, candidates, fused)
    if note is not None:
        record.trials.append(note)
    with_control = len(pick.choices) <= CONTROL_REGIONS
    for attempt, (what, nb) in enumerate(tried[:MAX_NEIGHBOURS]):
        spent = time.perf_counter() - start
        per_build = record.building_s / attempt if attempt else 0.0  # so far
        untried = ("half the budget, kept for building, was spent" if spent > budget_s / 2
                   else "the budget would not time it" if spent + per_build + timing_s(
                       len(built) + 1, record.run_s, with_control) > budget_s else "")
        if untried:
            record.trials.append(Trial(PHASE, what, nb.total_cost, None, False,
                                       f"not tried: {untried} ({budget_s:.1f} s; one run "
                                       f"of the pick: {record.run_s:.2f} s)"))
            continue
        building = time.perf_counter()
        if estimator is not None and _regions(nb) not in timed_faster:
            nb, why = _measured_rests(nb, estimator, transition, pick, _limit_s(
                start, budget_s, len(built), record.run_s, with_control))
            if why:
                record.building_s += time.perf_counter() - building
                record.trials.append(Trial(PHASE, what, nb.total_cost, None, False, why))
                continue
        if what.startswith(SPLIT):
            if estimator is not None:  # the search's cover is cut at max_depth: merge it
                nb = coalesce(nb, estimator.estimate, transition, MAX_SPLIT_MERGES)[0]
            what += f" into {len(nb.choices) - len(pick.choices) + 1}"
            if _regions(nb) == _regions(pick):  # merged back whole: the pick itself
                record.building_s += time.perf_counter() - building
                record.trials.append(Trial(PHASE, what, nb.total_cost, None, False,
                                           "not built: merging its parts gave the pick back"))
                continue
        above = (_above(nb, pick) if estimator is not None and _carves(nb)
                 and _regions(nb) not in timed_faster else 0.0)
        if above > ESTIMATE_SLACK:
            record.building_s += time.perf_counter() - building
            record.trials.append(Trial(PHASE, what, nb.total_cost, None, False,
                                       f"not built: estimated {above:.0%} above the pick "
                                       f"(past the estimates' error, {ESTIMATE_SLACK:.0%})"))
            continue
        limit_s = _limit_s(start, budget_s, len(built), record.run_s, with_control)
        try:
            model = build_neighbour(pristine, nb, incumbent, rows, limit_s)
            wrong = compare(model.run(inputs), reference, tol,
                            quantized_results(public_functions(pristine)[0]))
        except PastDeadline as e:  # the budget is spent: what is left goes to timing
            wrong = (f"not built: the budget ran out while compiling it ({e.compiled} of "
                     f"{e.regions} regions compiled)")
        except Exception as e:  # a neighbour that fails is not kept; the run goes on
            wrong = f"failed: {str(e).strip().splitlines()[0] if str(e) else repr(e)}"
        record.building_s += time.perf_counter() - building
        if wrong:
            record.trials.append(Trial(PHASE, what, nb.total_cost, None, False, wrong))
            continue
        one_s = _one_run_s(model, inputs, record.run_s)
        if _clearly_slower(one_s, record.run_s):
            record.trials.append(Trial(
                PHASE, what, nb.total_cost, one_s, False,
                f"slower: one run took {one_s * 1e3:.1f} ms, the pick's "
                f"{record.run_s * 1e3:.1f} ms (not timed further)"))
            continue
        built[what] = (model, nb)
    if built:
        runners = {INCUMBENT: incumbent.run, AGAIN: incumbent.run}
        building = time.perf_counter()
        control = (_rebuilt(pristine, pick, rows, inputs, reference, tol)
                   if with_control and time.perf_counter() - start <= budget_s / 2 else None)
        record.building_s += time.perf_counter() - building
        if control is not None:
            runners[REBUILT] = control.run
        runners.update({what: m.run for what, (m, _) in built.items()})
        left = budget_s - (time.perf_counter() - start)
        rounds = max([r for r in range(MIN_ROUNDS, MAX_ROUNDS + 1) if timing_s(
            len(built), record.run_s, control is not None, r) <= left], default=MIN_ROUNDS)
        medians = {t.name: t.median_s
                   for t in time_side_by_side(runners, inputs, rounds=rounds, warmup=1)}
        twins = [medians[n] for n in (INCUMBENT, AGAIN, REBUILT) if n in medians]
        base = min(twins)
        record.incumbent_s = base
        record.noise = (max(twins) - base) / base
        bar = base * (1 - max(NOISE_FLOOR, record.noise))
        best = min(built, key=lambda w: medians[w])
        faster = min((n for n in (INCUMBENT, REBUILT) if n in medians), key=medians.get)
        confirmed = medians[best] < bar and wins_again(
            runners, faster, best, inputs, rounds, max(NOISE_FLOOR, record.noise),
            time_side_by_side)
        for what, (_, nb) in built.items():
            kept = what == best and confirmed
            why = ("faster beyond the noise, confirmed by a second timing" if kept else
                   "faster, but not in a second timing" if what == best and medians[what] < bar
                   else "a faster neighbour won" if medians[what] < bar else
                   "within the noise" if medians[what] < base else "slower")
            record.trials.append(Trial(PHASE, what, nb.total_cost, medians[what], kept, why))
    record.seconds = time.perf_counter() - start
    winner = next((t.what for t in record.trials if t.kept), None)
    return (built[winner][0] if winner else None), record


def _limit_s(start: float, budget_s: float, built: int, run_s: float, control: bool) -> float:
    """Seconds the next neighbour may take to measure or build: what the budget leaves
    beside timing it with the `built` ones."""
    return budget_s - (time.perf_counter() - start) - timing_s(built + 1, run_s, control)


def _one_run_s(model: PartitionedModel, inputs: list, run_s: float) -> float:
    """Seconds of one run of `model` (built and checked: its first run is done), a second
    one only where the first looks clearly slower than `run_s` (a late allocation)."""
    best = math.inf
    for _ in range(2):
        ran = time.perf_counter()
        model.run(inputs)
        best = min(best, time.perf_counter() - ran)
        if not _clearly_slower(best, run_s):
            break
    return best


def _clearly_slower(one_s: float, run_s: float) -> bool:
    """Whether one run of `one_s` against the pick's `run_s` is past any noise timing could
    show (CLEARLY_SLOWER, and MIN_SLOWER_S apart: microsecond runs jitter by more)."""
    return one_s > CLEARLY_SLOWER * run_s and one_s - run_s > MIN_SLOWER_S


def _carves(nb: Partitioning) -> bool:
    """Whether `nb` carves islands (has parts of a region around one)."""
    return any(ch.candidate.rule_name == ISLAND_RULE for ch in nb.choices)


def _above(nb: Partitioning, pick: Partitioning) -> float:
    """How far `nb`'s estimate lies above `pick`'s, relative (0 where either is unknown)."""
    ok = all(math.isfinite(p.total_cost) for p in (nb, pick)) and pick.total_cost > 0
    return nb.total_cost / pick.total_cost - 1 if ok else 0.0


def _rebuilt(pristine: ir.Module, pick: Partitioning, rows: Rows, inputs: list,
             reference: list, tol: Tolerance) -> PartitionedModel | None:
    """The incumbent's regions compiled afresh (a control: the spread between two builds
    of the same cover is noise, not gain), or None when that build fails or differs."""
    try:
        model = build_neighbour(pristine, pick, None, rows)
        quantized = quantized_results(public_functions(pristine)[0])
        return None if compare(model.run(inputs), reference, tol, quantized) else model
    except Exception:  # no control: the run's noise is the incumbent's own timing alone
        return None


def _measured_rests(nb: Partitioning, estimator: CostEstimator,
                    transition: TransitionCost | None, pick: Partitioning,
                    limit_s: float = math.inf) -> tuple[Partitioning, str]:
    """`nb` with its island remainder parts measured (re-priced), or with the reason it is
    not built ("" when it may be): one of the parts cannot run, or, between chunks, its
    estimate with the parts not yet measured scaled as the measured ones came out against
    their shares lies past ESTIMATE_SLACK above `pick`'s, or measuring has taken longer than
    `limit_s`. Measuring stops early, and `nb` is built, once that estimate lies at or below
    the pick's: the end-to-end timing decides, and its budget is not spent on parts. Parts
    are measured largest share first (a small part measured alone is mostly its call's
    fixed cost, no guide to the rest): the first alone, then chunks of what the time left
    fits at the pace so far, REST_CHUNK at most, so a chunk overruns `limit_s` by one part
    at most."""
    rests = parts(nb)
    if not rests:
        return nb, ""
    measured: dict[int, float] = {}
    began = time.perf_counter()
    while len(measured) < len(rests):
        spent = time.perf_counter() - began
        if spent > limit_s:
            return nb, (f"not built: the budget ran out while measuring the parts around its "
                        f"islands ({len(measured)} of {len(rests)} measured)")
        chunk = rests[len(measured):len(measured) + _chunk_size(len(measured), spent, limit_s)]
        got = estimator.estimate([nb.choices[k].candidate for k in chunk])
        for k, cost in zip(chunk, got, strict=True):
            if not math.isfinite(cost):
                c = nb.choices[k].candidate
                why = estimator.reason(c) or "not measurable"
                return nb, f"not built: the part of {c.backend}'s region around it: {why}"
        measured.update(zip(chunk, got, strict=True))
        if len(measured) == len(rests):
            break
        guess = scaled_guess(nb, measured, transition)
        if math.isfinite(guess.total_cost) and guess.total_cost <= pick.total_cost:
            return guess, ""  # a gain by the estimate: timing it end to end decides
        above = _above(guess, pick)
        if above > ESTIMATE_SLACK:
            return guess, (f"not built: estimated {above:.0%} above the pick, {len(measured)} "
                           f"of the {len(rests)} parts around its islands measured and the "
                           f"rest scaled alike (past the estimates' error, "
                           f"{ESTIMATE_SLACK:.0%})")
    return repriced(nb, measured, 1.0, transition), ""


def _chunk_size(done: int, spent_s: float, limit_s: float) -> int:
    """Parts to measure next, `done` measured in `spent_s` of `limit_s` (`_measured_rests`)."""
    if not done:
        return 1
    if math.isinf(limit_s):
        return REST_CHUNK
    fits = (limit_s - spent_s) / max(spent_s / done, 1e-9)
    return max(1, min(REST_CHUNK, int(fits)))


def build_neighbour(pristine: ir.Module, nb: Partitioning,
                    incumbent: PartitionedModel | None, rows: Rows,
                    limit_s: float | None = None) -> PartitionedModel:
    """`nb` outlined on a copy of `pristine` and compiled, its regions shared with the
    incumbent taking the incumbent's kernels (none shared without an incumbent); a build
    taking longer than `limit_s` stops with PastDeadline (`PartitionedModel.from_module`)."""
    module = clone_module(pristine)
    graph = DataflowGraph(public_functions(module)[0], owner=module)
    rebased = _rebased(nb, graph)
    reuse = _kernels_by_region(incumbent) if incumbent is not None else {}
    name = function_name(graph.func_op)
    prebuilt: dict[str, Kernel] = {}
    for k, ch in enumerate(rebased.choices):
        kernel = reuse.get((ch.candidate.backend, ch.candidate.inside))
        if kernel is not None:
            prebuilt[region_name(name, ch.candidate.backend, k)] = kernel
    report = rows(rebased)
    outline_placed(graph, [(k, c.candidate.sub_graph, c.candidate.backend, c.cost)
                           for k, c in enumerate(rebased.choices)])
    return PartitionedModel.from_module(module, prebuilt=prebuilt, report_rows=report,
                                        estimated_cost=rebased.total_cost,
                                        partitioning=rebased, limit_s=limit_s)


def _kernels_by_region(model: PartitionedModel) -> Mapping[tuple[str, int], Kernel]:
    """(backend, node bits) → the model's compiled kernel for that region."""
    p = model.partitioning
    name = function_name(p.graph.func_op)  # the function outlived the outlining
    out = {}
    for k, ch in enumerate(p.choices):
        kernel = model.kernels.get(region_name(name, ch.candidate.backend, k))
        if kernel is not None:
            out[(ch.candidate.backend, ch.candidate.inside)] = kernel
    return out


def _rebased(p: Partitioning, graph: DataflowGraph) -> Partitioning:
    """`p` over `graph` (a copy of the same function: node numbers agree)."""
    choices = tuple(Choice(_moved(ch.candidate, graph), ch.cost,
                           _moved(ch.runner_up, graph) if ch.runner_up else None,
                           ch.runner_up_cost)
                    for ch in p.choices)
    return Partitioning(graph, choices, p.total_cost, p.transition_cost, p.states,
                        p.exact)


def _moved(c: CandidatePartition, graph: DataflowGraph) -> CandidatePartition:
    """`c` over `graph`, a copy of its function."""
    return CandidatePartition(SubGraph(graph, c.inside), c.backend, c.rule_name)


def _label(graph: DataflowGraph, k: int, c: CandidatePartition) -> str:
    """Region k of the pick for people: its number, backend and first op types."""
    return f"region {k} ({c.backend}: {_ops(graph, c)})"


def _ops(graph: DataflowGraph, c: CandidatePartition) -> str:
    types = [graph.nodes[i].op_type for i in c.sub_graph.nodes]
    return "+".join(types[:3]) + ("+…" if len(types) > 3 else "")

