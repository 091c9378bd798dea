"""End-to-end check of the search's pick against the backends running the whole model.

Why: the search adds up kernels measured one at a time in a worker. The sum is a good guide
but not the truth — a large kernel timed on a busy moment, hand-offs that cost more in a
real chain than in the transition experiment, two backends whose whole-model costs differ
by less than the noise. So whenever some backend could run the whole model for an estimate
within MARGIN of the pick (other than the pick itself), both are compiled and timed side by
side, interleaved, in this process, and the faster beyond the run's own noise is kept
(`fastest`). Whatever the estimates, a pick of one region is timed against the cheapest
other whole model and a pick of several regions against the two cheapest: estimates taken
on a busy machine can be off by 2x (measured under load, vit_base's 183-region pick was
estimated at 0.39x the whole models and ran at 1.11x the best of them; its cheapest whole
model by estimate was not the fastest).
That makes "never slower than the best single backend beyond the noise" a measured fact,
not an estimate. Whatever can be the incumbent (the pick when it is one region over the
whole model, else every whole model) is also timed as a second, separately loaded
instance: builds of one model differ by a few percent, so a challenger must beat the
incumbent's faster build, by more than the widest spread the run saw; of two whole models
within that spread, the faster over that run and a second one of the two alone is the
incumbent (`fastest_whole`; a one-region pick and a whole model that ran faster within it
too: `one_region_incumbent`). The caller may add
challengers of several regions it built (the archipelago carved before the search, when
the search took another cover): they can replace the incumbent, never be it. When the
budget buys few rounds, contenders far slower than the fastest are put out of the race after
a short screening (`screen`), so that the rounds go to those that could win.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence

import numpy as np
from iree.compiler import ir

from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.compare import (
    CONFIRM_ROUNDS,
    NOISE_FLOOR,
    Runner,
    time_side_by_side,
    whole_model_runner,
    wins_again,
)
from collage_mlir.dialects.func import public_functions
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.runtime.model import PartitionedModel
from collage_mlir.runtime.report import LostPick, Verdict
from collage_mlir.search.partitioning import Choice, Partitioning, TransitionCost, evaluate
from collage_mlir.tensors import model_inputs

MARGIN = 1.5
"""Whole-model alternatives estimated above MARGIN x the pick's estimate are not tried."""

MAX_ALTERNATIVES = 2

DEFAULT_BUDGET_S = 3.0
DEFAULT_BUDGET_RUNS = 60
"""With no budget given, the check may take DEFAULT_BUDGET_S or this many runs of the pick,
whichever is longer (`default_budget`), so that four contenders get the most rounds
`rounds_for` gives whatever the model's size: at its fewest rounds, two whole models a few
percent apart are told apart by the noise, not by their speed."""


PICK = "pick"
"""Contender name of the search's own pick."""
AGAIN = "pick (again)"
"""The pick timed a second time in the same run: the two medians are the run's noise."""
REBUILT = " (rebuilt)"
"""Suffix of a contender's second instance (`rebuilt`)."""


def rebuilt(name: str) -> str:
    """Contender name of `name`'s second, separately built instance."""
    return name + REBUILT


def whole_alternatives(graph: DataflowGraph, candidates: Sequence[CandidatePartition],
                       costs: Sequence[float], pick: Partitioning,
                       transition: TransitionCost | None) -> list[Partitioning]:
    """Single-region partitionings worth timing against `pick`: the cheapest whole-function
    candidate per backend, cheapest first, at most MAX_ALTERNATIVES: the first one (the
    first two when `pick` has several regions) whatever its estimate, more only within
    MARGIN of the pick. The pick itself is not among them."""
    best: dict[str, tuple[float, CandidatePartition]] = {}
    for cand, cost in zip(candidates, costs, strict=True):
        if cand.inside != graph.op_bits or not math.isfinite(cost):
            continue
        if cand.backend not in best or cost < best[cand.backend][0]:
            best[cand.backend] = (cost, cand)
    if len(pick.choices) == 1:
        best.pop(pick.choices[0].candidate.backend, None)
    out = []
    for cost, cand in sorted(best.values(), key=lambda t: (t[0], t[1].backend)):
        total, moved = evaluate(graph, [cand], [cost], transition)
        if total <= MARGIN * pick.total_cost or len(out) < (1 if len(pick.choices) == 1 else 2):
            out.append(Partitioning(graph, (Choice(cand, cost),), total, moved))
    return out[:MAX_ALTERNATIVES]


COST_DRIFT = 1.2
"""A whole model's cached cost this many times off its end-to-end time (either way), beyond
what the other whole models show, was measured in a moment unlike this one (these VMs drift
up to 1.9x for seconds at a time); its row is measured again by the next run that needs it.
Every whole model's cached cost differs from the chain's timing alike by method (it is timed
after a cache sweep: on a 1 ms model 25-60% dearer), which measuring again cannot change, so
with two or more whole models timed it is a ratio apart from theirs that counts."""


