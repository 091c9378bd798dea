"""The last-level cache of the cores a measurement runs on, and the sweep that evicts it.

A candidate is timed after streaming through a buffer (`MeasureSettings.cold_bytes`) so
that it starts as a region of a chain does: its data evicted, its backend's threads idle.
The buffer must outsize the cache it evicts, and every byte of it costs time before every
timed call, so its size follows the machine: twice the last-level cache, within
[SWEEP_MIN, SWEEP_MAX]. Linux says what the cache is in sysfs; elsewhere the sweep is
SWEEP_MAX.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

SYSFS_CPUS = Path("/sys/devices/system/cpu")
SWEEP_MIN = 16 << 20
SWEEP_MAX = 64 << 20


def sweep_bytes(root: Path = SYSFS_CPUS, cpus: Iterable[int] | None = None) -> int:
    """Twice `last_level_cache_bytes`, within [SWEEP_MIN, SWEEP_MAX]; SWEEP_MAX when the
    cache is unknown."""
    llc = last_level_cache_bytes(root, cpus)
    return min(SWEEP_MAX, max(SWEEP_MIN, 2 * llc)) if llc else SWEEP_MAX


def last_level_cache_bytes(root: Path = SYSFS_CPUS, cpus: Iterable[int] | None = None) -> int:
    """Bytes of the highest-level data cache over `cpus` (default: this process's CPU
    affinity), each instance counted once (two core complexes with an L3 each: both); 0
    where sysfs does not say."""
    cpus = _affinity() if cpus is None else cpus
    instances: dict[tuple[int, str], int] = {}  # (level, cores sharing it) → bytes
    for cpu in cpus:
        for index in sorted((Path(root) / f"cpu{cpu}" / "cache").glob("index*")):
            entry = _cache_entry(index)
            if entry is not None:
                level, shared, size = entry
                instances[(level, shared)] = size
    if not instances:
        return 0
    top = max(level for level, _ in instances)
    return sum(size for (level, _), size in instances.items() if level == top)


def _cache_entry(index: Path) -> tuple[int, str, int] | None:
    """(level, the cores sharing it, bytes) of one sysfs cache entry; None for an
    instruction cache or one sysfs describes only in part."""
    try:
        kind = (index / "type").read_text().strip()
        level = int((index / "level").read_text())
        size = _parse_size((index / "size").read_text())
        shared = (index / "shared_cpu_list").read_text().strip()
    except (OSError, ValueError):
        return None
    return None if kind == "Instruction" or size <= 0 else (level, shared, size)


def _parse_size(text: str) -> int:
    """sysfs's "8192K" (also "32M", "1G", or plain bytes) in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))
