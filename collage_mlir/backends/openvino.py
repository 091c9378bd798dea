"""OpenVINO (CPU plugin): a graph-kind backend.

Regions reach it as exported ONNX models, read from memory. Its capability is OpenVINO's own
answer: `Core.query_model` on the whole exported function, whose nodes are named from their
DataflowGraph index (`export.node_name`) so the supported OpenVINO ops map back to graph
nodes. Kernels keep one InferRequest whose input tensors share the caller's buffers and are
re-set only when a different array is passed (13 µs per call instead of 129-223 µs), and whose
output tensors are buffers the kernel owns (no copy, no allocation per call).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from iree.compiler import ir

from collage_mlir.backends.base import (
    Backend,
    BackendKind,
    Kernel,
    aligned_empty,
    cpu_identity,
    usable_cores,
)
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import find_function, io_names
from collage_mlir.export import export_function, export_graph, node_name
from collage_mlir.export.onnx_export import Constant, graph_constants
from collage_mlir.export.resources import model_source, store_of
from collage_mlir.graph.bits import iter_bits
from collage_mlir.graph.dataflow import DataflowGraph, Node
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.scratch import HELD, ScratchDir
from collage_mlir.sigstack import off_altstack

DEVICE = "CPU"
FUSED_SUFFIX = ".ovfused.json"
"""Beside a saved blob: `OpenVinoKernel.fused` of the compiled model (an import loses it)."""


def read_onnx(core: Any, model: bytes | str) -> Any:
    """An ov.Model from ONNX bytes or an ONNX file's path (`resources.model_source`)."""
    return core.read_model(model if isinstance(model, str) else io.BytesIO(model))


def tensor_owners(proto: Any) -> dict[str, int]:
    """ONNX tensor name → post-dfs index of the node producing it (nodes named `nK`)."""
    owners: dict[str, int] = {}
    for node in proto.graph.node:
        if node.name.startswith("n") and node.name[1:].isdigit():
            owners.update((out, int(node.name[1:])) for out in node.output if out)
    return owners


def supported_nodes(model: Any, supported: set[str], graph: DataflowGraph,
                    owners: dict[str, int]) -> int:
    """Graph op nodes all of whose attributable OpenVINO ops are in `supported`.

    OpenVINO names an op after its ONNX node (`n12`), a decomposed part as `n12/...`, and the
    op producing a graph output after that output's tensor (found through `owners`); unnamed
    helper ops (ShapeOf_7) cannot be attributed and are ignored.
    """
    by_name = {node_name(n.index): n.index for n in graph.op_nodes()}
    ok: set[int] = set()
    bad: set[int] = set()
    for op in model.get_ordered_ops():
        friendly = op.get_friendly_name()
        owner = by_name.get(friendly, by_name.get(friendly.split("/", 1)[0]))
        if owner is None:
            tensors = {t for out in op.outputs() for t in out.get_names()}
            found = {owners[t] for t in tensors if t in owners} & set(by_name.values())
            if len(found) != 1 or op.get_type_name() == "Result":
                continue
            owner = found.pop()
        (ok if friendly in supported else bad).add(owner)
    ok -= bad
    # A node with no op of its own was folded away by the frontend (a Relu before an
    # inference Dropout gives its name up): supported when its attributable neighbours are.
    for node in graph.op_nodes():
        if node.index in ok or node.index in bad:
            continue
        near = [i for i in iter_bits((node.preds | node.succs) & graph.op_bits)
                if i in ok or i in bad]
        if near and all(i in ok for i in near):
            ok.add(node.index)
    return sum(1 << i for i in ok)


def runtime_origins(compiled: Any) -> dict[str, tuple[str, ...]]:
    """Each node a compiled model executes (its friendly name) → that name and the names of
    the ops it was built from (`originalLayersNames`: what OpenVINO fused into it)."""
    out = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        fused = info["originalLayersNames"].astype(str) if "originalLayersNames" in info else ""
        name = op.get_friendly_name()
        out[name] = (name, *[f for f in fused.split(",") if f and f != name])
    return out


