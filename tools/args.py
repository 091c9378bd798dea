"""Arguments several commands share, parsed the same way everywhere."""

from __future__ import annotations

import argparse
import os
import zipfile
from pathlib import Path

import numpy as np

from collage_mlir.errors import CollageError, one_line
from collage_mlir.paths import user_path
from collage_mlir.static_shapes import parse_input_shape


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every command's `--help`: descriptions and epilogs as written (the cost-table
    example keeps its lines), and each option's default after its help unless the help
    states it. An option whose default is None or empty must say in words what it means
    (test_cli_usability checks that every option's help names its default)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.required or action.nargs == 0
                or action.default in (None, "", [], argparse.SUPPRESS)):
            return text
        return f"{text} (default: %(default)s)"


def cost_table_format() -> str:
    """The cost-table format for `--help`: the table estimator's own description
    (collage_mlir/cost/table.py) from its "Format" paragraph on, so the two cannot differ."""
    from collage_mlir.cost import table

    doc = table.__doc__ or ""
    return doc[doc.find("Format"):].strip()


def add_input_shape_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS",
                   help="static shape for a dynamic model input, e.g. input=1x3x224x224 "
                        "(repeatable; only for .onnx models; default: the model's shapes)")


def add_backends_argument(p: argparse.ArgumentParser, extra: str = "") -> None:
    """`--backends`, the same for every command: names, default every available one."""
    p.add_argument("--backends", default="", metavar="NAME,...",
                   help=f"comma-separated backend names{extra} (default: every backend "
                        "installed and usable here)")


def backend_names(args: argparse.Namespace) -> list[str] | None:
    """The `--backends` list; None when none was given (every available backend)."""
    return [b.strip() for b in args.backends.split(",") if b.strip()] or None


def add_measure_on_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measure-on", type=measure_on, default=None, metavar="WHERE",
                   help="where candidates are measured: 'local' (this machine, the default), "
                        "'ray' (this machine's Ray cluster, else a local one), "
                        "'ray://HOST:PORT' (Ray Client) or 'ray:HOST:PORT' (a head's GCS); "
                        "Ray needs pip install 'collage-mlir[ray]' and nodes started with "
                        "ray start --resources='{\"collage_bench\": 1}'")


def measure_on(text: str) -> str:
    """A `--measure-on` value, checked (`cost.executor.check_executor`)."""
    from collage_mlir.cost.executor import check_executor

    try:
        check_executor(text)
    except CollageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_cache_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", default=None, metavar="PATH|URL",
                   help="measurement cache: an SQLite file, or a PostgreSQL database a team "
                        "shares, postgresql://USER[:PASSWORD]@HOST[:PORT]/DB (pip install "
                        "'collage-mlir[postgres]') (default: $COLLAGE_CACHE, else "
                        "~/.cache/collage_mlir/cache.sqlite)")


def add_tolerance_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rtol", type=non_negative_float, default=None, metavar="R",
                   help="relative tolerance of every output element against the reference "
                        "backend's (default 0.01)")
    p.add_argument("--atol-scale", type=non_negative_float, default=None, metavar="A",
                   help="absolute tolerance as a fraction of the output's largest magnitude "
                        "(default 0.003); a quantized model's backends round differently and "
                        "may need more")


def tolerance_of(args: argparse.Namespace) -> tuple[float, float] | None:
    """`--rtol` / `--atol-scale` as the API's `tolerance` (None when neither is given)."""
    from collage_mlir.driver import tolerance

    return tolerance(getattr(args, "rtol", None), getattr(args, "atol_scale", None))


def input_shapes(args: argparse.Namespace) -> dict[str, tuple[int, ...]] | None:
    """The `--input-shape` options as the API's `input_shapes` (None when none given)."""
    pairs = [parse_input_shape(a) for a in getattr(args, "input_shape", None) or []]
    return dict(pairs) or None


INPUTS_HELP = ("the model's inputs: one .npz (arrays named as the inputs), .npy files in "
               "input order, or name=file.npy")


def add_inputs_argument(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--inputs", nargs="+", default=[], metavar="FILE",
                   help=f"{INPUTS_HELP} (default: {default})")


def load_inputs(specs: list[str]) -> dict[str, np.ndarray] | list[np.ndarray]:
    """`--inputs` as arrays: by name from one .npz or from name=file.npy, else in order."""
    if len(specs) == 1 and "=" not in specs[0] and specs[0].lower().endswith(".npz"):
        return _load_npz(specs[0])
    if all("=" in s for s in specs):
        pairs = [s.split("=", 1) for s in specs]
        twice = sorted({k for k, _ in pairs if [n for n, _ in pairs].count(k) > 1})
        if twice:
            raise CollageError(f"--inputs: {', '.join(map(repr, twice))} given more than once")
        return {k: _load_npy(v) for k, v in pairs}
    if any("=" in s for s in specs):
        raise CollageError("--inputs: use either all name=file.npy or all file.npy")
    return [_load_npy(s) for s in specs]


