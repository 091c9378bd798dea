"""collage-mlir demo — the whole pipeline on the bundled example, against each backend alone.

It says what it does as it goes, one flushed line at a time (a pipe shows progress too):
which backends it uses and which it skips, and why; the partition and whether the
end-to-end check ran (and why not); then the latency of the mix and of each backend running
the whole model, timed side by side. A second, independent instance of the fastest backend
alone is timed with them as a control: how far two identical contenders land apart is this
run's noise, printed beside every ratio, and a difference within it is called a tie. When the
mix kept one backend's whole model, it and that backend alone are such a pair too, and the
noise is the wider of the two spreads.
The bundled example is a small hybrid of Mamba2 layers and attention (`bamba_tiny` of
bench/models.py, exported by torch.onnx.export with seeded random weights), whose scans
OpenVINO runs slowly and onnxruntime fast. The bundled alexnet (`SPLAT_EXAMPLE`) runs with
seeded random weights in place of its splat stand-ins (`example_model`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from collage_mlir.tools.args import backend_names, input_shapes, positive_int

if TYPE_CHECKING:
    from collage_mlir.check.compare import Runner, Timing
    from collage_mlir.runtime.model import PartitionedModel

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bamba_tiny.onnx"
SPLAT_EXAMPLE = EXAMPLE.with_name("alexnet.onnx")
EXAMPLES_DIR = "~/.cache/collage_mlir/examples"
"""Where the bundled alexnet with random weights is written (once; ~240 MB)."""
CONTROL_SUFFIX = " #2 (control)"
"""Appended to a backend's contender name for its second instance."""
HEARTBEAT_S = 30.0
"""Seconds between `still partitioning` lines when the progress bars are off."""
CONTROL_ROUNDS = 3
"""Rounds of the short pre-run that picks the fastest backend alone as the control."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from collage_mlir.tools.cmd_partition import add_common_arguments

    p.add_argument("model", nargs="?", default=str(EXAMPLE),
                   help=f"ONNX model (default: the bundled {EXAMPLE.name})")
    p.add_argument("--rounds", type=positive_int, default=20, metavar="N",
                   help="timed rounds per contender")
    add_common_arguments(p)


def say(text: str = "") -> None:
    """One line (or block) of the demo's story, flushed at once."""
    print(text, flush=True)