def _shareable(x: np.ndarray) -> np.ndarray:
    """`x` as an array OpenVINO can share: C-contiguous, writable (a read-only one, such as
    a memory-mapped file, is copied), and of a dtype spelled the way its type table knows
    (numpy's `longlong`, which onnxruntime returns for int64, is refused: "Unsupported data
    type: int64")."""
    if not (isinstance(x, np.ndarray) and x.flags.c_contiguous and x.flags.writeable):
        x = np.array(x, order="C")
    canonical = np.dtype(x.dtype.str)
    return x if x.dtype.num == canonical.num else x.view(canonical)


def _arguments_read(compiled: Any, arg_names: Sequence[str] | None
                    ) -> tuple[int, list[int]]:
    """How many arrays a call takes, and which of them each compiled input reads (by name:
    OpenVINO keeps an input's ONNX name and drops inputs nothing reads)."""
    n = len(compiled.inputs)
    if arg_names is None or len(arg_names) == n:
        return n, list(range(n))
    position = {name: k for k, name in enumerate(arg_names)}

    def argument(port: Any) -> int:
        found = sorted(position[n] for n in port.get_names() if n in position)
        if not found:
            raise RuntimeError(f"OpenVINO input {port.get_any_name()!r} is none of the "
                               f"region's arguments ({', '.join(arg_names)})")
        return found[0]

    return len(arg_names), [argument(i) for i in compiled.inputs]


INT32 = np.iinfo(np.int32)


def _require_int32_range(x: np.ndarray, k: int) -> None:
    """OpenVINO's CPU plugin computes 64-bit integers in int32: a value past int32 would
    wrap without a word, so it is refused (checked on every call: a hand-off buffer keeps
    its identity while its values change)."""
    low, high = int(x.min()), int(x.max())
    if low < INT32.min or high > INT32.max:
        bad = low if low < INT32.min else high
        raise ValueError(f"input {k} holds {bad}, past int32: OpenVINO computes "
                         f"{x.dtype} values in int32")


WIDE_INTS = frozenset({"si64", "ui64", "ui32"})
"""Integer types OpenVINO's CPU plugin computes in int32 (no property turns that off)."""
COPYING = frozenset({
    "Shape", "Size", "Constant", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
    "Transpose", "Concat", "Slice", "Split", "Gather", "GatherElements", "GatherND",
    "ScatterND", "ScatterElements", "Expand", "Tile", "Pad", "Where", "Max", "Min", "Clip",
    "Sign", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK", "NonZero",
    "Range", "Compress", "Trilu", "DepthToSpace", "SpaceToDepth", "ReverseSequence",
    "ConstantOfShape"})
"""Ops whose integer results are values of their operands, or indices and counts bounded
by tensor sizes: operands inside int32 keep them inside."""
SHAPE_OPERANDS = {
    **dict.fromkeys(("Reshape", "Expand", "Tile", "Unsqueeze", "Squeeze", "Gather",
                     "GatherElements", "GatherND", "ScatterND", "ScatterElements", "TopK",
                     "Split", "CumSum", "Trilu", "OneHot", "ReduceMax", "ReduceMin",
                     "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSumExp", "ReduceSumSquare"), frozenset({1})),
    "Slice": frozenset({1, 2, 3, 4}), "Pad": frozenset({1, 3}), "Resize": frozenset({1, 2, 3}),
    "ConstantOfShape": frozenset({0})}
"""Operands OpenVINO reads as shapes, axes, indices or counts, not values to compute with
(a Slice's end of INT64_MAX, as exporters write it, is clamped, not wrapped)."""
FLOAT_INSIDE = frozenset({"Div", "Pow", "Relu", "Clip", "MatMul", "Gemm", "Einsum",
                          "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd",
                          "ReduceL1", "ReduceSumSquare"})