def input_files(specs: list[str]) -> list[str]:
    """The files `--inputs` names (`load_inputs`' forms: FILE.npz, name=FILE, FILE)."""
    return [s.split("=", 1)[1] if "=" in s else s for s in specs]


def _load_npz(path: str) -> dict[str, np.ndarray]:
    _require_numpy_file(path)
    try:
        loaded = np.load(user_path(path))
        if isinstance(loaded, np.ndarray):
            raise CollageError(f"{path}: holds one array (.npy), not an .npz archive of "
                               "named inputs: give it as FILE.npy or name=FILE")
        with loaded as arrays:
            return {name: arrays[name] for name in arrays.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise CollageError(f"{path}: cannot read .npz inputs: {one_line(e)}") from None


def _require_numpy_file(path: str) -> None:
    """A one-line refusal of a file that is neither .npy nor .npz (np.load would read it as
    a pickle, and say to allow pickles)."""
    try:
        with open(user_path(path), "rb") as f:
            head = f.read(6)
    except OSError:
        return  # np.load says why
    if not head:
        raise CollageError(f"{path}: is empty, not a NumPy file")
    if head != b"\x93NUMPY" and not head.startswith(b"PK"):
        raise CollageError(f"{path}: not a NumPy file (.npy or .npz, as np.save and "
                           "np.savez write them)")


def _load_npy(path: str) -> np.ndarray:
    _require_numpy_file(path)
    try:
        value = np.load(user_path(path))
    except (OSError, ValueError) as e:
        raise CollageError(f"{path}: cannot read .npy input: {e}") from None
    if not isinstance(value, np.ndarray):  # an .npz archive
        value.close()
        raise CollageError(f"{path}: holds several arrays (.npz); name=FILE and FILE in "
                           "order take one .npy each, one .npz alone holds all inputs")
    return value


STDOUT = "-"
"""An output file spelled so (`--json -`) is standard output."""


def check_output_file(path: str, replaced: Path | None = None) -> Path:
    """Refuse, before any work, an output file that cannot be written: its folder is
    missing or read-only, the path is a directory, or it lies inside a saved model (whose
    files the manifest checksums) or inside `replaced` (the folder the command's save
    replaces whole). `STDOUT` passes."""
    p = user_path(path)
    if path == STDOUT:
        return p
    where = p.resolve()
    if replaced is not None and (where == replaced or replaced in where.parents):
        raise CollageError(f"{path}: inside {str(replaced)!r}, the folder the model is saved "
                           "to (saving replaces it): write the file elsewhere")
    from collage_mlir.runtime.model import saved_model_holding

    held = saved_model_holding(where)
    if held is not None:
        raise CollageError(f"{path}: inside the saved model {str(held)!r} (writing there "
                           "breaks its checksums): write the file elsewhere")
    if p.is_dir():
        raise CollageError(f"{path}: is a directory (give a file name)")
    if not p.parent.is_dir():
        raise CollageError(f"{path}: folder {str(p.parent)!r} does not exist")
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CollageError(f"{path}: not writable")
    return p


def check_output_dir(path: str) -> Path:
    """Refuse, before any work, an output directory that cannot be made: an existing file
    is in the way, its parent is missing or read-only, or it lies inside a saved model."""
    p = user_path(path)
    from collage_mlir.runtime.model import is_saved_model, saved_model_holding

    where = p.resolve()
    held = where if is_saved_model(where) else saved_model_holding(where)
    if held is not None:
        what = "a saved model" if held == where else f"inside the saved model {str(held)!r}"
        raise CollageError(f"{path}: {what} (writing there breaks its checksums): write the "
                           "files elsewhere")
    if p.exists() and not p.is_dir():
        raise CollageError(f"{path}: exists and is not a directory (give a new or existing "
                           "directory)")
    parent = p if p.is_dir() else p.parent
    if parent.exists() and not parent.is_dir():
        raise CollageError(f"{path}: {str(parent)!r} is a file, not a folder")
    if not parent.is_dir():
        raise CollageError(f"{path}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise CollageError(f"{path}: not writable")
    return p


def _positive(text: str, kind: type, what: str) -> int | float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive {what.split()[-1]}, got {text}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1."""
    return _positive(text, int, "an integer")


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _positive(text, float, "a number")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number, got {text}")
    return value
