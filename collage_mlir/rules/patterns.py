"""Dataflow patterns over a DataflowGraph (the ONNX-in-MLIR form), matched exhaustively.

A small DFPattern-like language: `Op("Conv", Wildcard(), Constant())`, alternatives with `|`,
`p.optional(lambda x: Op("Relu", x))` (x, or x followed by Relu), and predicates on
attributes, shapes and dtypes (`p.has_attr(group=1)`, `p.has_shape((1, 64, -1, -1))`,
`p.has_dtype("f32")`, `p.where(fn)`).

Unlike a rewriter, which takes the first match and moves on, Collage needs every sub-graph
a backend could run, so `find_matches` yields EVERY match, overlapping ones included. Only
the op nodes matched by `Op` patterns are inside a match; `Wildcard` and `Constant` bind a
value without pulling its producer in. A pattern object used twice in one pattern must bind
the same value both times (so `x = Op("Relu"); Op("Add", x, x)` needs a shared input).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.graph import DataflowGraph, NodeKind, SubGraph
from collage_mlir.graph.bits import iter_bits

Value = tuple[int, int]
"""(node index, result number): what a pattern matches."""

Env = Mapping[int, Value]
"""Bindings made so far: id(pattern) → value (keeps shared sub-patterns consistent)."""


@dataclass(frozen=True)
class Match:
    """One way a pattern matches: the op nodes inside, and what each sub-pattern bound."""

    inside: int
    bindings: Env

    def bound(self, pattern: Pattern) -> Value | None:
        return self.bindings.get(id(pattern))


class Pattern:
    """Base of all patterns. `_match` yields (inside bits, bindings) for one value."""

    def _match(self, graph: DataflowGraph, value: Value, env: Env) -> Iterator[tuple[int, Env]]:
        raise NotImplementedError

    def match(self, graph: DataflowGraph, value: Value, env: Env | None = None
              ) -> Iterator[tuple[int, Env]]:
        """Every way this pattern matches `value`, honouring earlier bindings in `env`."""
        env = env or {}
        key = id(self)
        if key in env:
            if env[key] == value:
                yield from self._match(graph, value, env)
            return
        for inside, out in self._match(graph, value, env):
            yield inside, {**out, key: value}

    # -- combinators --------------------------------------------------------------------

    def __or__(self, other: Pattern) -> Pattern:
        return Alt(self, other)

    def optional(self, wrap: Callable[[Pattern], Pattern]) -> Pattern:
        """This pattern, or this pattern followed by what `wrap` builds around it."""
        return Alt(wrap(self), self)

    def where(self, predicate: Callable[[DataflowGraph, Value], bool]) -> Pattern:
        return Where(self, predicate)

    def has_attr(self, **expected: Any) -> Pattern:
        """The matched op carries these ONNX attributes with these (Python) values."""
        return Where(self, _attr_predicate(expected), f"attrs{expected}")

    def has_shape(self, shape: tuple[int, ...]) -> Pattern:
        """The matched value has this static shape; -1 in `shape` matches any size."""
        return Where(self, _shape_predicate(tuple(shape)), f"shape{tuple(shape)}")

    def has_dtype(self, dtype: str) -> Pattern:
        """The matched value has this element type ("f32", "si64", ...)."""
        return Where(self, _dtype_predicate(dtype), f"dtype({dtype})")


class Wildcard(Pattern):
    """Any value: an argument, a constant or an op result (never pulled inside)."""

    def _match(self, graph, value, env):
        yield 0, env

    def __repr__(self) -> str:
        return "*"


class Constant(Pattern):
    """A constant value (onnx.Constant or constant-folded weights); never inside."""

    def _match(self, graph, value, env):
        if graph.nodes[value[0]].kind is NodeKind.CONST:
            yield 0, env

    def __repr__(self) -> str:
        return "Constant()"


class Op(Pattern):
    """An op node of one of `op_types`, whose operands match `inputs` (None = any operands).

    With `inputs` given the op must have exactly that many operands (an omitted optional
    operand is only matched by Wildcard). `commutative=True` also tries the two operands of
    a binary op swapped (Add, Mul).
    """

    def __init__(self, op_types: str | tuple[str, ...], *inputs: Pattern,
                 any_inputs: bool | None = None, commutative: bool = False) -> None:
        self.op_types = frozenset((op_types,) if isinstance(op_types, str) else op_types)
        self.inputs = tuple(inputs)
        self.any_inputs = not inputs if any_inputs is None else any_inputs
        self.commutative = commutative

    def _match(self, graph, value, env):
        node = graph.nodes[value[0]]
        if node.kind is not NodeKind.OP or node.op_type not in self.op_types:
            return
        here = 1 << node.index
        if self.any_inputs:
            yield here, env
            return
        if len(node.operands) != len(self.inputs):
            return
        orders = [node.operands]
        if self.commutative and len(node.operands) == 2:
            orders.append(node.operands[::-1])
        for operands in orders:
            for inside, out in _match_operands(graph, self.inputs, operands, env):
                yield inside | here, out

    def __repr__(self) -> str:
        types = "|".join(sorted(self.op_types))
        return f"Op({types}{', ' if self.inputs else ''}{', '.join(map(repr, self.inputs))})"


class Alt(Pattern):
    """Either alternative; both are tried, so both matches are produced."""

    def __init__(self, *options: Pattern) -> None:
        self.options = options

    def _match(self, graph, value, env):
        for option in self.options:
            yield from option.match(graph, value, env)

    def __repr__(self) -> str:
        return "(" + " | ".join(map(repr, self.options)) + ")"


class Where(Pattern):
    """`inner`, when `predicate(graph, value)` holds for the matched value."""

    def __init__(self, inner: Pattern, predicate: Callable[[DataflowGraph, Value], bool],
                 label: str = "where") -> None:
        self.inner, self.predicate, self.label = inner, predicate, label

    def _match(self, graph, value, env):
        if self.predicate(graph, value):
            yield from self.inner.match(graph, value, env)

    def __repr__(self) -> str:
        return f"{self.inner!r}.{self.label}"


def _match_operands(graph: DataflowGraph, patterns: tuple[Pattern, ...],
                    operands: list[Value | None], env: Env) -> Iterator[tuple[int, Env]]:
    """The cross product of the operand matches, threading the bindings through."""
    if not patterns:
        yield 0, env
        return
    first, rest = patterns[0], patterns[1:]
    src = operands[0]
    if src is None:
        heads = iter([(0, env)]) if isinstance(first, Wildcard) else iter(())
    else:
        heads = first.match(graph, src, env)
    for inside, mid in heads:
        for more, out in _match_operands(graph, rest, operands[1:], mid):
            yield inside | more, out


# -- matching a whole graph ----------------------------------------------------------------

def find_matches(pattern: Pattern, graph: DataflowGraph) -> Iterator[Match]:
    """Every match of `pattern` rooted at any op result, in post-dfs order of the root.

    Matches with nothing inside (a bare Wildcard) are skipped: they name no work.
    """
    for node in graph.op_nodes():
        for result in range(max(1, len(node.values))):
            for inside, env in pattern.match(graph, (node.index, result)):
                if inside:
                    yield Match(inside, env)


def match_subgraphs(pattern: Pattern, graph: DataflowGraph) -> list[SubGraph]:
    """The distinct sub-graphs `pattern` matches, in deterministic (first node, nodes) order."""
    seen = {m.inside for m in find_matches(pattern, graph)}
    return [SubGraph(graph, b) for b in sorted(seen, key=lambda b: list(iter_bits(b)))]


# -- predicates ----------------------------------------------------------------------------

def _attr_predicate(expected: dict[str, Any]) -> Callable[[DataflowGraph, Value], bool]:
    def check(graph: DataflowGraph, value: Value) -> bool:
        op = graph.nodes[value[0]].op
        if op is None:
            return False
        attrs = onnx_view.attributes(op)
        for name, want in expected.items():
            if name not in attrs:
                return False
            got = onnx_view.attribute_value(attrs[name])
            want = list(want) if isinstance(want, tuple) else want
            if not _same(got, want):
                return False
        return True
    return check


def _same(got: Any, want: Any) -> bool:
    """Equality, with f32 rounding forgiven (epsilon=1e-5 is stored as 9.99999974e-06)."""
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(map(_same, got, want))
    if isinstance(got, float) and isinstance(want, int | float):
        return math.isclose(got, want, rel_tol=1e-6)
    return got == want


def value_type(graph: DataflowGraph, value: Value) -> tuple[tuple[int, ...] | None, str] | None:
    """(shape, dtype) of a value, or None when it is not a tensor of the ONNX form."""
    values = graph.nodes[value[0]].values
    if value[1] >= len(values):
        return None
    return onnx_view.tensor_type(values[value[1]].type)


def _shape_predicate(shape: tuple[int, ...]) -> Callable[[DataflowGraph, Value], bool]:
    def check(graph: DataflowGraph, value: Value) -> bool:
        t = value_type(graph, value)
        if t is None or t[0] is None or len(t[0]) != len(shape):
            return False
        return all(w == -1 or g == w for g, w in zip(t[0], shape, strict=True))
    return check


def _dtype_predicate(dtype: str) -> Callable[[DataflowGraph, Value], bool]:
    def check(graph: DataflowGraph, value: Value) -> bool:
        t = value_type(graph, value)
        return t is not None and t[1] == dtype
    return check
