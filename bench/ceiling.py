"""The mixing ceiling: how much faster than the better whole model any split could run.

Per-op timings taken alone say where the backends' winners differ; they include each call's
fixed cost and miss the fusions a whole model gets, so they overstate what a mix can gain.
This benchmark asks the whole models instead. onnxruntime and OpenVINO each run the model
whole, in alternating rounds, under their own profilers (session profiling; PERF_COUNT), with
the settings Collage's backends use. Every profiled kernel is charged to the ONNX node it
computes: by its name where the backend kept it, through OpenVINO's `originalLayersNames`
where it fused several. Compute nodes one kernel fused (OpenVINO's attention: MatMul,
scale, Softmax, MatMul) form one anchor group, compared as a whole with the other
backend's kernels for the same nodes. Nodes that both backends fuse into their producer (Relu,
BatchNormalization, a bias Add, ...) are charged to that producer's "anchor": the nearest
compute node upstream (Conv, Gemm, MatMul, LRN, a norm, a pool, ...).

    ceiling = min(Σ onnxruntime, Σ OpenVINO) / Σ over anchors of the faster backend's time

is the speed-up of a mix that hands off for free and keeps every fusion both backends make:
an upper bound on any partition of these two backends. Kernels a backend does not name (an
onnxruntime fusion such as SkipLayerNormalization keeps no source names, OpenVINO renames
recurrent layers) and anchors only one backend timed form each backend's remainder; the
oracle takes the smaller remainder as one block, so the ceiling is an upper bound only on
the anchors both backends timed: the remainder column says how much that leaves out.
Taking the faster of two noisy timings per anchor biases the bound up, so each backend also
runs a second, separately built instance (X#2) in the same rounds: the "noise ceiling" is
the larger of X against X#2, what noise alone makes of the bound. A ceiling near the noise
ceiling means no partition can pay on this model on this machine. The "priced ceiling"
charges the hand-offs the bound leaves out: an anchor taken off the faster whole model's
backend pays for the data crossing into and out of it (each tensor at the transition
model's measured line, `cost/transition.py`); a cut that pays must clear it too.
Profilers add their own cost per kernel, and not evenly (OpenVINO's kernels at batch 8 summed to 12% more than its
profiled whole run), so each backend also runs unprofiled (X plain) in the same rounds, and
its kernels are scaled to sum to that instance's time per run: the totals are what the
backends take unobserved.

    python bench/ceiling.py [--models resnet50,light:zfnet512,m.onnx] [--rounds 20] [--top 3]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import onnx
from onnx import helper

from collage_mlir.backends.openvino import runtime_origins
from collage_mlir.canonical import canonicalize, respell
from collage_mlir.errors import CollageError
from collage_mlir.static_shapes import make_static
from collage_mlir.tools.args import positive_int
from collage_mlir.tools.guard import guarded

sys.path.insert(0, os.path.dirname(__file__))
import models  # noqa: E402
from naming import help_text, known_model, resolve  # noqa: E402

ANCHORS = frozenset({
    "Conv", "ConvTranspose", "Gemm", "MatMul", "LRN", "GRU", "LSTM", "RNN",
    "InstanceNormalization", "LayerNormalization", "GroupNormalization", "MaxPool",
    "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Softmax", "ReduceMean", "Resize",
    "Pad", "Concat", "CumSum", "Gather", "Einsum", "Attention",
})
"""Node kinds that own their own kernel in both backends; anything else is charged upstream."""

MOVES = frozenset({
    "Reorder", "ReorderInput", "ReorderOutput", "Reshape", "Transpose", "Concatenation",
    "Concat", "Squeeze", "Unsqueeze", "Identity", "Input", "Output", "Parameter", "Result",
    "Const", "Constant",
})
"""Kernel kinds (either backend's word) that move data: they are charged to an anchor, but
do not show that a backend computed it."""

FUSION = re.compile(r"/[A-Za-z]+Fusion/?")
"""onnxruntime's mark on a kernel it fused from the node named before it."""

WARMUP = 5


class Kernel(NamedTuple):
    """A profiled kernel: the names it answers to (its own first), its kind in the
    backend's words, its ms per run."""

    names: tuple[str, ...]
    kind: str
    ms: float


class Attribution:
    """Maps a backend's kernel names onto the anchors of an ONNX graph."""

    def __init__(self, model: onnx.ModelProto, max_hops: int = 4) -> None:
        self.nodes = {n.name: n for n in model.graph.node if n.name}
        self.producer = {out: n for n in model.graph.node for out in n.output}
        weights = {w.name for w in model.graph.initializer}
        self.data = {v.name for v in model.graph.input} - weights
        for n in model.graph.node:  # topological order: what the inputs feed is data too
            if any(i in self.data for i in n.input):
                self.data.update(n.output)
        self.max_hops = max_hops
        self.order = {n.name: i for i, n in enumerate(model.graph.node)}
        self.parent: dict[str, str] = {}

    def fuse(self, kernels: Iterable[Kernel]) -> None:
        """Join the compute nodes one computing kernel covers into one anchor group (by
        any backend: both are compared on the same groups). OpenVINO fuses an attention's
        MatMul, scale, Softmax and MatMul into one kernel; charged to one of them alone it
        would set that node's time against the other backend's kernel for it alone."""
        for k in kernels:
            if k.kind in MOVES:
                continue
            anchors = sorted({n.name for n in map(self.node_of, k.names)
                              if n is not None and n.op_type in ANCHORS},
                             key=self.order.__getitem__)
            for a in anchors[1:]:
                first, other = self.find(anchors[0]), self.find(a)
                if first != other:  # the group is named after its first node in the model
                    first, other = sorted((first, other), key=self.order.__getitem__)
                    self.parent[other] = first

    def find(self, anchor: str) -> str:
        """The group `anchor` belongs to (itself unless `fuse` joined it to others)."""
        while anchor in self.parent:
            anchor = self.parent[anchor]
        return anchor

    def groups(self) -> dict[str, tuple[str, ...]]:
        """Group name → its nodes in model order, for groups of more than one node."""
        out: dict[str, list[str]] = defaultdict(list)
        for a in sorted(set(self.parent) | set(self.parent.values()), key=self.order.get):
            out[self.find(a)].append(a)
        return {g: tuple(members) for g, members in out.items()}

    def node_of(self, name: str) -> onnx.NodeProto | None:
        """The ONNX node a kernel name stands for: a node's name or output, possibly with
        the decorations the backends add (onnxruntime: "fused ", "_nchwc", "_token_N",
        "/MatMulAddFusion", "/QuickGeluFusion/"; OpenVINO: "/WithoutBiases")."""
        if name in self.nodes:
            return self.nodes[name]
        if name in self.producer:
            return self.producer[name]
        for prefix in ("fused ",):
            if name.startswith(prefix):
                return self.node_of(name[len(prefix):])
        fusion = FUSION.search(name)
        if fusion:
            return self.node_of(name[:fusion.start()])
        for mark in ("/WithoutBiases", "_token_", "_nchwc"):
            if mark in name:
                return self.node_of(name[:name.index(mark)])
        return None

    def anchor(self, node: onnx.NodeProto) -> str:
        """The anchor a node's time is charged to: itself if it is a compute node, else
        the nearest compute node up its first input that depends on the model's inputs (a
        weight passed through Identity or Constant is not data), at most `max_hops` away."""
        start = node
        for _ in range(self.max_hops + 1):
            if node.op_type in ANCHORS:
                return node.name
            upstream = next((self.producer[i] for i in node.input
                             if i in self.producer and i in self.data), None)
            if upstream is None:
                break
            node = upstream
        return start.name

    def charge(self, kernels: Iterable[Kernel]) -> tuple[dict[str, float], float]:
        """({anchor: ms per run}, unattributed ms per run): each kernel goes to the anchor
        (or the anchor's group, `fuse`) of the first of its names that is a compute node,
        else of the first that maps onto a node (a fused kernel may be named after its
        tail). Only anchors some computing kernel
        (not a data move) reached are kept; the rest of the time is unattributed."""
        per_anchor: dict[str, float] = defaultdict(float)
        computed: set[str] = set()
        lost = 0.0
        for k in kernels:
            nodes = [n for n in map(self.node_of, k.names) if n is not None]
            node = next((n for n in nodes if n.op_type in ANCHORS), nodes[0] if nodes else None)
            if node is None:
                lost += k.ms
                continue
            anchor = self.find(self.anchor(node))
            per_anchor[anchor] += k.ms
            if k.kind not in MOVES:
                computed.add(anchor)
        lost += sum(ms for a, ms in per_anchor.items() if a not in computed)
        return {a: ms for a, ms in per_anchor.items() if a in computed}, lost


@dataclass
class Ceiling:
    """Both backends' in-chain times, anchor by anchor, and the bound they give."""

    totals: dict[str, float]
    per_anchor: dict[str, dict[str, float]]
    unattributed: dict[str, float]
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Anchors that stand for several compute nodes a backend fused (`Attribution.fuse`)."""
    hand_off_ms: dict[str, float] = field(default_factory=dict)
    """What moving an anchor off the faster whole model's backend costs in hand-offs (its
    data in and out, `price_hand_offs`); `priced_ratio` charges it."""

    def common(self) -> set[str]:
        """Anchors every backend timed: the ones a mix can place either way."""
        return set.intersection(*(set(t) for t in self.per_anchor.values()))

    def remainder(self, backend: str) -> float:
        """What `backend` spent outside the common anchors: its unattributed kernels and
        the anchors only it timed (e.g. recurrent layers OpenVINO renames)."""
        common = self.common()
        own = sum(ms for a, ms in self.per_anchor[backend].items() if a not in common)
        return self.unattributed[backend] + own

    @property
    def oracle(self) -> float:
        """Σ over common anchors of the faster backend, plus the smaller remainder (ms)."""
        names = list(self.totals)
        best = sum(min(self.per_anchor[b][a] for b in names) for a in self.common())
        return best + min(self.remainder(b) for b in names)

    @property
    def ratio(self) -> float:
        """The better whole model over the oracle: the most any mix could gain."""
        return min(self.totals.values()) / self.oracle if self.oracle > 0 else 1.0

    @property
    def leader(self) -> str:
        """The backend whose whole model is faster."""
        return min(self.totals, key=self.totals.__getitem__)

    @property
    def priced_ratio(self) -> float:
        """`ratio` with each anchor taken off the leader paying its `hand_off_ms`: what is
        left of the bound once data crosses between the backends at what it costs."""
        names = list(self.totals)
        best = sum(min([self.per_anchor[self.leader][a]]
                       + [self.per_anchor[b][a] + self.hand_off_ms.get(a, 0.0)
                          for b in names if b != self.leader]) for a in self.common())
        oracle = best + min(self.remainder(b) for b in names)
        return min(self.totals.values()) / oracle if oracle > 0 else 1.0

    def differing(self, top: int) -> list[tuple[str, dict[str, float]]]:
        """The `top` anchors where the slower whole model's backend is faster, by gain."""
        names, leader = list(self.totals), self.leader
        gains = []
        for a in self.common():
            times = {b: self.per_anchor[b][a] for b in names}
            gain = times[leader] - min(times.values())
            if gain > 0:
                gains.append((gain, a, times))
        return [(a, times) for _, a, times in sorted(gains, reverse=True)[:top]]


