"""Tensors at the edges of kernels: their specs, the inputs every phase feeds (made up, or
the user's, arranged to a signature), the numeric check.

One input rule and one check for the whole tool, so that measurement, the end-to-end check
and the benchmarks feed kernels the same kind of data and judge outputs alike.

Input rule (deterministic: the generator is seeded from the specs, so every backend and the
reference see the same arrays):
- floating point: standard normal;
- bool: fair coin;
- integers: uniform in 0..n-1, where n is the smallest dimension (≥ 1) of the other,
  non-integer inputs, capped at INDEX_CAP (and INDEX_CAP when there is none). Integer inputs
  are almost always indices (Gather, GatherElements, OneHot, token ids) or small counts; an
  index below every dimension is valid on any axis, so the kernel does real work instead of
  failing a bounds check. Regions that need other integer values (a Reshape target fed at
  run time) fail on every backend alike, so they cost the same everywhere.
- narrower where the region itself says so (`index_bounds`): an integer input that reaches
  a gather's indices unchanged (reshaped, cast, sliced) stays below that table's rows — a
  BERT's `token_type_ids` index a table of 2; one that reaches them through arithmetic is
  0 or 1, the values of a mask or a token id that any model accepts — OPT's positions are
  the running sum of its attention mask, and a mask of values up to 15 summed over 512
  tokens would index past its table. Out of bounds, onnxruntime (the reference) fails
  and a backend that does not check returns garbage, so the region could not be checked.
- an integer input a recurrent op reads as its `sequence_lens` holds the sequences' full
  length (`sequence_lengths`): drawn as a small index it was 0, every sequence empty and
  every backend's outputs zeros alike, so nothing was checked.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple, Protocol

import numpy as np
from iree.compiler import ir

from collage_mlir.dialects import onnx as onnx_view
from collage_mlir.dialects.func import find_function, function_name, public_functions
from collage_mlir.errors import CollageError

INDEX_CAP = 16

SCALE_FLOOR = 1e-6
"""max|ref| below this counts as this: an all-zero reference still allows round-off."""


class TensorSpec(NamedTuple):
    """Static shape and numpy dtype of one tensor (a plain (shape, dtype) pair works too)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def of(t: ir.Type) -> TensorSpec:
        """The spec of a `!torch.vtensor` type; ValueError when it is not static or its
        element type has no numpy dtype."""
        parsed = onnx_view.tensor_type(t)
        if parsed is None or parsed[0] is None:
            raise ValueError(f"cannot make an input for type {t}")
        shape, name = parsed
        if any(d < 0 for d in shape):
            raise ValueError(f"dynamic shape {t}: measure needs static shapes")
        if name not in onnx_view.NUMPY_DTYPES:
            raise ValueError(f"element type {name} has no NumPy dtype, so its values "
                             "cannot be passed in or out")
        return TensorSpec(tuple(shape), onnx_view.NUMPY_DTYPES[name])

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def argument_specs(fn: ir.Operation) -> list[TensorSpec]:
    """The specs of a `func.func`'s arguments, in order."""
    return [TensorSpec.of(a.type) for a in fn.regions[0].blocks[0].arguments]


def result_specs(fn: ir.Operation) -> list[TensorSpec | None]:
    """The specs of a `func.func`'s results, in order (None for a type with no numpy
    counterpart or no static shape)."""
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    out: list[TensorSpec | None] = []
    for t in ftype.results:
        try:
            out.append(TensorSpec.of(t))
        except ValueError:
            out.append(None)
    return out


MADE_BYTES = 64 << 20
"""Input sets `make_inputs_for_specs` keeps for the next caller with the same specs, at most
this many bytes in all: a measuring worker feeds many regions of one signature (a ResNet's
repeated blocks), and drawing a 3 MiB normal array costs 20x copying it."""
_made: OrderedDict[tuple, list[np.ndarray]] = OrderedDict()


