"""collage-mlir cache stats|list|clear|remeasure|export FILE|import FILE [--cache PATH|URL]
[--backend NAME] [--noisy]

`--cache` takes a file (SQLite) or a postgresql:// URL; `export` writes the cache's rows as
JSON lines (`cost/cache_export.py` documents the format), `import` adds such a file's rows
to the cache (newest row per key wins), so rows move between the two stores either way."""

from __future__ import annotations

import argparse
import sys

from collage_mlir.backends import artifacts
from collage_mlir.errors import CollageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    from collage_mlir.cost.cache import BUSY_LOAD, NOISY_SPREAD
    from collage_mlir.driver import DEFAULT_MAX_DEPTH, DEFAULT_TIMEOUT_S
    from collage_mlir.tools.args import (
        add_cache_argument,
        add_input_shape_argument,
        add_tolerance_arguments,
        positive_float,
        positive_int,
    )

    p.add_argument("action", choices=("stats", "list", "clear", "remeasure", "export",
                                      "import"),
                   help="stats: entries per backend and status; list: every entry; "
                        "clear: delete entries; remeasure --noisy: have the noisy entries "
                        "measured again by the next run that needs them; export FILE: write "
                        "every row as JSON lines ('-': stdout); import FILE: add the rows of "
                        "an exported file (a row replaces an older one with its key)")
    p.add_argument("file", nargs="?", default=None, metavar="FILE",
                   help="export / import: the JSON-lines file ('-': stdout / stdin; no "
                        "default: export and import need one)")
    add_cache_argument(p)
    p.add_argument("--backend", default=None, metavar="NAME",
                   help="only this backend (list, clear, remeasure; default: every backend)")
    p.add_argument("--this-host", action="store_true",
                   help="clear: only this machine's measurements and hand-off prices (a "
                        "database a team shares holds every machine's; default: all)")
    p.add_argument("--noisy", action="store_true",
                   help="remeasure: the ok entries whose spread or machine load was too high")
    p.add_argument("--max-spread", type=positive_float, default=NOISY_SPREAD,
                   help="remeasure --noisy: (p90 - p10) / median above which an entry is noisy "
                        f"(default {NOISY_SPREAD})")
    p.add_argument("--max-load", type=positive_float, default=BUSY_LOAD,
                   help="remeasure --noisy: other runnable tasks per core while measuring above "
                        f"which an entry is noisy (default {BUSY_LOAD})")
    p.add_argument("--model", default=None, metavar="PATH",
                   help="remeasure: measure the marked entries of this model's candidates now "
                        "(default: none, the next run that needs them measures them)")
    p.add_argument("--backends", default="", metavar="NAME,...",
                   help="remeasure --model: the backends whose candidates to measure (default: "
                        "every backend installed and usable here)")
    p.add_argument("--max-depth", type=positive_int, default=DEFAULT_MAX_DEPTH, metavar="N",
                   help="remeasure --model: candidate depth, as `partition --max-depth`")
    p.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help="remeasure --model: seconds one candidate may take")
    add_input_shape_argument(p)
    add_tolerance_arguments(p)


_TAKES = {"backend": ("list", "clear", "remeasure"), "this_host": ("clear",),
          "noisy": ("remeasure",),
          "max_spread": ("remeasure",), "max_load": ("remeasure",), "model": ("remeasure",)}
"""Options → the actions they apply to (the other actions refuse them: `clear --noisy`
cleared every row)."""
_WITH_MODEL = ("backends", "max_depth", "timeout", "input_shape", "rtol", "atol_scale")
"""Options that apply to `remeasure --model` only."""


