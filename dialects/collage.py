"""The collage vocabulary: every discardable attribute the passes read or write, in one place.

All names live under the `collage.` prefix so that any MLIR tool can strip them and the model
is untouched. Phases 1-3 only add these attributes; only outlining rewrites the IR.
"""

from __future__ import annotations

NODE = "collage.node"
"""i64 on each op: its post-dfs index in the DataflowGraph of its function (annotate)."""

CANDIDATES = "collage.candidates"
"""On the function: array of dicts {backend, rule, nodes} — every CandidatePartition (annotate).
Entries with rule "maximal" are a backend's largest supported convex regions; they are exempt
from the max-depth / max-exits limits so that "everything on one backend" stays searchable."""

BACKEND = "collage.backend"
"""String on each op (search) and on each outlined function (outline): who runs it."""

REGION = "collage.region"
"""i64 on each op: index of the chosen region it belongs to (search)."""

ESTIMATED_COST = "collage.estimated_cost"
"""f64 seconds: on the function (total, search) and on each outlined function (outline)."""

REGION_COSTS = "collage.region_costs"
"""f64 array on the function (search): estimated seconds of each region, by region index;
collage-outline moves each onto its outlined function as `collage.estimated_cost`."""

INPUT_NAMES = "collage.input_names"
OUTPUT_NAMES = "collage.output_names"
"""String arrays on an imported function: the ONNX graph's input / output names, for the API."""

BLOB_TOKENS = "collage.blob_tokens"
"""Dictionary on the module (import): resource blob name → what stands for that blob in cache
keys (`cost.key.blob_token`), so that keying a region never prints the model's weights."""

WEIGHTS = "collage.weights"
"""String on a module: path of a weight store (`export.resources.WeightStore`) holding the
large blobs: set on regions sent to a measuring worker (whose text leaves those blobs out),
and on a model being partitioned and the regions taken from it (`resources.weight_store`), so
that exports refer to the weights in the store instead of copying them."""
