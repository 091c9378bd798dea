"""onnxruntime (CPU execution provider): a graph-kind backend and the natural fallback.

Regions reach it as exported ONNX models. Its capability is onnxruntime's own kernel registry
(`get_all_opkernel_def`): an op is supported when the CPU EP registers a kernel whose version
range covers the op's schema version at the function's opset and whose type constraint admits
the op's first input. Kernels run through an IO binding whose inputs are re-bound only when the
caller passes a different buffer and whose outputs are written into buffers the kernel owns,
the cheapest call path measured here (see design.md and bench/handoff.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from iree.compiler import ir

from collage_mlir.backends.base import Backend, BackendKind, Kernel, aligned_empty, usable_cores
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import public_functions
from collage_mlir.export import export_function
from collage_mlir.export.resources import model_source, store_of
from collage_mlir.graph.dataflow import DataflowGraph

PROVIDER = "CPUExecutionProvider"
_ONNX_TYPES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float", "f64": "double", "i1": "bool",
    "si8": "int8", "si16": "int16", "si32": "int32", "si64": "int64", "ui8": "uint8",
    "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
}


def function_opset(func_op: ir.Operation) -> int:
    """The default-domain opset of an ONNX-in-MLIR function (latest known when absent)."""
    key = onnx_view.META_PREFIX + "opset_version"
    if key in func_op.attributes:
        return ir.IntegerAttr(func_op.attributes[key]).value
    return onnx.defs.onnx_opset_version()


@functools.cache
def _kernel_table() -> dict[str, list[tuple[int, int, dict[str, frozenset[str]]]]]:
    """op type → [(since, until, type constraints)] of the CPU EP's default-domain kernels."""
    from onnxruntime.capi import onnxruntime_pybind11_state as c

    table: dict[str, list[tuple[int, int, dict[str, frozenset[str]]]]] = {}
    for k in c.get_all_opkernel_def():
        if k.provider == PROVIDER and k.domain in ("", "ai.onnx"):
            lo, hi = k.version_range
            constraints = {n: frozenset(ts) for n, ts in k.type_constraints.items()}
            table.setdefault(k.op_name, []).append((lo, hi, constraints))
    return table


def _first_input_type(node_op: ir.Operation) -> str | None:
    for v in node_op.operands:
        parsed = onnx_view.tensor_type(v.type)
        if parsed is not None:
            return _ONNX_TYPES.get(parsed[1])
    return None


def supports(op_type: str, opset: int, first_input: str | None) -> bool:
    """Whether the CPU EP has a kernel for `op_type` at `opset` taking `first_input` type.
    A float16 node without a float16 kernel runs in float: the session inserts the casts
    around it (onnxruntime's InsertCastTransformer, at every optimization level)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset)
    except onnx.defs.SchemaError:
        return False
    kernels = _kernel_table().get(op_type, [])
    param = schema.inputs[0].type_str if schema.inputs else None
    served = {f"tensor({first_input})"} | ({"tensor(float)"} if first_input == "float16"
                                           else set())
    for lo, hi, constraints in kernels:
        if not lo <= schema.since_version <= hi:
            continue
        allowed = constraints.get(param) if param else None
        if allowed is None or first_input is None or served & set(allowed):
            return True
    return False


def session_options(threads: int, optimize: bool = True) -> Any:
    """Options shared by every session: no spinning (it steals cores from other backends)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return so


def passed_through(module: ir.Module) -> list[bool]:
    """For each result of the module's entry point, whether it is one of its arguments,
    as it is or through Identity ops (which onnxruntime removes)."""
    fn = public_functions(module)[0]
    block = fn.regions[0].blocks[0]
    out = []
    for value in list(block.operations)[-1].operands:
        while not isinstance(value.owner, ir.Block) and \
                onnx_view.op_type(value.owner) == "Identity":
            value = value.owner.operands[0]
        out.append(isinstance(value.owner, ir.Block))
    return out


