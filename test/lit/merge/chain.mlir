// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/merge_chain.json},collage-merge{cost=table:%S/Inputs/merge_chain.json})' | filecheck %s --check-prefix=JOIN
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/merge_dear.json},collage-merge{cost=table:%S/Inputs/merge_dear.json})' | filecheck %s --check-prefix=KEEP
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-merge{cost=table:%S/Inputs/merge_chain.json})' 2>&1 | filecheck %s --check-prefix=ORDER

// Relu -> Relu -> Relu (nodes 1, 2, 3). With a 1 s hand-off, iree->iree included, the
// search puts all three on iree (onnxruntime costs 2 s an op) as node 1 alone, then the
// window [2, 3]: 1.0 + 0.75 + 1.0 = 2.75 (the window of three is no candidate, max-depth=2). collage-merge prices the union
// [1, 2, 3] from the table (per-op with iree's fusion discount: 1 + 0.5 + 0.5 = 2.0 < 2.75)
// and joins them (JOIN); when the table makes the union dear (5.0) the regions stay (KEEP).

// JOIN-LABEL: func.func @chain(
// JOIN-SAME:    collage.estimated_cost = 2.000000e+00 : f64
// JOIN-SAME:    collage.region_costs = [2.000000e+00]
// JOIN-NEXT:    "onnx.Relu"(%arg0) {collage.backend = "iree", collage.region = 0 : i64}
// JOIN-NEXT:    "onnx.Relu"(%0) {collage.backend = "iree", collage.region = 0 : i64}
// JOIN-NEXT:    "onnx.Relu"(%1) {collage.backend = "iree", collage.region = 0 : i64}

// KEEP-LABEL: func.func @chain(
// KEEP-SAME:    collage.estimated_cost = 2.750000e+00 : f64
// KEEP-NEXT:    "onnx.Relu"(%arg0) {collage.backend = "iree", collage.region = 0 : i64}
// KEEP-NEXT:    "onnx.Relu"(%0) {collage.backend = "iree", collage.region = 1 : i64}
// KEEP-NEXT:    "onnx.Relu"(%1) {collage.backend = "iree", collage.region = 1 : i64}

// ORDER: has no collage.region/collage.backend; run collage-search first
func.func @chain(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "iree", nodes = array<i64: 1>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 1, 2>, rule = "fuse_ops"},
      {backend = "iree", nodes = array<i64: 2>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
      {backend = "iree", nodes = array<i64: 2, 3>, rule = "fuse_ops"},
      {backend = "iree", nodes = array<i64: 3>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Relu"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Relu"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
