"""User-pinned placements: an onnx-mlir style JSON file that the search must respect.

    {"placement": [
       {"pattern": {"match": {"node_type": "LRN|Softmax", "onnx_node_name": ".*"},
                    "rewrite": {"backend": "openvino"}}},
       {"pattern": {"match": {"node_type": "Gemm"},
                    "rewrite": {"exclude": ["iree"]}}}
    ]}

For each op, the first pattern whose regexes all match (full match; `node_type` is the ONNX
op type, `onnx_node_name` the node's name from the ONNX file) decides: `backend` pins the op
to that backend, `exclude` forbids the listed backends. Ops no pattern matches are free.
A candidate survives only if every op inside allows its backend.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from collage_mlir.candidate import CandidatePartition
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, Node
from collage_mlir.paths import user_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlacementRule:
    node_type: re.Pattern | None
    node_name: re.Pattern | None
    backend: str | None
    exclude: frozenset[str]
    where: str = ""  # "FILE: placement[k]", for messages

    def matches(self, op_type: str, name: str) -> bool:
        return ((self.node_type is None or bool(self.node_type.fullmatch(op_type)))
                and (self.node_name is None or bool(self.node_name.fullmatch(name))))

    def allows(self, backend: str) -> bool:
        return (self.backend is None or backend == self.backend) and backend not in self.exclude


class Placement:
    """An ordered list of PlacementRules; first match wins."""

    def __init__(self, rules: list[PlacementRule]) -> None:
        self.rules = rules

    @staticmethod
    def from_json(path: str | Path) -> Placement:
        try:
            data = json.loads(user_path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise CollageError(f"{path}: cannot read placement file: {e}") from None
        entries = data.get("placement") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise CollageError(f"{path}: expected {{\"placement\": [...]}}")
        return Placement([_rule(path, k, e) for k, e in enumerate(entries)])

    def rule_for(self, op_type: str, name: str) -> PlacementRule | None:
        return next((r for r in self.rules if r.matches(op_type, name)), None)

    def says_of(self, node: Node) -> str | None:
        """What the rule matching `node` does to it, naming the rule ("FILE: placement[0]
        pins it to 'openvino'"), or None when no rule matches."""
        rule = self.rule_for(node.op_type, node_name(node))
        if rule is None:
            return None
        if rule.backend is not None:
            return f"{rule.where} pins it to '{rule.backend}'"
        return f"{rule.where} excludes {', '.join(map(repr, sorted(rule.exclude)))}"

    def allowed(self, graph: DataflowGraph, candidate: CandidatePartition) -> bool:
        for i in candidate.sub_graph.nodes:
            node = graph.nodes[i]
            rule = self.rule_for(node.op_type, node_name(node))
            if rule is not None and not rule.allows(candidate.backend):
                return False
        return True

    def _check_excludes(self, backends: set[str]) -> None:
        """An excluded name no backend has is a typo, which would exclude nothing: an
        error naming the rule (a known backend not in use is fine)."""
        from collage_mlir.backends.registry import registered_backends

        known = set(registered_backends()) | backends
        for rule in self.rules:
            typos = sorted(rule.exclude - known)
            if typos:
                raise CollageError(f"{rule.where}: excludes {', '.join(map(repr, typos))}, "
                                   f"which names no backend (known: {', '.join(sorted(known))})")

    def filter(self, graph: DataflowGraph,
               candidates: list[CandidatePartition]) -> list[CandidatePartition]:
        """The candidates every rule allows. A rule pinning ops to a backend that is not in
        play is an error naming the rule; a rule that matches no op is a warning."""
        backends = {c.backend for c in candidates}
        self._check_excludes(backends)
        matched: set[int] = set()
        for node in graph.op_nodes():
            rule = self.rule_for(node.op_type, node_name(node))
            if rule is not None:
                matched.add(id(rule))
                if rule.backend is not None and rule.backend not in backends:
                    raise CollageError(
                        f"{rule.where}: pins {node.op_type} node {node_name(node)!r} to "
                        f"'{rule.backend}', which offers no candidate here (not in use, or "
                        f"it takes none of this model's ops; backends offering some: "
                        f"{', '.join(sorted(backends))})")
        named = any(node_name(n) for n in graph.op_nodes())
        for rule in self.rules:
            if id(rule) not in matched:
                why = "" if named or rule.node_name is None else (
                    " (its ops carry no ONNX node names: MLIR text printed without locations "
                    "has none; print it with --mlir-print-debuginfo, or partition the .onnx)")
                log.warning("%s matches no op of this model%s", rule.where, why)
        kept = [c for c in candidates if self.allowed(graph, c)]
        before = _covered(candidates)
        after = _covered(kept)
        for node in graph.op_nodes():
            if before >> node.index & 1 and not after >> node.index & 1:
                rule = self.rule_for(node.op_type, node_name(node))
                raise CollageError(f"{rule.where if rule else 'placement'}: leaves "
                                   f"{node.op_type} node {node_name(node)!r} no backend")
        return kept


def _covered(candidates: list[CandidatePartition]) -> int:
    bits = 0
    for c in candidates:
        bits |= c.sub_graph.inside
    return bits


def node_name(node: Node) -> str:
    """The ONNX node name the importer kept as the op's location, or ""."""
    return onnx_view.node_name(node.op) if node.op is not None else ""


def _rule(path, k: int, entry: object) -> PlacementRule:
    where = f"{path}: placement[{k}]"
    pattern = entry.get("pattern") if isinstance(entry, dict) else None
    if not isinstance(pattern, dict):
        raise CollageError(f"{where}: expected {{\"pattern\": {{\"match\": ..., \"rewrite\": ...}}}}")
    match, rewrite = pattern.get("match", {}), pattern.get("rewrite", {})
    if not isinstance(match, dict) or not isinstance(rewrite, dict):
        raise CollageError(f"{where}: 'match' and 'rewrite' must be objects")
    unknown = (set(match) - {"node_type", "onnx_node_name"}) | (
        set(rewrite) - {"backend", "device", "exclude"})
    if unknown:
        raise CollageError(f"{where}: unknown keys {sorted(unknown)}")
    backend = rewrite.get("backend", rewrite.get("device"))
    exclude = rewrite.get("exclude", [])
    if backend is None and not exclude:
        raise CollageError(f"{where}: rewrite needs 'backend' or 'exclude'")
    if backend is not None and not isinstance(backend, str):
        raise CollageError(f"{where}: 'backend' must be a string, got {backend!r}")
    if not isinstance(exclude, list) or not all(isinstance(b, str) for b in exclude):
        raise CollageError(f"{where}: 'exclude' must be a list of backend names")
    if not all(isinstance(v, str) for v in match.values()):
        raise CollageError(f"{where}: 'match' values must be regex strings")
    try:
        return PlacementRule(_regex(match.get("node_type")), _regex(match.get("onnx_node_name")),
                             backend, frozenset(exclude), where)
    except re.error as e:
        raise CollageError(f"{where}: bad regex: {e}") from None


def _regex(text: str | None) -> re.Pattern | None:
    return None if text is None else re.compile(text)


