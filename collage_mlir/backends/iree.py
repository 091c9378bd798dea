"""IREE: a compiler-kind backend, on the CPU (`iree`: llvm-cpu, local-task driver) or on an
NVIDIA GPU (`iree-cuda`: the cuda target and driver).

It compiles the extracted ONNX-in-MLIR function itself; no export. `compile_many` puts many
regions into one module (one compile, one vmfb — minutes saved over one compile per
candidate) and falls back to one compile per region when the joint compile fails, so a bad
region costs only itself. Capability is IREE's own answer: each distinct op signature is
compiled alone through input conversion only (`--compile-to=input`, fast), in batches that
are split in halves on failure, and the answer is cached in-process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from iree.compiler import ir

from collage_mlir.backends import artifacts, iree_rewrites
from collage_mlir.backends.artifacts import artifact_key
from collage_mlir.backends.base import (
    ALIGNMENT,
    Backend,
    BackendKind,
    Kernel,
    cpu_identity,
    usable_cores,
)
from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.export.onnx_export import Constant, constant_reader, graph_constants
from collage_mlir.export.resources import materialize, module_resources
from collage_mlir.graph.dataflow import DataflowGraph, Node, NodeKind
from collage_mlir.graph.subgraph import SubGraph
from collage_mlir.scratch import ScratchDir
from collage_mlir.tensors import result_specs

DEFAULT_FLAGS = (
    "--iree-llvmcpu-target-cpu=host",
    "--iree-opt-level=O3",
    "--iree-opt-data-tiling",
    "--iree-llvmcpu-enable-ukernels=all",
    "--iree-llvmcpu-stack-allocation-limit=1048576",
    "--iree-input-demote-f64-to-f32=false",
    "--iree-preprocessing-pass-pipeline="
    "builtin.module(util.func(iree-global-opt-convert-conv2d-to-img2col))",
)
"""Fast code on this host (all accepted by iree-base-compiler 3.13). The default stack
allocation limit (32 KiB per dispatch) refuses whole transformers ("exceeded stack
allocation limit"): with 1 MiB, bert_base compiles in 10 s and matches onnxruntime.
Convolutions go through img2col into matmuls (IREE's tiled, ukernel path): compiled as
direct NCHW convolutions they run 5-40x slower on x86 (a resnet50 3x3 convolution 64 ms
against 1.9 ms); grouped and depthwise ones are left as they are. float64 stays float64: by
default IREE computes it in float32, and a region with float64 arguments then fails at its
first call (its buffers are half the size the arguments need)."""
RETRY_DROPPING = ("--iree-opt-data-tiling", "--iree-opt-level=O3")
"""Flags a region that fails to compile is compiled again without, once, before it counts as
failed. iree-base-compiler 3.13's data tiling breaks whole Mamba2-style models (an encoding
put on an i1 mask, "large vector sizes" in a fused einsum) that compile without it; at O3
an Add read both by a Softmax and as a graph output fails ("'vector.store' op write affecting
operations on global resources"), which compiles at the default level."""
RETRIED = "(final; "
"""Begins what `_compile_again` says of a region that fails to compile: "(final; retried
without …) " or "(final; no flag to drop) ". A cached IREE compile failure without it
predates retrying the regions a joint compile's error names, and is measured again
(`IreeBackend.outdated_failure`)."""
DRIVER = "local-task"
WORKER_STACK_BYTES = 16 << 20
"""Stack of each IREE task worker. A dispatch may put up to the compile flag's 1 MiB on it;
with the runtime's default, vit_base's whole model segfaulted on its first call."""
_OPSET = onnx_view.META_PREFIX + "opset_version"
SMALL_CONSTANT = 16
"""Constant operands up to this many elements are part of an op signature (shapes, axes)."""
JOINT_WEIGHT_BYTES = 64 << 20
"""One joint compile takes regions until their constants add up to this much: iree-compile
holds all of them at once, overlapping regions each with their own copy."""

_FUNC = re.compile(r"func\.func @([\w$.-]+)")
_ERROR_LINE = re.compile(r"regions\.mlir:(\d+):\d+: error:")
_SCRATCH_SOURCE = re.compile(r"\S*/collage-iree-\w+/regions\.mlir")
_OP_NAME = re.compile(r'name = "(onnx\.\w+)"')
_DIMS = re.compile(r"\[([-?\d,]*)\]")
_support: dict[str, bool] = {}
"""op signature → can IREE's input conversion take it (per process)."""


# -- op signatures and capability -------------------------------------------------------

def op_signature(graph: DataflowGraph, node: Node) -> str:
    """What decides whether a backend can take an op: type, opset, attributes, operand and result
    ranks and element types (sizes other than 1 abstracted), and the values of small
    constant operands (Reshape targets, axes)."""
    opset = graph.func_op.attributes[_OPSET] if _OPSET in graph.func_op.attributes else None
    parts = [node.op_type, f"opset={opset}", str(sorted((k, str(v)) for k, v in
                                      onnx_view.attributes(node.op).items()))]
    for src, value in zip(node.operands, node.op.operands, strict=True):
        if src is None:
            parts.append("none")
        elif graph.nodes[src[0]].kind is NodeKind.CONST:
            parts.append("const:" + _abstract(_constant_text(graph.nodes[src[0]], value)))
        else:
            parts.append(_abstract(str(value.type)))
    parts.extend(_abstract(str(r.type)) for r in node.op.results)
    return "|".join(parts)


def _abstract(type_text: str) -> str:
    """A tensor type with sizes other than 1 collapsed to `n`: legality hardly depends on
    sizes, and densenet's 668 ops then share a few dozen signatures."""
    def dims(m: re.Match[str]) -> str:
        return "[" + ",".join(d if d in ("1", "?", "") else "n"
                              for d in m.group(1).split(",")) + "]"
    return _DIMS.sub(dims, type_text)


def _constant_text(producer: Node, value: ir.Value) -> str:
    attrs = onnx_view.attributes(producer.op) if producer.op_type == "Constant" else {}
    attr = attrs.get("value")
    if isinstance(attr, ir.DenseElementsAttr) and (attr.is_splat or len(attr) <= SMALL_CONSTANT):
        return str(attr)
    return str(value.type)


INPUT_CONVERSION_TIMEOUT_S = 60.0
"""How long the capability probe's input conversion may take (a few seconds for a whole
model's op signatures): iree-compile 3.13 never finished Pad mode=wrap on int32."""


def _compile(module: ir.Module, flags: Sequence[str], work: Path,
             target: str = "llvm-cpu", timeout_s: float | None = None,
             kept_as: Sequence[str] = ()) -> Path:
    """Compile `module` with iree-compile through files in `work` (`regions.mlir` in,
    `regions.vmfb` out), raising past `timeout_s`. Files, not strings: a model's weights
    would otherwise be held as hex text, encoded again for the tool's stdin and returned
    through its stdout (about five copies of the weights at once in this process).
    With `kept_as` (what else shapes the output: versions, this CPU), the output is taken
    from and kept in the artifact store (`artifacts`)."""
    from iree.compiler.tools.core import (
        CompilerOptions,
        CompilerToolError,
        TempFileSaver,
        build_compile_command_line,
    )

    source, output = work / "regions.mlir", work / "regions.vmfb"
    with open(source, "w") as f:
        module.operation.print(file=f)
    key = artifact_key(source, [*kept_as, target, *flags]) if kept_as else ""
    if key and artifacts.fetch(key, output, ".vmfb"):
        return output
    targets = [target] if target == "llvm-cpu" else []  # a GPU target comes as a device flag
    options = CompilerOptions(output_file=str(output), target_backends=targets,
                              input_type="onnx", extra_args=list(flags))
    with TempFileSaver.implicit() as tfs:
        command = build_compile_command_line(str(source), tfs, options)
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"iree-compile did not finish in {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise CompilerToolError(done)
    if key:
        artifacts.keep(key, output, ".vmfb")
    return output


def _failed_functions(work: Path, names: list[str], error: str) -> set[int]:
    """Indices of the functions of `work/regions.mlir` that the `regions.mlir:LINE:COL:
    error:` lines of `error` point into."""
    starts = []
    source = work / "regions.mlir"
    if source.exists():
        with open(source) as f:
            for lineno, line in enumerate(f, 1):
                if line.startswith("{-#"):  # the resource section: whole blobs per line
                    break
                m = _FUNC.search(line)
                if m and m.group(1) in names:
                    starts.append((lineno, names.index(m.group(1))))
    bad: set[int] = set()
    for m in _ERROR_LINE.finditer(error):
        line = int(m.group(1))
        owner = [k for start, k in starts if start <= line]
        if owner:
            bad.add(owner[-1])
    return bad


def _accepts(probes: dict[str, ir.Module], sigs: list[str]) -> None:
    """Decide `sigs` (one-op probe modules in `probes`) by input conversion, all in one
    compile; functions the errors point at are dropped and the rest retried (halving when
    the errors cannot be placed)."""
    while sigs:
        bad = _input_conversion_failures([probes[s] for s in sigs])
        if bad is None:
            _support.update((s, True) for s in sigs)
            return
        if len(sigs) == 1:
            _support[sigs[0]] = False
            return
        if not bad:
            half = len(sigs) // 2
            _accepts(probes, sigs[:half])
            _accepts(probes, sigs[half:])
            return
        _support.update((sigs[k], False) for k in bad)
        sigs = [s for k, s in enumerate(sigs) if k not in bad]


def _input_conversion_failures(modules: list[ir.Module]) -> set[int] | None:
    """None when IREE's input conversion takes every module in one compile; else the indices
    of the modules its errors point at (empty when they cannot be placed)."""
    combined, names = combine(modules, "probe")
    with ScratchDir("iree") as work:
        try:
            _compile(combined, ["--compile-to=input"], Path(work),
                     timeout_s=INPUT_CONVERSION_TIMEOUT_S)
        except Exception as e:
            return _failed_functions(Path(work), names, str(e))
    return None


def iree_capability(graph: DataflowGraph) -> int:
    """Bitset of op nodes whose signature IREE's input conversion accepts (cached)."""
    sig_of = {node.index: op_signature(graph, node) for node in graph.op_nodes()}
    probes: dict[str, ir.Module] = {}
    for node in graph.op_nodes():
        sig = sig_of[node.index]
        if sig in _support or sig in probes:
            continue
        try:
            probes[sig] = SubGraph(graph, 1 << node.index).extract("probe")
        except Exception:  # cannot be extracted alone: IREE cannot be asked
            _support[sig] = False
    _accepts(probes, list(probes))
    return sum(1 << i for i, sig in sig_of.items() if _support.get(sig))


UNSIGNED_AS_SIGNED = frozenset({"Abs", "Div", "Mod", "Clip", "TopK"})
"""Ops IREE's ONNX input conversion computes on unsigned integers as on signed ones (uint8
255 / 169 gave 0, Abs(uint8 255) gave 1)."""


def miscomputed(node: Node, constant: Constant) -> str:
    """Why IREE computes `node` otherwise than ONNX says ("" when it does not), so that it
    is not offered (CPU and GPU alike: the conversion is shared): `UNSIGNED_AS_SIGNED` ops;
    an integer Neg in float32 (wrong past 2**24; int8 -(-128) gave 127); an integer Pow
    through floats ((-3) ** 3 gave INT32_MIN); a Pow whose exponent is not one constant
    value: computed as exp(y log x), it gives NaN for a negative base raised to a whole
    exponent ((-3) ** 2.0) and for 0 ** 0."""
    base = onnx_view.element(node.op.operands[0]) if len(node.op.operands) else ""
    if node.op_type in UNSIGNED_AS_SIGNED and base.startswith("ui"):
        return f"computes an unsigned {node.op_type} as signed"
    if node.op_type == "Neg" and base.startswith("si"):
        return "computes an integer Neg in float32 (wrong past 2**24)"
    if node.op_type == "Pow" and base[:2] in ("si", "ui"):
        return "computes an integer Pow through floats"
    if node.op_type == "Pow" and not _one_value(constant(node.op.operands[1])):
        return ("gives NaN for a negative or zero base unless the exponent is one "
                "constant value")
    return ""


def _one_value(value: np.ndarray | None) -> bool:
    return value is not None and value.size > 0 and bool((value == value.flat[0]).all())


def miscomputed_nodes(graph: DataflowGraph) -> int:
    """The op nodes `miscomputed` gives a reason for, as a bitset."""
    constant = graph_constants(graph)
    return sum(1 << n.index for n in graph.op_nodes() if miscomputed(n, constant))


# -- modules ----------------------------------------------------------------------------

def _declared(module: ir.Module) -> list[np.dtype | None]:
    """The dtypes a region module's function declares it returns."""
    return [s.dtype if s else None for s in result_specs(_only_function(module))]


def _only_function(module: ir.Module) -> ir.Operation:
    funcs = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise ValueError(f"expected one func.func in the region module, found {len(funcs)}")
    return funcs[0]


def combine(modules: Sequence[ir.Module], prefix: str = "collage_region",
            cpu_rewrites: bool = False) -> tuple[ir.Module, list[str]]:
    """One module holding every region's function, renamed `prefix_k` (with
    `cpu_rewrites`, respelled for IREE's CPU compile: `iree_rewrites`)."""
    names = [f"{prefix}_{k}" for k in range(len(modules))]
    ctx = _only_function(modules[0]).context
    with ctx, ir.Location.unknown():
        combined = ir.Module.create()
        for module, name in zip(modules, names, strict=True):
            blobs = _blob_table(module) if cpu_rewrites else {}
            materialize(module)  # IREE compiles the text: weights kept in a store go back in
            if _only_function(module).context is not ctx:
                module = ir.Module.parse(str(module), ctx)
            clone = _only_function(module).clone(ip=ir.InsertionPoint(combined.body))
            clone.attributes["sym_name"] = ir.StringAttr.get(name)
            if cpu_rewrites:
                iree_rewrites.rewrite(clone, constant_reader(lambda table=blobs: table))
    return combined, names


def _blob_table(module: ir.Module) -> Mapping[str, bytes | memoryview]:
    """The module's blobs, read before `materialize` drops the name of its weight store, and
    only when it has a Resize (the one rewrite that reads a constant)."""
    has_resize = onnx_view.ops_of(_only_function(module), "Resize")
    return module_resources(module) if has_resize else {}


# -- runtime ----------------------------------------------------------------------------

@functools.cache
def _runtime_config(driver: str, threads: int) -> Any:
    """One device per driver and process; local-task's worker count and stack size must be
    set before it is created."""
    import iree.runtime as rt

    if driver != DRIVER:
        return rt.Config(driver)
    for flag in (f"--task_topology_max_group_count={threads}",
                 f"--task_worker_stack_size={WORKER_STACK_BYTES}"):
        try:
            rt.flags.parse_flags(flag)
        except Exception:  # an unknown flag costs only its own setting
            pass
    return rt.Config(driver)


def _same_bits(got: np.dtype, want: np.dtype) -> bool:
    """Integers of one width that differ only in signedness."""
    return got != want and got.kind in "iu" and want.kind in "iu" and \
        got.itemsize == want.itemsize


class IreeKernel(Kernel):
    """One function of a loaded vmfb (several kernels may share one context).

    An input that is C-contiguous and ALIGNMENT-aligned (another kernel's output, an
    `aligned_empty` array) is imported as a buffer view over its own memory (DLPack, no
    copy) for the call; any other input is copied in by IREE. Nothing is kept between
    calls: keeping the last inputs would keep other IREE kernels' output buffers alive, and
    IREE would map fresh memory for every output. Outputs are IREE's fresh buffers, mapped
    (not copied) to numpy, as the dtypes the function declares (`dtypes`; IREE's integers
    are signless: a declared uint8 comes back int8, the same bits). `vmfb` is the (possibly
    shared) compiled module, mapped from its file: what `save_kernel` writes.
    """

    def __init__(self, context: Any, fn_name: str, vmfb: Any, host: bool = True,
                 dtypes: Sequence[np.dtype | None] = ()) -> None:
        self.context = context
        self.dtypes = list(dtypes)
        self.fn_name = fn_name
        self.vmfb = vmfb
        self._fn = context.modules.module[fn_name]
        self._device = context.config.device
        self._host = host
        self._staging: dict[int, tuple[Any, np.ndarray, Any]] = {}

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Fresh outputs: an output over an input's memory (a function returning its
        argument) is copied."""
        out = self.run_borrowed(inputs)
        return [np.array(o, copy=True) if any(np.may_share_memory(o, x) for x in inputs)
                else o for o in out]

    def run_borrowed(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        args = (self._arg(x) if self._host else self._staged(k, x) for k, x in enumerate(inputs))
        result = self._fn(*args)
        if not isinstance(result, tuple | list):
            result = (result,)
        out = [np.asarray(r.to_host()) for r in result]
        for k, want in enumerate(self.dtypes[:len(out)]):
            if want is not None and _same_bits(out[k].dtype, want):
                out[k] = out[k].view(want)
        return out

    def _arg(self, x: np.ndarray) -> Any:
        """On the host device: a buffer view over `x`'s memory where IREE can import it,
        else `x` (copied)."""
        if (isinstance(x, np.ndarray) and x.size and x.flags.c_contiguous
                and x.ctypes.data % ALIGNMENT == 0):
            try:
                return self._device.from_dlpack_capsule(x.__dlpack__())
            except Exception:  # a dtype or array DLPack cannot carry: IREE copies it
                pass
        return x

    def _staged(self, k: int, x: np.ndarray) -> Any:
        """On a GPU: input `k` copied into pinned host memory the GPU reads directly, a
        buffer the kernel keeps for that input while its shape and type stay (far cheaper
        than IREE's own copy of a host array: docs/results.md, "On an NVIDIA GPU"). A host pointer
        imported as `_arg` does would be read as device memory (CUDA_ERROR_ILLEGAL_ADDRESS,
        and the process's CUDA context is lost)."""
        import iree.runtime as rt

        x = np.asarray(x, order="C")  # ascontiguousarray would make a 0-d array 1-d
        slot = self._staging.get(k)
        if slot is None or slot[1].shape != x.shape or slot[1].dtype != x.dtype:
            element = rt.array_interop.map_dtype_to_element_type(x.dtype)
            if element is None or not x.size:
                return x  # a type IREE has no element for, or nothing to copy: IREE's way
            buffer = self._device.allocator.allocate_buffer(
                memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
                allowed_usage=rt.BufferUsage.DEFAULT | rt.BufferUsage.MAPPING,
                allocation_size=x.nbytes)
            mapping = buffer.map()
            slot = (rt.HalBufferView(buffer, x.shape, element),
                    mapping.asarray(x.shape, x.dtype), mapping)
            self._staging[k] = slot
        np.copyto(slot[1], x)
        return slot[0]


class IreeBackend(Backend):
    """IREE llvm-cpu. Options: `threads` (task workers, default all cores), `flags` (extra
    iree-compile flags, replacing DEFAULT_FLAGS)."""

    name = "iree"
    kind = BackendKind.COMPILER
    capability_revision = 1  # ops it computes otherwise are left out (`miscomputed_nodes`)
    target = "llvm-cpu"
    driver = DRIVER
    cpu_rewrites = True
    """Ops respelled for the CPU compile (`iree_rewrites`): 1-D convolutions as 2-D ones for
    img2col to take, nearest resizes by whole factors as broadcasts."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.threads = int(options.get("threads", usable_cores()))
        flags = options.get("flags", self.default_flags())
        self.flags = tuple(flags.split() if isinstance(flags, str) else flags)
        self._loaded: dict[Path, tuple[Any, bytes]] = {}

    @property
    def version(self) -> str:
        from importlib.metadata import version

        return f"{version('iree-base-compiler')}/{version('iree-base-runtime')}"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        try:
            import iree.compiler  # noqa: F401
        except ImportError:
            return "iree-base-compiler is not installed"
        try:
            import iree.runtime as rt
        except ImportError:
            return "iree-base-runtime is not installed"
        if cls.driver not in rt.query_available_drivers():
            return f"iree runtime has no {cls.driver} driver"
        return None

    def default_flags(self) -> tuple[str, ...]:
        return DEFAULT_FLAGS

    @classmethod
    def outdated_failure(cls, reason: str) -> bool:
        """A compile failure without `RETRIED`: from before the regions a joint compile's
        error names were compiled again (`_compile_again`)."""
        return "iree-compile " in reason and RETRIED not in reason

    @property
    def artifact_target(self) -> str:
        """This CPU, when the code is compiled for a CPU (`target-cpu=host` by default, or
        named, or its features): run on a CPU without its instructions, it would die of an
        illegal instruction."""
        tied = any(f.startswith("--iree-llvmcpu-target-cpu") for f in self.flags)
        return cpu_identity() if tied else ""

    def capability(self, graph: DataflowGraph) -> int:
        return iree_capability(graph) & ~miscomputed_nodes(graph)

    def refusal(self, graph: DataflowGraph, node: int) -> str:
        constant = graph_constants(graph)
        return miscomputed(graph.nodes[node], constant) or super().refusal(graph, node)

    def _load(self, vmfb_path: Path) -> tuple[Any, Any]:
        """(a context running the vmfb at `vmfb_path`, the vmfb's bytes): the file is mapped,
        not read, and may be deleted once this returns."""
        import iree.runtime as rt

        config = _runtime_config(self.driver, self.threads)
        context = rt.SystemContext(config=config)
        module = rt.VmModule.mmap(context.instance, str(vmfb_path))
        context.add_vm_module(module)
        return context, module.stashed_flatbuffer_blob

    def compile(self, module: ir.Module) -> Kernel:
        result = self.compile_many([module])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def compile_many(self, modules: Sequence[ir.Module]) -> list[Kernel | Exception]:
        """Regions in as few compiles as their weights allow (`JOINT_WEIGHT_BYTES`)."""
        results: list[Kernel | Exception] = [RuntimeError("not compiled")] * len(modules)
        for batch in _weight_batches(modules):
            for i, kernel in zip(batch, self._compile_batch([modules[i] for i in batch]),
                                 strict=True):
                results[i] = kernel
        return results

    def _compile_batch(self, modules: Sequence[ir.Module]) -> list[Kernel | Exception]:
        """All regions in one compile; regions the errors point at fail alone and the rest
        are compiled together again; unplaceable errors fall back to one compile each."""
        results: list[Kernel | Exception | None] = [None] * len(modules)
        dtypes = [_declared(m) for m in modules]
        pending = list(range(len(modules)))
        while pending:
            try:
                context, vmfb, names = self._compile_joint([modules[i] for i in pending])
            except _JointFailure as failure:
                if len(pending) == 1:
                    results[pending[0]] = self._compile_again(modules[pending[0]], failure)
                    break
                if not failure.bad:
                    for i in pending:
                        results[i] = self._compile_batch([modules[i]])[0]
                    break
                for k in failure.bad:
                    results[pending[k]] = self._compile_again(modules[pending[k]], failure)
                pending = [i for k, i in enumerate(pending) if k not in failure.bad]
                continue
            for i, name in zip(pending, names, strict=True):
                results[i] = IreeKernel(context, name, vmfb, self.driver == DRIVER, dtypes[i])
            break
        return [r if r is not None else RuntimeError("not compiled") for r in results]

    def _compile_again(self, module: ir.Module, failure: _JointFailure) -> Kernel | Exception:
        """`module`, whose compile failed with `failure` (alone, or with others and the
        error pointing at it), compiled without RETRY_DROPPING; where that fails too, or
        drops no flag, the first failure stands, marked RETRIED."""
        fewer = tuple(f for f in self.flags if f not in RETRY_DROPPING)
        if fewer == self.flags:
            return RuntimeError(f"{RETRIED}no flag to drop) {_short(failure.error)}")
        try:
            context, vmfb, names = self._compile_joint([module], fewer)
        except _JointFailure:
            dropped = " ".join(f for f in self.flags if f in RETRY_DROPPING)
            return RuntimeError(f"{RETRIED}retried without {dropped}) {_short(failure.error)}")
        return IreeKernel(context, names[0], vmfb, self.driver == DRIVER, _declared(module))

    def _compile_joint(self, modules: Sequence[ir.Module], flags: Sequence[str] | None = None
                       ) -> tuple[Any, Any, list[str]]:
        """(context, vmfb, function names) of one compile of all `modules` (with `flags`, by
        default the backend's), or a `_JointFailure` naming the modules its errors point at."""
        with ScratchDir("iree") as work:
            names: list[str] = []
            try:
                combined, names = combine(modules, cpu_rewrites=self.cpu_rewrites)
                vmfb_path = _compile(combined, self.flags if flags is None else flags,
                                     Path(work), self.target,
                                     kept_as=(self.version, cpu_identity()))
                context, vmfb = self._load(vmfb_path)
            except Exception as e:
                bad = _failed_functions(Path(work), names, str(e)) if len(names) > 1 else set()
                raise _JointFailure(e, bad) from e
        return context, vmfb, names

    def save_kernel(self, kernel: Kernel, module: ir.Module, stem: str) -> list[str]:
        """The .vmfb (written once per distinct content when regions share one) and a small
        JSON naming the function inside it."""
        digest = hashlib.sha1(kernel.vmfb).hexdigest()[:16]
        vmfb_path = Path(stem).with_name(f"iree_{digest}.vmfb")
        if not vmfb_path.exists():
            vmfb_path.write_bytes(kernel.vmfb)
        ref = Path(stem + ".iree.json")
        ref.write_text(json.dumps({"vmfb": vmfb_path.name, "function": kernel.fn_name}))
        return [str(ref), str(vmfb_path)]

    def load_kernel(self, module: ir.Module, stem: str) -> Kernel:
        ref = json.loads(Path(stem + ".iree.json").read_text())
        vmfb_path = Path(stem).with_name(ref["vmfb"])
        if vmfb_path not in self._loaded:  # regions sharing a vmfb share one context
            self._loaded[vmfb_path] = self._load(vmfb_path)
        context, vmfb = self._loaded[vmfb_path]
        return IreeKernel(context, ref["function"], vmfb, self.driver == DRIVER,
                          _declared(module))

    def cache_options(self) -> str:
        rewrite = f",{iree_rewrites.TAG}" if self.cpu_rewrites else ""
        return f"threads={self.threads},flags={' '.join(self.flags)}{rewrite}"


CUDA_TARGETS = ("sm_90", "sm_89", "sm_87", "sm_86", "sm_80", "sm_75", "sm_70")
"""NVPTX targets to try, newest first: a GPU newer than the newest target this IREE build
can configure runs that target's PTX (forward compatible). iree-base-compiler 3.13 refuses
sm_90 ("missing GPU target") and takes sm_89."""


class IreeCudaBackend(IreeBackend):
    """IREE on the first NVIDIA GPU (cuda target, cuda driver). Options: `flags` (replacing
    the defaults), `cuda_target` (an NVPTX target; default the newest this IREE configures
    that the GPU can run). Inputs are copied to the GPU and outputs back on every call."""

    name = "iree-cuda"
    target = "cuda"
    driver = "cuda"
    cpu_rewrites = False  # img2col is a CPU flag here; the GPU's kernels were not timed

    @classmethod
    def unavailable_reason(cls) -> str | None:
        reason = super().unavailable_reason()
        if reason:
            return reason
        return _cuda_device_problem()

    def default_flags(self) -> tuple[str, ...]:
        target = self.options.get("cuda_target") or _cuda_target(_compute_capability())
        return ("--iree-hal-target-device=cuda", f"--iree-cuda-target={target}",
                "--iree-opt-level=O3")

    def cache_options(self) -> str:
        """The GPU and the flags: the host fingerprint names the CPU, and task threads do
        not run GPU code."""
        return f"gpu={_nvidia_smi('name') or 'unknown'},flags={' '.join(self.flags)}"


@functools.cache
def _cuda_device_problem() -> str | None:
    """None when the IREE cuda driver finds a device, else why not (no libcuda, no GPU)."""
    import iree.runtime as rt

    try:
        devices = rt.get_driver("cuda").query_available_devices()
    except Exception as e:  # no libcuda.so: the driver cannot even be created
        return ("no CUDA driver (libcuda.so not found)" if "libcuda" in str(e)
                else f"no CUDA driver ({str(e).splitlines()[0][:120]})")
    return None if devices else "no CUDA device"


UNKNOWN_CAPABILITY = 999
"""What `_compute_capability` says when nvidia-smi cannot tell: any target may be tried."""


@functools.cache
def _nvidia_smi(field: str) -> str | None:
    """The first GPU's `field` as nvidia-smi's query reports it, or None where nvidia-smi is
    missing or says nothing."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.strip().splitlines()
    return lines[0].strip() if lines and lines[0].strip() else None


def _compute_capability() -> int:
    """The first GPU's compute capability as one number (9.0 → 90), or UNKNOWN_CAPABILITY
    where nvidia-smi cannot tell."""
    try:
        major, minor = (_nvidia_smi("compute_cap") or "").split(".")
        return int(major) * 10 + int(minor)
    except ValueError:
        return UNKNOWN_CAPABILITY


@functools.cache
def _cuda_target(capability: int) -> str:
    """The newest of CUDA_TARGETS not above `capability` that this IREE can compile for."""
    import iree.compiler as ic

    source = ("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
              "  %b = arith.addf %a, %a : tensor<4xf32>\n  return %b : tensor<4xf32>\n}\n")
    for target in CUDA_TARGETS:
        if int(target[3:]) > capability:
            continue
        try:
            ic.compile_str(source, extra_args=["--iree-hal-target-device=cuda",
                                               f"--iree-cuda-target={target}"])
            return target
        except Exception:  # this build cannot configure it: try an older one
            continue
    raise RuntimeError(f"iree-compile configures no CUDA target for sm_{capability}")


def _constant_bytes(module: ir.Module) -> int:
    """Bytes of the constants in a region module's function."""
    ops = _only_function(module).regions[0].blocks[0].operations
    return sum(onnx_view.tensor_nbytes(r.type) for op in ops
               if onnx_view.op_type(op.operation) == "Constant" for r in op.operation.results)


def _weight_batches(modules: Sequence[ir.Module]) -> list[list[int]]:
    """Consecutive runs of module indices whose constants stay within JOINT_WEIGHT_BYTES (a
    module above it is a batch of its own)."""
    batches: list[list[int]] = []
    total = JOINT_WEIGHT_BYTES + 1
    for i, module in enumerate(modules):
        size = _constant_bytes(module)
        if total + size > JOINT_WEIGHT_BYTES:
            batches.append([])
            total = 0
        batches[-1].append(i)
        total += size
    return batches


class _JointFailure(Exception):
    """A joint compile failed with `error`; `bad` are the indices its errors point at."""

    def __init__(self, error: Exception, bad: set[int]) -> None:
        super().__init__(str(error))
        self.error, self.bad = error, bad


def _short(error: Exception) -> Exception:
    """iree-compile errors carry pages of text; keep the first diagnostic line (with the
    scratch directory left out of its location: the reason is cached and compared)."""
    text = _SCRATCH_SOURCE.sub("regions.mlir", str(error))
    lines = [ln for ln in text.splitlines() if "error:" in ln]
    if not lines:
        return RuntimeError(f"iree-compile failed: {text}")
    op = _OP_NAME.search(lines[0])
    if op and "failed to legalize" in lines[0]:
        return RuntimeError(f"iree-compile cannot lower {op.group(1)} ({lines[0].split(': error')[0]})")
    return RuntimeError(f"iree-compile failed: {lines[0].strip()}")
