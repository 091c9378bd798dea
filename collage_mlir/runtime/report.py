"""The partition report: one row per region (backend, ops, estimated cost, runner-up), and
the verdict of the end-to-end check."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field


@dataclass
class ReportRow:
    region: str
    backend: str
    ops: int
    op_types: str
    estimated_cost: float
    runner_up: str = ""
    runner_up_cost: float | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> ReportRow:
        return ReportRow(**d)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def summarize_op_types(types: list[str], limit: int = 4) -> str:
    """"Conv x3, Relu x2, ..." in first-seen order."""
    counts: dict[str, int] = {}
    for t in types:
        counts[t] = counts.get(t, 0) + 1
    parts = [f"{t} x{n}" if n > 1 else t for t, n in counts.items()]
    return ", ".join(parts[:limit]) + (", ..." if len(parts) > limit else "")


def format_report(rows: list[ReportRow], total: float | None = None,
                  measured: Mapping[str, float] | None = None) -> str:
    """One line per region; `measured` (region → seconds) adds a column beside the
    estimate, and its sum beside the estimated total."""
    header = ("region", "backend", "ops", "op types", "est. ms", "runner-up", "runner-up ms")
    table = [header] + [(r.region, r.backend, str(r.ops), r.op_types, _ms(r.estimated_cost),
                         r.runner_up or "-", _ms(r.runner_up_cost)) for r in rows]
    if measured is not None:
        table = [row[:5] + (col,) + row[5:] for row, col in
                 zip(table, ["measured ms"] + [_ms(measured.get(r.region)) for r in rows],
                     strict=True)]
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if total is not None:
        lines.append(f"estimated total: {_ms(total)} ms over {len(rows)} regions")
    if measured is not None:
        lines.append(f"measured sum of region calls: {_ms(sum(measured.values()))} ms")
    return "\n".join(lines)


@dataclass
class Rejection:
    """Candidates of one backend left out of the search for one reason (the first
    candidate's words), and the op types they held in first-seen order."""

    backend: str
    reason: str
    count: int = 0
    op_types: list[str] = field(default_factory=list)


def format_rejections(groups: list[Rejection], op_types: int = 4, width: int = 120,
                      per_backend: int = 6) -> str:
    """"candidates left out:" and one line per group: backend: count × reason (op types),
    at most `per_backend` lines per backend (the rest summed up in one); "" when nothing
    was left out. `groups` come most frequent first within each backend."""
    if not groups:
        return ""
    lines = [f"candidates left out ({sum(g.count for g in groups)}; per backend: "
             "count x reason [op types]):"]
    by_backend: dict[str, list[Rejection]] = {}
    for g in groups:
        by_backend.setdefault(g.backend, []).append(g)
    for backend, mine in by_backend.items():
        for g in mine[:per_backend]:
            reason = g.reason if len(g.reason) <= width else g.reason[:width - 1] + "…"
            types = ", ".join(g.op_types[:op_types]) + (", ..." if len(g.op_types) > op_types
                                                         else "")
            lines.append(f"  {backend}: {g.count} x {reason} [{types}]")
        if len(mine) > per_backend:
            rest = mine[per_backend:]
            lines.append(f"  {backend}: {sum(g.count for g in rest)} x {len(rest)} other "
                         "reasons")
    return "\n".join(lines)


@dataclass
class Verdict:
    """What the end-to-end check timed (median seconds per contender) and what it kept."""

    kept: str
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        cells = ", ".join(f"{n} {t * 1e3:.3f} ms" for n, t in self.timings.items())
        return f"end-to-end check: {cells}; kept {self.kept}"

    def to_json(self) -> dict:
        return {"kept": self.kept, "timings": self.timings}