@contextlib.contextmanager
def heartbeat(label: str, enabled: bool = True, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """While the block runs, say `label: N s so far` every `every_s` seconds: when stderr
    is not a terminal the progress bars are off, and a minute of silence looks like a hang."""
    if not enabled:
        yield
        return
    stop = threading.Event()
    t0 = time.perf_counter()

    def beat() -> None:
        while not stop.wait(every_s):
            say(f"  {label}: {time.perf_counter() - t0:.0f} s so far ...")

    thread = threading.Thread(target=beat, name="demo-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _isatty(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def run(args: argparse.Namespace) -> int:
    import collage_mlir
    from collage_mlir.check.compare import time_side_by_side
    from collage_mlir.tensors import model_inputs
    from collage_mlir.tools import cmd_partition

    say(f"model: {args.model}")
    args.model = example_model(args.model)
    used, skipped = choose_backends(backend_names(args))
    say(backends_line(used, skipped))
    say("partitioning: import, annotate, measure (or read the cache; a few minutes when "
        "it is empty), search, outline, compile ...")
    t0 = time.perf_counter()
    with heartbeat("partitioning", enabled=not _isatty(sys.stderr)):
        model = cmd_partition.compile_from_args(args.model, args, backends=used)
    say(f"partitioned in {time.perf_counter() - t0:.1f} s\n")
    say(model.report())
    note = check_note(model, args)
    if note:
        say(note)
    original = collage_mlir.import_onnx(args.model, input_shapes=input_shapes(args))
    inputs = model_inputs(original)
    say(f"\ncompiling each backend's whole model for comparison: {', '.join(used)} ...")
    singles = whole_model_runners(original, used)
    say(compare_outputs(model, singles.get("onnxruntime"), used, inputs))
    runners = {collage_label(model): model.run}
    runners.update({f"{name} alone": r for name, r in singles.items()})
    control = add_control(runners, singles, original, inputs)
    whole = kept_whole(model)
    twin = (collage_label(model), f"{whole} alone") if whole in singles else None
    say(f"\ntiming {len(runners)} contenders side by side, {args.rounds} interleaved rounds ...")
    timings = time_side_by_side(runners, inputs, rounds=args.rounds)
    for line in latency_lines(timings, [f"{n} alone" for n in singles], control, twin):
        say(line)
    return 0


# -- the model ------------------------------------------------------------------------------


def example_model(model: str, where: str | Path = EXAMPLES_DIR) -> str:
    """`model`, unless it is the bundled alexnet: then a copy with seeded random weights in
    place of its splat ones (`collage_mlir.weights`), written once under `where`. A splat
    weight makes the demo's numbers an artifact (IREE folds alexnet's Gemms with it)."""
    import onnx

    from collage_mlir.paths import user_path
    from collage_mlir.weights import with_random_weights

    if Path(model).resolve() != SPLAT_EXAMPLE:
        return model
    path = user_path(where) / f"{SPLAT_EXAMPLE.stem}.random-weights.onnx"
    if not path.exists():
        say("weights: the bundled alexnet holds splat stand-ins (ConstantOfShape); making "
            "seeded random, well-scaled ones once ...")
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        onnx.save(with_random_weights(onnx.load(SPLAT_EXAMPLE)), part)
        os.replace(part, path)
    say(f"weights: seeded random in place of alexnet's splat ones ({path})")
    return str(path)


# -- backends ---------------------------------------------------------------------------------


def choose_backends(requested: Sequence[str] | None) -> tuple[list[str], dict[str, str]]:
    """(backends used, {backend skipped: why}): the requested ones, or every registered one,
    so that a backend installed but unusable here is named too. An unknown name, or no
    usable backend, is an error (driver.usable_backends)."""
    from collage_mlir.backends.registry import registered_backends
    from collage_mlir.driver import usable_backends

    known = registered_backends()
    names = list(requested or sorted(known))
    used = usable_backends(names, say=lambda _line: None)
    return used, {n: known[n].unavailable_reason() or "unusable" for n in names
                  if n not in used}


def backends_line(used: Sequence[str], skipped: dict[str, str]) -> str:
    """`backends: a, b (plugin from pkg.mod); skipped: c (why)`."""
    from collage_mlir.backends.registry import registered_backends

    known = registered_backends()

    def origin(name: str) -> str:
        module = getattr(known.get(name), "__module__", "")
        return "" if module.startswith("collage_mlir.backends") else f" (plugin from {module})"

    text = "backends: " + ", ".join(f"{n}{origin(n)}" for n in used)
    if skipped:
        text += "; skipped: " + "; ".join(f"{n} ({why})" for n, why in skipped.items())
    return text


# -- what the partition did -------------------------------------------------------------------


def kept_whole(model: PartitionedModel) -> str | None:
    """The backend whose whole model is what was kept (one region), else None."""
    choices = model.partitioning.choices if model.partitioning else ()
    return choices[0].candidate.backend if len(choices) == 1 else None


def collage_label(model: PartitionedModel) -> str:
    """The mix's contender name, saying when what was kept is one backend's whole model."""
    whole = kept_whole(model)
    if whole is not None:
        return f"collage (= {whole} whole)"
    choices = model.partitioning.choices if model.partitioning else ()
    return f"collage ({len(choices)} regions)"


def check_note(model: PartitionedModel, args: argparse.Namespace) -> str | None:
    """Why the end-to-end check did not run (None when it ran: the report shows it)."""
    from collage_mlir.check.verify import MARGIN

    if model.verdict is not None:
        return None
    if args.verify is False:
        why = "--no-verify"
    elif args.cost != "measure":
        why = f"costs came from {args.cost}, and only measured costs are checked"
    else:
        why = f"no other backend's whole model was estimated within {MARGIN}x of the pick"
    return f"end-to-end check: not run ({why}); the side-by-side timing below still compares"


# -- the contenders ---------------------------------------------------------------------------


def whole_model_runners(original, names: Sequence[str]) -> dict[str, Runner]:
    """Each backend's whole model; one that cannot run it is said and left out."""
    from collage_mlir.check.compare import whole_model_runner

    runners = {}
    for name in names:
        try:
            runners[name] = whole_model_runner(original, name)
        except Exception as e:  # a backend that cannot take the whole model is reported
            first = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
            say(f"  {name} alone: cannot run the whole model ({first})")
    return runners


def compare_outputs(model: PartitionedModel, reference: Runner | None, used: Sequence[str],
                    inputs: list) -> str:
    """The numeric check of the mix against onnxruntime's whole model, or why not."""
    from collage_mlir.tensors import max_abs_diff

    if reference is None:
        why = ("onnxruntime is not among the backends used" if "onnxruntime" not in used
               else "onnxruntime could not run the whole model")
        return f"outputs not compared: {why}"
    diff = max_abs_diff(model.run(inputs), reference(inputs))
    return f"max |collage - onnxruntime alone| over outputs: {diff:.3g}"


def add_control(runners: dict[str, Runner], singles: dict[str, Runner], original,
                inputs: list) -> tuple[str, str] | None:
    """Add a second instance of the fastest backend alone (a short pre-run picks it) to
    `runners`; returns (control name, the contender it copies), None when there is none."""
    from collage_mlir.check.compare import time_side_by_side, whole_model_runner

    if not singles:
        return None
    name = next(iter(singles))
    if len(singles) > 1:
        quick = time_side_by_side(singles, inputs, rounds=CONTROL_ROUNDS, warmup=1)
        name = min(quick, key=lambda t: t.median_s).name
    try:
        runners[f"{name} alone{CONTROL_SUFFIX}"] = whole_model_runner(original, name)
    except Exception as e:
        say(f"no control: a second {name} whole model did not compile ({type(e).__name__}); "
            "the run's noise is unknown")
        return None
    say(f"control: a second, independent {name} whole model is timed with the others; how "
        "far it lands from the first is this run's noise")
    return f"{name} alone{CONTROL_SUFFIX}", f"{name} alone"


# -- the verdict ------------------------------------------------------------------------------


def compared(ratio: float, noise: float | None) -> str:
    """`tie`, `faster` or `slower`, with the noise: a difference within it is a tie."""
    if noise is None:
        return "noise unknown"
    word = "tie" if abs(ratio - 1) <= noise else "faster" if ratio < 1 else "slower"
    return f"{word}, noise ±{noise:.1%}"


def latency_lines(timings: Sequence[Timing], singles: Sequence[str],
                  control: tuple[str, str] | None,
                  twin: tuple[str, str] | None = None) -> list[str]:
    """The latency table: each contender's median, p90 and ratio to the best single
    backend (among `singles`) with the run's noise beside it. `control` is (the control's
    name, the contender it is a second instance of); `twin` is (the mix's name, the backend
    alone whose whole model the mix kept). Each pair computes the same thing the same way,
    so the run's noise is how far apart the farther pair landed."""
    by_name = {t.name: t for t in timings}
    spreads = {pair: abs(by_name[pair[0]].median_s / by_name[pair[1]].median_s - 1)
               for pair in (control, twin) if pair}
    noise = max(spreads.values()) if control else None
    best = min((by_name[n] for n in singles if n in by_name), key=lambda t: t.median_s,
               default=None)
    width = max(len(t.name) for t in timings)
    lines = ["", "end-to-end latency (median of interleaved rounds, this machine):"]
    for t in timings:
        if best is None:
            note = ""
        elif control and t.name == control[0]:
            note = f"  a second instance: ±{spreads[control]:.1%} from {control[1]}"
        elif t.name == best.name:
            note = "  best single backend"
        else:
            ratio = t.median_s / best.median_s
            same = f"; the same model as {twin[1]}" if twin and t.name == twin[0] else ""
            note = f"  ×{ratio:.2f} of best single ({compared(ratio, noise)}{same})"
        lines.append(f"  {t.name:<{width}} {t.median_s * 1e3:9.3f} ms  (p90 "
                     f"{t.p90_s * 1e3:.3f}){note}")
    if best is None:
        lines.append("no backend ran the whole model: no ratio to a single backend")
    elif control is None:
        lines.append("no control was timed: the run's noise is unknown")
    elif twin and spreads[twin] > spreads[control]:
        lines.append(f"the run's noise: ±{noise:.1%}, how far the mix landed from {twin[1]}, "
                     f"the same model (the control landed ±{spreads[control]:.1%} apart)")
    else:
        lines.append(f"the run's noise: ±{noise:.1%}, how far the control landed from "
                     f"{control[1]}")
    return lines