def crossing_bytes(model: onnx.ModelProto, members: Iterable[str]) -> int:
    """Bytes of the data tensors a cut around the nodes named `members` hands off, each
    once (`crossing`)."""
    return sum(crossing(model, members))


def crossing(model: onnx.ModelProto, members: Iterable[str]) -> list[int]:
    """Bytes of each data tensor a cut around the nodes named `members` hands off: those
    entering (computed outside them, or the model's inputs) and those leaving (used
    outside them, or returned). Values of unknown type count 0."""
    inside = {n.name for n in model.graph.node if n.name in set(members)}
    nodes = [n for n in model.graph.node if n.name in inside]
    data = Attribution(model).data
    types = {v.name: v.type.tensor_type for v in
             [*model.graph.input, *model.graph.value_info, *model.graph.output]}
    made = {o for n in nodes for o in n.output}
    used_outside = {i for n in model.graph.node if n.name not in inside for i in n.input}
    returned = {o.name for o in model.graph.output}
    entering = {i for n in nodes for i in n.input if i in data and i not in made}
    leaving = {o for o in made if o in used_outside or o in returned}

    def nbytes(name: str) -> int:
        t = types.get(name)
        if t is None or not all(d.HasField("dim_value") for d in t.shape.dim):
            return 0
        size = helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
        return int(np.prod([d.dim_value for d in t.shape.dim], dtype=np.int64)) * size

    return sorted(map(nbytes, entering | leaving))


