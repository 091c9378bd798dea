"""Search speed on a real model with a synthetic candidate set (no backends needed).

    python bench/search.py [model.onnx] [--backends 3] [--seed 0]

Candidates: every op alone, every convex producer->consumer pair and every convex chain of
three, on each backend, with random costs (seeded); fused candidates get a discount so the
search has real choices. Prints the search time with and without transition costs.
"""

from __future__ import annotations

import argparse
import os
import random
import time

from collage_mlir.candidate import HOST, CandidatePartition
from collage_mlir.graph import DataflowGraph, SubGraph, iter_bits
from collage_mlir.search.search import search


def default_model() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_densenet121.onnx")


def synthetic_candidates(graph: DataflowGraph, backends: list[str], seed: int
                         ) -> tuple[list[CandidatePartition], list[float]]:
    """Singletons, pairs and chains of three on every backend, with random costs."""
    rng = random.Random(seed)
    groups: list[int] = []
    for i in iter_bits(graph.op_bits):
        groups.append(1 << i)
        for j in iter_bits(graph.nodes[i].succs & graph.op_bits):
            groups.append((1 << i) | (1 << j))
            for k in iter_bits(graph.nodes[j].succs & graph.op_bits):
                groups.append((1 << i) | (1 << j) | (1 << k))
    cands, costs = [], []
    for bits in dict.fromkeys(groups):
        sub = SubGraph(graph, bits)
        if not sub.is_convex:
            continue
        for b in backends:
            cands.append(CandidatePartition(sub, b, f"size{len(sub)}"))
            costs.append(rng.uniform(1e-4, 1e-3) * len(sub) * (0.8 ** (len(sub) - 1)))
    return cands, costs


def transition(src: str, dst: str, nbytes: int) -> float:
    if src == dst or HOST in (src, dst):
        return 0.0
    return 2e-5 + nbytes * 1e-10


def main(argv: list[str] | None = None) -> None:
    from collage_mlir.importer import import_onnx

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default=default_model())
    p.add_argument("--backends", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    module = import_onnx(args.model)
    fn = module.body.operations[0]
    t0 = time.perf_counter()
    graph = DataflowGraph(fn)
    t1 = time.perf_counter()
    backends = [f"b{k}" for k in range(args.backends)]
    cands, costs = synthetic_candidates(graph, backends, args.seed)
    t2 = time.perf_counter()
    print(f"{os.path.basename(args.model)}: {graph.op_bits.bit_count()} op nodes, "
          f"{len(cands)} candidates; graph {t1 - t0:.2f} s, candidates {t2 - t1:.2f} s")
    for label, trans in (("no transitions", None), ("with transitions", transition)):
        t = time.perf_counter()
        result = search(graph, cands, costs, trans)
        dt = time.perf_counter() - t
        print(f"  {label:<17} search {dt:.2f} s, {result.states} states, "
              f"{len(result.choices)} regions, total {result.total_cost * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
