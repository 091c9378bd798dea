"""The cache's exchange format (`collage-mlir cache export FILE` / `cache import FILE`):
JSON lines, to move rows between stores (an SQLite file and a team's PostgreSQL database,
either way) or keep them in a file.

Format version 2 (`FORMAT_VERSION`), UTF-8, one JSON object per line:
- line 1, the header: `{"format": "collage-mlir-cache", "version": 2, "schema": 2,
  "source": LOCATION, "exported": UNIX_TIME}` (`schema`: the cache schema the rows follow);
- then one line per row, `{"table": TABLE, "row": {COLUMN: VALUE, ...}}`, with every column
  of the table's schema-2 row and no other: `measurements` (as `records.Measurement`,
  `stale` true/false), then `transitions` (`points` a list of [bytes, seconds]), then
  `capabilities` (`key`, `backend`, `bits` in hex, `created`), each table in key order.
  Numbers are JSON numbers (NaN / Infinity as Python's `json` writes them); no value is
  ever a string holding a number;
- the last line, `{"end": {TABLE: ROWS, ...}}`: the rows written per table, so that a file
  cut short is refused rather than imported in part. (Version 1, without it, still reads.)
Claims are not exported: they belong to runs in progress.

Importing adds every row in one transaction; a row replaces the one with its key only when
it was created later (so merging two caches keeps each key's newest measurement). A
file that does not follow the format is refused whole, naming its line.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from typing import Any, NamedTuple, TextIO

from collage_mlir.cost.records import (
    CAPABILITY_COLUMNS,
    MEASUREMENT_COLUMNS,
    STATUSES,
    TRANSITION_COLUMNS,
    Measurement,
    Transition,
)
from collage_mlir.cost.storage import SCHEMA_VERSION, CacheStore
from collage_mlir.errors import CollageError

FORMAT = "collage-mlir-cache"
FORMAT_VERSION = 2
TABLES = ("measurements", "transitions", "capabilities")

_TEXT, _REAL, _MAYBE_REAL, _INT, _BOOL, _POINTS = range(6)
_TYPES: dict[str, dict[str, int]] = {
    "measurements": {**dict.fromkeys(MEASUREMENT_COLUMNS, _TEXT),
                     **dict.fromkeys(("median", "p90", "spread", "timeout_s", "load"),
                                     _MAYBE_REAL),
                     "runs": _INT, "attempts": _INT, "created": _REAL, "stale": _BOOL},
    "transitions": {**dict.fromkeys(TRANSITION_COLUMNS, _TEXT),
                    **dict.fromkeys(("per_call", "per_byte", "timeout_s"), _MAYBE_REAL),
                    "attempts": _INT, "created": _REAL, "points": _POINTS},
    "capabilities": {**dict.fromkeys(CAPABILITY_COLUMNS, _TEXT), "created": _REAL},
}


def export_cache(store: CacheStore, out: TextIO) -> dict[str, int]:
    """Write every row of `store` to `out`; rows per table."""
    header = {"format": FORMAT, "version": FORMAT_VERSION, "schema": SCHEMA_VERSION,
              "source": store.location, "exported": time.time()}
    out.write(json.dumps(header) + "\n")
    rows = {
        "measurements": sorted((m.__dict__ for m in store.measurements()),
                               key=lambda r: r["key"]),
        "transitions": sorted(({**t.__dict__, "points": [list(p) for p in t.points]}
                               for t in store.transitions()), key=lambda r: r["key"]),
        "capabilities": sorted((dict(zip(CAPABILITY_COLUMNS, c, strict=True))
                                for c in store.capabilities()), key=lambda r: r["key"]),
    }  # sorted here: a PostgreSQL database's collation may order text unlike SQLite
    for table in TABLES:
        for row in rows[table]:
            out.write(json.dumps({"table": table, "row": row}) + "\n")
    counts = {table: len(rows[table]) for table in TABLES}
    out.write(json.dumps({"end": counts}) + "\n")
    return counts


def import_cache(store: CacheStore, lines: Iterable[str], name: str
                 ) -> tuple[dict[str, int], dict[str, int]]:
    """Add the rows of an exported file (`lines`, named `name` in errors) to `store`.
    Returns (rows read, rows written) per table; nothing is written unless the whole file
    is well-formed."""
    return write_export(store, read_export(lines, name))


class Export(NamedTuple):
    """The rows of a well-formed exported file, ready to merge into a cache."""

    measurements: list[Measurement]
    transitions: list[Transition]
    capabilities: list[tuple]

    def counts(self) -> dict[str, int]:
        return dict(zip(TABLES, (len(self.measurements), len(self.transitions),
                                 len(self.capabilities)), strict=True))


def write_export(store: CacheStore, export: Export) -> tuple[dict[str, int], dict[str, int]]:
    """Merge `export` into `store`: (rows read, rows written) per table."""
    written = store.merge(export.measurements, export.transitions, export.capabilities)
    return export.counts(), dict(zip(TABLES, written, strict=True))


def read_export(lines: Iterable[str], name: str) -> Export:
    """The rows of an exported file (`lines`, named `name` in errors), every line checked;
    a CollageError names the first line that is not well-formed."""
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    version = end = None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{name}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CollageError(f"{where}: not JSON ({e.msg})") from None
        if version is None:
            version = _check_header(obj, where)
            continue
        if end is not None:
            raise CollageError(f"{where}: a line after the end line")
        if version >= 2 and isinstance(obj, dict) and set(obj) == {"end"}:
            end = obj["end"]
            counts = {t: len(rows[t]) for t in TABLES}
            if end != counts:
                raise CollageError(f"{where}: the end line counts {end}, the file holds "
                                   f"{counts}")
            continue
        if not isinstance(obj, dict) or set(obj) != {"table", "row"} or \
                obj["table"] not in TABLES or not isinstance(obj["row"], dict):
            raise CollageError(f"{where}: expected {{\"table\": one of {', '.join(TABLES)}, "
                               "\"row\": {...}}")
        rows[obj["table"]].append(_checked(obj["table"], obj["row"], where))
    if version is None:
        raise CollageError(f"{name}: empty; not a `collage-mlir cache export` file")
    if version >= 2 and end is None:
        raise CollageError(f"{name}: no end line: the file was cut short (export it again)")
    measurements = [Measurement(**r) for r in rows["measurements"]]
    transitions = [Transition(**{**r, "points": [tuple(p) for p in r["points"]]})
                   for r in rows["transitions"]]
    capabilities = [tuple(r[c] for c in CAPABILITY_COLUMNS) for r in rows["capabilities"]]
    return Export(measurements, transitions, capabilities)


def _check_header(obj: Any, where: str) -> int:
    """The format version of a well-formed header line."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise CollageError(f"{where}: not a `collage-mlir cache export` file (no "
                           f"\"format\": \"{FORMAT}\" header)")
    version = obj.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise CollageError(f"{where}: export format version {version!r}; this collage-mlir "
                           f"reads version {FORMAT_VERSION} (upgrade it to import this file)")
    if obj.get("schema") != SCHEMA_VERSION:
        raise CollageError(f"{where}: rows of cache schema {obj.get('schema')!r}; this "
                           f"collage-mlir imports schema {SCHEMA_VERSION}")
    return version