def medians(rounds: list[dict[tuple[str, str], float]]) -> dict[tuple[str, str], float]:
    """Per kernel, the median of its ms over rounds (0 in a round it did not run): one
    slow moment on a shared machine moves a mean, not a median."""
    keys = {k for r in rounds for k in r}
    return {k: float(np.median([r.get(k, 0.0) for r in rounds])) for k in keys}


class OrtProfiler:
    """onnxruntime's session over the whole model, profiled, with Collage's settings."""

    def __init__(self, path: str, threads: int, profiled: bool = True) -> None:
        import onnxruntime as ort

        from collage_mlir.backends.onnxruntime import session_options

        so = session_options(threads)
        so.enable_profiling = profiled
        if profiled:
            so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="ceiling-"), "ort")
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

    def run(self, feeds: dict[str, np.ndarray], keep: bool) -> None:
        self.session.run(None, feeds)  # the profiler records every run; `kernels` skips

    def kernels(self) -> list[Kernel]:
        """The node events, run by run after the warm-up, as median ms per run."""
        path = self.session.end_profiling()
        with open(path) as f:
            events = json.load(f)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # the profile's own dir
        runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                      if e.get("name") == "model_run")
        starts = [start for start, _ in runs]
        rounds: list[dict[tuple[str, str], float]] = [defaultdict(float) for _ in runs]
        for e in events:
            name = e.get("name", "")
            if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
                continue
            i = bisect.bisect_right(starts, e["ts"]) - 1
            if i >= 0 and e["ts"] <= runs[i][1]:
                key = (name.removesuffix("_kernel_time"), e.get("args", {}).get("op_name", ""))
                rounds[i][key] += e["dur"] / 1e3
        return [Kernel((name,), kind, ms)
                for (name, kind), ms in medians(rounds[WARMUP:]).items()]