def make_inputs_for_specs(specs: Sequence[tuple[tuple[int, ...], np.dtype]],
                          seed: int | None = None, variant: int = 0,
                          bounds: Mapping[int, int] | None = None,
                          lengths: Mapping[int, int] | None = None) -> list[np.ndarray]:
    """Arrays following the module's input rule; seeded from the specs (plus `variant`, for
    another set of the same kind) unless `seed` is given; integer input k below
    `bounds[k]` where given (`index_bounds`), and all `lengths[k]` where given
    (`sequence_lengths`). Each call returns arrays of its own (a set made before is
    copied)."""
    specs = [(tuple(shape), np.dtype(dt)) for shape, dt in specs]
    if seed is None:
        seed = int.from_bytes(hashlib.sha256(repr(specs).encode()).digest()[:8], "little")
        seed += variant
    key = (tuple(specs), seed, tuple(sorted((bounds or {}).items())),
           tuple(sorted((lengths or {}).items())))
    if key not in _made:
        drawn = _drawn(specs, seed, bounds)
        for k, n in (lengths or {}).items():
            drawn[k][...] = n
        _keep(key, drawn)
    _made.move_to_end(key)
    return [a.copy() for a in _made[key]]


def _keep(key: tuple, arrays: list[np.ndarray]) -> None:
    """Keep `arrays` under `key`, the least recently used sets going past MADE_BYTES (a set
    larger than that alone is still kept, until the next)."""
    _made[key] = arrays
    total = sum(a.nbytes for made in _made.values() for a in made)
    while total > MADE_BYTES and len(_made) > 1:
        _, gone = _made.popitem(last=False)
        total -= sum(a.nbytes for a in gone)


def _drawn(specs: list[tuple[tuple[int, ...], np.dtype]], seed: int,
           bounds: Mapping[int, int] | None) -> list[np.ndarray]:
    """The input rule's arrays for `specs`, drawn from a generator seeded with `seed`."""
    rng = np.random.default_rng(seed)
    high = _index_high(specs)
    out: list[np.ndarray] = []
    for k, (shape, dt) in enumerate(specs):
        if dt.kind == "f":
            out.append(rng.standard_normal(shape, dtype=np.float32).astype(dt))
        elif dt.kind == "b":
            out.append(rng.integers(0, 2, size=shape).astype(np.bool_))
        else:
            top = min(high, (bounds or {}).get(k, high))
            out.append(rng.integers(0, top, size=shape).astype(dt))
    return out


def _index_high(specs: Sequence[tuple[tuple[int, ...], np.dtype]]) -> int:
    """The integer inputs' bound by the general rule: below every non-integer dimension."""
    dims = [d for shape, dt in specs if dt.kind not in "iu" for d in shape if d >= 1]
    return min([INDEX_CAP, *dims])


def make_inputs(fn: ir.Operation, seed: int | None = None, variant: int = 0
                ) -> list[np.ndarray]:
    """Inputs for every argument of `fn` (a `func.func`), by the module's input rule."""
    return make_inputs_for_specs(argument_specs(fn), seed, variant, index_bounds(fn),
                                 sequence_lengths(fn))


RECURRENT = frozenset({"RNN", "GRU", "LSTM"})
"""Ops whose operand 4 is `sequence_lens` (operand 0 the sequences, time first unless
`layout` is 1)."""


def sequence_lengths(fn: ir.Operation) -> dict[int, int]:
    """Integer arguments of `fn` a recurrent op reads as its `sequence_lens`, directly or
    through calls into the module's other functions: argument position → the sequences'
    full length (the input rule's value for them)."""
    out = {}
    for k, arg in enumerate(fn.regions[0].blocks[0].arguments):
        n = _sequence_length(arg)
        if n:
            out[k] = n
    return out


def _sequence_length(value: ir.Value) -> int | None:
    for use in value.uses:
        op, n = use.owner.operation, use.operand_number
        if op.name == "func.call":
            callee = find_function(op.parent.parent,
                                   ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            found = _sequence_length(callee.regions[0].blocks[0].arguments[n])
        elif onnx_view.op_type(op) in RECURRENT and n == 4:
            shape = (onnx_view.tensor_type(op.operands[0].type) or (None, ""))[0]
            layout = onnx_view.attributes(op).get("layout")
            time_axis = int(onnx_view.attribute_value(layout)) if layout is not None else 0
            found = shape[time_axis] if shape and len(shape) == 3 else None
        else:
            continue
        if found and found > 0:
            return found
    return None


GATHERS = frozenset({"Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND"})
"""Ops whose operand 1 indexes operand 0 (along `axis`; the ND forms along leading axes)."""

ALL_VALUES_KEEPING = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity",
                                "Cast", "Expand", "Transpose", "Concat", "Tile"})
