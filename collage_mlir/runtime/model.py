"""PartitionedModel: an outlined module with one compiled kernel per region.

Saved as a directory: `model.mlir` (the partitioned module), `manifest.json` (entry point,
input/output names, each region's backend and artifact files, the report) and the
artifacts the backends chose to write. Loading does not search again.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.base import Backend, Kernel
from collage_mlir.backends.registry import get_backend
from collage_mlir.dialects import collage
from collage_mlir.errors import CollageError, one_line
from collage_mlir.export import with_onnx_names_of
from collage_mlir.export.resources import share_store
from collage_mlir.importer import parse_mlir, print_mlir
from collage_mlir.paths import user_path
from collage_mlir.runtime.plan import Plan, build_plan, region_functions
from collage_mlir.runtime.report import (
    BaselineRow,
    Record,
    Rejection,
    ReportRow,
    RunNotes,
    Trial,
    Verdict,
    format_baselines,
    format_rejections,
    format_report,
    format_trials,
    op_names,
    report_data,
)
from collage_mlir.tensors import Inputs, arrange_inputs

if TYPE_CHECKING:
    from collage_mlir.search.partitioning import Partitioning

FORMAT = "collage_mlir.partitioned/1"
DEADLINE_CHUNK = 16
"""Regions compiled at a time when a build has a time limit (checked between batches)."""


class PastDeadline(CollageError):
    """A build stopped at its time limit, with `compiled` of its `regions` compiled."""

    def __init__(self, compiled: int, regions: int) -> None:
        super().__init__(f"past its time limit with {compiled} of {regions} regions compiled")
        self.compiled, self.regions = compiled, regions


def region_module(fn: ir.Operation) -> ir.Module:
    """A standalone module holding a public copy of region function `fn` (reading the
    weight store of `fn`'s module, if it has one)."""
    with fn.context, ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            clone = fn.clone()
        if "sym_visibility" in clone.attributes:
            del clone.attributes["sym_visibility"]
        share_store(fn.parent, module)
    return module


def clone_module(module: ir.Module) -> ir.Module:
    """A copy of `module` (attributes and top-level ops) in the same context: outlining
    rewrites a module in place, so keep a copy when another decision may still be built."""
    with module.context, ir.Location.unknown():
        copy = ir.Module.create()
        for name, attr in module.operation.attributes.items():
            copy.operation.attributes[name] = attr
        with ir.InsertionPoint(copy.body):
            for op in module.body.operations:
                op.clone()
    return copy


class PartitionedModel:
    """A model split across backends, ready to `run`; see `collage_mlir.compile`.

    Safe to share between threads: its kernels own their buffers and requests, so calls of
    `run` and `profile` take turns (one model per thread runs them side by side)."""

    def __init__(self, module: ir.Module, kernels: dict[str, Kernel],
                 backends: dict[str, Backend], report_rows: list[ReportRow] | None = None,
                 estimated_cost: float | None = None, partitioning: Partitioning | None = None,
                 verdict: Verdict | None = None) -> None:
        self.module = module
        self.plan: Plan = build_plan(module)
        self.kernels = kernels
        self.backends = backends
        self.report_rows = report_rows or []
        self.estimated_cost = estimated_cost
        self.partitioning = partitioning
        """The search's `Partitioning` this model was built from (None when loaded)."""
        self.verdict = verdict
        """The end-to-end check (saved); None when there was nothing to check."""
        # the record of the run that made it (`with_record`; not saved)
        self.backends_considered: list[str] = sorted(backends)
        self.candidates: list = []
        self.timings: dict[str, float] = {}
        self.rejected: list[Rejection] = []
        self.transition_cost = partitioning.transition_cost if partitioning else None
        """Estimated seconds of all hand-offs (saved; None when unknown)."""
        self.trials: list[Trial] = []
        """What merging and refinement tried after the search (saved)."""
        self.refinement = None
        """`check.refine.Refinement` of the run that made it (not saved; its trials are)."""
        self.op_names: dict[str, list[str]] = {}
        """Region → ONNX node names, as loaded (from the manifest: models saved before
        model.mlir kept locations have names only there)."""
        self.baselines: list = []
        """The greedy baselines (`search.greedy.Baseline`, with their partitionings) of the
        run that made the model (not saved; their rows are)."""
        self.baseline_rows: list[BaselineRow] = []
        self.skipped: dict[str, str] = {}
        """Backend → why the run left it out as unusable."""
        self._turn = threading.Lock()  # shared by copies: they share the kernels

    def __copy__(self) -> PartitionedModel:
        out = PartitionedModel.__new__(PartitionedModel)
        out.__dict__.update(self.__dict__)
        return out

    def __deepcopy__(self, memo: dict) -> PartitionedModel:
        raise CollageError("a PartitionedModel cannot be deep-copied (its kernels live in the "
                           "backends' runtimes): copy.copy() shares them; save() it and "
                           "collage_mlir.load() the folder for kernels of its own")

    def __reduce_ex__(self, protocol: object) -> object:
        raise CollageError("a PartitionedModel cannot be pickled (its kernels live in the "
                           "backends' runtimes): save() it and collage_mlir.load() the folder")

    def with_record(self, *, verdict: Verdict | None, candidates: list,
                    backends_considered: list[str], timings: dict[str, float],
                    rejected: list[Rejection] | None = None,
                    notes: RunNotes | None = None) -> PartitionedModel:
        """This model (same kernels) with the record of the run that made it: the end-to-end
        check's verdict, the candidates the search saw, the backends it considered, the
        seconds each phase took, the candidates left out (per backend and reason) and the
        run's `notes` (greedy baselines, measurement spreads, skipped backends)."""
        out = copy.copy(self)
        out.verdict = verdict
        out.candidates = list(candidates)
        out.backends_considered = list(backends_considered)
        out.timings = dict(timings)
        out.rejected = list(rejected or [])
        if notes is not None:
            out.report_rows = [copy.copy(r) for r in self.report_rows]
            notes.fill_spreads(out.report_rows, self.partitioning)
            if verdict is not None and verdict.lost is not None:
                notes.fill_spreads(verdict.lost.rows, verdict.lost.partitioning)
            out.baselines = list(notes.baselines)
            out.baseline_rows = [BaselineRow.of(b) for b in notes.baselines]
            out.skipped = dict(notes.skipped)
        return out

    # -- building -----------------------------------------------------------------------

    @classmethod
    def from_module(cls, module: ir.Module, backend_options: Mapping[str, dict] | None = None,
                    saved: Mapping[str, str] | None = None,
                    prebuilt: Mapping[str, Kernel] | None = None,
                    limit_s: float | None = None, **kwargs) -> PartitionedModel:
        """Compile every region function of an outlined module on its backend; a region
        named in `saved` (region → file stem, written by `save_kernel`) is loaded from
        there instead (`check/isolated.py` compiles in a probe process first), and one
        named in `prebuilt` takes that kernel (compiled for an identical region function
        of another module: `check/refine.py` shares them between neighbours). With
        `limit_s`, regions compile DEADLINE_CHUNK at a time and the build stops with
        PastDeadline once it has taken longer."""
        backends, kernels = {}, {}
        by_backend: dict[str, list[str]] = defaultdict(list)
        regions = region_functions(module)
        for name, fn in regions.items():
            by_backend[ir.StringAttr(fn.attributes[collage.BACKEND]).value].append(name)
        saved, prebuilt = saved or {}, prebuilt or {}
        to_compile = sum(n not in saved and n not in prebuilt for n in regions)
        done = 0
        deadline = None if limit_s is None else time.perf_counter() + limit_s
        for backend_name, names in sorted(by_backend.items()):
            backend = get_backend(backend_name, **(backend_options or {}).get(backend_name, {}))
            backends[backend_name] = backend
            kernels.update({n: prebuilt[n] for n in names if n in prebuilt})
            fresh = [n for n in names if n not in saved and n not in prebuilt]
            step = DEADLINE_CHUNK if deadline is not None else max(len(fresh), 1)
            compiled: dict[str, Kernel | Exception] = {}
            for at in range(0, len(fresh), step):
                if deadline is not None and time.perf_counter() > deadline:
                    raise PastDeadline(done, to_compile)
                batch = fresh[at:at + step]
                compiled.update(zip(batch, backend.compile_many(
                    [region_module(regions[n]) for n in batch]), strict=True))
                done += len(batch)
            for n in (n for n in names if n not in prebuilt):
                k = compiled[n] if n in compiled else _saved_kernel(backend, regions[n],
                                                                    saved[n])
                if isinstance(k, Exception):
                    said = str(k).strip().splitlines()[0] if str(k).strip() else repr(k)
                    raise CollageError(f"region @{n} failed to compile on {backend_name}: "
                                       f"{with_onnx_names_of(said, regions[n])}")
                kernels[n] = k
        return cls(module, kernels, backends, **kwargs)

    # -- running ------------------------------------------------------------------------

    def arrange(self, inputs: Inputs) -> list[np.ndarray]:
        """`inputs` as the arrays `run` passes on: in order, checked against the shapes
        and dtypes this model was built for and the tables its indices address
        (`tensors.arrange_inputs`)."""
        return arrange_inputs(self.plan.input_names, self.plan.inputs, inputs,
                              "this model was built for", self.plan.index_limits)

    def run(self, inputs: Inputs) -> list[np.ndarray]:
        """Run end to end: inputs by name (dict) or in order (list); outputs in order, the
        caller's own arrays (a later run changes none of them). The input arrays are only
        read; a later run reads them again only when passed again."""
        arrays = self.arrange(inputs)
        with self._turn:
            slots = self._execute(arrays)
            return [np.array(slots[i], copy=True) for i in self.plan.outputs]

    def _execute(self, arrays: list[np.ndarray],
                 times: dict[str, list[float]] | None = None) -> list[np.ndarray | None]:
        """Call every region in plan order over slots; `times` collects each call's seconds.

        Regions run `run_borrowed`: a value between regions is the producing kernel's own
        buffer, handed to the consumers by reference, so a boundary moves no data. Each
        kernel runs once per call, so every slot holds this call's values until the next
        `_execute`; a caller keeping a slot beyond that must copy it (`run` does)."""
        slots: list[np.ndarray | None] = [None] * self.plan.slot_count
        slots[: len(arrays)] = arrays
        for i, constant in self.plan.constants.items():
            slots[i] = constant.value
        for step in self.plan.steps:
            t0 = time.perf_counter()
            try:
                results = self.kernels[step.callee].run_borrowed([slots[i] for i in step.args])
            except CollageError:
                raise
            except Exception as e:  # a backend's own exception: say which region, which node
                raise self._region_failed(step.callee, step.backend, e) from e
            if times is not None:
                times[step.callee].append(time.perf_counter() - t0)
            for i, r in zip(step.results, results, strict=True):
                slots[i] = r
        return slots

    def _region_failed(self, callee: str, backend: str, e: Exception) -> CollageError:
        fn = region_functions(self.module)[callee]
        return CollageError(f"region @{callee} on {backend} failed: "
                            f"{with_onnx_names_of(one_line(e), fn)}")

    def profile(self, inputs: Inputs, rounds: int = 10) -> dict[str, float]:
        """Median seconds of each region's call inside whole runs, by region function name:
        the measured counterpart of each region's estimated cost (each call includes taking
        its inputs from the previous regions, which the estimate prices as transitions)."""
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise CollageError(f"profile: rounds must be a positive int, got {rounds!r}")
        arrays = self.arrange(inputs)
        samples: dict[str, list[float]] = {s.callee: [] for s in self.plan.steps}
        with self._turn:
            for _ in range(rounds + 1):  # the first round warms up and is not kept
                self._execute(arrays, samples)
        return {name: float(np.median(ts[1:])) for name, ts in samples.items()}

    # -- inspection ---------------------------------------------------------------------

    @property
    def mlir(self) -> str:
        return str(self.module)

    @property
    def input_names(self) -> list[str]:
        return list(self.plan.input_names)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.output_names)

    def record(self) -> Record:
        """What the report says besides the module (see `report.Record`)."""
        return Record(self.report_rows, self.estimated_cost, self.transition_cost,
                      self.verdict, self.backends_considered, self.timings, self.rejected,
                      self.op_names or op_names(self.module), self.baseline_rows,
                      self.skipped, self.trials)

    def report(self, measured: Mapping[str, float] | None = None, format: str = "text",
               rounds: int | None = None, chain_s: float | None = None) -> str:
        """The region table; `measured` (from `profile`, over `rounds`) adds a measured-ms
        column and the additive error, against `chain_s` (the median whole run) too when
        given. format="json": the report as JSON text (schema `report.schema.json`)."""
        if format == "json":
            return json.dumps(report_data(self.module, self.record(), measured, rounds,
                                          chain_s=chain_s), indent=1)
        if format != "text":
            raise CollageError(f"report format {format!r}: expected 'text' or 'json'")
        lines = [format_report(self.report_rows, self.estimated_cost, measured, chain_s)]
        if self.verdict is not None:
            lines.append(self.verdict.summary())
        if self.trials:
            lines.append(format_trials(self.trials))
        if self.baseline_rows:
            lines.append(format_baselines(self.baseline_rows, self.record().search_estimate))
        if self.skipped:
            lines.append("backends skipped: " + "; ".join(f"{b}: {r}" for b, r in
                                                         self.skipped.items()))
        if self.rejected:
            lines.append(format_rejections(self.rejected))
        if self.timings:
            lines.append("phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.timings.items()))
        return "\n".join(lines)

    def explain(self, path: str | os.PathLike, measured: Mapping[str, float] | None = None,
                rounds: int | None = None) -> Path:
        """Write the partition as one self-contained HTML page (`runtime/explain.py`); a
        path inside a saved model is refused (a file there breaks the manifest's checksums,
        and the folder could no longer be saved over)."""
        from collage_mlir.runtime.explain import write_explain

        held = saved_model_holding(user_path(path))
        if held is not None:
            raise CollageError(f"{path}: inside the saved model {str(held)!r} (writing there "
                               "breaks its checksums): write the page elsewhere")
        return write_explain(report_data(self.module, self.record(), measured, rounds), path)

    # -- persistence --------------------------------------------------------------------

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the model to `directory` (new, empty, or a model saved before, which it
        replaces: `check_save_target`): built in a sibling scratch directory and moved
        into place at the end, so a failed save leaves the old contents and a new one leaves
        nothing of them. The manifest records a SHA-256 of every file."""
        with _saving_into(directory):
            final = check_save_target(directory)
        out = final.parent / f".{final.name}.new-{os.getpid()}-{time.monotonic_ns()}"
        out.mkdir()  # not mkdtemp: the umask decides who may read the saved model
        try:
            self._write(out)
            with _saving_into(final):
                _replace_dir(out, final)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        return final

    def _write(self, out: Path) -> None:
        # with locations: the ONNX node names, which messages about a loaded model quote
        (out / "model.mlir").write_text(print_mlir(self.module, locations=True))
        regions = region_functions(self.module)
        entries = []
        for step in self.plan.steps:
            backend = self.backends[step.backend]
            files = backend.save_kernel(self.kernels[step.callee],
                                        region_module(regions[step.callee]),
                                        str(out / step.callee))
            entries.append({"name": step.callee, "backend": step.backend,
                            "backend_version": backend.version,
                            "target": backend.artifact_target,
                            "options": backend.options,
                            "artifacts": [os.path.basename(f) for f in files]})
        manifest = {"format": FORMAT, "entry": self.plan.entry,
                    "inputs": self.plan.input_names, "outputs": self.plan.output_names,
                    "input_shapes": {n: list(s.shape) for n, s in
                                     zip(self.plan.input_names, self.plan.inputs, strict=True)},
                    "regions": entries, **self.record().to_manifest()}
        manifest["checksums"] = {p.name: _sha256(p) for p in sorted(out.iterdir())}
        manifest = json.loads(json.dumps(manifest, default=str))  # as `load` will read it
        manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _saved_kernel(backend: Backend, fn: ir.Operation, stem: str) -> Kernel | Exception:
    """The kernel `save_kernel` wrote at `stem` for region `fn`, or why it cannot load."""
    try:
        return backend.load_kernel(region_module(fn), stem)
    except Exception as e:
        return e


def _load_kernel(d: Path, entry: dict, backend: Backend, regions: dict) -> Kernel:
    """One region's kernel from its saved artifacts (recompiled when the backend's version
    changed, or the CPU its artifacts were compiled for: `Backend.artifact_target`); a
    damaged artifact is a one-line error naming it."""
    name = entry["name"]
    if name not in regions:
        raise CollageError(f"{d / 'model.mlir'}: no function {name!r} for the manifest's region")
    stem = str(d / name)
    module_r = region_module(regions[name])
    try:
        if backend.version == entry["backend_version"] and entry["artifacts"] and \
                _same_target(entry, backend):
            return backend.load_kernel(module_r, stem)
        return backend.compile(module_r)
    except CollageError:
        raise
    except Exception as e:
        files = ", ".join(entry.get("artifacts") or []) or "no artifacts"
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise CollageError(f"{d}: region {name} ({backend.name}: {files}) cannot be loaded: "
                           f"{type(e).__name__}: {first}; partition again") from None


def _same_target(entry: dict, backend: Backend) -> bool:
    """Whether region `entry`'s artifacts were made for what `backend` targets here (a
    region saved with none, or before targets were recorded, is taken at its word)."""
    return entry.get("target") in ("", None, backend.artifact_target)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_save_target(directory: str | os.PathLike) -> Path:
    """Where `save` may write the model: the absolute path (symlinks resolved) of a new
    directory, an empty one, or a model saved before. Anything else is refused, before any
    work: a directory holding other files (saving replaces the directory whole, and an
    input model or notes beside it would be lost), a file, a missing or read-only parent."""
    given = user_path(directory)
    final = given.resolve()
    if final.exists() and not final.is_dir():
        raise CollageError(f"{given}: exists and is not a directory (give a new, empty or "
                           "saved-model directory)")
    if final == Path.cwd().resolve() or final in Path.cwd().resolve().parents:
        raise CollageError(f"{given}: is the current directory or holds it (saving "
                           "replaces the directory): give a new directory")
    held = saved_model_holding(final)
    if held is not None:
        raise CollageError(f"{given}: inside the saved model {str(held)!r} (writing there "
                           "breaks its checksums): save elsewhere")
    if final.is_dir():
        foreign = _foreign_files(final)
        if foreign:
            shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
            raise CollageError(f"{given}: holds files that are not a saved model ({shown}); "
                               "saving replaces the directory, so give a new, empty or "
                               "saved-model directory")
    if not final.parent.is_dir():
        raise CollageError(f"{given}: folder {str(final.parent)!r} does not exist")
    if not os.access(final.parent, os.W_OK | os.X_OK):
        raise CollageError(f"{given}: not writable (folder {str(final.parent)!r})")
    _try_making_a_folder_in(final.parent, given)
    return final


def _try_making_a_folder_in(parent: Path, given: Path) -> None:
    """Make and remove a folder beside the target, as `save` will: permission bits do not
    tell everything (root passes `os.access` under /sys and on a read-only mount)."""
    probe = parent / f".collage-write-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        probe.mkdir()
    except OSError as e:
        raise CollageError(f"{given}: cannot make a folder in {str(parent)!r} "
                           f"({e.strerror or e})") from None
    probe.rmdir()


def _foreign_files(d: Path) -> list[str]:
    """Entries of `d` that a saved model there does not list (all of them when `d` holds
    no readable manifest of this format), sorted."""
    names = sorted(p.name for p in d.iterdir())
    manifest = _manifest_of(d)
    if manifest is None:
        return names
    known = set(manifest.get("checksums") or {}) | {"manifest.json"}
    return [n for n in names if n not in known]


def is_saved_model(d: Path) -> bool:
    """Whether folder `d` holds a model `save` wrote (a readable manifest of this format)."""
    return _manifest_of(d) is not None


def saved_model_holding(path: Path) -> Path | None:
    """The saved model folder `path` lies in, if any (a file written there breaks the
    manifest's checksums)."""
    return next((d for d in path.resolve().parents if is_saved_model(d)), None)


def _manifest_of(d: Path) -> dict | None:
    try:
        manifest = json.loads((d / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("format") == FORMAT else None


@contextmanager
def _saving_into(directory: str | os.PathLike) -> Iterator[None]:
    """Saves into one folder take turns looking at and replacing what is there (a lock on
    the folder holding it, so nothing is left behind; a missing one is left for
    `check_save_target` to name)."""
    parent = user_path(directory).resolve().parent
    try:
        fd = os.open(parent, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _replace_dir(staged: Path, out: Path) -> None:
    """Put the finished `staged` directory at `out`, replacing what was there (saves take
    turns at this: `_saving_into`); a failed move puts back what was there."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}-{time.monotonic_ns()}")
    if not out.exists():
        staged.rename(out)
        return
    out.rename(old)
    try:
        staged.rename(out)
    except OSError:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)


MANIFEST_DIGEST = "manifest_sha256"
"""The manifest's own checksum, over its other keys: a flipped bit in a report string is
caught like one in a weight."""


def _manifest_digest(manifest: Mapping) -> str:
    body = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _verify_checksums(d: Path, manifest: dict) -> None:
    """The manifest matches its own checksum, and every file the model is read from
    (model.mlir and each region's artifacts) has its checksum in the manifest and matches
    it: a manifest whose checksums were dropped is as untrustworthy as a changed artifact."""
    if manifest.get(MANIFEST_DIGEST) != _manifest_digest(manifest):
        raise CollageError(f"{d / 'manifest.json'}: changed since it was saved (or saved by "
                           "an older version: no checksum of its own); partition again")
    sums = manifest.get("checksums")
    if not isinstance(sums, dict):
        raise CollageError(f"{d / 'manifest.json'}: no checksums; partition again")
    read = {"model.mlir"} | {a for e in manifest["regions"] for a in e.get("artifacts") or []}
    unlisted = sorted(read - set(sums))
    if unlisted:
        raise CollageError(f"{d / unlisted[0]}: has no checksum in the manifest (altered, or "
                           "saved by an older version); partition again")
    for name, want in sums.items():
        path = d / name
        if not path.is_file():
            raise CollageError(f"{path}: missing (the saved model is incomplete; partition "
                               "again)")
        if _sha256(path) != want:
            raise CollageError(f"{path}: changed since it was saved (checksum mismatch); "
                               "partition again")


def load(directory: str | os.PathLike) -> PartitionedModel:
    """Load a PartitionedModel saved by `save`, using the saved artifacts where present."""
    return _read(user_path(directory), _assemble)


def describe(directory: str | os.PathLike) -> tuple[ir.Module, Record]:
    """The partitioned module and report record saved in `directory`, checked like `load`
    but without compiling or loading any kernel (for reports and the explain view)."""
    return _read(user_path(directory),
                 lambda d, manifest, module: (module, Record.from_manifest(manifest)),
                 weights=False)


_T = TypeVar("_T")


def _read(d: Path, assemble: Callable[[Path, dict, ir.Module], _T], weights: bool = True) -> _T:
    """`assemble(d, manifest, module)` over the checked contents of saved model `d`; without
    `weights` the module is parsed without its resource blobs (a report needs no weights,
    and parsing bert_base's took 20 s)."""
    manifest = _read_file(d, "manifest.json", lambda p: json.loads(p.read_text()))
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CollageError(f"{d}: unknown format "
                           f"{manifest.get('format') if isinstance(manifest, dict) else None!r}")
    try:
        _verify_checksums(d, manifest)
        text = _read_file(d, "model.mlir",
                          Path.read_text if weights else _without_resources)
        module = parse_mlir(text, str(d / "model.mlir"))
        return assemble(d, manifest, module)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CollageError(f"{d / 'manifest.json'}: malformed ({type(e).__name__}: {e})") from None


def _read_file(d: Path, name: str, read: Callable[[Path], _T]) -> _T:
    """`read(d / name)`, its failures as errors naming the file."""
    try:
        return read(d / name)
    except OSError as e:
        raise CollageError(f"{d}: not a saved partitioned model ({e.strerror}: "
                           f"{Path(e.filename or d / name).name})") from None
    except UnicodeDecodeError as e:
        raise CollageError(f"{d / name}: not UTF-8 text ({e})") from None
    except json.JSONDecodeError as e:
        raise CollageError(f"{d / name}: not valid JSON ({e})") from None


def _without_resources(path: Path) -> str:
    """The text of module file `path` up to its `{-# dialect_resources … #-}` section (the
    weights), read line by line: the module parses without it (`dense_resource`s unresolved)."""
    lines = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("{-#"):
                break
            lines.append(line)
    return "".join(lines)


def _assemble(d: Path, manifest: dict, module: ir.Module) -> PartitionedModel:
    """The PartitionedModel that `manifest` describes over the parsed `module`."""
    regions = region_functions(module)
    backends: dict[str, Backend] = {}
    kernels: dict[str, Kernel] = {}
    for entry in manifest["regions"]:
        name = entry["backend"]
        if name not in backends:
            try:
                backends[name] = get_backend(name, **entry.get("options", {}))
            except CollageError as e:
                raise CollageError(f"{d / 'manifest.json'}: {e}") from None
            if backends[name].version != entry["backend_version"]:
                print(f"collage-mlir: note: {name} {backends[name].version} differs from the "
                      f"saved {entry['backend_version']}; recompiling", flush=True)
        if not _same_target(entry, backends[name]):
            print(f"collage-mlir: note: region {entry['name']} was compiled for "
                  f"{entry['target']}, this machine is {backends[name].artifact_target}; "
                  "recompiling", flush=True)
        kernels[entry["name"]] = _load_kernel(d, entry, backends[name], regions)
    missing = sorted(set(regions) - set(kernels))
    if missing:
        raise CollageError(f"{d / 'manifest.json'}: no entry for region(s) {missing}")
    record = Record.from_manifest(manifest)
    model = PartitionedModel(module, kernels, backends, record.rows, record.estimated_cost,
                             verdict=record.verdict)
    model.transition_cost, model.op_names = record.transition_cost, record.op_names
    model.baseline_rows, model.skipped = record.baselines, record.skipped
    model.trials = record.trials
    return model.with_record(verdict=record.verdict, candidates=[],
                             backends_considered=record.backends_considered or sorted(backends),
                             timings=record.timings, rejected=record.rejected)
