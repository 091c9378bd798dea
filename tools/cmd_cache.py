"""collage-mlir cache stats|list|clear|remeasure [--cache PATH] [--backend NAME] [--noisy]"""

from __future__ import annotations

import argparse
import os
import sys

from collage_mlir.errors import CollageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from collage_mlir.cost.cache import BUSY_LOAD, NOISY_SPREAD
    from collage_mlir.tools.args import add_cache_argument, positive_float

    p.add_argument("action", choices=("stats", "list", "clear", "remeasure"),
                   help="stats: entries per backend and status; list: every entry; "
                        "clear: delete entries; remeasure --noisy: have the noisy entries "
                        "measured again by the next run that needs them")
    add_cache_argument(p)
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="only this backend (list, clear, remeasure; default: every backend)")
    p.add_argument("--noisy", action="store_true",
                   help="remeasure: the ok entries whose spread or machine load was too high")
    p.add_argument("--max-spread", type=positive_float, default=NOISY_SPREAD,
                   help="remeasure --noisy: (p90 - p10) / median above which an entry is noisy "
                        f"(default {NOISY_SPREAD})")
    p.add_argument("--max-load", type=positive_float, default=BUSY_LOAD,
                   help="remeasure --noisy: other runnable tasks per core while measuring above "
                        f"which an entry is noisy (default {BUSY_LOAD})")


def run(args: argparse.Namespace) -> int:
    from collage_mlir.cost.cache import MeasurementCache, default_cache_path

    path = args.cache or default_cache_path()
    if args.action != "clear" and not os.path.exists(path):
        raise CollageError(f"{path}: no cache here yet (run `collage-mlir measure` first)")
    if args.action == "remeasure" and not args.noisy:
        raise CollageError("cache remeasure: say which entries (--noisy)")
    writes = args.action in ("clear", "remeasure")
    with MeasurementCache(path, readonly=not writes) as cache:
        if args.action == "stats":
            _stats(cache)
        elif args.action == "list":
            _list(cache, args.backend)
        elif args.action == "remeasure":
            _remeasure_noisy(cache, args.backend, args.max_spread, args.max_load)
        else:
            n = cache.clear(args.backend)
            which = f" of {args.backend}" if args.backend else ""
            sys.stdout.write(f"cleared {n} measurements{which} from {cache.path}\n")
    return 0


def _stats(cache) -> None:
    s = cache.stats()
    out = sys.stdout
    out.write(f"{s['path']}: {s['entries']} measurements, {s['transitions']} transitions, "
              f"{s['bytes'] / 1024:.0f} KiB\n")
    for backend, counts in sorted(s["backends"].items()):
        parts = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
        out.write(f"  {backend}: {sum(counts.values())} ({parts})\n")


def _list(cache, backend: str | None) -> None:
    for m in cache.measurements(backend):
        cost = f"{m.median * 1e3:.3f} ms p90 {m.p90 * 1e3:.3f} spread {m.spread:.0%} " \
               f"n={m.runs}" if m.median is not None else m.error
        if m.load is not None and m.median is not None:
            cost += f" load {m.load:.2f}"
        if m.status == "timeout":
            cost += f" (timeouts in a row: {m.attempts})"
        if m.stale:
            cost += " (stale: measured again by the next run)"
        sys.stdout.write(f"{m.backend:12} {m.status:8} {m.signature}: {cost}\n")
    for t in cache.transitions():
        if t.per_call is not None:
            desc = f"{t.per_call * 1e6:.1f} us + {t.per_byte * 1e12:.1f} us/MB"
        else:
            desc = t.error
        sys.stdout.write(f"transition {t.src} -> {t.dst}: {t.status} {desc}\n")


def _remeasure_noisy(cache, backend: str | None, max_spread: float, max_load: float) -> None:
    """Mark the ok entries measured with a wide spread or on a busy machine: the next
    `measure` / `partition` that needs one measures it again (its cost stands till then).
    Region texts are not cached, so the re-measuring is left to the run that has the model."""
    noisy = [m for m in cache.measurements(backend) if m.status == "ok" and (
        (m.spread or 0.0) > max_spread or (m.load or 0.0) > max_load)]
    n = cache.mark_stale(m.key for m in noisy)
    wide = sum((m.spread or 0.0) > max_spread for m in noisy)
    sys.stdout.write(f"marked {n} noisy measurements in {cache.path} ({wide} with spread > "
                     f"{max_spread:g}, {n - wide} only with load > {max_load:g}): the next "
                     "`measure` or `partition` that needs them measures them again\n")