"""Ops whose outputs hold every value of their (first) input and nothing computed from it."""

VALUE_KEEPING = ALL_VALUES_KEEPING | {"Slice", "Gather"}
"""Ops whose outputs hold only values of their (first) input: an index stays an index."""

DERIVED_BOUND = 2
"""Integer inputs that reach indices through arithmetic are below this: masks and ids."""


class IndexLimit(NamedTuple):
    """An integer input whose every value indexes a table: the values a model accepts are
    -rows..rows-1 (ONNX counts negative indices from the end)."""

    rows: int
    op: str
    """The gather, as a message names it: `Gather '/embeddings/word_embeddings/Gather'`."""


class _Reach(NamedTuple):
    """A gather whose indices depend on an argument, and how they depend on it."""

    op: ir.Operation
    derived: bool
    """Through arithmetic (a mask's running sum), not only through value-keeping ops."""
    partial: bool
    """Through a Slice or a Gather: only some of the argument's values reach it."""


def index_bounds(fn: ir.Operation) -> dict[int, int]:
    """Integer arguments of `fn` the input rule must keep narrower than its general bound:
    argument position → exclusive bound (see the module docstring). Empty for most regions,
    so their inputs, and their cache keys, are as before."""
    args = list(fn.regions[0].blocks[0].arguments)
    try:
        specs = argument_specs(fn)
    except ValueError:  # no input can be made for it at all (a dynamic shape)
        return {}
    high = _index_high(specs)
    out = {}
    for k, (arg, spec) in enumerate(zip(args, specs, strict=True)):
        if spec.dtype.kind in "iu":
            bound = _reached_bound(arg)
            if bound is not None and bound < high:
                out[k] = max(1, bound)
    return out


def index_limits(fn: ir.Operation) -> dict[int, IndexLimit]:
    """Integer arguments of `fn` whose every value reaches a gather's indices unchanged
    (reshaped, cast, expanded; through calls into the module's other functions, so an
    outlined model's entry point has them too): argument position → the smallest table
    they index. Outside its range an index is each backend's to handle (onnxruntime refuses
    it, OpenVINO reads past the table), so user inputs are checked against these."""
    out = {}
    for k, arg in enumerate(fn.regions[0].blocks[0].arguments):
        if onnx_view.NUMPY_DTYPES.get(_element(arg.type), np.dtype(np.float32)).kind not in "iu":
            continue
        exact = [(rows, r.op) for r in _gathers_reached(arg)
                 if not (r.derived or r.partial) and (rows := _exact_rows(r.op)) is not None]
        if exact:
            rows, op = min(exact, key=lambda e: e[0])
            out[k] = IndexLimit(rows, _op_named(op))
    return out


def _op_named(op: ir.Operation) -> str:
    """`Gather '/embeddings/Gather'` by its ONNX node name; by its function when the text
    kept no names (IR printed without locations): `Gather in @main_graph_openvino_0`."""
    name = onnx_view.node_name(op)
    where = f"'{name}'" if name else f"in @{function_name(op.parent)}"
    return f"{onnx_view.op_type(op)} {where}"


def _element(t: ir.Type) -> str:
    found = onnx_view.tensor_type(t)
    return found[1] if found else ""


def _reached_bound(arg: ir.Value) -> int | None:
    """The smallest table `arg`'s values index (DERIVED_BOUND for indices computed from
    it); None when no gather's indices depend on it."""
    bounds = [min(_indexed_rows(r.op), DERIVED_BOUND) if r.derived else _indexed_rows(r.op)
              for r in _gathers_reached(arg)]
    return min(bounds, default=None)