class OvProfiler:
    """OpenVINO's compiled whole model with PERF_COUNT, with Collage's settings."""

    def __init__(self, path: str, threads: int, profiled: bool = True) -> None:
        import openvino as ov

        from collage_mlir.backends.openvino import OpenVinoBackend

        config = {**OpenVinoBackend(threads=threads).config(), "PERF_COUNT": profiled}
        compiled = ov.Core().compile_model(path, "CPU", config)
        self.request = compiled.create_infer_request()
        self.origins = runtime_origins(compiled)
        self.rounds: list[dict[tuple[str, str], float]] = []
        self.profiled = profiled

    def run(self, feeds: dict[str, np.ndarray], keep: bool) -> None:
        self.request.infer(feeds)
        if keep and self.profiled:
            times: dict[tuple[str, str], float] = defaultdict(float)
            for p in self.request.profiling_info:
                times[p.node_name, p.node_type] += p.real_time.total_seconds() * 1e3
            self.rounds.append(times)

    def kernels(self) -> list[Kernel]:
        return [Kernel(self.origins.get(n, (n,)), kind, ms)
                for (n, kind), ms in medians(self.rounds).items()]


PROFILERS = {"onnxruntime": OrtProfiler, "openvino": OvProfiler}
CONTROL = "#2"
"""Suffix of a second, separately built instance of a backend: its ceiling against the
first is what noise alone makes of the bound."""
PLAIN = " plain"
"""Suffix of an unprofiled instance of a backend: its time per run is what the backend's
kernels are scaled to (`scaled_to`)."""


def backend_of(contender: str) -> str:
    return contender.removesuffix(CONTROL).removesuffix(PLAIN)


def scaled_to(kernels: list[Kernel], ms: float) -> list[Kernel]:
    """`kernels` scaled to sum to `ms` (the unprofiled run's time), in proportion."""
    total = sum(k.ms for k in kernels)
    return [k._replace(ms=k.ms * ms / total) for k in kernels] if total > 0 else kernels