def _refuse_foreign_options(args: argparse.Namespace) -> None:
    """A CollageError naming the first option given that `args.action` does not take."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    for dest in [*_TAKES, *_WITH_MODEL]:
        if getattr(args, dest) == defaults.get_default(dest):
            continue
        flag = "--" + dest.replace("_", "-")
        if dest in _TAKES and args.action not in _TAKES[dest]:
            raise CollageError(f"cache {args.action} takes no {flag} (it applies to "
                               f"{', '.join(_TAKES[dest])})")
        if dest in _WITH_MODEL and not (args.action == "remeasure" and args.model):
            raise CollageError(f"cache {args.action}: {flag} applies to remeasure --model only")


def run(args: argparse.Namespace) -> int:
    from collage_mlir.cost.cache import cache_exists, default_cache_location, open_cache

    location = args.cache or default_cache_location()
    if (args.file is None) != (args.action not in ("export", "import")):
        raise CollageError(f"cache {args.action}: " + (
            "say which file (cache export FILE / cache import FILE)" if args.file is None
            else f"takes no file ({args.file})"))
    _refuse_foreign_options(args)
    if args.action != "import" and not cache_exists(location):
        raise CollageError(f"{location}: no cache here yet (run `collage-mlir measure` first)")
    if args.action == "remeasure" and not args.noisy:
        raise CollageError("cache remeasure: say which entries (--noisy)")
    if args.action == "import":
        export = _read_import(args.file)  # checked before a cache is created for it
    elif args.action == "export" and args.file != "-":
        from collage_mlir.tools.args import check_output_file

        check_output_file(args.file)
        _refuse_overwriting_a_database(args.file, location)
    writes = args.action in ("clear", "remeasure", "import")
    with open_cache(location, readonly=not writes) as cache:
        if args.backend and args.action in ("list", "clear", "remeasure"):
            _check_backend(cache, args.backend)
        if args.action == "stats":
            _stats(cache)
        elif args.action == "list":
            _list(cache, args.backend)
        elif args.action == "remeasure":
            target = _remeasure_target(args) if args.model else None  # before marking
            marked = _remeasure_noisy(cache, args.backend, args.max_spread, args.max_load)
            if target is not None:
                _remeasure_model(args, location, marked, *target)
        elif args.action == "export":
            _export(cache, args.file)
        elif args.action == "import":
            _import(cache, export)
        else:
            from collage_mlir.cost.key import host_fingerprint

            n = cache.clear(args.backend, host_fingerprint() if args.this_host else None)
            which = f" of {args.backend}" if args.backend else ""
            where = f" made on this host ({host_fingerprint()})" if args.this_host else ""
            sys.stdout.write(f"cleared {n} measurements{which}{where} from "
                             f"{cache.location}\n")
    return 0


def _refuse_overwriting_a_database(file: str, location: str) -> None:
    """The export must not replace the cache itself (`cache export cache.sqlite` emptied
    it before reading it) nor any other SQLite file."""
    from collage_mlir.paths import user_path

    path = user_path(file)
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return  # a new file (check_output_file has said whether it can be written)
    if head == b"SQLite format 3\0":
        same = "://" not in location and path.resolve() == user_path(location).resolve()
        raise CollageError(f"{path}: is {'the cache itself' if same else 'an SQLite database'}"
                           "; export writes JSON lines to a new file (cache export FILE)")


def _check_backend(cache, backend: str) -> None:
    """Refuse a `--backend` that names neither a backend the cache holds rows of nor one
    installed here (a typo listed, cleared and marked nothing, rc 0)."""
    from collage_mlir.backends.registry import registered_backends

    held = sorted(cache.stats()["backends"])
    if backend not in held and backend not in registered_backends():
        raise CollageError(f"--backend {backend}: this cache holds no measurements of it "
                           f"(it holds: {', '.join(held) or 'none'})")


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {table}" for table, n in counts.items())


def _export(cache, file: str) -> None:
    from collage_mlir.cost.cache_export import export_cache
    from collage_mlir.paths import user_path

    if file == "-":
        export_cache(cache, sys.stdout)
        return
    path = user_path(file)
    try:
        with open(path, "w", encoding="utf-8") as out:
            counts = export_cache(cache, out)
    except OSError as e:
        raise CollageError(f"{path}: cannot write the export ({e.strerror})") from None
    sys.stdout.write(f"exported {_counts(counts)} from {cache.location} to {path}\n")


def _read_import(file: str):
    """The rows of the file to import, every line checked (a refused file creates no
    cache)."""
    from collage_mlir.cost.cache_export import read_export
    from collage_mlir.paths import user_path

    if file == "-":
        return read_export(sys.stdin.read().splitlines(), "stdin")
    path = user_path(file)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CollageError(f"{path}: no such file to import") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CollageError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})"
                           ) from None
    return read_export(text.splitlines(), file)


def _import(cache, export) -> None:
    from collage_mlir.cost.cache_export import write_export

    read, written = write_export(cache, export)
    sys.stdout.write(f"imported {_counts(written)} into {cache.location} (read "
                     f"{_counts(read)}; a row no newer than the one cached is not written)\n")


def _stats(cache) -> None:
    s = cache.stats()
    out = sys.stdout
    out.write(f"{s['path']}: {s['entries']} measurements, {s['transitions']} transitions, "
              f"{s['bytes'] / 1024:.0f} KiB\n")
    for backend, counts in sorted(s["backends"].items()):
        parts = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
        out.write(f"  {backend}: {sum(counts.values())} ({parts})\n")
    root, files, size = artifacts.usage()
    out.write(f"compiled artifacts: {root}: {files} files, {size / 2**20:.1f} MiB\n"
              if root is not None else "compiled artifacts: off ($COLLAGE_ARTIFACTS)\n")


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
        if m.median is not None and m.error:  # an ok row's notes: unchecked, cut short
            cost += f" ({m.error})"
        sys.stdout.write(f"{m.backend:12} {m.status:8} {m.signature}: {cost}\n")
    for t in cache.transitions():
        if t.per_call is not None:
            desc = f"{t.per_call * 1e6:.1f} us + {t.per_byte * 1e12:.1f} us/MB"
        else:
            desc = t.error
        sys.stdout.write(f"transition {t.src} -> {t.dst}: {t.status} {desc}\n")


def _remeasure_noisy(cache, backend: str | None, max_spread: float,
                     max_load: float) -> set[str]:
    """Mark the ok entries measured with a wide spread or on a busy machine: the next
    `measure` / `partition` that needs one measures it again (its cost stands till then;
    region texts are not cached, so a run that has the model does it). Returns every key
    now marked (earlier marks included)."""
    noisy = [m for m in cache.measurements(backend) if m.status == "ok" and (
        (m.spread or 0.0) > max_spread or (m.load or 0.0) > max_load)]
    n = cache.mark_stale(m.key for m in noisy)
    wide = sum((m.spread or 0.0) > max_spread for m in noisy)
    sys.stdout.write(f"marked {n} noisy measurements in {cache.location} ({wide} with spread > "
                     f"{max_spread:g}, {n - wide} only with load > {max_load:g}): the next "
                     "`measure` or `partition` that needs them measures them again\n")
    return {m.key for m in cache.measurements(backend) if m.stale}


def _remeasure_target(args: argparse.Namespace) -> tuple:
    """The model and the usable backends `remeasure --model` measures (a bad path or
    backend name is an error before anything is marked)."""
    from collage_mlir import driver
    from collage_mlir.tools.args import backend_names, input_shapes

    module = driver.load(args.model, input_shapes(args))
    names = driver.usable_backends(backend_names(args),
                                   say=lambda m: sys.stderr.write(m + "\n"))
    return module, names


def _remeasure_model(args: argparse.Namespace, location, marked: set[str], module,
                     names: list[str]) -> None:
    """Measure now the marked entries among the model's candidates (as `partition` makes
    them); entries of other models stay marked."""
    from collage_mlir import driver
    from collage_mlir.graph import SubGraphConfig
    from collage_mlir.tools.args import tolerance_of

    graph = driver.entry_graph(module)
    config = SubGraphConfig(max_exits=driver.DEFAULT_MAX_EXITS, allow_taps=False,
                            max_depth=args.max_depth)
    candidates = driver.annotate(graph, names, config)
    with driver.make_estimator("measure", names, location, args.timeout,
                               tolerance=tolerance_of(args)) as est:
        again = [c for c in candidates if est.key(c) in marked]
        est.estimate(again)
        s = est.stats
    sys.stdout.write(f"measured {s.measured} marked entries of {args.model} again "
                     f"({s.invalid + s.timeouts + s.errors} failed, {s.busy} on a busy machine); "
                     f"{len(marked) - s.measured} stay marked\n")