def _gathers_reached(arg: ir.Value) -> list[_Reach]:
    """Every gather whose indices depend on `arg`, walking its uses forward, into the
    functions it is passed to and out of them again at their calls."""
    found, seen = [], set()
    todo: list[tuple[ir.Value, bool, bool, tuple]] = [(arg, False, False, ())]
    while todo:
        value, derived, partial, calls = todo.pop()
        for use in value.uses:
            op, n = use.owner.operation, use.operand_number
            kind = onnx_view.op_type(op)
            if kind in GATHERS and n == 1:
                found.append(_Reach(op, derived, partial))
                continue
            d, p = derived, partial
            if op.name not in ("func.call", "func.return"):
                d = derived or not (kind in VALUE_KEEPING and (kind == "Concat" or n == 0))
                p = partial or kind in VALUE_KEEPING - ALL_VALUES_KEEPING
            for step in ((v, d, p, c) for v, c in _next_values(op, n, calls)):
                if step not in seen:
                    seen.add(step)
                    todo.append(step)
    return found


def _next_values(op: ir.Operation, operand: int, calls: tuple
                 ) -> list[tuple[ir.Value, tuple]]:
    """Where a value used as `op`'s operand `operand` goes next, with the stack of calls
    the walk is inside: an op's results; a call's callee argument; a return's value at the
    call it returns to (nothing at the walk's own function)."""
    if op.name == "func.call":
        callee = find_function(op.parent.parent,
                               ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        return [(callee.regions[0].blocks[0].arguments[operand], (*calls, op))]
    if op.name == "func.return":
        return [(calls[-1].results[operand], calls[:-1])] if calls else []
    return [(result, calls) for result in op.results]


def _indexed_rows(op: ir.Operation) -> int:
    """How many entries the gather `op`'s indices can address, for the input rule: its
    table's indexed dim (the smallest dim for the ND forms; INDEX_CAP when not static)."""
    dims = _table_dims(op)
    if not dims or any(d < 0 for d in dims):
        return INDEX_CAP
    if onnx_view.op_type(op) in ("GatherND", "ScatterND"):
        return min(dims)
    return dims[_axis(op) % len(dims)]


def _exact_rows(op: ir.Operation) -> int | None:
    """The size of the axis the gather `op`'s indices address; None for the ND forms
    (each index column has its own axis) and for a dim that is not static."""
    dims = _table_dims(op)
    if onnx_view.op_type(op) in ("GatherND", "ScatterND") or not dims:
        return None
    rows = dims[_axis(op) % len(dims)]
    return rows if rows >= 0 else None


def _table_dims(op: ir.Operation) -> list[int]:
    """The dims of the table (operand 0) the gather `op` indexes; [] when unranked."""
    shape = onnx_view.tensor_type(op.operands[0].type)
    return list(shape[0]) if shape and shape[0] is not None else []


def _axis(op: ir.Operation) -> int:
    attr = onnx_view.attributes(op).get("axis")
    return int(onnx_view.attribute_value(attr)) if attr is not None else 0


QUANTIZING = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                        "QLinearMatMul"})
"""Ops whose 8-bit outputs are quantized values (`compare` lets them round a step apart)."""


def quantized_results(fn: ir.Operation) -> frozenset[int]:
    """Positions of `fn`'s results that a quantizing op makes, directly or through ops that
    keep its values (reshapes, slices, max pooling) and calls into the module's other
    functions: the outputs `compare` takes as quantized values."""
    returned = fn.regions[0].blocks[0].operations[-1]  # func.return
    return frozenset(k for k, v in enumerate(returned.operands) if _quantized(v))


