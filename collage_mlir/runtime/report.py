"""The partition report: one row per region (backend, ops, estimated cost, runner-up), and
the verdict of the end-to-end check; as text (`format_report`) and as JSON data
(`report_data`, schema in report.schema.json, documented there)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from iree.compiler import ir

from collage_mlir.candidate import HOST, CandidatePartition
from collage_mlir.cost.base import CostEstimator
from collage_mlir.dialects import collage
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import public_functions
from collage_mlir.graph import DataflowGraph, NodeKind
from collage_mlir.runtime.plan import Plan, Step, build_plan, region_functions
from collage_mlir.search.greedy import Baseline, greedy_baselines
from collage_mlir.search.partitioning import Partitioning


@dataclass
class ReportRow:
    region: str
    backend: str
    ops: int
    op_types: str
    estimated_cost: float
    runner_up: str = ""
    runner_up_cost: float | None = None
    spread: float | None = None
    """(p90 - p10) / median of the measurement behind `estimated_cost` (None: not measured,
    or the cost came from a table)."""

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> ReportRow:
        return ReportRow(**d)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def summarize_op_types(types: list[str], limit: int = 4) -> str:
    """"Conv x3, Relu x2, ..." in first-seen order."""
    counts: dict[str, int] = {}
    for t in types:
        counts[t] = counts.get(t, 0) + 1
    parts = [f"{t} x{n}" if n > 1 else t for t, n in counts.items()]
    return ", ".join(parts[:limit]) + (", ..." if len(parts) > limit else "")


def format_report(rows: list[ReportRow], total: float | None = None,
                  measured: Mapping[str, float] | None = None,
                  chain_s: float | None = None) -> str:
    """One line per region; `measured` (region → seconds) adds a column beside the
    estimate, its sum beside the estimated total and the additive error (against
    `chain_s`, the median whole run, too when given)."""
    header = ("region", "backend", "ops", "op types", "est. ms", "spread", "runner-up",
              "runner-up ms")
    table = [header] + [(r.region, r.backend, str(r.ops), r.op_types, _ms(r.estimated_cost),
                         _spread(r.spread), r.runner_up or "-", _ms(r.runner_up_cost))
                        for r in rows]
    if measured is not None:
        table = [row[:6] + cols + row[6:] for row, cols in
                 zip(table, [("measured ms", "err")] + [
                     (_ms(measured.get(r.region)), _rel(r.estimated_cost, measured.get(r.region)))
                     for r in rows], strict=True)]
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if total is not None:
        lines.append(f"estimated total: {_ms(total)} ms over {len(rows)} "
                     f"region{'s' if len(rows) != 1 else ''}")
    if measured is not None:
        lines.append(f"measured sum of region calls: {_ms(sum(measured.values()))} ms")
        lines.append(additive_error_line([r.estimated_cost for r in rows],
                                         [measured.get(r.region) for r in rows], total,
                                         sum(measured.values()), chain_s))
    return "\n".join(lines)


def _spread(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _rel(estimate: float | None, measured: float | None) -> str:
    """(estimate - measured) / measured as a signed percentage ("-" when either is missing)."""
    if estimate is None or measured is None or measured <= 0 or not math.isfinite(estimate):
        return "-"
    return f"{(estimate - measured) / measured:+.0%}"


def additive_error_line(estimates: Sequence[float | None], measured: Sequence[float | None],
                        total: float | None, measured_total: float,
                        chain: float | None = None) -> str:
    """The additive cost model against measured calls, in one line: the median |error| of
    the regions (estimate vs median call inside whole runs) and the error of the total
    (against the sum of the calls, and against the whole chain's median run when given)."""
    errors = [abs(e - m) / m for e, m in zip(estimates, measured, strict=True)
              if e is not None and m is not None and m > 0 and math.isfinite(e)]
    parts = [f"additive error: regions median |err| "
             f"{statistics.median(errors):.0%} over {len(errors)}" if errors else
             "additive error: no region measured"]
    if total is not None and measured_total > 0:
        parts.append(f"total {_ms(total)} ms estimated vs {_ms(measured_total)} ms of calls "
                     f"({_rel(total, measured_total)})")
    if total is not None and chain:
        parts.append(f"vs {_ms(chain)} ms whole chain ({_rel(total, chain)})")
    return "; ".join(parts)


@dataclass
class Rejection:
    """Candidates of one backend left out of the search for one reason (the first
    candidate's words), and the op types they held in first-seen order."""

    backend: str
    reason: str
    count: int = 0
    op_types: list[str] = field(default_factory=list)


def format_rejections(groups: list[Rejection], op_types: int = 4, width: int = 120,
                      per_backend: int = 6) -> str:
    """"candidates left out:" and one line per group: backend: count × reason (op types),
    at most `per_backend` lines per backend (the rest summed up in one); "" when nothing
    was left out. `groups` come most frequent first within each backend."""
    if not groups:
        return ""
    lines = [f"candidates left out ({sum(g.count for g in groups)}; per backend: "
             "count x reason [op types]):"]
    by_backend: dict[str, list[Rejection]] = {}
    for g in groups:
        by_backend.setdefault(g.backend, []).append(g)
    for backend, mine in by_backend.items():
        for g in mine[:per_backend]:
            reason = g.reason if len(g.reason) <= width else g.reason[:width - 1] + "…"
            types = ", ".join(g.op_types[:op_types]) + (", ..." if len(g.op_types) > op_types
                                                         else "")
            lines.append(f"  {backend}: {g.count} x {reason} [{types}]")
        if len(mine) > per_backend:
            rest = mine[per_backend:]
            lines.append(f"  {backend}: {sum(g.count for g in rest)} x {len(rest)} other "
                         "reasons")
    return "\n".join(lines)


@dataclass
class LostPick:
    """The search's pick that the end-to-end check replaced: its regions as the report
    showed them and its estimated total (its measured time is the verdict's "pick")."""

    rows: list[ReportRow]
    estimated_cost: float | None = None
    partitioning: Partitioning | None = field(default=None, repr=False, compare=False)
    """The pick itself, while the run that made it lasts (not saved)."""

    def to_json(self) -> dict:
        return {"rows": [r.to_json() for r in self.rows], "estimated_cost": self.estimated_cost}

    @staticmethod
    def from_json(d: Mapping) -> LostPick:
        rows = [ReportRow.from_json(r) for r in d["rows"]]
        for r in rows:
            _seconds(r.estimated_cost, "verdict.lost.rows.estimated_cost")
        return LostPick(rows, _seconds(d.get("estimated_cost"), "verdict.lost.estimated_cost"))


@dataclass
class Verdict:
    """What the end-to-end check timed (median seconds per contender) and what it kept;
    `lost`: the pick's regions when another contender replaced it (None when kept)."""

    kept: str
    timings: dict[str, float] = field(default_factory=dict)
    lost: LostPick | None = None
    noise: float | None = None
    """Widest relative difference between two medians of one contender in the same run (the
    pick timed twice; an incumbent's two builds); None: not timed."""
    rounds: int | None = None
    """Rounds the contenders were timed in (None: not recorded)."""
    out_of_race: list[str] = field(default_factory=list)
    """Contenders timed only in the first, screening rounds: far slower than the fastest,
    they were timed no further (their timings are the screening medians)."""

    def summary(self) -> str:
        cells = ", ".join(f"{n} {t * 1e3:.3f} ms" + (" (out of the race)" if n in
                                                     self.out_of_race else "")
                          for n, t in self.timings.items())
        said = ([f"noise ±{self.noise:.1%}"] if self.noise is not None else []) + (
            [f"{self.rounds} rounds"] if self.rounds is not None else [])
        noise = f" ({', '.join(said)})" if said else ""
        text = f"end-to-end check: {cells}{noise}; kept {self.kept}"
        if self.lost is not None:
            backends = sorted({r.backend for r in self.lost.rows})
            text += (f" (the pick's {len(self.lost.rows)} region(s) on {', '.join(backends)}, "
                     f"estimated {_ms(self.lost.estimated_cost)} ms, were replaced)")
        return text

    def to_json(self) -> dict:
        out = {"kept": self.kept, "timings": self.timings}
        if self.lost is not None:
            out["lost"] = self.lost.to_json()
        if self.noise is not None:
            out["noise"] = self.noise
        if self.rounds is not None:
            out["rounds"] = self.rounds
        if self.out_of_race:
            out["out_of_race"] = list(self.out_of_race)
        return out

    @staticmethod
    def from_json(d: Mapping) -> Verdict:
        lost = d.get("lost")
        return Verdict(d["kept"], dict(d.get("timings") or {}),
                       LostPick.from_json(lost) if lost else None, d.get("noise"),
                       d.get("rounds"), list(d.get("out_of_race") or []))


@dataclass
class BaselineRow:
    """One greedy baseline (`search/greedy.py`) as the report keeps it: its claim order
    (the fallback last), estimated total and hand-offs (None: unknown, or it cannot run),
    regions, ops per backend, and why it has no estimate."""

    name: str
    order: list[str]
    estimated_cost: float | None
    transition_cost: float | None
    regions: int
    ops: dict[str, int] = field(default_factory=dict)
    reason: str = ""

    @staticmethod
    def of(b: Baseline) -> BaselineRow:
        p = b.partitioning
        ops: dict[str, int] = {}
        for c in p.choices if p is not None else ():
            ops[c.candidate.backend] = ops.get(c.candidate.backend, 0) + len(c.candidate.sub_graph)
        return BaselineRow(b.name, list(b.order), _finite(b.cost),
                           _finite(p.transition_cost) if p is not None else None,
                           len(p.choices) if p is not None else 0, ops, b.reason)

    @staticmethod
    def from_json(d: Mapping) -> BaselineRow:
        row = BaselineRow(**d)
        _seconds(row.estimated_cost, "baselines.estimated_cost")
        _seconds(row.transition_cost, "baselines.transition_cost")
        return row


def format_baselines(rows: Sequence[BaselineRow], estimated: float | None) -> str:
    """"greedy baselines (estimated):" and one line per baseline, with the estimated
    apparent loss (`estimated`, the search pick's estimate, minus the best baseline's;
    negative: Collage wins)."""
    if not rows:
        return ""
    lines = ["greedy baselines (estimated; the fallback takes what the others leave):"]
    for r in rows:
        ops = ", ".join(f"{b} {n} ops" for b, n in r.ops.items())
        cost = f"{_ms(r.estimated_cost)} ms" if r.estimated_cost is not None else "no estimate"
        lines.append(f"  {r.name}: {cost}, {r.regions} region(s) ({ops})"
                     + (f"; {r.reason}" if r.reason else ""))
    finite = [r for r in rows if r.estimated_cost is not None]
    if finite and estimated is not None:
        b = min(finite, key=lambda r: r.estimated_cost)
        lines.append(f"  apparent loss (estimated): {_ms(estimated - b.estimated_cost)} ms "
                     f"against {b.name}")
    return "\n".join(lines)



# -- the machine-readable report (schema: report.schema.json) ---------------------------------

SCHEMA_VERSION = 1
"""Bumped on any change that removes or retypes a key; new optional keys keep it."""

SCHEMA_PATH = Path(__file__).with_name("report.schema.json")


@dataclass
class Trial:
    """One change tried around the search: `phase` "islands" (an archipelago carved out of
    the cheapest whole model, its parts offered to the search), "merge" (a union of two adjacent regions
    on one backend, judged by the cover's estimate) or "refine" (a neighbour of the kept
    pick timed end to end beside it; the incumbent itself is a trial too). `estimate_s`:
    the cover's estimate with it; `measured_s`: its median end to end (refine; None when
    not timed); `why`: the verdict in words."""

    phase: str
    what: str
    estimate_s: float | None
    measured_s: float | None
    kept: bool
    why: str = ""


def format_trials(trials: Sequence[Trial]) -> str:
    """What the islands, merging and refinement tried and kept, a line each for what
    refinement timed."""
    lines = []
    for t in (t for t in trials if t.phase == "islands"):
        lines.append(f"before the search: {t.what}: {t.why}")
    merges = [t for t in trials if t.phase == "merge"]
    if merges:
        kept = [t for t in merges if t.kept]
        first, last = merges[0].why, (kept[-1] if kept else merges[-1])
        lines.append(f"merged after the search: {len(kept)} of {len(merges)} union(s) of "
                     f"adjacent regions kept" + (f" (estimate {_ms(kept[0].estimate_s)} ... "
                                                 f"{_ms(last.estimate_s)} ms)" if kept else "")
                     + (f"; {first}" if first and not kept else ""))
    refine = [t for t in trials if t.phase == "refine"]
    if refine:
        lines.append(f"refinement: {len(refine) - 1} neighbour(s) of the kept pick:")
        lines += [f"  {'kept ' if t.kept else '     '}{t.what}: "
                  f"{_ms(t.measured_s) + ' ms' if t.measured_s is not None else 'not timed'}"
                  f" (est. {_ms(t.estimate_s)} ms) {t.why}" for t in refine]
    return "\n".join(lines)


@dataclass
class Record:
    """What a report says besides the module: the search's rows and totals, the end-to-end
    check, the run that made the model (backends, phase seconds, candidates left out).
    Saved in manifest.json beside the regions (`to_manifest` / `from_manifest`)."""

    rows: list[ReportRow] = field(default_factory=list)
    estimated_cost: float | None = None
    transition_cost: float | None = None
    verdict: Verdict | None = None
    backends_considered: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rejected: list[Rejection] = field(default_factory=list)
    op_names: dict[str, list[str]] = field(default_factory=dict)
    """Region → the ONNX node name of each of its ops in dataflow order: the saved module
    text drops the locations that hold them (`op_names`)."""
    baselines: list[BaselineRow] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Backend → why it was unusable and left out of the run."""
    trials: list[Trial] = field(default_factory=list)
    """What merging and refinement tried after the search."""

    @property
    def search_estimate(self) -> float | None:
        """The estimate of the search's own pick: the lost pick's when the end-to-end check
        replaced it (estimated_cost is then the kept model's)."""
        if self.verdict is not None and self.verdict.lost is not None:
            return self.verdict.lost.estimated_cost
        return self.estimated_cost

    def to_manifest(self) -> dict:
        """The manifest keys that hold this record (those `load` has always read included)."""
        return {"estimated_cost": self.estimated_cost, "transition_cost": self.transition_cost,
                "verdict": self.verdict.to_json() if self.verdict else None,
                "report": [r.to_json() for r in self.rows],
                "backends_considered": list(self.backends_considered),
                "timings": dict(self.timings),
                "rejected": [asdict(g) for g in self.rejected],
                "op_names": dict(self.op_names),
                "baselines": [asdict(b) for b in self.baselines],
                "skipped": dict(self.skipped),
                "trials": [_trial_json(t) for t in self.trials]}

    @staticmethod
    def from_manifest(manifest: Mapping) -> Record:
        """The record of a saved model (keys a model saved before them lacks stay empty);
        TypeError or ValueError where a value has the wrong type."""
        verdict = manifest.get("verdict")
        rows = [ReportRow.from_json(r) for r in manifest.get("report") or []]
        for r in rows:
            _seconds(r.estimated_cost, "report.estimated_cost")
            _seconds(r.runner_up_cost, "report.runner_up_cost")
        return Record(rows=rows,
                      estimated_cost=_seconds(manifest.get("estimated_cost"), "estimated_cost"),
                      transition_cost=_seconds(manifest.get("transition_cost"),
                                               "transition_cost"),
                      verdict=Verdict.from_json(verdict) if verdict else None,
                      backends_considered=list(manifest.get("backends_considered") or []),
                      timings={k: _seconds(v, "timings") for k, v in
                               dict(manifest.get("timings") or {}).items()},
                      rejected=[Rejection(**g) for g in manifest.get("rejected") or []],
                      op_names={k: list(v) for k, v in
                                (manifest.get("op_names") or {}).items()},
                      baselines=[BaselineRow.from_json(b)
                                 for b in manifest.get("baselines") or []],
                      skipped={str(k): str(v) for k, v in
                               (manifest.get("skipped") or {}).items()},
                      trials=[_trial(t) for t in manifest.get("trials") or []])


@dataclass
class RunNotes:
    """What the run knows that the search's pick does not say: the greedy baselines (with
    their partitionings, so they can be built and timed), the spread of each measured
    candidate ((backend, nodes) → spread) and the backends skipped as unusable."""

    baselines: list[Baseline] = field(default_factory=list)
    spreads: dict[tuple[str, int], float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    def fill_spreads(self, rows: Sequence[ReportRow], pick: Partitioning | None) -> None:
        """Set each row's spread from the candidate of its region (rows in `pick`'s order)."""
        if pick is None or len(pick.choices) != len(rows):
            return
        for row, choice in zip(rows, pick.choices, strict=True):
            row.spread = self.spreads.get((choice.candidate.backend, choice.candidate.inside))


def run_notes(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
              costs: Sequence[float], estimator: CostEstimator,
              requested: Sequence[str] | None, usable: Sequence[str],
              timings: dict[str, float] | None = None, pick: Partitioning | None = None
              ) -> RunNotes:
    """The notes of a run, while its estimator is open: the greedy baselines over `usable`
    (regions no candidate covers are estimated, i.e. measured once and cached), the
    spreads of the measured candidates and of `pick`'s regions, and why each of `requested`
    (every registered backend when None) that is not `usable` was skipped. Adds the seconds
    it took to `timings["baselines"]`."""
    import time

    t0 = time.perf_counter()
    baselines = greedy_baselines(graph, candidates, costs, estimator.transition_cost,
                                 list(usable), estimate=estimator.estimate,
                                 reason=estimator.reason)
    extra = [c.candidate for b in baselines if b.partitioning is not None
             for c in b.partitioning.choices] + (pick.candidates if pick is not None else [])
    notes = RunNotes(baselines, measured_spreads(estimator, [*candidates, *extra]),
                     skipped_backends(requested, usable))
    if timings is not None:
        timings["baselines"] = timings.get("baselines", 0.0) + time.perf_counter() - t0
    return notes


def measured_spreads(estimator: CostEstimator, candidates: Sequence[CandidatePartition]
                     ) -> dict[tuple[str, int], float]:
    """(backend, nodes) → the spread of its cached measurement, for a measuring estimator
    (a table's costs have none: {})."""
    from collage_mlir.cost.measure import MeasuringEstimator
    from collage_mlir.cost.records import OK

    if not isinstance(estimator, MeasuringEstimator):
        return {}
    by_key: dict[str, list[tuple[str, int]]] = {}
    for c in candidates:
        try:
            key = estimator.key(c)
        except Exception:  # a region that cannot be extracted has no measurement
            continue
        if key is not None:
            by_key.setdefault(key, []).append((c.backend, c.inside))
    out = {}
    for key, m in estimator.cache.get_many(list(by_key)).items():
        if m.status == OK and m.spread is not None:
            out.update(dict.fromkeys(by_key[key], m.spread))
    return out


def skipped_backends(requested: Sequence[str] | None, usable: Sequence[str]) -> dict[str, str]:
    """Backend → why it is unusable here, for each of `requested` (every registered one when
    None) that is not in `usable`."""
    from collage_mlir.backends.registry import registered_backends

    known = registered_backends()
    names = known if requested is None else requested
    out = {}
    for name in names:
        if name in usable or name not in known:
            continue
        out[name] = known[name].unavailable_reason() or "not usable"
    return out


def _seconds(x: object, key: str) -> float | None:
    """`x` when it is a number of seconds or None, else TypeError naming `key`."""
    if x is not None and (isinstance(x, bool) or not isinstance(x, int | float)):
        raise TypeError(f"{key}: expected seconds, got {type(x).__name__}")
    return x


def op_names(module: ir.Module) -> dict[str, list[str]]:
    """Region → the ONNX node names of its ops (from their locations), as `Record` keeps."""
    return {name: [onnx_view.node_name(n.op) for n in DataflowGraph(fn, owner=module).nodes
                   if n.kind is NodeKind.OP]
            for name, fn in region_functions(module).items()}


@dataclass
class _Slots:
    """Per plan slot: the value's source ("input:NAME", "op:ID", "const"), the region that
    made it and its backend (HOST for model inputs), and its type."""

    source: dict[int, str] = field(default_factory=dict)
    producer: dict[int, str] = field(default_factory=dict)
    backend: dict[int, str] = field(default_factory=dict)
    type: dict[int, ir.Type] = field(default_factory=dict)


def report_data(module: ir.Module, record: Record,
                measured: Mapping[str, float] | None = None,
                rounds: int | None = None,
                transition: Callable[[str, str, int], float] | None = None,
                chain_s: float | None = None) -> dict:
    """The report of an outlined `module` as plain JSON data (schema in `SCHEMA_PATH`): the
    one source of `report(format="json")`, `--json` and the HTML explain view. `measured`
    (region → seconds, from `profile` over `rounds`) adds the profile and each region's
    estimate error; `transition` (src backend, dst backend, bytes → seconds; NaN unknown:
    the estimator's hand-off price) prices each hand-off and each region's inputs;
    `chain_s` (the median whole run, with `measured`) adds the whole chain's error."""
    plan = build_plan(module)
    functions = region_functions(module)
    rows = {r.region: r for r in record.rows}
    refined = _refinement_kept(record.trials)
    slots = _Slots()
    args = public_functions(module)[0].regions[0].blocks[0].arguments
    for k, (name, arg) in enumerate(zip(plan.input_names, args, strict=True)):
        slots.source[k], slots.type[k] = f"input:{name}", arg.type
        slots.producer[k] = slots.backend[k] = HOST
    for k, constant in plan.constants.items():
        slots.source[k], slots.type[k] = "const", ir.Type.parse(constant.type, module.context)
        slots.producer[k] = slots.backend[k] = HOST
    regions, handoffs, next_id = [], [], 0
    for k, step in enumerate(plan.steps):
        graph = DataflowGraph(functions[step.callee], owner=module)
        ops, local = _region_ops(graph, step, slots, next_id,
                                 record.op_names.get(step.callee))
        next_id += len(ops)
        handoffs += [_handoff(slots, slot, step.callee, step.backend)
                     for slot in dict.fromkeys(step.args)]
        for (node, r), slot in zip(graph.outputs, step.results, strict=True):
            slots.source[slot] = _value_source(graph, node, step, slots, local)
            slots.producer[slot], slots.backend[slot] = step.callee, step.backend
            slots.type[slot] = graph.nodes[node].values[r].type
        regions.append(_region(k, step, ops, rows.get(step.callee), functions[step.callee],
                               record.verdict, refined))
    handoffs += [_handoff(slots, slot, HOST, HOST) for slot in dict.fromkeys(plan.outputs)
                 if slots.producer[slot] != HOST]  # an input or constant returned moves nothing
    if transition is not None:
        _price(handoffs, regions, transition)
    data = {"schema_version": SCHEMA_VERSION, "model": _model_io(plan, slots),
            "backends": {"considered": list(record.backends_considered),
                         "used": sorted({s.backend for s in plan.steps}),
                         "skipped": [{"backend": b, "reason": r}
                                     for b, r in record.skipped.items()]},
            "totals": _totals(regions, record), "regions": regions, "handoffs": handoffs,
            "verdict": _verdict(record.verdict), "phases_s": dict(record.timings),
            "left_out": [asdict(g) for g in record.rejected], "profile": None,
            "baselines": _baselines(record), "trials": [_trial_json(t) for t in record.trials]}
    if measured is not None:
        data["profile"] = _profile(regions, measured, data["totals"]["estimated_s"], rounds,
                                   chain_s)
    return data


def _trial(d: Mapping) -> Trial:
    """A saved trial; TypeError or ValueError where a value has the wrong type."""
    return Trial(str(d["phase"]), str(d["what"]), _seconds(d.get("estimate_s"), "estimate_s"),
                 _seconds(d.get("measured_s"), "measured_s"), bool(d["kept"]),
                 str(d.get("why", "")))


def _model_io(plan: Plan, slots: _Slots) -> dict:
    """The model's entry, inputs and outputs (with each output's source)."""
    return {"entry": plan.entry,
            "inputs": [{"name": n, **_tensor(slots.type[k])}
                       for k, n in enumerate(plan.input_names)],
            "outputs": [{"name": n, "source": slots.source[s], **_tensor(slots.type[s])}
                        for n, s in zip(plan.output_names, plan.outputs, strict=True)]}


def _tensor(t: ir.Type) -> dict:
    """{"shape": dims or None (unranked / not a tensor), "dtype": element type or None}."""
    parsed = onnx_view.tensor_type(t)
    if parsed is None:
        return {"shape": None, "dtype": None}
    shape, element = parsed
    return {"shape": None if shape is None else list(shape), "dtype": element}


def _value_source(graph: DataflowGraph, node: int, step: Step, slots: _Slots,
                  local: dict[int, int]) -> str:
    """Where a value of a region function comes from, in the whole model's terms."""
    kind = graph.nodes[node].kind
    if kind is NodeKind.OP:
        return f"op:{local[node]}"
    if kind is NodeKind.ARG:
        return slots.source[step.args[node]]
    return "const"


def _region_ops(graph: DataflowGraph, step: Step, slots: _Slots, first_id: int,
                names: list[str] | None) -> tuple[list[dict], dict[int, int]]:
    """The ops of one region function (constants left out) in dataflow order, numbered
    from `first_id`, named from `names` when given, else from their locations; and node
    index → op id."""
    local: dict[int, int] = {}
    ops = []
    for node in graph.nodes:
        if node.kind is not NodeKind.OP:
            continue
        local[node.index] = first_id + len(ops)
        inputs = []
        for operand, value in zip(node.operands, node.op.operands, strict=True):
            source = "none" if operand is None else _value_source(graph, operand[0], step,
                                                                  slots, local)
            inputs.append({"source": source, **_tensor(value.type)})
        name = (names[len(ops)] if names and len(ops) < len(names)
                else onnx_view.node_name(node.op))
        ops.append({"id": local[node.index], "type": node.op_type,
                    "name": name, "region": step.callee,
                    "inputs": inputs, "outputs": [_tensor(v.type) for v in node.values]})
    return ops, local


def _handoff(slots: _Slots, slot: int, to: str, to_backend: str) -> dict:
    """One hand-off of the transition model: a value crossing into region `to` (HOST for
    a model output). Its seconds are not kept per value (null); the total is in totals."""
    return {"from": slots.producer[slot], "to": to, "from_backend": slots.backend[slot],
            "to_backend": to_backend,
            "value": slots.source[slot], **_tensor(slots.type[slot]),
            "bytes": onnx_view.tensor_nbytes(slots.type[slot]), "cost_s": None}


def _price(handoffs: list[dict], regions: list[dict],
           transition: Callable[[str, str, int], float]) -> None:
    """Fill each hand-off's `cost_s` (None where the price is unknown) and each region's
    `handoffs_in_s` (None unless every value handed in has a price)."""
    into: dict[str, list[float | None]] = {}
    for h in handoffs:
        cost = transition(h["from_backend"], h["to_backend"], h["bytes"])
        h["cost_s"] = cost if math.isfinite(cost) else None
        into.setdefault(h["to"], []).append(h["cost_s"])
    for r in regions:
        costs = into.get(r["name"], [])
        r["handoffs_in_s"] = (math.fsum(costs) if all(c is not None for c in costs)
                              else None)


def _refinement_kept(trials: Sequence[Trial]) -> Trial | None:
    """The neighbour refinement kept over the incumbent (its first trial), if any."""
    refine = [t for t in trials if t.phase == "refine"]
    return next((t for t in refine[1:] if t.kept), None)


def _region(k: int, step: Step, ops: list[dict], row: ReportRow | None,
            fn: ir.Operation, verdict: Verdict | None, refined: Trial | None) -> dict:
    """One region's entry: its ops, estimate, runner-up and why it won (refinement, when it
    kept a neighbour of the checked pick; the end-to-end check, when it replaced the
    search's pick by this whole-model region)."""
    estimate = row.estimated_cost if row else None
    if estimate is None and collage.ESTIMATED_COST in fn.attributes:
        estimate = ir.FloatAttr(fn.attributes[collage.ESTIMATED_COST]).value
    runner_up = None
    if row and row.runner_up:
        runner_up = {"backend": row.runner_up, "estimated_s": _finite(row.runner_up_cost)}
    won_by, why = _why(step.backend, estimate, runner_up)
    if refined is not None:
        won_by = "refine"
        why = (f"refinement: {refined.what} ran faster end to end than what the check kept"
               + (f" ({_ms(refined.measured_s)} ms)" if refined.measured_s else ""))
    elif verdict is not None and verdict.kept != "pick":
        won_by = "check"
        why = (f"end-to-end check: {verdict.kept} "
               + ", ".join(f"{n} {_ms(t)} ms" for n, t in verdict.timings.items())
               + "; the search's pick lost and was replaced")
    return {"name": step.callee, "index": k, "backend": step.backend,
            "op_types": summarize_op_types([o["type"] for o in ops]),
            "estimated_s": _finite(estimate), "spread": row.spread if row else None,
            "runner_up": runner_up, "won_by": won_by,
            "why": why, "handoffs_in_s": None, "measured_s": None, "error_s": None,
            "error_rel": None, "ops": ops}


def _why(backend: str, estimate: float | None, runner_up: dict | None) -> tuple[str | None, str]:
    """("kernel" | "hand-offs" | None, a sentence): a region whose runner-up's kernel was
    cheaper won because the cover with the runner-up cost more in hand-offs."""
    if runner_up is None or estimate is None or runner_up["estimated_s"] is None:
        return None, "no runner-up: no other backend had a candidate for exactly these ops"
    other, theirs = runner_up["backend"], runner_up["estimated_s"]
    if estimate <= theirs:
        return "kernel", (f"kernel: {backend} {_ms(estimate)} ms against {other} "
                          f"{_ms(theirs)} ms")
    return "hand-offs", (f"hand-offs: {other}'s kernel is {_ms(estimate - theirs)} ms cheaper, "
                         f"but the cover with it costs more in hand-offs")


def _trial_json(t: Trial) -> dict:
    """A trial as JSON: a cover that cannot run (estimate inf) is null, not `Infinity`,
    which strict JSON readers refuse."""
    return {**asdict(t), "estimate_s": _finite(t.estimate_s),
            "measured_s": _finite(t.measured_s)}


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _totals(regions: list[dict], record: Record) -> dict:
    """Counts and seconds over the regions, per backend too; hand-offs = the estimate less
    the kernels when the search did not say."""
    kernels = [r["estimated_s"] for r in regions]
    kernel_sum = math.fsum(kernels) if all(c is not None for c in kernels) else None
    handoffs = record.transition_cost
    if handoffs is None and record.estimated_cost is not None and kernel_sum is not None:
        handoffs = max(0.0, record.estimated_cost - kernel_sum)
    by_backend: dict[str, dict] = {}
    for r in regions:
        b = by_backend.setdefault(r["backend"], {"regions": 0, "ops": 0, "estimated_s": 0.0})
        b["regions"] += 1
        b["ops"] += len(r["ops"])
        b["estimated_s"] += r["estimated_s"] or 0.0
    return {"regions": len(regions), "ops": sum(len(r["ops"]) for r in regions),
            "estimated_s": _finite(record.estimated_cost), "kernels_s": kernel_sum,
            "handoffs_s": handoffs, "by_backend": by_backend}


def _verdict(verdict: Verdict | None) -> dict | None:
    if verdict is None:
        return None
    lost = None
    if verdict.lost is not None:
        lost = {"estimated_s": _finite(verdict.lost.estimated_cost),
                "regions": [{"name": r.region, "backend": r.backend, "ops": r.ops,
                             "op_types": r.op_types, "estimated_s": _finite(r.estimated_cost),
                             "spread": r.spread} for r in verdict.lost.rows]}
    return {"kept": verdict.kept, "pick_kept": verdict.kept == "pick",
            "contenders": [{"name": n, "median_s": t, "out_of_race": n in verdict.out_of_race}
                           for n, t in verdict.timings.items()],
            "noise": verdict.noise, "rounds": verdict.rounds, "lost_pick": lost}


def _baselines(record: Record) -> dict:
    """The greedy baselines and the estimated apparent loss of the search's pick against
    the best of them (both in the search's own cost terms)."""
    rows = [{"name": b.name, "order": list(b.order), "estimated_s": b.estimated_cost,
             "handoffs_s": b.transition_cost, "regions": b.regions, "ops": dict(b.ops),
             "reason": b.reason} for b in record.baselines]
    finite = [r for r in rows if r["estimated_s"] is not None]
    best = min(finite, key=lambda r: r["estimated_s"]) if finite else None
    pick = record.search_estimate
    loss = pick - best["estimated_s"] if best is not None and pick is not None else None
    return {"items": rows, "best": best["name"] if best else None,
            "apparent_loss_estimated_s": _finite(loss)}


def _profile(regions: list[dict], measured: Mapping[str, float], estimated: float | None,
             rounds: int | None, chain_s: float | None = None) -> dict:
    """Measured seconds per region (median call inside whole runs) beside the estimates;
    error = estimate - measured (and relative to measured), per region and in total (the
    total estimate includes hand-offs, the measured sum includes what each call paid for
    them)."""
    for r in regions:
        got = measured.get(r["name"])
        r["measured_s"] = got
        if got is not None and r["estimated_s"] is not None:
            r["error_s"] = r["estimated_s"] - got
            r["error_rel"] = r["error_s"] / got if got > 0 else None
    total = math.fsum(measured.values())
    error = None if estimated is None else estimated - total
    rel = [abs(r["error_rel"]) for r in regions if r["error_rel"] is not None]
    return {"rounds": rounds, "measured_total_s": total, "estimated_total_s": estimated,
            "error_s": error, "error_rel": error / total if error is not None and total > 0
            else None, "region_error_median_abs_rel": statistics.median(rel) if rel else None,
            "chain_s": chain_s,
            "chain_error_rel": (estimated - chain_s) / chain_s
            if estimated is not None and chain_s else None}