def drifted(verdict: Verdict, pick: Partitioning, alternatives: Sequence[Partitioning]
            ) -> list[tuple[CandidatePartition, float, float]]:
    """The whole models among the contenders (the alternatives, and the pick when it is one
    region over the whole function) whose timed / cached ratio lies more than `COST_DRIFT`
    times off the others' (the other one's, or the median of all when there are three or
    more; its own ratio against 1 when it is alone): (candidate, cached s, timed s). A whole
    model has no hand-offs, so its cost is its kernel's, timed there as a contender."""
    contenders = [(f"{a.choices[0].candidate.backend} whole", a.choices[0])
                  for a in alternatives]
    if len(pick.choices) == 1 and pick.choices[0].candidate.inside == pick.graph.op_bits:
        contenders.append((PICK, pick.choices[0]))
    timed = [(choice, verdict.timings.get(name)) for name, choice in contenders]
    timed = [(c, t) for c, t in timed if t and math.isfinite(c.cost) and c.cost > 0]
    ratios = [t / c.cost for c, t in timed]
    out = []
    for k, (choice, t) in enumerate(timed):
        others = ratios[:k] + ratios[k + 1:]
        usual = (1.0 if not others else others[0] if len(others) == 1
                 else statistics.median(ratios))
        if max(ratios[k], usual) > COST_DRIFT * min(ratios[k], usual):
            out.append((choice.candidate, choice.cost, t))
    return out


def default_budget(run_s: float) -> float:
    """The check's budget when none is given, for a pick whose one run takes `run_s`
    (DEFAULT_BUDGET_RUNS)."""
    return max(DEFAULT_BUDGET_S, DEFAULT_BUDGET_RUNS * run_s)


MIN_ROUNDS, MAX_ROUNDS = 5, 15
"""The fewest and most rounds the check times its contenders in (`rounds_for`)."""


def rounds_for(estimates: Sequence[float], budget_s: float, lo: int = MIN_ROUNDS,
               hi: int = MAX_ROUNDS) -> int:
    """Timed rounds that fit `budget_s`, given each contender's estimated seconds."""
    per_round = max(sum(e for e in estimates if math.isfinite(e)), 1e-6)
    return max(lo, min(hi, int(budget_s / per_round)))


SCREEN_ROUNDS = 2
"""Rounds every contender is first timed in when the budget binds (`screen`)."""
OUT_OF_RACE = 1.5
"""A contender each of whose screening calls took more than this multiple of the fastest
contender's slowest one is out of the race: timed no further, so the budget buys the others
rounds. The VM's drift (up to 1.9x for seconds) hits contenders timed in the same
interleaved round alike, and no build seen here varied by half its time between two calls."""


def screen(timed: Mapping[str, Runner], inputs: Sequence[np.ndarray],
           regions: Mapping[str, int], budget_s: float
           ) -> tuple[dict[str, float], int]:
    """Time every contender in `timed` (second instances included) for SCREEN_ROUNDS rounds
    and put out of the race those `OUT_OF_RACE` times slower than the fastest (every
    instance of a contender together). Never out: the pick, and the fastest whole model
    (the incumbent when the pick has several regions). Returns the screening medians of
    those out (name → seconds) and the rounds the rest get from `budget_s`, priced at their
    screening medians."""
    timings = {t.name: t for t in time_side_by_side(dict(timed), inputs,
                                                    rounds=SCREEN_ROUNDS, warmup=1)}
    lead = min(timings.values(), key=lambda t: (t.median_s, t.name))
    wholes = [n for n in timings if n != PICK and regions.get(_base(n)) == 1]
    keep = {PICK}
    if wholes:
        keep.add(_base(min(wholes, key=lambda n: (timings[n].median_s, n))))
    bar = OUT_OF_RACE * lead.max_s
    fast = {_base(n) for n, t in timings.items() if not t.min_s > bar}  # NaN: not out
    out = {n for n in timings if _base(n) not in fast | keep}
    rest = [t.median_s for n, t in timings.items() if n not in out]
    return {n: timings[n].median_s for n in out}, rounds_for(rest, budget_s)


def _base(name: str) -> str:
    """The contender a timed name belongs to (a second instance: its first)."""
    return PICK if name == AGAIN else name.removesuffix(REBUILT)