def _quantized(value: ir.Value) -> bool:
    while not isinstance(value.owner, ir.Block):  # an argument's values are given
        op = value.owner.operation
        if op.name == "func.call":
            callee = find_function(op.parent.parent,
                                   ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            returned = callee.regions[0].blocks[0].operations[-1]
            value = returned.operands[ir.OpResult(value).result_number]
            continue
        kind = onnx_view.op_type(op)
        if kind in QUANTIZING:
            return True
        if kind not in VALUE_KEEPING | {"MaxPool"} or not op.operands:
            return False
        value = op.operands[0]
    return False


def model_inputs(module: ir.Module, seed: int | None = None) -> list[np.ndarray]:
    """Inputs for the model entry point (the module's public function)."""
    return make_inputs(public_functions(module)[0], seed)


Inputs = Mapping[str, np.ndarray] | Sequence[np.ndarray]
"""A model's inputs as a user gives them: by name, or in the model's order."""


def arrange_inputs(names: Sequence[str], specs: Sequence[TensorSpec], inputs: Inputs,
                   built: str = "the model takes",
                   limits: Mapping[int, IndexLimit] | None = None) -> list[np.ndarray]:
    """`inputs` as the arrays a kernel takes: in order, contiguous, of the specs' shapes
    and dtypes; a CollageError naming the input when one is missing, extra, of another
    shape, of a dtype the cast to the spec's would change values of, or holds an index
    past its table (`limits`, from `index_limits`). `built` opens the shape a message
    quotes ("this model was built for")."""
    names = list(names)
    if isinstance(inputs, Mapping):
        missing = [n for n in names if n not in inputs]
        extra = [n for n in inputs if n not in names]
        if missing or extra:
            what = [f"{label} {', '.join(map(repr, found))}"
                    for label, found in (("missing", missing), ("unexpected", extra)) if found]
            raise CollageError(f"inputs: {'; '.join(what)}; the model takes {names}")
        arrays = [inputs[n] for n in names]
    else:
        if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
            raise CollageError(f"inputs: expected a dict of name → array or a list of arrays "
                               f"in the model's order ({names}), got {type(inputs).__name__}"
                               + (" (one array: pass [x])" if isinstance(inputs, np.ndarray)
                                  else ""))
        arrays = list(inputs)
        if len(arrays) != len(names):
            raise CollageError(f"inputs: got {len(arrays)} arrays, the model takes "
                               f"{len(names)} ({names})")
    out = []
    for name, spec, a in zip(names, specs, arrays, strict=True):
        a = np.asarray(a)
        if a.shape != spec.shape:
            hint = (" (where the original model's input takes other shapes, partition it "
                    f"with --input-shape {name}={'x'.join(map(str, a.shape))})"
                    if a.ndim else "")
            raise CollageError(
                f"input '{name}' has shape {_dims(a.shape)}; {built} {_dims(spec.shape)}{hint}")
        out.append(np.asarray(_exact_cast(a, spec.dtype, name), order="C"))
    for k, limit in (limits or {}).items():
        _check_indices(names[k], out[k], limit)
    return out


def _check_indices(name: str, a: np.ndarray, limit: IndexLimit) -> None:
    """A CollageError naming the first value of `a` outside -rows..rows-1, and where."""
    if a.size == 0:
        return
    bad = (a < -limit.rows) | (a >= limit.rows)
    if bad.any():
        at = np.unravel_index(int(np.argmax(bad)), a.shape)
        where = f" at {_dims(at)}" if a.ndim else ""
        raise CollageError(
            f"input '{name}' holds {a[at]}{where}, but it indexes a table of "
            f"{limit.rows} rows ({limit.op}): its values must lie in "
            f"{-limit.rows}..{limit.rows - 1}")


def _dims(shape: Sequence[int]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _exact_cast(a: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """`a` as `dtype`, refused where the cast would change a value (float64 → float32 that
    rounds, int64 out of int32 range, a fraction to an int)."""
    if a.dtype == dtype:
        return a
    dtype = np.dtype(dtype)
    if a.dtype.kind == "O":  # Python numbers in an object array: as numpy reads them
        try:
            a = np.array(a.tolist())
        except (ValueError, TypeError):
            pass
    if a.dtype.kind not in "biufc":
        raise CollageError(f"input '{name}' holds {a.dtype} values, not numbers numpy can "
                           f"hold (an integer past 64 bits?); the model takes {dtype}")
    if a.dtype.kind == "c" and dtype.kind != "c":
        raise CollageError(f"input '{name}' is {a.dtype} (complex); the model takes {dtype}")
    if a.dtype.kind in "biu" and dtype.kind in "iu" and a.size:
        # a wrapped integer survives the round trip below (uint32 4294967289 → int32 -7 →
        # back): integers are checked against the target's range instead
        info = np.iinfo(dtype)
        same = info.min <= int(a.min()) and int(a.max()) <= info.max
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            same = np.array_equal(a.astype(dtype).astype(a.dtype), a,
                                  equal_nan=a.dtype.kind in "fc")
    if not same:
        raise CollageError(f"input '{name}' is {a.dtype}; the model takes {dtype} and the "
                           f"cast would change its values (convert it first)")
    return a.astype(dtype)


QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))
"""Integer types a quantizing op makes (`quantized_results`)."""


class Tolerance(Protocol):
    rtol: float
    atol_scale: float


def compare(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray],
            tol: Tolerance, quantized: Collection[int] = ()) -> str | None:
    """None when `outputs` match `reference`, else the reason ("wrong numbers: …").

    Exact on count, shape and dtype; NaN exactly where the reference has NaN; ±Inf equal;
    every other element within `tol.atol_scale * max|ref| + tol.rtol * |ref|` — relative
    to the output's own magnitude, so an all-zero or doubled output of a small-valued
    reference fails. The 8-bit outputs at the positions `quantized` names
    (`quantized_results`) are quantized values: the same bound, but never under one step —
    two correct integer kernels round differently where a value sits between two steps.
    Other integers (indices, shapes, integer arithmetic) must be equal."""
    if len(outputs) != len(reference):
        return f"wrong numbers: {len(outputs)} outputs, reference has {len(reference)}"
    for k, (out, ref) in enumerate(zip(outputs, reference, strict=True)):
        reason = _compare_one(k, np.asarray(out), np.asarray(ref), tol, k in quantized)
        if reason:
            return f"wrong numbers: {reason}"
    return None


