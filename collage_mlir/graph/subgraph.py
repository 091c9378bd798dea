"""SubGraph: a set of op nodes of a DataflowGraph, with its boundary and validity.

Vocabulary (from the Collage RFC):
- entry: an inside node fed by a value from outside (or by an argument);
- exit: an inside node whose value is used outside or returned by the function;
- input / output: the outside nodes on the other side of those edges;
- tap: an exit whose value is also used inside (the value both leaves and is reused);
- depth: the number of nodes on the longest path inside.
A valid SubGraph is convex: no path leaves it and re-enters, so it can become one call.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from iree.compiler import ir
from iree.compiler.dialects import func

from collage_mlir.dialects import collage
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.errors import CollageError
from collage_mlir.graph.bits import iter_bits
from collage_mlir.graph.dataflow import DataflowGraph, NodeKind


@dataclass(frozen=True)
class SubGraphConfig:
    """Limits on a SubGraph. `max_depth=None` means unlimited."""

    max_exits: int = 1
    allow_taps: bool = False
    max_depth: int | None = None

    def __post_init__(self) -> None:
        if self.max_depth is not None and self.max_depth < 1:
            raise CollageError(f"max-depth must be at least 1 (or unset), got {self.max_depth}")
        if self.max_exits is not None and self.max_exits < 1:
            raise CollageError(f"max-exits must be at least 1, got {self.max_exits}")


class SubGraph:
    """An immutable set of op nodes (`inside` bitset) of `graph`; boundary sets are cached."""

    __slots__ = ("graph", "inside", "__dict__")

    def __init__(self, graph: DataflowGraph, inside: int) -> None:
        if inside & ~graph.op_bits:
            raise ValueError("a SubGraph holds op nodes only (no arguments or constants)")
        self.graph = graph
        self.inside = inside

    # -- identity -----------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SubGraph) and other.inside == self.inside
                and other.graph is self.graph)

    def __hash__(self) -> int:
        return hash(self.inside)

    def __repr__(self) -> str:
        return f"SubGraph({self.nodes})"

    def __or__(self, other: SubGraph) -> SubGraph:
        return SubGraph(self.graph, self.inside | other.inside)

    def __len__(self) -> int:
        return self.inside.bit_count()

    @cached_property
    def nodes(self) -> list[int]:
        return list(iter_bits(self.inside))

    @property
    def first(self) -> int:
        """Lowest post-dfs index inside (the search expands on this)."""
        return (self.inside & -self.inside).bit_length() - 1

    # -- boundary -----------------------------------------------------------------------

    @cached_property
    def input_bits(self) -> int:
        """Outside non-constant nodes (arguments included) feeding an inside node."""
        acc = 0
        for i in self.nodes:
            acc |= self.graph.nodes[i].preds
        return acc & ~self.inside & ~self.graph.const_bits

    @cached_property
    def output_bits(self) -> int:
        """Outside nodes fed by an inside node."""
        acc = 0
        for i in self.nodes:
            acc |= self.graph.nodes[i].succs
        return acc & ~self.inside

    @cached_property
    def exit_bits(self) -> int:
        g = self.graph
        return sum(1 << i for i in self.nodes
                   if g.nodes[i].succs & ~self.inside or (g.output_bits >> i) & 1)

    @cached_property
    def tap_bits(self) -> int:
        """Exits whose value is also consumed inside."""
        g = self.graph
        return sum(1 << i for i in iter_bits(self.exit_bits) if g.nodes[i].succs & self.inside)

    @cached_property
    def depth(self) -> int:
        """Nodes on the longest path inside."""
        longest: dict[int, int] = {}
        for i in self.nodes:  # post-dfs order: producers first
            preds = self.graph.nodes[i].preds & self.inside
            longest[i] = 1 + max((longest[p] for p in iter_bits(preds)), default=0)
        return max(longest.values(), default=0)

    # -- validity -----------------------------------------------------------------------

    @cached_property
    def is_convex(self) -> bool:
        """No path from an inside node through an outside node back inside."""
        reach = 0
        for o in iter_bits(self.output_bits):
            reach |= self.graph.downstream[o]
        return not reach & self.inside

    def is_valid(self, config: SubGraphConfig) -> bool:
        return self.why_invalid(config) is None

    def why_invalid(self, config: SubGraphConfig) -> str | None:
        """None when valid, else the first rule broken (for test passes and diagnostics)."""
        if not self.inside:
            return "empty"
        if not self.is_convex:
            return "not convex"
        exits = self.exit_bits.bit_count()
        if exits > config.max_exits:
            return f"{exits} exits > max_exits={config.max_exits}"
        if self.tap_bits and not config.allow_taps:
            return "has taps"
        if config.max_depth is not None and self.depth > config.max_depth:
            return f"depth {self.depth} > max_depth={config.max_depth}"
        return None

    # -- values at the boundary ---------------------------------------------------------

    @cached_property
    def input_values(self) -> list[tuple[int, int]]:
        """(node, result) pairs read from outside, sorted: the extracted function's arguments."""
        seen: set[tuple[int, int]] = set()
        g = self.graph
        for i in self.nodes:
            for src in g.nodes[i].operands:
                if src and not (self.inside >> src[0]) & 1 and g.nodes[src[0]].kind is not NodeKind.CONST:
                    seen.add(src)
        return sorted(seen)

    @cached_property
    def output_values(self) -> list[tuple[int, int]]:
        """(node, result) pairs used outside or returned, sorted: the function's results."""
        g = self.graph
        used: set[tuple[int, int]] = {o for o in g.outputs if (self.inside >> o[0]) & 1}
        for o in iter_bits(self.output_bits):
            for src in g.nodes[o].operands:
                if src and (self.inside >> src[0]) & 1:
                    used.add(src)
        return sorted(used)

    # -- extraction ---------------------------------------------------------------------

    def extract(self, name: str = "region") -> ir.Module:
        """A new module (same context) holding `func.func @name` that computes this SubGraph.

        Arguments are `input_values`, results are `output_values` (several exits give
        several results), constants it reads are cloned in, and the parent function's
        `torch.onnx_meta.*` attributes are copied (IREE needs the opset), and so is the
        module's weight store (`collage.weights`). The original function is not modified.
        """
        g = self.graph
        ctx = g.func_op.context
        with ctx, ir.Location.unknown():
            module = ir.Module.create()
            value = {src: g.nodes[src[0]].values[src[1]] for src in self.input_values}
            in_types = [value[s].type for s in self.input_values]
            out_types = [g.nodes[n].values[r].type for n, r in self.output_values]
            with ir.InsertionPoint(module.body):
                fn = func.FuncOp(name, (in_types, out_types))
                for key, attr in g.func_op.attributes.items():
                    if key.startswith(onnx_view.META_PREFIX):
                        fn.attributes[key] = attr
                block = fn.add_entry_block()
            mapping = {g.nodes[n].values[r]: block.arguments[k]
                       for k, (n, r) in enumerate(self.input_values)}
            with ir.InsertionPoint(block):
                for i in iter_bits(g.const_closure(self.inside) | self.inside):
                    self._clone_into(g.nodes[i].op, mapping)
                func.ReturnOp([mapping[g.nodes[n].values[r]] for n, r in self.output_values])
            parent = g.func_op.parent.attributes
            if collage.WEIGHTS in parent:  # the region reads its weights where the model does
                module.operation.attributes[collage.WEIGHTS] = parent[collage.WEIGHTS]
        return module

    @staticmethod
    def _clone_into(op: ir.Operation, mapping: dict[ir.Value, ir.Value]) -> None:
        clone = op.clone()
        for k, v in enumerate(op.operands):
            clone.operands[k] = mapping[v]
        for old, new in zip(op.results, clone.results, strict=True):
            mapping[old] = new


def execution_order(regions: Sequence[SubGraph]) -> list[int]:
    """Indices of disjoint `regions` (of one graph) so that each follows the regions it reads
    from; among the ready ones, the lowest first node goes first. This is the order of the
    search's choices and of the calls outlining makes.

    Raises ValueError when the regions depend on each other in a cycle (each convex on its
    own, but not schedulable as calls).
    """
    deps = _region_deps(regions)
    users: list[list[int]] = [[] for _ in regions]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    waiting = [len(ds) for ds in deps]
    ready = [(r.first, k) for k, r in enumerate(regions) if not waiting[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (regions[u].first, u))
    if len(order) != len(regions):
        raise ValueError("regions form a cycle")
    return order


def _region_deps(regions: Sequence[SubGraph]) -> list[set[int]]:
    """deps[k]: indices of the regions that region k reads a value from."""
    if not regions:
        return []
    graph = regions[0].graph
    owner = {i: k for k, r in enumerate(regions) for i in r.nodes}
    deps: list[set[int]] = [set() for _ in regions]
    for k, r in enumerate(regions):
        for i in r.nodes:
            for p in iter_bits(graph.nodes[i].preds):
                if p in owner and owner[p] != k:
                    deps[k].add(owner[p])
    return deps