def fastest(runners: dict[str, Runner], inputs: Sequence[np.ndarray], rounds: int,
            regions: dict[str, int], twins: Mapping[str, Runner] | None = None,
            budget_s: float | None = None) -> Verdict:
    """Time the contenders side by side, the pick twice and each contender in `twins` also
    as its second build (name → runner). A contender's median is its faster instance's;
    the run's noise is the widest relative spread between two timings of one contender.
    The incumbent is the pick when it is one region (or a whole model that ran faster
    within the noise, here and alone: `one_region_incumbent`), else the fastest whole model
    (a split must earn its hand-offs; `fastest_whole`). Another contender replaces the incumbent
    only when it is faster by more than the noise (and NOISE_FLOOR), and again when the
    two are timed alone: of several contenders timed once, the fastest is as often the one
    whose timing erred lowest. `regions`: each contender's region count (a contender of several regions
    other than the pick, a carved cover, is a challenger, never the incumbent).
    `budget_s`: when given and `rounds` is short of the most `rounds_for` gives, contenders
    are screened first (`screen`): those out of the race keep their screening medians, the
    rest get the rounds the budget buys them."""
    twins = dict(twins or {})
    timed = {**runners, AGAIN: runners[PICK], **{rebuilt(n): r for n, r in twins.items()}}
    out: dict[str, float] = {}
    screened = budget_s is not None and rounds < MAX_ROUNDS and len(runners) > 2
    if screened:
        out, rounds = screen(timed, inputs, regions, budget_s)
        timed = {n: r for n, r in timed.items() if n not in out}
    medians = {t.name: t.median_s for t in time_side_by_side(
        timed, inputs, rounds=rounds, warmup=0 if screened else 2)}  # screened: warm
    best = {n: r for n, r in runners.items() if n not in out}  # each one's faster instance
    spreads = []
    for name, second, runner in [(PICK, AGAIN, runners[PICK]),
                                 *((n, rebuilt(n), r) for n, r in twins.items() if n not in out)]:
        first, other = medians[name], medians.pop(second)
        spreads.append(abs(first - other) / max(min(first, other), 1e-12))
        if other < first:
            medians[name], best[name] = other, runner
    noise = max(spreads)
    margin = max(NOISE_FLOOR, noise)
    wholes = [n for n in medians if n != PICK and regions[n] == 1]
    incumbent = (one_region_incumbent(wholes, medians, margin, best, inputs, rounds)
                 if regions[PICK] == 1 else
                 fastest_whole(wholes, medians, margin, best, inputs, rounds))
    challenger = min((n for n in medians if n != incumbent), key=lambda n: (medians[n], n))
    kept = incumbent
    if medians[challenger] < medians[incumbent] * (1 - margin) and wins_again(
            best, incumbent, challenger, inputs, rounds, margin, time_side_by_side):
        kept = challenger
    out_of_race = sorted(n for n in out if n in runners)
    return Verdict(kept, {**medians, **{n: out[n] for n in out_of_race}}, noise=noise,
                   rounds=rounds, out_of_race=out_of_race)


def one_region_incumbent(wholes: Sequence[str], medians: Mapping[str, float], margin: float,
                         runners: Mapping[str, Runner], inputs: Sequence[np.ndarray],
                         rounds: int) -> str:
    """The incumbent when the pick is one region, a whole model itself: the pick, unless
    the fastest other whole model by `medians` ran faster within `margin`; then the faster
    of the two over this run and a second timing of them alone (`fastest_whole`). Two
    backends tying on a model (mobilenet_v2 on onnxruntime and OpenVINO) put the pick's
    estimate on the slower one as often as not, and a whole model ahead by less than the
    noise once is not ahead; one ahead over both timings is."""
    rival = min(wholes, key=lambda n: (medians[n], n), default=None)
    if rival is None or not medians[PICK] * (1 - margin) <= medians[rival] < medians[PICK]:
        return PICK
    return fastest_whole([rival, PICK], medians, margin, runners, inputs, rounds)


def fastest_whole(wholes: Sequence[str], medians: Mapping[str, float], margin: float,
                  runners: Mapping[str, Runner], inputs: Sequence[np.ndarray], rounds: int
                  ) -> str:
    """The incumbent a split pick must beat: the fastest of the whole models `wholes` by
    `medians`; when the runner-up lies within `margin` of it, the two are timed again side
    by side alone (at least CONFIRM_ROUNDS rounds), and the faster over both timings (the
    lower product of its two medians) is the incumbent: among many contenders a round's
    drift can order two close whole models either way, and a split that ties with the
    slower one is not a win."""
    ranked = sorted(wholes, key=lambda n: (medians[n], n))
    if len(ranked) < 2 or medians[ranked[1]] > medians[ranked[0]] * (1 + margin):
        return ranked[0]
    pair = ranked[:2]
    again = {t.name: t.median_s for t in time_side_by_side(
        {n: runners[n] for n in pair}, inputs, rounds=max(rounds, CONFIRM_ROUNDS), warmup=1,
        seed=2)}
    return min(pair, key=lambda n: (medians[n] * again[n], n))


