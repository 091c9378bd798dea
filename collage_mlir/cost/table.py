"""TableEstimator: costs read from a JSON table, for lit tests and for replaying a decision
without the backends.

Format (every key optional; seconds everywhere; a cost is a number >= 0 or the string "inf"):

    {
      "regions": [                           // checked first, in order; first match wins
        {"backend": "ort", "nodes": [1, 2], "cost": 0.3},  // exactly these post-dfs nodes
        {"backend": "*", "ops": ["Relu", "Relu"], "cost": 0.5},  // op types in node order
        {"backend": "iree", "rule": "fuse", "cost": "inf"}  // candidates of one rule
      ],
      "per_op":          {"iree": {"Relu": 1.0, "*": 2.0}},  // "*": every other op type
      "per_call":        {"iree": 0.1},      // added once per region (call overhead)
      "fusion_discount": {"iree": 0.5},      // fused ops but the dearest cost d times theirs
      "default": null,                       // no match at all: null = unknown (NaN)
      "transition": {"per_call": 0.1, "per_byte": 1e-9, "host": false,
                     "pairs": {"iree->ort": {"per_call": 0.2, "per_byte": 0.0}}}
    }

A `regions` entry matches when every key it gives matches (`backend` "*" or absent: any).
Otherwise a backend listed in `per_op` costs `per_call + max + d * (sum - max)` over its
ops' costs: the dearest op at full price, every other op at `d` (default 1) times its own,
so fusing pays linearly in region size. An op type with no entry and no "*" makes the
candidate invalid (+inf): the backend cannot run it. A backend in no table gets `default`.
Transitions: 0 on the same backend unless `pairs` names it ("iree->iree": two kernels of one
backend have a boundary too); hand-offs with the caller ("host") are free unless
`"host": true`; else the `pairs` entry "src->dst" or the global line `per_call + per_byte*n`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collage_mlir.candidate import HOST, CandidatePartition
from collage_mlir.cost.base import CostEstimator, Progress
from collage_mlir.errors import CollageError

_TOP_KEYS = {"regions", "per_op", "per_call", "fusion_discount", "default", "transition"}
_REGION_KEYS = {"backend", "nodes", "ops", "rule", "cost"}
_TRANSITION_KEYS = {"per_call", "per_byte", "host", "pairs"}


@dataclass(frozen=True)
class RegionEntry:
    """One `regions` row: None fields match anything."""

    cost: float
    backend: str | None = None
    nodes: tuple[int, ...] | None = None
    ops: tuple[str, ...] | None = None
    rule: str | None = None

    def matches(self, c: CandidatePartition) -> bool:
        sub = c.sub_graph
        return ((self.backend is None or self.backend == c.backend)
                and (self.nodes is None or self.nodes == tuple(sub.nodes))
                and (self.rule is None or self.rule == c.rule_name)
                and (self.ops is None
                     or self.ops == tuple(sub.graph.nodes[i].op_type for i in sub.nodes)))


@dataclass(frozen=True)
class Line:
    """A hand-off price: per_call + per_byte * nbytes."""

    per_call: float = 0.0
    per_byte: float = 0.0

    def __call__(self, nbytes: int) -> float:
        return self.per_call + self.per_byte * nbytes


@dataclass(frozen=True)
class TableEstimator(CostEstimator):
    """A CostEstimator that looks costs up; see the module docstring for the format."""

    regions: tuple[RegionEntry, ...] = ()
    per_op: dict[str, dict[str, float]] = field(default_factory=dict)
    per_call: dict[str, float] = field(default_factory=dict)
    fusion_discount: dict[str, float] = field(default_factory=dict)
    default: float = math.nan
    transition: Line = Line()
    pairs: dict[tuple[str, str], Line] = field(default_factory=dict)
    host: bool = False

    @classmethod
    def from_json(cls, path: str | Path) -> TableEstimator:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except OSError as e:
            raise CollageError(f"{path}: cannot read cost table ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise CollageError(f"{path}: not JSON: {e.msg} at line {e.lineno}") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, label: str = "<cost table>") -> TableEstimator:
        """Validate and build; errors name `label` and the offending key."""
        r = _Reader(label)
        r.keys(data, _TOP_KEYS, "")
        t = r.keys(data.get("transition", {}), _TRANSITION_KEYS, "transition")
        return cls(
            regions=tuple(r.region(e, f"regions[{k}]")
                          for k, e in enumerate(r.array(data.get("regions", []), "regions"))),
            per_op={b: {op: r.cost(c, f"per_op.{b}.{op}") for op, c in r.items(ops,
                                                                               f"per_op.{b}")}
                    for b, ops in r.items(data.get("per_op", {}), "per_op")},
            per_call={b: r.cost(c, f"per_call.{b}")
                      for b, c in r.items(data.get("per_call", {}), "per_call")},
            fusion_discount={b: r.number(d, f"fusion_discount.{b}")
                             for b, d in r.items(data.get("fusion_discount", {}),
                                                "fusion_discount")},
            default=(math.nan if data.get("default") is None
                     else r.cost(data["default"], "default")),
            transition=r.line(t, "transition"),
            pairs={r.pair(k, f"transition.pairs.{k}"): r.line(v, f"transition.pairs.{k}")
                   for k, v in r.items(t.get("pairs", {}), "transition.pairs")},
            host=r.flag(t.get("host", False), "transition.host"),
        )

    def estimate(self, candidates: Sequence[CandidatePartition],
                 progress: Progress | None = None) -> list[float]:
        out = []
        for k, c in enumerate(candidates):
            out.append(self.cost(c))
            if progress is not None:
                progress(k + 1, len(candidates))
        return out

    def cost(self, c: CandidatePartition) -> float:
        for entry in self.regions:
            if entry.matches(c):
                return entry.cost
        table = self.per_op.get(c.backend)
        if table is None:
            return self.default
        sub = c.sub_graph
        ops = [sub.graph.nodes[i].op_type for i in sub.nodes]
        if any(op not in table and "*" not in table for op in ops):
            return math.inf
        each = [table.get(op, table.get("*", math.inf)) for op in ops]
        if math.inf in each:  # an op the backend cannot run ("inf"): so neither the region
            return math.inf  # (the discounted rest below would be inf - inf, NaN)
        dearest = max(each)
        rest = math.fsum(each) - dearest
        return self.per_call.get(c.backend, 0.0) + dearest + self.fusion_discount.get(
            c.backend, 1.0) * rest

    def transition_cost(self, src_backend: str, dst_backend: str, nbytes: int) -> float:
        if src_backend == dst_backend:
            line = self.pairs.get((src_backend, dst_backend))
            return line(nbytes) if line is not None else 0.0
        if not self.host and HOST in (src_backend, dst_backend):
            return 0.0
        return self.pairs.get((src_backend, dst_backend), self.transition)(nbytes)


class _Reader:
    """Typed access to the parsed JSON; every error names the file and the key."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, key: str, msg: str) -> CollageError:
        return CollageError(f"{self.label}: {key or 'top level'}: {msg}")

    def keys(self, data: Any, allowed: set[str], key: str) -> dict:
        if not isinstance(data, dict):
            raise self.fail(key, f"expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise self.fail(f"{key}.{unknown[0]}" if key else unknown[0],
                            f"unknown key (known: {', '.join(sorted(allowed))})")
        return data

    def items(self, data: Any, key: str) -> list[tuple[str, Any]]:
        if not isinstance(data, dict):
            raise self.fail(key, f"expected an object, got {type(data).__name__}")
        return list(data.items())

    def array(self, data: Any, key: str) -> list[Any]:
        if not isinstance(data, list):
            raise self.fail(key, f"expected a list, got {type(data).__name__}")
        return data

    def number(self, v: Any, key: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise self.fail(key, f"expected a number >= 0, got {json.dumps(v)}")
        return float(v)

    def cost(self, v: Any, key: str) -> float:
        if v == "inf":
            return math.inf
        if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
            raise self.fail(key, f'expected a cost (number >= 0 or "inf"), got {json.dumps(v)}')
        return float(v)

    def flag(self, v: Any, key: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {json.dumps(v)}")
        return v

    def text(self, v: Any, key: str) -> str:
        if not isinstance(v, str) or not v:
            raise self.fail(key, f"expected a non-empty string, got {json.dumps(v)}")
        return v

    def line(self, data: Any, key: str) -> Line:
        d = self.keys(data, _TRANSITION_KEYS if key == "transition" else {"per_call", "per_byte"},
                      key)
        return Line(self.number(d.get("per_call", 0.0), f"{key}.per_call"),
                    self.number(d.get("per_byte", 0.0), f"{key}.per_byte"))

    def pair(self, text: str, key: str) -> tuple[str, str]:
        src, sep, dst = text.partition("->")
        if not sep or not src.strip() or not dst.strip():
            raise self.fail(key, 'expected "src->dst"')
        return src.strip(), dst.strip()

    def region(self, data: Any, key: str) -> RegionEntry:
        d = self.keys(data, _REGION_KEYS, key)
        if "cost" not in d:
            raise self.fail(f"{key}.cost", "missing")
        backend = self.text(d.get("backend", "*"), f"{key}.backend")
        nodes = ops = None
        if "nodes" in d:
            nodes = tuple(sorted(self._int(n, f"{key}.nodes")
                                 for n in self.array(d["nodes"], f"{key}.nodes")))
        if "ops" in d:
            ops = tuple(self.text(o, f"{key}.ops") for o in self.array(d["ops"], f"{key}.ops"))
        rule = self.text(d["rule"], f"{key}.rule") if "rule" in d else None
        return RegionEntry(self.cost(d["cost"], f"{key}.cost"),
                           None if backend == "*" else backend, nodes, ops, rule)

    def _int(self, v: Any, key: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.fail(key, f"expected a node index >= 0, got {json.dumps(v)}")
        return v
