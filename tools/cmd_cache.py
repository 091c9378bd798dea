"""collage-mlir cache stats|list|clear [--cache PATH] [--backend NAME]"""

from __future__ import annotations

import argparse
import os
import sys

from collage_mlir.errors import CollageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("stats", "list", "clear"),
                   help="stats: entries per backend and status; list: every entry; "
                        "clear: delete entries")
    p.add_argument("--cache", default=None,
                   help="cache file (default $COLLAGE_CACHE or ~/.cache/collage_mlir/cache.sqlite)")
    p.add_argument("--backend", default=None, help="only this backend (list, clear)")


def run(args: argparse.Namespace) -> int:
    from collage_mlir.cost.cache import MeasurementCache, default_cache_path

    path = args.cache or default_cache_path()
    if args.action != "clear" and not os.path.exists(path):
        raise CollageError(f"{path}: no cache here yet (run `collage-mlir measure` first)")
    with MeasurementCache(path, readonly=args.action != "clear") as cache:
        if args.action == "stats":
            _stats(cache)
        elif args.action == "list":
            _list(cache, args.backend)
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
        sys.stdout.write(f"{m.backend:12} {m.status:8} {m.signature}: {cost}\n")
    for t in cache.transitions():
        if t.per_call is not None:
            desc = f"{t.per_call * 1e6:.1f} us + {t.per_byte * 1e12:.1f} us/MB"
        else:
            desc = t.error
        sys.stdout.write(f"transition {t.src} -> {t.dst}: {t.status} {desc}\n")
