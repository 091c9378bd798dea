"""Scaling of measurement on Ray: one model measured cold on 1 and on 2 simulated nodes.

    .venv/bin/python bench/scale.py [MODEL] [--backends onnxruntime,openvino] [--max-depth 2]

Each run starts a local `ray.cluster_utils.Cluster` of N simulated nodes (one CPU and one
`collage_bench` slot each), measures every candidate of the model (the driver's own
`annotate`) into an empty cache, and keeps the measuring tasks' records. Simulated nodes are
processes on this one machine and share its cores, so:

- every backend runs on 1 thread (`threads=1` in its options) and each node has one CPU:
  two nodes measure on two cores, as two one-core machines would;
- the figures are taken from the tasks' durations (each task's start to end on its node),
  not from the wall clock: a run's time on N nodes is its busiest node's total task time,
  and the speed-up compares those. Two simulated nodes still compete with each other (and
  with any other work) for the cores and memory, which stretches their tasks; the speed-up
  on the tasks' CPU time (their measuring workers' user + system seconds) is printed too,
  though a kernel's timing runs for a wall-clock budget, so its CPU time grows with the
  share of a core it gets.

The projected N-node time replays the 1-node run's regions: each region's time is the gap
between consecutive results of its task (a task's first region also carries the worker's
start, which every projected group pays once, as the mean first gap less the mean region
time), dealt into groups as `RayExecutor.split` would for N nodes and placed
longest-first on N nodes.

The driver's overhead per candidate is the wall time of `estimate` less the time the driver
spent waiting for the cluster (`RayExecutor.waited_s`), over the candidates: keys, region
texts, cache reads and writes, submitting and collecting.
"""

from __future__ import annotations

import argparse
import heapq
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = ROOT / "test" / "data" / "exported" / "tiny_mobilenet_v2.onnx"


def run(model: str, backends: list[str], nodes: int, max_depth: int, budget: float) -> dict:
    """Measure the model cold on a fresh cluster of `nodes` simulated nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from collage_mlir import driver
    from collage_mlir.cost.measure import MeasuringEstimator
    from collage_mlir.cost.protocol import MeasureSettings
    from collage_mlir.cost.ray_executor import BENCH_RESOURCE, RayExecutor
    from collage_mlir.export.resources import weight_store
    from collage_mlir.graph import SubGraphConfig

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {BENCH_RESOURCE: 1}, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1, resources={BENCH_RESOURCE: 1})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        module = driver.load(model)
        with weight_store(module), tempfile.TemporaryDirectory() as scratch, \
                RayExecutor() as executor:
            graph = driver.entry_graph(module)
            config = SubGraphConfig(max_exits=1, allow_taps=False, max_depth=max_depth)
            candidates = driver.annotate(graph, backends, config)
            with MeasuringEstimator({b: {"threads": 1} for b in backends},
                                    cache_path=Path(scratch) / "cold.sqlite",
                                    settings=MeasureSettings(budget_s=budget),
                                    executor=executor) as est:
                load = os.getloadavg()[0]
                started = time.perf_counter()
                est.estimate(candidates)
                wall = time.perf_counter() - started
                load = max(load, os.getloadavg()[0])
                stats = est.stats
            return {"nodes": nodes, "candidates": len(candidates), "keys": stats.measured,
                    "errors": stats.errors + stats.invalid, "wall": wall, "load": load,
                    "waited": executor.waited_s, "tasks": list(executor.tasks)}
    finally:
        ray.shutdown()
        cluster.shutdown()


def busiest_node(tasks, cpu: bool = False) -> float:
    """A run's time on its nodes: the largest total task time (or CPU time) of one node."""
    per_node: dict[str, float] = {}
    for t in tasks:
        per_node[t.node] = per_node.get(t.node, 0.0) + (t.cpu if cpu else t.seconds)
    return max(per_node.values())


def projected(tasks, nodes: int) -> float:
    """The 1-node run's regions replayed on `nodes` nodes (see the module docstring)."""
    from collage_mlir.cost.ray_executor import GROUPS_PER_NODE, MIN_GROUP

    per_task = []
    for t in tasks:
        marks = [t.started, *t.results]
        gaps = [b - a for a, b in zip(marks, marks[1:], strict=False)]
        if gaps:
            per_task.append((t.backend, gaps))
    firsts = [g[0] for _, g in per_task]
    rest = [x for _, g in per_task for x in g[1:]]
    region_mean = statistics.fmean(rest) if rest else 0.0
    start = max(0.0, statistics.fmean(firsts) - region_mean) if firsts else 0.0
    regions: dict[str, list[float]] = {}
    for backend, gaps in per_task:
        regions.setdefault(backend, []).extend([max(0.0, gaps[0] - start), *gaps[1:]])
    groups = []
    for times in regions.values():
        n = max(1, min(len(times) // MIN_GROUP, GROUPS_PER_NODE * nodes))
        groups += [start + sum(times[j::n]) for j in range(n)]
    load = [0.0] * nodes
    heapq.heapify(load)
    for g in sorted(groups, reverse=True):
        heapq.heappush(load, heapq.heappop(load) + g)
    return max(load)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default=str(DEFAULT_MODEL))
    p.add_argument("--backends", default="onnxruntime,openvino")
    p.add_argument("--max-depth", type=int, default=2)
    p.add_argument("--budget", type=float, default=0.05, help="seconds of timing per kernel")
    p.add_argument("--project", default="4,8,16", help="node counts to project to")
    args = p.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    runs = [run(args.model, backends, n, args.max_depth, args.budget) for n in (1, 2)]
    print(f"{Path(args.model).name}: {runs[0]['candidates']} candidates, "
          f"{runs[0]['keys']} distinct regions measured cold on {', '.join(backends)} "
          f"(1 thread each, budget {args.budget:g} s per kernel)")
    for r in runs:
        overhead = (r["wall"] - r["waited"]) / r["candidates"]
        print(f"  {r['nodes']} node(s): {len(r['tasks'])} tasks, busiest node "
              f"{busiest_node(r['tasks']):.1f} s of tasks ({busiest_node(r['tasks'], True):.1f}"
              f" s CPU), all tasks {sum(t.seconds for t in r['tasks']):.1f} s "
              f"({sum(t.cpu for t in r['tasks']):.1f} s CPU), wall {r['wall']:.1f} s, "
              f"driver overhead {overhead * 1e3:.2f} ms per candidate, "
              f"{r['errors']} invalid or errors, load average up to {r['load']:.1f}")
    one, two = busiest_node(runs[0]["tasks"]), busiest_node(runs[1]["tasks"])
    print(f"  speed-up on task durations, 2 nodes over 1: {one / two:.2f}x")
    one, two = busiest_node(runs[0]["tasks"], True), busiest_node(runs[1]["tasks"], True)
    print(f"  speed-up on task CPU time: "
          f"{one / two:.2f}x")
    for n in [1, 2, *(int(k) for k in args.project.split(",") if k)]:
        print(f"  projected from the 1-node run's regions, {n} node(s): "
              f"{projected(runs[0]['tasks'], n):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
