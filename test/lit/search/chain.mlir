// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/chain_fusion.json})' | filecheck %s --check-prefix=FUSE
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/chain_transition.json})' | filecheck %s --check-prefix=HOP

// Relu -> Relu -> Relu (nodes 1, 2, 3) with candidates as collage-annotate would write them
// under max-depth=2: single ops on both backends, and iree's two windows of two (no window
// of three). The iree window [2, 3] is cheap (0.75), onnxruntime is cheaper per op (0.875).
// Free hand-offs (chain_fusion.json): onnxruntime for node 1, then the iree window: 0.875 + 0.75.
// A 1 s hand-off (chain_transition.json) flips it: all iree, node 1 alone then the window: 1.0 + 0.75.

// FUSE-LABEL: func.func @chain(
// FUSE-SAME:    collage.estimated_cost = 1.625000e+00 : f64
// FUSE-SAME:    collage.region_costs = [8.750000e-01, 7.500000e-01]
// FUSE-NEXT:    "onnx.Relu"(%arg0) {collage.backend = "onnxruntime", collage.region = 0 : i64}
// FUSE-NEXT:    "onnx.Relu"(%0) {collage.backend = "iree", collage.region = 1 : i64}
// FUSE-NEXT:    "onnx.Relu"(%1) {collage.backend = "iree", collage.region = 1 : i64}
// FUSE-NEXT:    return

// HOP-LABEL: func.func @chain(
// HOP-SAME:    collage.estimated_cost = 1.750000e+00 : f64
// HOP-NEXT:    "onnx.Relu"(%arg0) {collage.backend = "iree", collage.region = 0 : i64}
// HOP-NEXT:    "onnx.Relu"(%0) {collage.backend = "iree", collage.region = 1 : i64}
// HOP-NEXT:    "onnx.Relu"(%1) {collage.backend = "iree", collage.region = 1 : i64}
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