def _checked(table: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    """`row` when every column of `table` is there, of its type, and nothing else."""
    types = _TYPES[table]
    if set(row) != set(types):
        missing, extra = sorted(set(types) - set(row)), sorted(set(row) - set(types))
        what = "; ".join(filter(None, [missing and f"missing {', '.join(missing)}",
                                       extra and f"unknown {', '.join(extra)}"]))
        raise CollageError(f"{where}: {table} row: {what}")
    for column, kind in types.items():
        if kind == _MAYBE_REAL and _number(row[column]) and math.isnan(row[column]):
            row[column] = None  # unknown (PostgreSQL keeps NaN where SQLite keeps NULL)
        if not _fits(row[column], kind):
            raise CollageError(f"{where}: {table} row: {column} = {row[column]!r} is not "
                               f"{_KIND_NAMES[kind]}")
    if "status" in row and row["status"] not in STATUSES:
        raise CollageError(f"{where}: {table} row: status {row['status']!r} is not one of "
                           f"{', '.join(STATUSES)}")
    if row.get("status") == "ok":
        for column in _MEASURED[table]:
            v = row[column]
            if not (_number(v) and math.isfinite(v) and v >= 0):
                raise CollageError(f"{where}: {table} row: status ok with {column} = {v!r} "
                                   "(a measured time is a finite number of seconds, ≥ 0)")
    if table == "capabilities":
        try:
            bits = int(row["bits"], 16)
        except ValueError:
            bits = -1
        if bits < 0:
            raise CollageError(f"{where}: capabilities row: bits {row['bits']!r} is not "
                               "a hexadecimal bit set") from None
    return row


_MEASURED = {"measurements": ("median", "p90"), "transitions": ("per_call", "per_byte"),
             "capabilities": ()}
"""The columns an `ok` row must hold a time in."""

_KIND_NAMES = {_TEXT: "a string (UTF-8)", _REAL: "a finite number",
               _MAYBE_REAL: "a number or null", _INT: "a count (integer, 0..2^31-1)",
               _BOOL: "true or false", _POINTS: "a list of [bytes, seconds]"}


def _encodable(text: str) -> bool:
    """Whether `text` is storable (a lone surrogate from JSON's \\ud800 is not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _fits(v: Any, kind: int) -> bool:
    if kind == _TEXT:
        return isinstance(v, str) and _encodable(v)
    if kind == _REAL:
        return _number(v) and math.isfinite(v)
    if kind == _MAYBE_REAL:
        return v is None or _number(v)
    if kind == _INT:  # counts, as both stores hold them (PostgreSQL's INTEGER: 32 bits)
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31
    if kind == _BOOL:
        return isinstance(v, bool)
    return isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and _number(p[0]) and _number(p[1]) for p in v)