class OrtKernel(Kernel):
    """A session plus an IO binding; inputs are re-bound only when their buffer changes.

    Binding is by reference (no copy): each bound input array is kept alive while bound, and
    in-place updates of the same array are seen by the next run. The first run lets
    onnxruntime allocate the outputs; from then on every output whose shape the session
    declares static is written into a buffer the kernel owns (`run_borrowed` returns it,
    `run` a copy), so a run allocates nothing. Not an output that is an input passed
    through (`passthrough`): onnxruntime hands the input over and never writes the buffer
    bound to it, which would keep the first run's values.
    """

    def __init__(self, session: Any, passthrough: Sequence[bool] = ()) -> None:
        self.session = session
        self._passthrough = list(passthrough) or [False] * len(session.get_outputs())
        self.input_names = [i.name for i in session.get_inputs()]
        self.output_names = [o.name for o in session.get_outputs()]
        self._static = [all(isinstance(d, int) for d in o.shape) for o in session.get_outputs()]
        self._binding = session.io_binding()
        for name in self.output_names:
            self._binding.bind_output(name, "cpu")
        self._refs: list[np.ndarray | None] = [None] * len(self.input_names)
        self._owned: list[np.ndarray | None] | None = None

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.array(o, copy=True) for o in self.run_borrowed(inputs)]

    def run_borrowed(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.input_names):
            raise ValueError(f"expected {len(self.input_names)} inputs, got {len(inputs)}")
        for k, x in enumerate(inputs):
            if x is not self._refs[k]:  # the same array object is still bound: nothing to do
                self._bind(k, x)
        self.session.run_with_iobinding(self._binding)
        if self._owned is None:
            return self._own(self._binding.copy_outputs_to_cpu())
        if all(o is not None for o in self._owned):
            return list(self._owned)  # type: ignore[arg-type]
        fresh = self._binding.copy_outputs_to_cpu()  # every output, in order
        return [o if o is not None else f for o, f in zip(self._owned, fresh, strict=True)]

    def _bind(self, k: int, x: np.ndarray) -> None:
        x = x if isinstance(x, np.ndarray) and x.flags.c_contiguous else np.asarray(x, order="C")
        self._binding.bind_cpu_input(self.input_names[k], x)
        self._refs[k] = x

    def _own(self, first: list[np.ndarray]) -> list[np.ndarray]:
        """Bind each static numeric output to a kernel-owned buffer holding `first`'s
        values (the first run's outputs); the others stay allocated by onnxruntime."""
        owned: list[np.ndarray | None] = []
        self._binding.clear_binding_outputs()
        for name, value, static, through in zip(self.output_names, first, self._static,
                                                self._passthrough, strict=True):
            buf = None
            if static and not through and isinstance(value, np.ndarray) \
                    and value.dtype.kind in "biufc" and value.size:
                buf = aligned_empty(value.shape, value.dtype)
                buf[...] = value
                try:
                    self._binding.bind_output(name, "cpu", 0, value.dtype.type,
                                              list(value.shape), buf.ctypes.data)
                except Exception:  # a type onnxruntime cannot bind: it allocates
                    buf = None
            if buf is None:
                self._binding.bind_output(name, "cpu")
            owned.append(buf)
        self._owned = owned
        return [o if o is not None else v for o, v in zip(owned, first, strict=True)]


class OnnxRuntimeBackend(Backend):
    """onnxruntime on the CPU EP. Options: `threads` (intra-op, default all cores),
    `optimize` (graph optimizations, default True)."""

    name = "onnxruntime"
    kind = BackendKind.GRAPH

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.threads = int(options.get("threads", usable_cores()))
        self.optimize = bool(options.get("optimize", True))

    @property
    def version(self) -> str:
        import onnxruntime

        return onnxruntime.__version__

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            import onnxruntime
        except ImportError:
            return "onnxruntime is not installed"
        if PROVIDER not in onnxruntime.get_available_providers():
            return f"onnxruntime has no {PROVIDER}"
        return None

    def capability(self, graph: DataflowGraph) -> int:
        opset = function_opset(graph.func_op)
        bits = 0
        for node in graph.op_nodes():
            if supports(node.op_type, opset, _first_input_type(node.op)):
                bits |= 1 << node.index
        return bits

    def compile(self, module: ir.Module) -> Kernel:
        with model_source(export_function(module, external=True), store_of(module)) as model:
            return self._session(model, module)

    def _session(self, model: bytes | str, module: ir.Module) -> OrtKernel:
        """A kernel over the ONNX model given as bytes or a file path. The session holds the
        only copy of the weights: the model bytes are not kept (a whole model's weights
        would be held twice for as long as the kernel lives)."""
        import onnxruntime as ort

        session = ort.InferenceSession(model, session_options(self.threads, self.optimize),
                                       providers=[PROVIDER])
        return OrtKernel(session, passed_through(module))

    def save_kernel(self, kernel: Kernel, module: ir.Module, stem: str) -> list[str]:
        """The region exported again as the ONNX model the session was built from
        (onnxruntime's own optimizations run again at load, in milliseconds)."""
        path = Path(stem + ".onnx")
        path.write_bytes(export_function(module).SerializeToString())
        return [str(path)]

    def load_kernel(self, module: ir.Module, stem: str) -> Kernel:
        return self._session(stem + ".onnx", module)

    def cache_options(self) -> str:
        return f"threads={self.threads},optimize={int(self.optimize)}"