"""Ops OpenVINO's CPU plugin computes in float32 on 32- and 64-bit integers, exact only to
2**24 (an int32 Relu of 50773491 gave 50773492; an int64 ReduceMax of values inside int32
was rounded)."""
SATURATING = frozenset({"Add", "Sub", "Mul", "Sum", "Neg", "Abs", "Pow"})
"""Ops it computes on 8-bit integers saturating where ONNX wraps (uint8 6 - 40 gave 0, not
222; int8 -(-128) gave 127); a left BitShift too."""
NARROW_INTS = frozenset({"i1", "si8", "si16", "si32", "ui8", "ui16"})
"""Element types a Cast to a WIDE_INTS type keeps inside int32."""


def _may_pass_int32(node: Node, constant: Constant) -> bool:
    """Whether OpenVINO could compute a WIDE_INTS value of `node` past int32, which it
    wraps: an op that can make one from values inside int32 (arithmetic, reductions that
    sum, a Cast from a float or a wide type), or a constant operand holding one (`constant`
    reads an operand's value, None when it is not a constant) that it computes with (not a
    SHAPE_OPERANDS one). A region's inputs are checked at run time
    (`_require_int32_range`)."""
    made = {onnx_view.element(r) for r in node.op.results} & WIDE_INTS
    if made and node.op_type in ("Cast", "CastLike"):
        source = onnx_view.element(node.op.operands[0])
        if source not in NARROW_INTS and not (source == "si64" and made == {"si64"}):
            return True
    elif made and node.op_type not in COPYING:
        return True
    skipped = SHAPE_OPERANDS.get(node.op_type, frozenset())
    return any(onnx_view.element(v) in WIDE_INTS and _past_int32(constant(v))
               for k, v in enumerate(node.op.operands) if k not in skipped)


def _past_int32(value: np.ndarray | None) -> bool:
    return value is not None and value.size > 0 and (
        int(value.min()) < INT32.min or int(value.max()) > INT32.max)


def _miscomputed(node: Node, constant: Constant) -> str:
    """Why OpenVINO's CPU plugin computes `node` otherwise than ONNX says ("" when it does
    not), so that it is not offered: float64 values are computed in float32; 64-bit and
    uint32 integers in int32, so a value past int32 would wrap unseen (`_may_pass_int32`);
    an integer Mod (2**24 + 1 mod 10 gave 6) and 32- and 64-bit `FLOAT_INSIDE` ops in
    float32; 8-bit `SATURATING` ones saturating; a TopK whose indices are read (ties came
    out in another order); an LSTM's peepholes (its input P) are dropped (1.5% off on
    ONNX's own test, 20% with larger P)."""
    if node.op_type == "LSTM" and len(node.operands) > 7 and node.operands[7] is not None:
        return "drops an LSTM's peepholes (input P)"
    if "f64" in (onnx_view.element(v) for v in (*node.op.operands, *node.op.results)):
        return "computes float64 in float32"
    if node.op_type == "Mod" and onnx_view.element(node.op.operands[0])[:2] in ("si", "ui"):
        return "computes an integer Mod in float32 (wrong past 2**24)"
    made = {onnx_view.element(r) for r in node.op.results}
    if node.op_type in FLOAT_INSIDE and made & {"si32", "ui32", "si64", "ui64"}:
        return f"computes an integer {node.op_type} in float32 (wrong past 2**24)"
    if node.op_type == "TopK" and any(True for _ in node.op.results[1].uses):
        return "breaks ties otherwise than ONNX (the lower index first)"
    if made & {"si8", "ui8"} and (node.op_type in SATURATING or (
            node.op_type == "BitShift" and _left_shift(node.op))):
        return f"computes an 8-bit integer {node.op_type} saturating (ONNX wraps)"
    if _may_pass_int32(node, constant):
        return "computes 64-bit integers in int32 (a value past int32 would wrap)"
    return ""


def _left_shift(op: Any) -> bool:
    direction = onnx_view.attributes(op).get("direction")
    return direction is not None and onnx_view.attribute_value(direction) == "LEFT"


def _miscomputed_nodes(graph: DataflowGraph) -> int:
    """The op nodes `_miscomputed` gives a reason for, as a bitset."""
    constant = graph_constants(graph)
    return sum(1 << n.index for n in graph.op_nodes() if _miscomputed(n, constant))