def check_pick(pick: PartitionedModel, pristine: ir.Module, alternatives: list[Partitioning],
               budget_s: float | None, saved: Mapping[str, str] | None = None,
               inputs: list[np.ndarray] | None = None,
               challengers: Mapping[str, PartitionedModel] | None = None
               ) -> tuple[Verdict | None, Partitioning | None]:
    """Time `pick` against each alternative run whole on `pristine` (the module as it was
    before outlining; an alternative whose backend is in `saved` loads the kernel a probe
    saved at that stem), and against `challengers` (name → a built model of other regions,
    its numbers checked: the carved archipelago the search did not take). Returns the
    verdict (None when no alternative could even run) and, when an alternative won, that
    alternative rebased onto `pristine`'s own graph, ready to be outlined and compiled in
    place of the pick (a challenger that won: its own partitioning; the caller keeps the
    built model); the verdict then keeps the pick's regions (`Verdict.lost`) for the
    report. Timed on `inputs` (the model's, arranged) where given, else on made-up ones,
    within `budget_s` (None: `default_budget` for one run of the pick, timed here)."""
    inputs = inputs if inputs is not None else model_inputs(pristine)
    runners: dict[str, Runner] = {PICK: pick.run}
    regions = {PICK: len(pick.plan.steps)}
    by_name: dict[str, Partitioning] = {}
    for alt in alternatives:
        name = f"{alt.choices[0].candidate.backend} whole"
        runner = _whole(pristine, alt.choices[0].candidate.backend, saved, inputs)
        if runner is not None:  # measured fine in the worker, fails here: not a contender
            runners[name] = runner
            by_name[name], regions[name] = alt, 1
    if not by_name:
        return None, None
    twins = {name: twin for name, backend in _incumbents(pick, by_name).items()
             if (twin := _whole(pristine, backend, saved, inputs)) is not None}
    for name, model in (challengers or {}).items():
        runners[name], regions[name] = model.run, len(model.plan.steps)
    estimates = {**{n: a.total_cost for n, a in by_name.items()},
                 **{n: m.estimated_cost or 0.0 for n, m in (challengers or {}).items()},
                 PICK: pick.estimated_cost or 0.0}
    if budget_s is None:
        budget_s = default_budget(_one_run_s(pick.run, inputs))
    rounds = rounds_for([estimates[PICK]] + [estimates[n] for n in (*runners, *twins)],
                        budget_s)  # the pick runs twice a round
    verdict = fastest(runners, inputs, rounds, regions, twins, budget_s)
    if verdict.kept == PICK:
        return verdict, None
    verdict.lost = LostPick(list(pick.report_rows), pick.estimated_cost, pick.partitioning)
    if verdict.kept not in by_name:
        return verdict, challengers[verdict.kept].partitioning
    return verdict, _rebased(by_name[verdict.kept], pristine, pick.partitioning)


def _one_run_s(run: Runner, inputs: list[np.ndarray]) -> float:
    """Seconds of one call of `run` after an untimed one (which may allocate)."""
    run(inputs)
    start = time.perf_counter()
    run(inputs)
    return time.perf_counter() - start


def _whole(pristine: ir.Module, backend: str, saved: Mapping[str, str] | None,
           inputs: list[np.ndarray]) -> Runner | None:
    """A fresh instance of `backend` running the whole model, run once; None when it fails
    here (it measured fine in a worker)."""
    try:
        runner = whole_model_runner(pristine, backend, (saved or {}).get(backend))
        runner(inputs)
        return runner
    except Exception:
        return None


def _incumbents(pick: PartitionedModel, wholes: Mapping[str, Partitioning]) -> dict[str, str]:
    """The contenders that can be the incumbent and be built again as a whole model (name →
    backend): every whole model when the pick has several regions; else the pick, when its
    one region is the whole model."""
    p = pick.partitioning
    if p is not None and len(p.choices) > 1:
        return {n: a.choices[0].candidate.backend for n, a in wholes.items()}
    if p is not None and p.choices[0].candidate.inside == p.graph.op_bits:
        return {PICK: p.choices[0].candidate.backend}
    return {}


def _rebased(alt: Partitioning, pristine: ir.Module, lost: Partitioning | None) -> Partitioning:
    """`alt` (one whole-function region) over the graph of `pristine`; a one-region pick it
    beat becomes its runner-up (the same nodes on another backend)."""
    graph = DataflowGraph(public_functions(pristine)[0], owner=pristine)
    chosen = alt.choices[0]
    whole = CandidatePartition(SubGraph(graph, graph.op_bits), chosen.candidate.backend,
                               chosen.candidate.rule_name)
    runner_up = lost.choices[0] if lost is not None and len(lost.choices) == 1 else None
    choice = Choice(whole, chosen.cost, runner_up.candidate if runner_up else None,
                    runner_up.cost if runner_up else None)
    return Partitioning(graph, (choice,), alt.total_cost, alt.transition_cost)
