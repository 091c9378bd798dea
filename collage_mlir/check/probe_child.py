"""The probe's side of `check/isolated.py`, run in the child process.

Every step that runs backend code first announces itself as a stage (model, backend,
regions, what it is doing, how long it may take) on the private channel, so that when the
process dies or goes silent the parent knows whom to blame. Failures it can see itself (a
raise, outputs of the wrong shape, dtype or value) it reports as `failed` and stops; a pass
ends with `done` and the saved kernels (region function → file stem).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.base import Backend, Kernel
from collage_mlir.backends.registry import get_backend, register_backend
from collage_mlir.check.compare import whole_model_kernel
from collage_mlir.cost.protocol import MeasureSettings, load_backend, shares_compiles
from collage_mlir.dialects.func import find_function, function_name, public_functions
from collage_mlir.errors import CollageError, one_line
from collage_mlir.export import with_onnx_names_of
from collage_mlir.graph import DataflowGraph
from collage_mlir.graph.outline import outline_placed
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.importer import parse_mlir
from collage_mlir.runtime.model import PartitionedModel, clone_module, region_module
from collage_mlir.runtime.plan import region_functions
from collage_mlir.tensors import (
    TensorSpec,
    Tolerance,
    compare,
    make_inputs,
    quantized_results,
    result_specs,
)

DEFAULT_TOLERANCE = MeasureSettings()
RUNS = 2
"""Calls checked per model, each on its own inputs (a kernel right only on its first call
is caught on the second)."""
MARGIN = 2.0
"""A stage may take this many measuring timeouts (per region, for a batch compile)."""

SAVE_ALTERNATIVE_ABOVE_S = 2.0
"""A whole-model alternative is saved for the end-to-end check only when it took longer
than this to compile: on alexnet OpenVINO compiles it in 0.9 s and takes 2.4 s to export
its 240 MB blob (IREE's compiles of whole models take many seconds)."""

Outputs = list[np.ndarray]


class Failed(CollageError):
    """A failure the probe saw and reported; the probe stops (a CollageError, so a run
    passes it on as it is)."""


class Channel:
    """The private channel to the parent: stages, notes, the failure or the end."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.current: dict[str, Any] = {}

    def send(self, **msg: Any) -> None:
        self.out.write(json.dumps(msg) + "\n")
        self.out.flush()

    def stage(self, allow: float, **fields: Any) -> None:
        self.current = {**fields, "allow": allow}
        self.send(stage=self.current)

    def fail(self, reason: str, **fields: Any) -> Failed:
        self.send(failed={**self.current, **fields, "reason": reason})
        return Failed(reason)


def run(job: dict[str, Any], out: IO[str]) -> int:
    """Probe the job's pick and alternatives; 0 when the parent was told the outcome."""
    ch = Channel(out)
    try:
        _probe(ch, job)
    except Failed:
        pass
    except Exception as e:  # the probe's own trouble, not a backend's: no one is blamed
        traceback.print_exc()
        ch.current = {}
        ch.fail(f"the probe failed: {one_line(e)}")
    return 0


def _probe(ch: Channel, job: dict[str, Any]) -> None:
    sys.path[:0] = [p for p in job["sys_path"] if p not in sys.path]
    for target in job["targets"].values():
        if ":" in target:
            module_name, _, cls_name = target.partition(":")
            register_backend(getattr(importlib.import_module(module_name), cls_name))
    t = float(job["timeout_s"]) * MARGIN
    ch.stage(120.0, doing="parsing the model")
    module = parse_mlir(job["text"], "the model")
    pristine = clone_module(module)
    graph = DataflowGraph(public_functions(module)[0], owner=module)
    outline_placed(graph, [(k, SubGraph(graph, int(inside, 16)), backend, cost)
                           for k, (inside, backend, cost) in enumerate(job["pick"])])
    inputs = [make_inputs(public_functions(pristine)[0], variant=v) for v in range(RUNS)]
    if job.get("inputs"):
        with np.load(job["inputs"]) as given:
            inputs.insert(0, [given[f"arr_{k}"] for k in range(len(given.files))])
    calls = _call_names(len(inputs), bool(job.get("inputs")))
    declared = _declared(pristine)
    nan_inputs = _with_nan(inputs[0])
    reference = _reference(ch, pristine, job["reference"],
                           inputs if nan_inputs is None else [*inputs, nan_inputs], t,
                           given=bool(job.get("inputs")))
    model = _compile_pick(ch, module, t)
    nan = (nan_inputs, reference[len(inputs)]) if reference and nan_inputs is not None else None
    tol = MeasureSettings(**job["tolerance"])
    _check_pick(ch, model, inputs, declared, reference, job["reference"], t, nan, tol,
                calls=calls)
    scratch = Path(job["scratch"])
    saved, trips = _save(ch, model, scratch, t)
    whole = {b: _check_alternative(ch, pristine, b, inputs, declared, reference, t,
                                   scratch, trips, tol, calls=calls)
             for b in job["alternatives"]}
    ch.send(done={"saved": saved,
                  "whole": {b: stem for b, stem in whole.items() if stem},
                  "dropped": [b for b, stem in whole.items() if stem is None]})


def _call_names(n: int, given: bool) -> list[str]:
    """How a failure names the call it happened on: the user's inputs, when given, are
    call 1."""
    return [f"call {v + 1}" + (" (the given inputs)" if given and v == 0 else "")
            for v in range(n)]


def _declared(module: ir.Module) -> list[TensorSpec | None]:
    """The shapes and dtypes the model's entry point returns."""
    return result_specs(public_functions(module)[0])


def _reference(ch: Channel, pristine: ir.Module, spec: dict[str, Any] | None,
               inputs: Sequence[list[np.ndarray]], allow: float, given: bool = False
               ) -> list[list[np.ndarray | None]] | None:
    """The reference backend's whole-model outputs per input set, one per output of the
    entry point: None where it returns an input or a constant as it is (no op computes
    it: the plan returns the model's own); None when there is no reference or it cannot
    run the model (said as a note). When it refuses the `given` inputs (the first set) but
    runs made-up ones, the inputs are at fault, not a backend: said as `bad_inputs`, and
    the probe ends (`Failed`)."""
    if spec is None:
        return None
    graph = DataflowGraph(public_functions(pristine)[0], owner=pristine)
    if not graph.op_bits:  # every output an input or a constant: nothing to check
        return [[None] * len(graph.outputs) for _ in inputs]
    ch.stage(allow * 2, model="reference", backend=spec["target"], doing="compiling")
    kernel = None
    try:
        whole = SubGraph(graph, graph.op_bits)
        kernel = load_backend(spec).compile(whole.extract("model"))
        at = {src: k for k, src in enumerate(whole.output_values)}
        read = [arg for arg, _ in whole.input_values]  # not the inputs nothing reads
        inputs = [[x[arg] for arg in read] for x in inputs]
        ch.stage(allow * 2, model="reference", backend=spec["target"], doing="running")
        outs = [kernel.run(x) for x in inputs[:1]]
    except Exception as e:
        if given and len(inputs) > 1 and _runs(kernel, inputs[1]):
            ch.send(bad_inputs=f"the reference backend {spec['target']} refuses them and "
                               f"runs made-up ones: {one_line(e)}")
            raise Failed("bad inputs") from None
        ch.send(note=f"reference {spec['target']} cannot run the whole model "
                     f"({one_line(e)}); outputs not checked end to end")
        return None
    try:
        outs += [kernel.run(x) for x in inputs[1:]]
    except Exception as e:
        ch.send(note=f"reference {spec['target']} cannot run the whole model "
                     f"({one_line(e)}); outputs not checked end to end")
        return None
    return [[None if src not in at else out[at[src]] for src in graph.outputs] for out in outs]


def _runs(kernel: Any, inputs: list[np.ndarray]) -> bool:
    """Whether `kernel` (None: not compiled) runs on `inputs` without raising."""
    try:
        return kernel is not None and kernel.run(inputs) is not None
    except Exception:
        return False


def _compile_pick(ch: Channel, module: ir.Module, allow: float) -> PartitionedModel:
    """Every region compiled on its backend: one stage per region, or per batch for a
    backend that shares compiles."""
    regions = region_functions(module)
    by_backend: dict[str, list[str]] = {}
    for name in regions:
        by_backend.setdefault(_backend_of(regions[name]), []).append(name)
    backends: dict[str, Backend] = {}
    kernels: dict[str, Kernel] = {}
    for backend_name, names in sorted(by_backend.items()):
        ch.stage(allow, model="pick", backend=backend_name, regions=names, doing="loading")
        backend = backends[backend_name] = get_backend(backend_name)
        batches = [names] if shares_compiles(backend) else [[n] for n in names]
        for batch in batches:
            ch.stage(allow * len(batch), model="pick", backend=backend_name, regions=batch,
                     doing="compiling")
            compiled = backend.compile_many([region_module(regions[n]) for n in batch])
            for n, k in zip(batch, compiled, strict=True):
                if isinstance(k, Exception):
                    raise ch.fail(f"raised {with_onnx_names_of(one_line(k), regions[n])}",
                                  regions=[n])
                kernels[n] = k
    return PartitionedModel(module, kernels, backends)


def _backend_of(fn: ir.Operation) -> str:
    from collage_mlir.dialects import collage

    return ir.StringAttr(fn.attributes[collage.BACKEND]).value


class _Announced(Kernel):
    """A region's kernel that announces each call as a stage, and reports a raise or
    outputs of other shapes or dtypes than its function declares (which a later region
    might absorb, where another backend would refuse them)."""

    def __init__(self, inner: Kernel, ch: Channel, backend: str, fn: ir.Operation,
                 allow: float, call: list[int]) -> None:
        self.inner, self.ch, self.backend, self.fn = inner, ch, backend, fn
        self.name, self.specs = function_name(fn), result_specs(fn)
        self.allow, self.call = allow, call

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        self.ch.stage(self.allow, model="pick", backend=self.backend, regions=[self.name],
                      doing=f"running call {self.call[0]}")
        try:
            outputs = [np.asarray(o) for o in self.inner.run(inputs)]
        except Exception as e:
            raise self.ch.fail(f"raised {with_onnx_names_of(one_line(e), self.fn)}") from None
        why = _mismatch(outputs, self.specs, None)
        if why:
            raise self.ch.fail(why)
        return outputs


def _with_nan(inputs: list[np.ndarray]) -> list[np.ndarray] | None:
    """`inputs` with the first element of every float input NaN; None without one."""
    if not any(x.dtype.kind == "f" for x in inputs):
        return None
    out = [x.copy() for x in inputs]
    for x in out:
        if x.dtype.kind == "f" and x.size:
            x.flat[0] = np.nan
    return out


def _check_pick(ch: Channel, model: PartitionedModel, inputs: Sequence[list[np.ndarray]],
                declared: list[TensorSpec | None], reference: list[Outputs] | None,
                spec: dict[str, Any] | None, allow: float,
                nan: tuple[list[np.ndarray], Outputs] | None = None,
                tol: Tolerance = DEFAULT_TOLERANCE, *, calls: Sequence[str]) -> None:
    """Run the pick on every input set; its outputs must have the declared shapes and
    dtypes and match the reference. A mismatch is blamed on the first region whose own
    outputs differ from the reference's on the same inputs. Then, given `nan` (inputs
    holding NaN and the reference's outputs for them), one more call: finite outputs
    where the reference's are not are said in a note, not blamed (NaN propagation is the
    backends' own; outputs are checked on finite inputs)."""
    call = [0]
    inner = dict(model.kernels)
    regions = region_functions(model.module)
    announced = PartitionedModel(model.module, {
        s.callee: _Announced(inner[s.callee], ch, s.backend, regions[s.callee], allow, call)
        for s in model.plan.steps}, model.backends)
    quantized = quantized_results(find_function(model.module, model.plan.entry))
    for v, x in enumerate(inputs):
        call[0] = v + 1
        outputs = announced.run(x)
        ch.stage(allow, model="pick", backend="", regions=[], doing=f"checking call {v + 1}")
        why = _mismatch(outputs, declared, reference[v] if reference else None, tol,
                        quantized)
        if why:
            _blame_region(ch, announced, x, spec, why, calls[v], allow, tol)
    if nan is not None:
        call[0] = len(inputs) + 1
        outputs = announced.run(nan[0])
        lost = sum(int((np.isfinite(o) & ~np.isfinite(r)).sum())
                   for o, r in zip(outputs, nan[1], strict=True)
                   if r is not None and o.shape == r.shape)
        if lost:
            values = "a finite value" if lost == 1 else f"{lost} finite values"
            ch.send(note=f"non-finite inputs: given a NaN input the pick returns {values} "
                         "where the reference's whole model returns NaN or Inf (outputs are "
                         "checked on finite inputs only)")


def _mismatch(outputs: Outputs, declared: list[TensorSpec | None],
              reference: Outputs | None, tol: Tolerance = DEFAULT_TOLERANCE,
              quantized: frozenset[int] = frozenset()) -> str | None:
    """Why `outputs` are wrong (declared shape or dtype, then the reference, `quantized`
    as `compare` takes it), or None."""
    for k, (o, spec) in enumerate(zip(outputs, declared, strict=False)):
        if spec is not None and (o.shape != spec.shape or o.dtype != spec.dtype):
            return (f"output {k} is {o.dtype}{list(o.shape)}, declared "
                    f"{np.dtype(spec.dtype)}{list(spec.shape)}")
    if len(outputs) != len(declared):
        return f"{len(outputs)} outputs, declared {len(declared)}"
    if reference is None:
        return None
    return compare(outputs, [o if r is None else r for o, r in zip(outputs, reference,
                                                                   strict=True)], tol,
                   quantized)


def _blame_region(ch: Channel, model: PartitionedModel, x: list[np.ndarray],
                  spec: dict[str, Any] | None, why: str, call: str, allow: float,
                  tol: Tolerance = DEFAULT_TOLERANCE) -> None:
    """Report the first region whose outputs on this call's inputs are wrong (declared
    types, then the reference region); the whole pick when none is."""
    slots = model._execute(model.arrange(x))
    regions = region_functions(model.module)
    ref = load_backend(spec) if spec is not None else None
    for step in model.plan.steps:
        got = [slots[i] for i in step.results]
        want_types = result_specs(regions[step.callee])
        want = None
        if ref is not None:
            ch.stage(allow * 2, model="reference", backend=spec["target"],
                     doing=f"checking region {step.callee}")
            want = ref.compile(region_module(regions[step.callee])).run(
                [slots[i] for i in step.args])
        bad = _mismatch(got, want_types, want, tol, quantized_results(regions[step.callee]))
        if bad:
            ch.current = {"model": "pick", "backend": step.backend, "regions": [step.callee]}
            raise ch.fail(f"{bad} on {call}")
    ch.current = {"model": "pick", "backend": "",
                  "regions": [s.callee for s in model.plan.steps]}
    raise ch.fail(f"the chain's outputs are wrong on {call} ({why}) though no single "
                  "region's are")


def _check_alternative(ch: Channel, pristine: ir.Module, backend: str,
                       inputs: Sequence[list[np.ndarray]], declared: list[TensorSpec | None],
                       reference: list[Outputs] | None, allow: float, scratch: Path,
                       trips: dict[str, bool], tol: Tolerance = DEFAULT_TOLERANCE, *,
                       calls: Sequence[str]) -> str | None:
    """Compile and run one whole-model alternative as the end-to-end check will, and save
    its kernel under `scratch` when that pays (a slow compile) and its backend's kernels
    round-trip (`trips`, learnt on a one-op model when the pick did not say): the stem
    ("" when not saved); None when it raises (the check would leave it out: not a
    contender, no one to blame)."""
    model = f"alt:{backend}"
    ch.stage(allow * 2, model=model, backend=backend, doing="compiling")
    try:
        t0 = time.perf_counter()
        kernel = whole_model_kernel(pristine, backend)
        compile_s = time.perf_counter() - t0
        quantized = quantized_results(public_functions(pristine)[0])
        for v, x in enumerate(inputs):
            ch.stage(allow * 2, model=model, backend=backend, doing=f"running call {v + 1}")
            outputs = [np.asarray(o) for o in kernel.run(x)]
            why = _mismatch(outputs, declared, reference[v] if reference else None, tol,
                            quantized)
            if why:
                raise ch.fail(f"{why} on {calls[v]}")
    except Failed:
        raise
    except Exception as e:
        ch.send(note=f"{backend} whole model left out of the end-to-end check: "
                     f"raised {one_line(e)}")
        return None
    if compile_s < SAVE_ALTERNATIVE_ABOVE_S:
        return ""
    if backend not in trips:
        ch.stage(allow * 3, model=model, backend=backend,
                 doing="saving and loading a one-op model")
        trips[backend] = _one_op_round_trips(get_backend(backend), scratch)
    if not trips[backend]:
        return ""
    ch.stage(allow, model=model, backend=backend, doing="saving its kernel")
    stem = str(scratch / ("whole_" + "".join(c if c.isalnum() else "_" for c in backend)))
    try:
        whole = region_module(public_functions(pristine)[0])
        return stem if get_backend(backend).save_kernel(kernel, whole, stem) else ""
    except Exception:  # the check compiles it again
        return ""


def _save(ch: Channel, model: PartitionedModel, scratch: Path, allow: float
          ) -> tuple[dict[str, str], dict[str, bool]]:
    """Each region's kernel written under `scratch` where its backend can: (region →
    stem, backend → whether its saved kernels round-trip). The regions of a backend whose
    loaded kernels cannot be saved again are left out (the main process compiles them): the
    model built from them may be saved by its user (OpenVINO exports an imported model as a
    blob it cannot import)."""
    regions = region_functions(model.module)
    saved: dict[str, str] = {}
    size: dict[str, int] = {}
    for step in model.plan.steps:
        ch.stage(allow, model="pick", backend=step.backend, regions=[step.callee],
                 doing="saving its kernel")
        stem = str(scratch / step.callee)
        try:
            files = model.backends[step.backend].save_kernel(
                model.kernels[step.callee], region_module(regions[step.callee]), stem)
        except Exception as e:  # the parent compiles this one again
            ch.send(note=f"{step.backend} cannot save region {step.callee} "
                         f"({one_line(e)}); compiled again")
            continue
        if files:
            saved[step.callee] = stem
            size[step.callee] = sum(Path(f).stat().st_size for f in files)
    trips: dict[str, bool] = {}
    for step in sorted(model.plan.steps, key=lambda s: size.get(s.callee, 0)):
        if step.callee in saved and step.backend not in trips:  # its smallest region
            ch.stage(allow * 3, model="pick", backend=step.backend, regions=[step.callee],
                     doing="loading and saving its kernel again")
            trips[step.backend] = _round_trips(model.backends[step.backend],
                                               region_module(regions[step.callee]),
                                               saved[step.callee], scratch)
    return {n: stem for n, stem in saved.items()
            if trips.get(_backend_of(regions[n]))}, trips


ONE_OP = """
func.func @round_trip(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
    attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
"""


def _one_op_round_trips(backend: Backend, scratch: Path) -> bool:
    """`_round_trips` on a one-op model (False when the backend cannot even compile it)."""
    stem = str(scratch / "one_op")
    try:
        module = parse_mlir(ONE_OP, "one-op model")
        if not backend.save_kernel(backend.compile(module), module, stem):
            return False
    except Exception:
        return False
    return _round_trips(backend, module, stem, scratch)


def _round_trips(backend: Backend, module: ir.Module, stem: str, scratch: Path) -> bool:
    """Whether the kernel saved at `stem` loads, saves again and loads again."""
    again = str(scratch / "round_trip")
    try:
        kernel = backend.load_kernel(module, stem)
        backend.save_kernel(kernel, module, again)
        backend.load_kernel(module, again)
    except Exception:
        return False
    finally:
        for f in scratch.glob("round_trip*"):
            f.unlink(missing_ok=True)
    return True