SAME_CODE = SimpleNamespace(rtol=1e-4, atol_scale=1e-5)
"""How close a kernel imported from its blob must come to the kernel exported (`compare`):
the same compiled code, so far closer than two backends agree."""


class OpenVinoKernel(Kernel):
    """One compiled model and a reused InferRequest.

    Inputs are shared, not copied: a bound array is kept alive and re-set only when a
    different array object is passed. Outputs of static shape are written into buffers the
    kernel owns, set once as the request's output tensors (`run_borrowed` returns them,
    `run` a copy); others are copied out of OpenVINO's own tensors. `source` is the blob
    file the model was imported from, if it was. OpenVINO drops an input the model never
    reads; given the function's `arg_names`, the kernel still takes one array per argument
    and passes on those it reads.
    """

    def __init__(self, compiled: Any, source: Path | None = None,
                 fused: list[tuple[str, ...]] | None = None,
                 arg_names: Sequence[str] | None = None) -> None:
        import openvino as ov

        self._tensor = ov.Tensor
        self.compiled = compiled
        self.source = source
        self._fused = fused
        self.request = compiled.create_infer_request()
        self._refs: list[np.ndarray | None] = [None] * len(compiled.inputs)
        self._shared: list[np.ndarray | None] = [None] * len(compiled.inputs)
        self._n_args, self._reads = _arguments_read(compiled, arg_names)
        self._n_out = len(compiled.outputs)
        self._static = [o.get_partial_shape().is_static for o in compiled.outputs]
        self._owned: list[np.ndarray | None] | None = None

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array(o, copy=True) for o in self.run_borrowed(inputs)]

    def run_borrowed(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != self._n_args:
            raise ValueError(f"expected {self._n_args} inputs, got {len(inputs)}")
        request = self.request
        for k, a in enumerate(self._reads):
            x = inputs[a]
            if x.dtype.kind in "iu" and x.size and (x.dtype.itemsize == 8 or
                                                    x.dtype == np.uint32):
                _require_int32_range(x, k)
            if x is not self._refs[k]:
                shared = _shareable(x)
                request.set_input_tensor(k, self._tensor(shared, shared_memory=True))
                self._refs[k], self._shared[k] = x, shared  # both kept alive while bound
        request.infer(share_outputs=True)  # the default copies every output out, unused
        if self._owned is None:
            return self._own()
        return [o if o is not None else np.array(request.get_output_tensor(i).data)
                for i, o in enumerate(self._owned)]

    def fused(self) -> list[tuple[str, ...]]:
        """The exported node names each executed node was built from, where two or more (a
        decomposed op's parts, `n12/...`, count as `n12`). A model imported from a blob
        has lost its fused subgraphs' names: such a kernel is given those its compile saw
        (`OpenVinoBackend.save_kernel` keeps them beside the blob)."""
        if self._fused is None:
            self._fused = []
            for names in runtime_origins(self.compiled).values():
                own = tuple(dict.fromkeys(n.split("/", 1)[0] for n in names))
                if len(own) > 1:
                    self._fused.append(own)
        return self._fused

    def _own(self) -> list[np.ndarray]:
        """Give each static numeric output a kernel-owned buffer holding this first run's
        values, set as the request's output tensor (written in place from now on)."""
        owned: list[np.ndarray | None] = []
        out = []
        for i in range(self._n_out):
            value = np.array(self.request.get_output_tensor(i).data)
            buf = None
            if self._static[i] and value.dtype.kind in "biufc" and value.size:
                buf = aligned_empty(value.shape, value.dtype)
                buf[...] = value
                self.request.set_output_tensor(i, self._tensor(buf, shared_memory=True))
            owned.append(buf)
            out.append(value if buf is None else buf)
        self._owned = owned
        return out


class OpenVinoBackend(Backend):
    """OpenVINO on CPU. Options: `threads` (default all cores), `precision` (inference
    precision hint, default "f32": on AMX/AVX512-BF16 hosts OpenVINO would pick bf16)."""

    name = "openvino"
    kind = BackendKind.GRAPH
    call_revision = 1  # 1: `infer(share_outputs=True)`, no copy of each output per call
    capability_revision = 5  # ops it computes otherwise are left out (`_miscomputed_nodes`)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.threads = int(options.get("threads", usable_cores()))
        self.precision = str(options.get("precision", "f32"))
        self._core: Any = None
        self._probe_cache: dict[str, bool] = {}

    @property
    def core(self) -> Any:
        if self._core is None:
            import openvino as ov

            self._core = ov.Core()
            off_altstack()  # its compiled models leave the signal stack dangling (`sigstack`)
        return self._core

    @property
    def version(self) -> str:
        import openvino as ov

        return ov.get_version()

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            import openvino as ov
        except ImportError:
            return "openvino is not installed"
        try:
            if DEVICE not in ov.Core().available_devices:
                return "openvino has no CPU device"
        except Exception as e:  # a broken install: say so, never crash
            return f"openvino cannot start: {e}"
        return None

    def config(self) -> dict[str, Any]:
        """compile_model settings: latency mode, one stream, no core pinning (shared cores)."""
        return {
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(self.threads),
            "INFERENCE_PRECISION_HINT": self.precision,
            "ENABLE_CPU_PINNING": "NO",
        }

    def _capability(self, graph: DataflowGraph) -> int:
        proto = export_graph(graph, external=True)
        with model_source(proto, store_of(graph.func_op.parent)) as source:
            try:
                model = read_onnx(self.core, source)
                supported = set(self.core.query_model(model, DEVICE, self.config()))
            except Exception:
                # an op the ONNX frontend cannot read, or one whose transformation throws
                # during the query (OpenVINO 2026.4's Einsum decomposition on an ellipsis outer
                # product, '...nd,...ne->...nde'): it fails the whole model, so ask op by op
                return self._capability_by_probe(graph)
        return supported_nodes(model, supported, graph, tensor_owners(proto)) & graph.op_bits

    def capability(self, graph: DataflowGraph) -> int:
        return self._capability(graph) & ~_miscomputed_nodes(graph)

    @property
    def artifact_target(self) -> str:
        """This CPU: the CPU plugin's blob holds the graph as it compiled it here (kernels
        and weight layouts chosen for this CPU's instructions), so another CPU compiles
        again rather than trust it."""
        return cpu_identity()

    def refusal(self, graph: DataflowGraph, node: int) -> str:
        return (_miscomputed(graph.nodes[node], graph_constants(graph))
                or super().refusal(graph, node))

    def _capability_by_probe(self, graph: DataflowGraph) -> int:
        """Ask query_model about each op alone (cached per op signature)."""
        from collage_mlir.backends.iree import op_signature

        bits = 0
        for node in graph.op_nodes():
            sig = op_signature(graph, node)
            if sig not in self._probe_cache:
                self._probe_cache[sig] = self._probe(SubGraph(graph, 1 << node.index))
            if self._probe_cache[sig]:
                bits |= 1 << node.index
        return bits

    def _probe(self, sub: SubGraph) -> bool:
        try:
            model = read_onnx(self.core, export_function(sub.extract("probe")).SerializeToString())
            supported = set(self.core.query_model(model, DEVICE, self.config()))
        except Exception:
            return False
        return any(op.get_friendly_name() in supported and op.get_type_name() not in
                   ("Parameter", "Result", "Constant") for op in model.get_ordered_ops())

    def compile(self, module: ir.Module) -> Kernel:
        with model_source(export_function(module, external=True), store_of(module)) as source:
            model = read_onnx(self.core, source)
            return OpenVinoKernel(self.core.compile_model(model, DEVICE, self.config()),
                                  arg_names=_arg_names(module))

    def save_kernel(self, kernel: Kernel, module: ir.Module, stem: str) -> list[str]:
        """OpenVINO's own compiled blob (`export_model`), re-imported without compiling.

        A model OpenVINO imported from a blob exports one that does not read back (2026.4:
        "Unable to read the model"), so an imported kernel is saved as its blob file (kept
        under a second name while the kernel lives: `_kept_name`), or compiled again when
        that file is gone."""
        path, fusions = Path(stem + ".ovblob"), Path(stem + FUSED_SUFFIX)
        source = getattr(kernel, "source", None)
        if source is not None and source.is_file():
            shutil.copyfile(source, path)
        else:
            if source is not None:
                kernel = self.compile(module)
            blob = kernel.compiled.export_model()
            if not self._reproduces(kernel, blob, module):
                return []  # compiled again when loaded
            path.write_bytes(blob.getbuffer())  # no copy of it
        fusions.write_text(json.dumps(kernel.fused()))
        return [str(path), str(fusions)]

    def _reproduces(self, kernel: OpenVinoKernel, blob: io.BytesIO, module: ir.Module) -> bool:
        """Whether the model imported from `blob` computes what `kernel` does, on made-up
        inputs. OpenVINO's export does not always keep a model's numbers: 2026.4 exported
        RotaryEmbedding so that half its outputs came back wrong, by up to 1.1 on values of
        1.7, from a kernel that computed them right."""
        from collage_mlir.tensors import compare, make_inputs

        try:
            inputs = make_inputs(find_function(module))
            imported = OpenVinoKernel(self.core.import_model(blob.getvalue(), DEVICE,
                                                             self.config()),
                                      arg_names=_arg_names(module))
            return compare(imported.run(inputs), kernel.run(inputs), SAME_CODE) is None
        except Exception:  # not known to reproduce: compiled again when loaded
            return False

    def load_kernel(self, module: ir.Module, stem: str) -> Kernel:
        path, fusions = Path(stem + ".ovblob"), Path(stem + FUSED_SUFFIX)
        compiled = self.core.import_model(path.read_bytes(), DEVICE, self.config())
        fused = ([tuple(g) for g in json.loads(fusions.read_text())] if fusions.is_file()
                 else None)
        source = _kept_name(path.resolve())
        kernel = OpenVinoKernel(compiled, source=source, fused=fused,
                                arg_names=_arg_names(module))
        if source != path.resolve():
            weakref.finalize(kernel, _unlink, source)
        return kernel

    def cache_options(self) -> str:
        return f"threads={self.threads},precision={self.precision}"


def _arg_names(module: ir.Module) -> list[str]:
    """The input names the export gives the module's function (`export_function`)."""
    return io_names(find_function(module))[0]


_kept_count = itertools.count()
_kept_dir: dict[int, ScratchDir] = {}  # pid → this process's folder of kept names


def _kept_name(path: Path) -> Path:
    """A second name (a hard link in this process's held temporary folder) for the blob at
    `path`, so that a kernel imported from it can still be saved once `path` is gone: a
    probe's scratch folder goes once its kernels are loaded, and OpenVINO cannot export an
    imported model in a form it reads back. Where no link can be made (another file
    system) the name is a copy: `path` itself could be replaced by another model's blob
    before the kernel is saved. The caller removes the name with the kernel
    (`weakref.finalize`, which also runs at exit); the folder goes at exit, or is swept
    (`scratch.sweep`) after a kill."""
    pid = os.getpid()  # a forked child makes its own
    if pid not in _kept_dir:
        _kept_dir[pid] = ScratchDir("ov")
    kept = Path(_kept_dir[pid].name) / f"{next(_kept_count)}.ovblob"
    try:
        os.link(path, kept)
    except OSError:
        shutil.copyfile(path, kept)
    return kept


def _unlink(path: Path) -> None:
    """Remove a kept name; with the last one, this process's folder of them (a probe's
    child is killed once it has answered, before its exit could remove it)."""
    with contextlib.suppress(OSError):
        path.unlink()
    folder = _kept_dir.get(os.getpid())
    if folder is not None and path.parent == Path(folder.name):
        with contextlib.suppress(OSError):
            if all(p.name == HELD for p in path.parent.iterdir()):
                _kept_dir.pop(os.getpid()).cleanup()
