"""Candidates as an MLIR attribute, so annotate and search can be separate passes.

`collage.candidates = [{backend = "iree", nodes = array<i64: 3, 4>, rule = "fuse_ops"}, ...]`
on the function; node numbers are the `collage.node` post-dfs indices of its DataflowGraph.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from iree.compiler import ir

from collage_mlir.candidate import CandidatePartition
from collage_mlir.errors import CollageError
from collage_mlir.graph import DataflowGraph, SubGraph
from collage_mlir.graph.bits import bits_of


def candidate_to_attr(c: CandidatePartition) -> ir.Attribute:
    return ir.DictAttr.get({
        "backend": ir.StringAttr.get(c.backend),
        "rule": ir.StringAttr.get(c.rule_name),
        "nodes": ir.DenseI64ArrayAttr.get(c.sub_graph.nodes),
    })


def candidates_to_attr(candidates: Sequence[CandidatePartition],
                       context: ir.Context | None = None) -> ir.ArrayAttr:
    """An ArrayAttr of DictAttrs, in the given order (uses the candidates' context)."""
    if context is None:
        context = candidates[0].sub_graph.graph.func_op.context if candidates else None
    with context or ir.Context.current:
        return ir.ArrayAttr.get([candidate_to_attr(c) for c in candidates])


def candidates_from_attr(graph: DataflowGraph, attr: ir.Attribute) -> list[CandidatePartition]:
    """The candidates `candidates_to_attr` wrote, re-bound to `graph` (checked against it)."""
    try:
        entries = list(ir.ArrayAttr(attr))
    except ValueError:
        raise CollageError(f"collage.candidates: expected an array of candidates, got "
                           f"{attr}") from None
    out = []
    for k, entry in enumerate(entries):
        try:
            d = ir.DictAttr(entry)
            backend = ir.StringAttr(d["backend"]).value
            rule = ir.StringAttr(d["rule"]).value if "rule" in d else ""
            nodes = list(ir.DenseI64ArrayAttr(d["nodes"]))
        except (KeyError, ValueError):
            raise CollageError(f"collage.candidates[{k}]: malformed entry {entry} (expected "
                               "{backend = \"...\", nodes = array<i64: ...>})") from None
        if not nodes or min(nodes) < 0 or max(nodes) >= len(graph) or (
                bits_of(nodes) & ~graph.op_bits):
            raise CollageError(f"collage.candidates[{k}]: nodes {nodes} are not ops of the "
                               "function (was the IR changed after collage-annotate?)")
        out.append(CandidatePartition(SubGraph(graph, bits_of(nodes)), backend, rule))
    return out


def summary(candidates: Sequence[CandidatePartition], backends: Sequence[str] = ()) -> str:
    """Counts per backend and per (backend, rule), one line each, sorted; a backend of
    `backends` with no candidate says so (it runs none of the ops)."""
    per_backend = Counter(c.backend for c in candidates)
    per_rule = Counter((c.backend, c.rule_name) for c in candidates)
    lines = [f"{len(candidates)} candidates"]
    for backend in sorted(set(per_backend) | set(backends)):
        if not per_backend[backend]:
            lines.append(f"  {backend}: 0 (it runs none of these ops)")
            continue
        rules = ", ".join(f"{rule or '-'}: {n}" for (b, rule), n in sorted(per_rule.items())
                          if b == backend)
        lines.append(f"  {backend}: {per_backend[backend]} ({rules})")
    return "\n".join(lines)