def profile(path: str, feeds: dict[str, np.ndarray], rounds: int, threads: int,
            contenders: list[str]) -> tuple[dict[str, list[Kernel]], dict[str, float]]:
    """({contender: kernels}, {contender: wall ms per run}) from interleaved rounds; a
    contender is a backend name, or one with CONTROL appended for a second instance, or
    with PLAIN for an unprofiled one (no kernels)."""
    import time

    built = {c: PROFILERS[backend_of(c)](path, threads, profiled=not c.endswith(PLAIN))
             for c in contenders}
    wall: dict[str, list[float]] = {c: [] for c in contenders}
    for i in range(WARMUP + rounds):
        for c, profiler in built.items():
            t = time.perf_counter()
            profiler.run(feeds, keep=i >= WARMUP)
            wall[c].append(time.perf_counter() - t)
    kernels = {c: p.kernels() for c, p in built.items() if not c.endswith(PLAIN)}
    return kernels, {c: float(np.median(w[WARMUP:])) * 1e3 for c, w in wall.items()}


def ceiling_of(model: onnx.ModelProto, kernels: dict[str, list[Kernel]]) -> Ceiling:
    """Charge every backend's kernels to the model's anchors, grouped where a backend
    computed several in one kernel (`Attribution.fuse`)."""
    attribution = Attribution(model)
    for ks in kernels.values():
        attribution.fuse(ks)
    per_anchor, lost = {}, {}
    for backend, ks in kernels.items():
        per_anchor[backend], lost[backend] = attribution.charge(ks)
    totals = {b: sum(k.ms for k in ks) for b, ks in kernels.items()}
    return Ceiling(totals, per_anchor, lost, attribution.groups())


