"""Static shapes for exported models: specialise dynamic inputs, fold shape computations.

`torch.onnx.export` writes models that compute shapes at run time (Shape → Gather →
Unsqueeze → Concat → Reshape, padding from input sizes, attention masks from sequence
lengths), and often a dynamic batch (`dim_param`). Measuring a region needs a static shape on
every value, so the import first gives every input a static shape (the model's own, or one the
user names), then evaluates every node whose inputs are constants or static shapes, replaces
its outputs by initializers and drops what became dead, until nothing more folds. The result
uses standard ONNX ops only and computes the same values; a value that stays dynamic (a
data-dependent shape, NonZero say) is an error naming its node.

Shape inference runs on a copy without the large initializers: they are never needed for
shapes, and copying hundreds of MB of weights through the C++ inferencer on every round would
cost seconds and memory.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from collage_mlir.errors import CollageError, first_line

InputShapes = Mapping[str, Sequence[int]]

FOLD_BYTES = 1 << 16
"""A folded value may be this large even when its inputs are smaller (an index table made
from a shape); beyond it, folding must not grow the model (ConstantOfShape weights stay ops)."""

SMALL_INITIALIZER = 1 << 12
"""Initializers up to this many elements go to shape inference (data propagation reads
shape-like constants); larger ones are passed as typed inputs."""

NO_FOLD = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
           "Multinomial", "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct",
           "DequantizeLinear"}
"""Ops never folded: random ones, control flow, and DequantizeLinear — a quantized model's
int8 weights stay int8 behind their DequantizeLinear, the pattern (DQ → Conv → Q) by which
backends recognise an integer kernel; folded, the weights become float and so do the
kernels. A DequantizeLinear of a few bytes that folding computed (onnxruntime's static
quantizer quantizes float shape arithmetic: MobileViT's ceil(H / patch) * patch) is folded
(`SHAPE_SIZED`); a fake-quantized weight (float, then QuantizeLinear) folds to int8 and
stays behind its DequantizeLinear."""

SHAPE_SIZED = 64
"""Bytes, at most, of a computed value whose DequantizeLinear folds: shape arithmetic is
scalars and short vectors, weights are not."""


def parse_shape(text: str) -> tuple[int, ...]:
    """'1x3x224x224' → (1, 3, 224, 224); '' or 'scalar' → () (a scalar input)."""
    text = text.strip()
    if text in ("", "scalar"):
        return ()
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise CollageError(f"shape '{text}': expected dimensions like 1x3x224x224") from None
    if any(d < 0 for d in dims):
        raise CollageError(f"shape '{text}': dimensions must be >= 0")
    return dims


def parse_input_shape(arg: str) -> tuple[str, tuple[int, ...]]:
    """'NAME=1x3x224x224' → ('NAME', (1, 3, 224, 224)), as `--input-shape` takes it."""
    name, sep, shape = arg.rpartition("=")
    if not sep or not name:
        raise CollageError(f"--input-shape '{arg}': expected NAME=DIMS, e.g. input=1x3x224x224")
    return name, parse_shape(shape)


def format_dims(dims: Iterable[int | str | None]) -> str:
    """A shape as users write it: [batch,3,224,224], '?' for an unnamed unknown dim."""
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """The dims of a value (int, dim_param name or None), None when the rank is unknown."""
    t = value.type.tensor_type
    if not t.HasField("shape"):
        return None
    out: list[int | str | None] = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:  # -1: dynamic, as onnxruntime reads it
            out.append(d.dim_value)
        else:
            out.append(d.dim_param or None)
    return out


def model_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs a caller feeds (initializers listed as inputs are weights)."""
    weights = {i.name for i in proto.graph.initializer}
    return [i for i in proto.graph.input if i.name not in weights]


SampleShapes = Mapping[str, Sequence[int]] | Sequence[Sequence[int]]
"""The shapes of the inputs a user gave (by name, or in the model's input order)."""


def specialize_inputs(proto: onnx.ModelProto, shapes: InputShapes | None, label: str,
                      samples: SampleShapes | None = None) -> onnx.ModelProto:
    """`proto` with every input static: given shapes replace the declared ones (which they
    must agree with where those are static); a dynamic input given none takes its sample's
    shape (`samples`: the shapes of the inputs the user gave); one left dynamic is an error
    naming every such input."""
    shapes = dict(shapes or {})
    inputs = {i.name: i for i in model_inputs(proto)}
    unknown = sorted(set(shapes) - set(inputs))
    if unknown:
        raise CollageError(f"{label}: --input-shape names no input '{unknown[0]}' "
                           f"(inputs: {', '.join(inputs)})")
    sampled = _by_name(samples, list(inputs))
    dynamic = []
    named = _NamedDims(label)
    for name, value in inputs.items():
        declared = _dims(value)
        static = declared is not None and all(isinstance(d, int) for d in declared)
        given, how = ((shapes[name], "--input-shape gives") if name in shapes else
                      (sampled[name], "the given input has shape") if name in sampled and
                      not static else (None, ""))
        if given is not None:
            given = _given_dims(name, given)
            if declared is not None and (
                    len(declared) != len(given)
                    or any(isinstance(d, int) and d != g for d, g in zip(declared, given, strict=False))):
                raise CollageError(f"{label}: input '{name}' is {format_dims(declared)}; "
                                   f"{how} {format_dims(given)}")
            named.agree(name, declared, given)
            _refuse_beyond_memory(name, value, given, label)
            _set_dims(value, given)
        elif not static:
            dynamic.append((name, declared))
    if dynamic:
        said = ", ".join(f"'{n}' {format_dims(d or ['?'])}" for n, d in dynamic)
        flags = " ".join(f"--input-shape {n}=" + "x".join(
            str(d) if isinstance(d, int) else str(named.value(d, 1)) for d in dims or [1])
            for n, dims in dynamic)
        raise CollageError(
            f"{label}: input{'s' if len(dynamic) > 1 else ''} {said} "
            f"{'have dynamic shapes' if len(dynamic) > 1 else 'has a dynamic shape'}; give "
            f"static ones with {flags} (input_shapes= in the API), or give `partition` "
            "sample inputs (--inputs; inputs= in the API)")
    return proto


class _NamedDims:
    """The values given to the named (dim_param) dims seen so far: inputs that share a name
    share that dimension, so every shape given for them must agree there (else shape
    inference fails later, naming neither input)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.seen: dict[str, tuple[str, int, int]] = {}  # dim -> (input, axis, value)

    def agree(self, name: str, declared: Sequence[int | str | None] | None,
              given: Sequence[int]) -> None:
        for axis, (d, g) in enumerate(zip(declared or [], given, strict=False)):
            if not isinstance(d, str):
                continue
            other, other_axis, value = self.seen.setdefault(d, (name, axis, g))
            if value != g:
                who = (f"input '{name}' names dimension '{d}' at axes {other_axis} and "
                       f"{axis}, but the shape given for it puts" if other == name else
                       f"inputs '{other}' and '{name}' share dimension '{d}' (axis "
                       f"{other_axis} of '{other}', axis {axis} of '{name}'), but the "
                       "shapes given for them put")
                raise CollageError(f"{self.label}: {who} {value} and {g} there")

    def value(self, dim: str | None, default: int) -> int:
        """The value given for named dim `dim` so far, else `default`."""
        return self.seen[dim][2] if dim in self.seen else default


def _by_name(samples: SampleShapes | None, names: list[str]) -> dict[str, Sequence[int]]:
    """`samples` keyed by input name (a sequence is in the model's input order)."""
    if samples is None:
        return {}
    if isinstance(samples, Mapping):
        return {k: v for k, v in samples.items() if k in names}
    return dict(zip(names, samples, strict=False))


def _given_dims(name: str, dims: Sequence[int] | str) -> list[int]:
    """An input's given dims: integers ≥ 0, or a string as `--input-shape` spells them
    ("1x3x224x224")."""
    if isinstance(dims, str):
        return list(parse_shape(dims))
    given = list(dims)
    if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0
               for d in given):
        raise CollageError(f"input shape of '{name}': {given!r}: expected integers ≥ 0, "
                           "e.g. (1, 3, 224, 224) or '1x3x224x224'")
    return [int(d) for d in given]


def _refuse_beyond_memory(name: str, value: onnx.ValueInfoProto, dims: Sequence[int],
                          label: str) -> None:
    """A given shape whose one input would not fit in this machine's memory is a typo (shape
    inference on it was killed for memory, with no message)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).itemsize
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (KeyError, TypeError, ValueError, OSError):
        return
    need = math.prod(dims) * itemsize
    if need > memory:
        raise CollageError(f"{label}: input '{name}' of shape {format_dims(dims)} would take "
                           f"{need / 2**30:.3g} GiB, more than this machine's "
                           f"{memory / 2**30:.3g} GiB")


def _set_dims(value: onnx.ValueInfoProto, dims: Sequence[int]) -> None:
    shape = value.type.tensor_type.shape
    shape.ClearField("dim")
    for d in dims:
        shape.dim.add().dim_value = int(d)


# -- shape inference on a light copy ------------------------------------------------------


SHAPE_KEEPING = {"GroupNormalization"}
"""Ops whose output has their first input's type and shape, but whose ONNX schema infers
nothing (GroupNormalization-21, which torch's dynamo exporter writes at opset 21 and later):
shape inference sees them as an Identity of that input."""


def _light_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` without large initializer data, for shape inference. Every initializer is
    also a typed graph input (IR version 3 inference sees only those); small ones keep their
    data. SHAPE_KEEPING ops are Identities here."""
    g = proto.graph
    graph = onnx.GraphProto(name=g.name)
    graph.node.extend(_inferable(n) for n in g.node)
    graph.input.extend(g.input)
    graph.output.extend(g.output)
    listed = {i.name for i in g.input}
    for init in g.initializer:
        if init.name not in listed:
            graph.input.append(onnx.helper.make_tensor_value_info(
                init.name, init.data_type, list(init.dims)))
        if int(np.prod(init.dims, dtype=np.int64)) <= SMALL_INITIALIZER:
            graph.initializer.append(init)
    light = onnx.ModelProto()
    light.ir_version = proto.ir_version
    light.opset_import.extend(proto.opset_import)
    light.functions.extend(proto.functions)
    light.graph.CopyFrom(graph)
    return light


def _inferable(node: onnx.NodeProto) -> onnx.NodeProto:
    if node.op_type in SHAPE_KEEPING and node.domain in ("", "ai.onnx"):
        return onnx.helper.make_node("Identity", node.input[:1], node.output[:1],
                                     name=node.name)
    return node


def infer_types(proto: onnx.ModelProto, label: str,
                strict: bool = False) -> dict[str, onnx.ValueInfoProto]:
    """Inferred type of every value (by name), with data propagation for shape tensors."""
    light = _light_copy(proto)
    produced = {out for node in light.graph.node for out in node.output}
    given = {v.name: v for v in light.graph.input}  # initializers are typed inputs here
    for out in light.graph.output:  # declared dim_params must not pin inferred dims
        if out.name in produced:
            out.type.tensor_type.ClearField("shape")
        elif out.name in given:  # an input or initializer returned as it is: its own type
            out.type.CopyFrom(given[out.name].type)
    try:  # check_type: inputs one op's type binds alike must agree (no backend runs a
        # LayerNormalization of float16 scale on float data, as a .half() export wrote)
        inferred = onnx.shape_inference.infer_shapes(light, check_type=True,
                                                     strict_mode=strict, data_prop=True)
    except Exception as e:
        raise CollageError(f"{label}: shape inference failed: {_type_names(first_line(e))}"
                           ) from None
    g = inferred.graph
    computed = [v for v in g.output if v.name in produced]
    return {v.name: v for v in [*g.input, *g.value_info, *computed]}


def _type_names(message: str) -> str:
    """ONNX's inference message with its element types named: "(1) vs (11)" as
    "(float) vs (double)"."""
    def name(m: re.Match) -> str:
        try:
            spelled = onnx.helper.tensor_dtype_to_string(int(m[1]))
        except Exception:  # not a type number after all
            return m[0]
        return f"({spelled.removeprefix('TensorProto.').lower()})"
    if "elem type" not in message:  # "(3) vs (4)" may be dims
        return message
    return re.sub(r"\((\d+)\)(?= vs |\s*$)", name, message)


def _static(value: onnx.ValueInfoProto | None) -> list[int] | None:
    dims = _dims(value) if value is not None else None
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    return dims  # type: ignore[return-value]


# -- folding ------------------------------------------------------------------------------


def fold_constants(proto: onnx.ModelProto, label: str, max_rounds: int = 64) -> onnx.ModelProto:
    """Fold shape computations (and anything else on constants that does not grow the model)
    into initializers, in place, re-inferring shapes between rounds; drop dead nodes."""
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
    values = _Constants(proto.graph)
    for _ in range(max_rounds):
        types = infer_types(proto, label)
        folded = _fold_round(proto.graph, types, values, opset)
        if not (_sequences_as_splits(proto.graph, types, values, opset) or folded):
            break
    drop_dead(proto.graph)
    return proto


class _Constants:
    """Constant values by name: the initializers (read lazily) and what folding produced."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.protos = {i.name: i for i in graph.initializer}
        self.arrays: dict[str, np.ndarray] = {}
        self.computed: set[str] = set()  # by folding, not the model's own constants
        self.graph = graph

    def __contains__(self, name: str) -> bool:
        return name in self.protos or name in self.arrays

    def nbytes(self, name: str) -> int:
        if name in self.arrays:
            return int(self.arrays[name].nbytes)
        t = self.protos[name]
        return _nbytes(t.data_type, t.dims)

    def array(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            self.arrays[name] = numpy_helper.to_array(self.protos[name])
        return self.arrays[name]

    def add(self, name: str, array: np.ndarray) -> None:
        """A value folding computed."""
        self.computed.add(name)
        tensor = numpy_helper.from_array(array, name)
        self.graph.initializer.append(tensor)
        self.protos[name] = tensor
        self.arrays[name] = array


def _fold_round(graph: onnx.GraphProto, types: dict[str, onnx.ValueInfoProto],
                values: _Constants, opset: int) -> bool:
    """One pass in topological order; True when some node was folded."""
    outputs = {o.name for o in graph.output}
    kept, folded = [], False
    for node in graph.node:
        if node.op_type == "Constant" and node.output[0] not in values:
            values.arrays[node.output[0]] = _constant_value(node, opset)  # stays a node
        results = None
        if node.op_type != "Constant" and node.domain in ("", "ai.onnx"):
            # a value the model returns is data either way: no size bound keeps it a recipe
            bounded = not outputs.intersection(node.output)
            results = _try_fold(node, types, values, opset, bounded)
        if results is None:
            kept.append(node)
            continue
        for name, array in zip(node.output, results, strict=False):
            if name:
                values.add(name, array)
        folded = True
    if folded:
        graph.ClearField("node")
        graph.node.extend(kept)
    return folded


def _sequences_as_splits(graph: onnx.GraphProto, types: dict[str, onnx.ValueInfoProto],
                         values: _Constants, opset: int) -> bool:
    """Rewrite, in place, each SplitToSequence whose sizes are known and whose sequence is
    only read by SequenceAt at constant indices into one Split whose parts are those reads:
    torch writes `chunk` and `split` this way when the number of parts depends on a dynamic
    size, and a sequence has no static shape. True when something was rewritten."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    returned = {o.name for o in graph.output}
    changed = False
    for node in list(graph.node):
        if node.op_type != "SplitToSequence" or node.domain not in ("", "ai.onnx"):
            continue
        reads = readers.get(node.output[0], [])
        sizes = _sequence_sizes(node, types, values)
        if (sizes is None or not reads or node.output[0] in returned
                or not all(_reads_a_part(r, len(sizes), values) for r in reads)):
            continue
        _replace_by_split(graph, node, reads, sizes, values, opset)
        changed = True
    return changed


def _reads_a_part(node: onnx.NodeProto, parts: int, values: _Constants) -> bool:
    """Whether `node` is a SequenceAt at a constant index, within a sequence of `parts`."""
    return (node.op_type == "SequenceAt" and node.input[1] in values
            and -parts <= int(values.array(node.input[1])) < parts)


def _sequence_sizes(node: onnx.NodeProto, types: dict[str, onnx.ValueInfoProto],
                    values: _Constants) -> list[int] | None:
    """The part sizes of SplitToSequence `node` along its axis, when constants and static
    shapes give them (and the parts keep that axis)."""
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    split = node.input[1] if len(node.input) > 1 and node.input[1] else None
    if split is not None and split not in values:
        return None
    sizes = values.array(split).astype(np.int64) if split is not None else None
    dims = _static(types.get(node.input[0]))
    if dims is None or (sizes is None and attrs.get("keepdims", 1) == 0):
        return None  # parts without the axis would need a Squeeze each: not done here
    n = dims[attrs.get("axis", 0)]
    if sizes is not None and sizes.ndim == 1:
        parts = [int(v) for v in sizes]
    else:
        step = 1 if sizes is None else int(sizes)
        parts = [step] * (n // step) + ([n % step] if n % step else []) if step > 0 else []
    return parts if parts and min(parts) >= 0 and sum(parts) == n else None


def _replace_by_split(graph: onnx.GraphProto, node: onnx.NodeProto,
                      reads: list[onnx.NodeProto], sizes: list[int], values: _Constants,
                      opset: int) -> None:
    """`node` (SplitToSequence) and its SequenceAt `reads` become one Split whose part k is
    the value of the first read at index k (an Identity for each further one)."""
    parts = [f"{node.output[0]}__part{k}" for k in range(len(sizes))]
    named: set[int] = set()
    extra = []
    for read in reads:
        k = int(values.array(read.input[1])) % len(sizes)
        if k in named:
            extra.append(onnx.helper.make_node("Identity", [parts[k]], [read.output[0]]))
        else:
            parts[k] = read.output[0]
            named.add(k)
        graph.node.remove(read)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if opset >= 13:
        values.add(f"{node.output[0]}__sizes", np.array(sizes, np.int64))
        split = onnx.helper.make_node("Split", [node.input[0], f"{node.output[0]}__sizes"],
                                      parts, name=node.name, axis=axis)
    else:
        split = onnx.helper.make_node("Split", [node.input[0]], parts, name=node.name,
                                      axis=axis, split=sizes)
    at = list(graph.node).index(node)
    graph.node.remove(node)
    for k, new in enumerate([split, *extra]):
        graph.node.insert(at + k, new)


def _try_fold(node: onnx.NodeProto, types: dict[str, onnx.ValueInfoProto],
              values: _Constants, opset: int, bounded: bool = True) -> list[np.ndarray] | None:
    """The node's output values when they follow from constants and static shapes (and,
    when `bounded`, are not much larger than its inputs)."""
    if node.op_type in ("Shape", "Size"):
        dims = _static(types.get(node.input[0]))
        if dims is None:
            return None
        if node.op_type == "Size":
            return [np.array(int(np.prod(dims, dtype=np.int64)), dtype=np.int64)]
        attrs = {a.name: a.i for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(dims))
        return [np.array(dims[start:end], dtype=np.int64)]
    if _never_folded(node, values):
        return None
    inputs = [i for i in node.input if i]
    if not all(i in values for i in inputs):
        return None
    if bounded and not _small_enough(node, types, values, inputs):
        return None
    try:
        results = _evaluate(node, {i: values.array(i) for i in inputs}, opset)
    except Exception:  # an op the reference cannot evaluate stays an op
        return None
    return [_as_declared(r, types.get(o)) for r, o in zip(results, node.output, strict=False)]


def _never_folded(node: onnx.NodeProto, values: _Constants) -> bool:
    """NO_FOLD ops (a DequantizeLinear but of shape arithmetic) and control flow."""
    if node.op_type == "DequantizeLinear":
        quantized = node.input[0]
        return quantized not in values.computed or values.nbytes(quantized) > SHAPE_SIZED
    return node.op_type in NO_FOLD or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for a in node.attribute)


def _constant_value(node: onnx.NodeProto, opset: int) -> np.ndarray:
    """The value of a Constant node (kept as a node: small constants stay readable)."""
    attr = node.attribute[0]
    if attr.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    return _evaluate(node, {}, opset)[0]


def _small_enough(node: onnx.NodeProto, types: dict[str, onnx.ValueInfoProto],
                  values: _Constants, inputs: list[str]) -> bool:
    """Folding must not turn a small recipe into large data (ConstantOfShape weights)."""
    budget = max(FOLD_BYTES, sum(values.nbytes(i) for i in inputs))
    for out in node.output:
        value = types.get(out)
        dims = _static(value)
        if dims is None:
            continue  # unknown until evaluated: shape computations are small
        if _nbytes(value.type.tensor_type.elem_type, dims) > budget:
            return False
    return True


def _nbytes(elem_type: int, dims: Sequence[int]) -> int:
    """Bytes of a tensor of ONNX element type `elem_type` (0: unknown, counted as 8)."""
    itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize \
        if elem_type else 8
    return int(np.prod(dims, dtype=np.int64)) * itemsize


def _evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int
              ) -> list[np.ndarray]:
    """`node` run by onnx's reference evaluator, numpy's warnings kept quiet: T5's position
    buckets take log(0) and cast -inf to int64 on the way to a Where that drops them."""
    from onnx.reference import ReferenceEvaluator

    with np.errstate(all="ignore"):
        run = ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)
    return [np.asarray(r) for r in run]