def _compare_one(k: int, out: np.ndarray, ref: np.ndarray, tol: Tolerance,
                 quantized: bool) -> str | None:
    if out.shape != ref.shape:
        return f"output {k} has shape {out.shape}, reference {ref.shape}"
    if out.dtype != ref.dtype:
        return f"output {k} is {out.dtype}, reference {ref.dtype}"
    quantized = quantized and ref.dtype in QUANTIZED
    if ref.dtype.kind not in "fc" and not quantized:
        if not np.array_equal(out, ref):
            return f"output {k} differs in {int((out != ref).sum())} elements"
        return None
    out64, ref64 = out.astype(np.float64).ravel(), ref.astype(np.float64).ravel()  # 0-d too
    if np.isfinite(ref64).all() and np.isfinite(out64).all():  # the usual case, in one pass
        scale = max(SCALE_FLOOR, float(np.abs(ref64).max(initial=0.0)))
        return _over_bound(k, np.abs(out64 - ref64), _bound(ref64, scale, quantized, tol),
                           scale, tol)
    finite = np.isfinite(ref64)
    if not np.array_equal(np.isnan(out64), np.isnan(ref64)):
        return f"output {k} has NaN where the reference has none (or back)"
    infinite = np.isinf(ref64)
    off = int((np.isinf(out64) != infinite).sum() + (out64[infinite] != ref64[infinite]).sum())
    if off:
        return (f"output {k} has ±Inf where the reference has other values (or back) in "
                f"{off} elements")
    scale = max(SCALE_FLOOR, float(np.abs(ref64[finite]).max(initial=0.0)))
    err = np.where(finite, np.abs(out64 - np.where(finite, ref64, 0.0)), 0.0)
    return _over_bound(k, err, _bound(np.where(finite, ref64, 0.0), scale, quantized, tol),
                       scale, tol)


def _bound(ref64: np.ndarray, scale: float, quantized: bool, tol: Tolerance) -> np.ndarray:
    """Each element's allowed error (`compare`)."""
    bound = tol.atol_scale * scale + tol.rtol * np.abs(ref64)
    return np.maximum(bound, 1.0) if quantized else bound


def _over_bound(k: int, err: np.ndarray, bound: np.ndarray, scale: float,
                tol: Tolerance) -> str | None:
    """What is wrong with output k when an error passes its bound, else None."""
    if (err > bound).any():
        return (f"max abs err {float(err.max()):.3g} in output {k} "
                f"(max |ref| {scale:.3g}, rtol {tol.rtol:g})")
    return None


def max_abs_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    return max((float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
                for x, y in zip(a, b, strict=True)), default=0.0)
