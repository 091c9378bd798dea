"""Carving by hand: a whole model on one backend against the same model with chosen nodes
moved to another, timed side by side.

`bench/ceiling.py` says which anchors the other backend runs faster inside its own whole
model; this asks whether moving them pays end to end. It builds the model whole on OUTER
(twice: the second build is the noise), and once more with each island (a group of ONNX
node names, `;` between groups) carved out onto INNER the way refinement carves
(`search/islands.carve`: the rest of the region split upstream and downstream of the island),
times them interleaved, and lists each region's median call inside whole runs of the carved
model. `--ceiling N` carves the ceiling's N best anchors instead, each an island (of the
nodes one backend fused into it, where it did).
No measuring and no search: the cover is given.

    python bench/carve.py MODEL (--islands "a,b;c" | --ceiling N) [--outer openvino]
                          [--inner onnxruntime] [--rounds 10]
"""

from __future__ import annotations

import argparse
import os
import sys

import collage_mlir
from collage_mlir.candidate import CandidatePartition
from collage_mlir.check.compare import time_side_by_side
from collage_mlir.check.refine import build_neighbour
from collage_mlir.driver import entry_graph, usable_backends
from collage_mlir.export.resources import weight_store
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.placement import node_name
from collage_mlir.runtime.model import PartitionedModel
from collage_mlir.search.islands import carve
from collage_mlir.search.partitioning import Choice, Partitioning
from collage_mlir.tensors import model_inputs
from collage_mlir.tools.args import positive_int
from collage_mlir.tools.guard import guarded

sys.path.insert(0, os.path.dirname(__file__))
import ceiling  # noqa: E402
from e2e import relative_error  # noqa: E402
from naming import help_text, known_model, resolve  # noqa: E402

RULE = "by-hand"


def cover_of_one(graph: DataflowGraph, backend: str) -> Choice:
    """The whole graph as one region on `backend`."""
    return Choice(CandidatePartition(SubGraph(graph, graph.op_bits), backend, RULE), 0.0)


def no_rows(_: Partitioning) -> list:
    """No report rows: nothing here is reported region by region."""
    return []


def groups_of(text: str) -> list[list[str]]:
    """`--islands`' node names: `,` within an island, `;` between; an empty name (an empty
    option: the ceiling's anchors are `--ceiling`) is an error."""
    groups = [g.split(",") for g in text.split(";")]
    if not all(all(g) for g in groups):
        raise SystemExit(f"--islands {text!r}: an empty node name")
    return groups


def islands_of(graph: DataflowGraph, groups: list[list[str]]) -> list[int]:
    """Each group of ONNX node names as node bits; a name no op carries is an error."""
    by_name = {node_name(n): n.index for n in graph.op_nodes()}
    missing = [name for g in groups for name in g if name not in by_name]
    if missing:
        raise SystemExit(f"no op named {', '.join(missing[:5])} in the model")
    return [sum(1 << by_name[name] for name in g) for g in groups]


def carved(graph: DataflowGraph, outer: str, inner: str, islands: list[int]) -> Partitioning:
    """The whole graph on `outer` with every island carved out onto `inner`, in turn."""
    cover = Partitioning(graph, (cover_of_one(graph, outer),), 0.0)
    for bits in islands:
        island = CandidatePartition(SubGraph(graph, bits), inner, RULE)
        if not island.sub_graph.is_convex:
            names = ", ".join(node_name(graph.nodes[i]) for i in island.sub_graph.nodes)
            raise SystemExit(f"the island {names} is not convex: a path between its nodes "
                             "leaves it (add the nodes on that path, or make two islands)")
        k = next((j for j, ch in enumerate(cover.choices)
                  if not bits & ~ch.candidate.inside), None)
        if k is None:
            raise SystemExit(f"an island of {bits.bit_count()} ops straddles two regions "
                             "(overlapping groups?)")
        cover = carve(cover, k, island, 0.0, 0.0, None)
    return cover


def ceiling_islands(source, top: int, rounds: int) -> list[list[str]]:
    """The ceiling's `top` anchors where the slower whole model's backend is faster, each
    with the nodes a backend fused into it (`Ceiling.groups`) as one island."""
    pair, _, _, _ = ceiling.measure(source, rounds)
    return [list(pair.groups.get(anchor, (anchor,))) for anchor, _ in pair.differing(top)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help=help_text())
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--islands", help="ONNX node names, ',' within an island, ';' between")
    group.add_argument("--ceiling", type=positive_int,
                       help="carve bench/ceiling.py's N best anchors")
    ap.add_argument("--outer", default="openvino")
    ap.add_argument("--inner", default="onnxruntime")
    ap.add_argument("--rounds", type=positive_int, default=10)
    args = ap.parse_args()
    if not known_model(args.model):
        ap.error(f"unknown model {args.model}: use {help_text()}")
    if usable_backends([args.outer, args.inner]) != [args.outer, args.inner]:
        ap.error(f"--outer {args.outer} and --inner {args.inner} must be two usable backends")
    label, source = resolve(args.model)
    groups = (groups_of(args.islands) if args.islands is not None
              else ceiling_islands(source, args.ceiling, args.rounds))
    pristine = collage_mlir.import_onnx(source)
    with weight_store(pristine):
        graph = entry_graph(pristine)
        cover = carved(graph, args.outer, args.inner, islands_of(graph, groups))
        whole = Partitioning(graph, (cover_of_one(graph, args.outer),), 0.0)
        models: dict[str, PartitionedModel] = {
            name: build_neighbour(pristine, p, None, no_rows)
            for name, p in ((f"{args.outer} whole", whole), (f"{args.outer} whole#2", whole),
                            ("carved", cover))}
        inputs = model_inputs(pristine)
        reference = models[f"{args.outer} whole"].run(inputs)
        err = relative_error(models["carved"].run(inputs), reference)
        times = {t.name: t.median_s * 1e3 for t in time_side_by_side(
            {n: m.run for n, m in models.items()}, inputs, rounds=args.rounds, warmup=1)}
        calls = models["carved"].profile(inputs, rounds=args.rounds)
    base = min(times[f"{args.outer} whole"], times[f"{args.outer} whole#2"])
    noise = max(times[f"{args.outer} whole"], times[f"{args.outer} whole#2"]) / base - 1
    print(f"{label}: {len(groups)} island(s) of {sum(map(len, groups))} node(s) on "
          f"{args.inner}, {len(cover.choices)} regions; max err {err:.1e}")
    for name, ms in times.items():
        print(f"  {name}: {ms:.2f} ms ({ms / base:.2f}x)")
    print(f"  noise ±{noise:.1%}")
    print("  carved model's regions, median call inside whole runs:")
    for name, s in calls.items():
        print(f"    {name}: {s * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(guarded("bench/carve.py", main))