def _as_declared(array: np.ndarray, value: onnx.ValueInfoProto | None) -> np.ndarray:
    """The reference evaluator may widen scalars; keep the inferred element type."""
    elem = value.type.tensor_type.elem_type if value is not None else 0
    if elem:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
        if array.dtype != dtype:
            array = array.astype(dtype)
    return array


def _used_names(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """Every name a node reads, subgraph bodies included (they may read outer values)."""
    used: set[str] = set()
    for node in nodes:
        used.update(node.input)
        for attr in node.attribute:
            for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs):
                used |= _used_names(g.node)
    return used


def drop_dead(graph: onnx.GraphProto) -> None:
    """Remove nodes no output depends on and initializers nothing reads, in place."""
    live = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if live.intersection(node.output):
            kept.append(node)
            live |= _used_names([node])
    kept.reverse()
    if len(kept) != len(graph.node):
        graph.ClearField("node")
        graph.node.extend(kept)
    listed = {i.name for i in graph.input}
    unused = [i for i in graph.initializer if i.name not in live and i.name not in listed]
    for init in unused:
        graph.initializer.remove(init)


def require_static(proto: onnx.ModelProto, types: dict[str, onnx.ValueInfoProto],
                   label: str) -> None:
    """Every value a node produces and something reads has a static shape, or an error
    names the first that does not (an unused Dropout mask may stay untyped)."""
    used = _used_names(proto.graph.node) | {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        for out in node.output:
            if out in used and _static(types.get(out)) is None:
                value = types.get(out)
                dims = _dims(value) if value is not None else None
                shape = format_dims(dims) if dims is not None else "of unknown rank"
                raise CollageError(
                    f"{label}: node '{node.name or out}' ({node.op_type}) output '{out}' has "
                    f"no static shape after folding ({shape}); collage needs static shapes")


def make_static(proto: onnx.ModelProto, label: str, input_shapes: InputShapes | None = None,
                samples: SampleShapes | None = None) -> onnx.ModelProto:
    """Specialise the inputs (`specialize_inputs`), fold, and return the model with every
    value's static type recorded (value_info and outputs), ready for the importer."""
    specialize_inputs(proto, input_shapes, label, samples)
    fold_constants(proto, label)
    types = infer_types(proto, label, strict=True)
    require_static(proto, types, label)
    g = proto.graph
    g.ClearField("value_info")
    skip = {o.name for o in g.output} | {i.name for i in g.input} | {
        i.name for i in g.initializer}
    g.value_info.extend(v for name, v in types.items() if name not in skip)
    for out in g.output:
        out.type.CopyFrom(types[out.name].type)
    return proto
