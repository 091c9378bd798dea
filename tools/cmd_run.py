"""collage-mlir run out/ [--inputs name=x.npy ...] — run a saved partitioned model."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from collage_mlir.errors import CollageError, one_line
from collage_mlir.paths import user_path
from collage_mlir.tools.args import (
    add_inputs_argument,
    check_output_dir,
    check_output_file,
    input_files,
    load_inputs,
    positive_int,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", help="directory written by `collage-mlir partition -o`")
    add_inputs_argument(p, "seeded random inputs")
    p.add_argument("--save-outputs", metavar="DIR",
                   help="write each output as DIR/<name>.npy, the name spelled for a file "
                        "(characters other than letters, digits, '.', '-' and '_' as '_'; "
                        "a clash numbered) (default: outputs not saved)")
    p.add_argument("--repeat", type=positive_int, default=0, metavar="N",
                   help="also time N runs and print the median latency (default: not timed)")
    p.add_argument("--profile", type=positive_int, default=0, metavar="N",
                   help="also time each region's call and the whole chain over N runs and "
                        "print the report with measured beside estimated cost and the "
                        "additive error (default: not profiled)")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the report as JSON, with the profile when --profile is "
                        "given (default: not written)")


def _save_output(folder: Path, file: str, value: np.ndarray) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / file, value)
    except OSError as e:
        raise CollageError(f"{folder / file}: cannot save the output: "
                           f"{e.strerror or one_line(e)}") from None


def run(args: argparse.Namespace) -> int:
    from collage_mlir.check.compare import time_side_by_side
    from collage_mlir.runtime import load
    from collage_mlir.tensors import model_inputs

    if args.save_outputs:
        check_output_dir(args.save_outputs)
    if args.json:
        check_output_file(args.json)
    model = load(args.model_dir)
    files = output_files(model.output_names)
    if args.save_outputs:
        _require_inputs_kept(Path(args.save_outputs), files, model.output_names, args.inputs)
    inputs = (load_inputs(args.inputs) if args.inputs
              else model_inputs(model.module))
    outputs = model.run(inputs)
    for name, file, out in zip(model.output_names, files, outputs, strict=True):
        summary = (f"mean={float(np.mean(out)):.6g} max={float(np.max(out)):.6g}" if out.size
                   else "empty")
        print(f"{name}: shape={list(out.shape)} dtype={out.dtype} {summary}")
        if args.save_outputs:
            _save_output(Path(args.save_outputs), file, out)
    if args.repeat:
        arranged = model.arrange(inputs)
        (t,) = time_side_by_side({"model": lambda a: model.run(a)}, arranged,
                                 rounds=args.repeat)
        print(f"latency: median {t.median_s * 1e3:.3f} ms, p90 {t.p90_s * 1e3:.3f} ms")
    measured = model.profile(inputs, rounds=args.profile) if args.profile else None
    chain = None
    if measured is not None:
        (t,) = time_side_by_side({"model": lambda a: model.run(a)}, model.arrange(inputs),
                                 rounds=args.profile)
        chain = t.median_s
        print(model.report(measured=measured, chain_s=chain))
    if args.json:
        from collage_mlir.tools.report_out import write_json

        write_json(json.loads(model.report(measured, format="json", rounds=args.profile or None,
                                           chain_s=chain)), args.json,
                   getattr(args, "json_stream", None))
    return 0


def _require_inputs_kept(folder: Path, files: list[str], names: list[str],
                         inputs: list[str]) -> None:
    """Refuse a --save-outputs folder where an output's file would replace an input file."""
    given = {user_path(f).resolve(): f for f in input_files(inputs)}
    for name, file in zip(names, files, strict=True):
        target = (user_path(str(folder)) / file).resolve()
        if target in given:
            raise CollageError(f"--save-outputs {folder}: output '{name}' would overwrite "
                               f"the input file {given[target]}: save the outputs elsewhere")


def output_files(names: list[str]) -> list[str]:
    """Each output's file name in the --save-outputs folder: never a path ("gpu_0/softmax"
    → "gpu_0_softmax.npy", "../x" → "_.._x.npy"), no two alike."""
    files: list[str] = []
    taken: set[str] = set()
    for name in names:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"
        stem = "_" + stem if stem.startswith(".") else stem
        file, n = f"{stem}.npy", 1
        while file in taken:
            n += 1
            file = f"{stem}_{n}.npy"
        files.append(file)
        taken.add(file)
    return files