def named(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every unnamed node named, so kernels can be traced back to it."""
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"node{i}_{node.op_type}"
    return model


def measure(source: str | onnx.ModelProto, rounds: int = 20, threads: int = os.cpu_count() or 1,
            batch: int | None = None
            ) -> tuple[Ceiling, float, dict[str, float], onnx.ModelProto]:
    """(the backends' ceiling, the noise ceiling, each backend's profiled kernels over its
    unprofiled run, the named model)
    for a model file or proto, shapes folded and rewritten as Collage's import does; raises
    what a backend raises when it cannot run it whole. `batch`: every input's first
    dimension (the model's must be dynamic), its rows drawn as a batch of 1 with
    successive seeds."""
    model = named(source if isinstance(source, onnx.ModelProto) else onnx.load(source))
    shapes = batched_shapes(model, batch) if batch else None
    respell(model)  # the model as Collage imports it
    canonicalize(make_static(model, "ceiling", shapes))
    with tempfile.TemporaryDirectory(prefix="ceiling-") as scratch:
        path = os.path.join(scratch, "model.onnx")
        onnx.save(model, path, save_as_external_data=model.ByteSize() > 1_900_000_000)
        key = source if isinstance(source, str) else path
        rows = [models.inputs(key, seed=k) for k in range(batch or 1)]
        feeds = {n: np.concatenate([r[n] for r in rows]) for n in rows[0]}
        contenders = [*PROFILERS, *(b + x for x in (CONTROL, PLAIN) for b in PROFILERS)]
        profiled, wall = profile(path, feeds, rounds, threads, contenders)
    kernels = {c: scaled_to(ks, wall[backend_of(c) + PLAIN]) for c, ks in profiled.items()}
    pair = ceiling_of(model, {b: kernels[b] for b in PROFILERS})
    noise = max(ceiling_of(model, {b: kernels[b], b + CONTROL: kernels[b + CONTROL]}).ratio
                for b in PROFILERS)
    inflation = {b: sum(k.ms for k in profiled[b]) / wall[b + PLAIN] for b in PROFILERS}
    price_hand_offs(pair, model, hand_off_line())
    return pair, noise, inflation, model


def hand_off_line() -> tuple[float, float]:
    """(seconds per tensor, seconds per byte) of an onnxruntime/OpenVINO hand-off, as
    Collage's transition model measures and fits it (`cost/transition.py`)."""
    from collage_mlir.backends.registry import get_backend
    from collage_mlir.cost.transition import fit, measure_points

    points, _ = measure_points(*(get_backend(b) for b in PROFILERS))
    return fit(points)


def price_hand_offs(pair: Ceiling, model: onnx.ModelProto,
                    line: tuple[float, float]) -> None:
    """Fill `pair.hand_off_ms` for every common anchor another backend runs faster than
    the leader: its crossing tensors (`crossing`), each priced on `line`."""
    per_call, per_byte = line
    for a in pair.common():
        times = {b: pair.per_anchor[b][a] for b in pair.totals}
        if min(times.values()) < times[pair.leader]:
            sizes = crossing(model, pair.groups.get(a, (a,)))
            pair.hand_off_ms[a] = sum(per_call + per_byte * n for n in sizes) * 1e3


def batched_shapes(model: onnx.ModelProto, batch: int) -> dict[str, list[int]]:
    """Input shapes with the first dimension `batch` and the rest as declared; an input
    whose first dimension is static is refused, saying so."""
    known = {i.name for i in model.graph.initializer}
    out = {}
    for value in model.graph.input:
        if value.name not in known:
            dims = value.type.tensor_type.shape.dim
            if dims and dims[0].HasField("dim_value") and dims[0].dim_value != batch:
                raise CollageError(f"--batch {batch}: input '{value.name}' has a static first "
                                   f"dimension ({dims[0].dim_value}); export the model with "
                                   "a dynamic batch (bench/models.py --dynamic-batch)")
            out[value.name] = [batch] + [d.dim_value for d in dims[1:]]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,mobilenet_v2,fast_neural_style,deepspeech2")
    ap.add_argument("--rounds", type=positive_int, default=20)
    ap.add_argument("--top", type=positive_int, default=3,
                    help="anchors listed where winners differ")
    ap.add_argument("--threads", type=positive_int, default=os.cpu_count() or 1)
    ap.add_argument("--batch", type=positive_int, default=None,
                    help="every input's first dimension (a model exported with "
                         "`bench/models.py --dynamic-batch`, or an .onnx path with one)")
    args = ap.parse_args()
    names = args.models.split(",")
    unknown = [n for n in names if not known_model(n)]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}: use {help_text()}")
    print("| model | onnxruntime ms | openvino ms | oracle ms | ceiling | noise ceiling "
          "| priced ceiling | remainder ort / ov ms | profiled / unprofiled ort / ov |")
    print("|---|---|---|---|---|---|---|---|---|")
    notes = []
    ort, ov = PROFILERS
    for name in names:
        label, source = resolve(name)
        try:
            pair, noise, inflation, model = measure(source, args.rounds, args.threads,
                                                    args.batch)
        except Exception as e:  # a backend that cannot run the model whole: say so, go on
            print(f"| {label} | cannot profile both whole models: "
                  f"{str(e).strip().splitlines()[-1][:120]} |||||||", flush=True)
            continue
        cells = [label, f"{pair.totals[ort]:.2f}", f"{pair.totals[ov]:.2f}",
                 f"{pair.oracle:.2f}", f"**{pair.ratio:.3f}**", f"{noise:.3f}",
                 f"{pair.priced_ratio:.3f}",
                 f"{pair.remainder(ort):.2f} / {pair.remainder(ov):.2f}",
                 f"{inflation[ort]:.2f} / {inflation[ov]:.2f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
        nodes = Attribution(model).nodes
        for anchor, times in pair.differing(args.top):
            members = pair.groups.get(anchor, (anchor,))
            op = "+".join(nodes[m].op_type for m in members)
            cells = ", ".join(f"{b} {ms:.2f}" for b, ms in times.items())
            mib = crossing_bytes(model, members) / (1 << 20)
            notes.append(f"{label}: {op} {anchor}: {cells}; {mib:.1f} MiB in and out, "
                         f"{pair.hand_off_ms.get(anchor, 0.0):.2f} ms")
    if notes:
        print("\nAnchors where the slower whole model's backend is faster (ms per run; the "
              "data a cut around each would hand off, which the ceiling counts as free):")
        print("\n".join(f"- {n}" for n in notes))
    return 0


if __name__ == "__main__":
    sys.exit(guarded("bench/ceiling.py", main))
