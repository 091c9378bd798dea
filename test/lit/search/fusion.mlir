// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/fusion.json})' | filecheck %s

// Mul (1) -> Add (2). One op costs 1.0 on iree and 0.75 on onnxruntime, but iree's fused
// Mul+Add (matched by op types in fusion.json) costs 1.25 < 0.75 + 0.75: one iree region.

// CHECK-LABEL: func.func @fusion(
// CHECK-SAME:    collage.estimated_cost = 1.250000e+00 : f64
// CHECK-NEXT:    "onnx.Mul"{{.*}}{collage.backend = "iree", collage.region = 0 : i64}
// CHECK-NEXT:    "onnx.Add"{{.*}}{collage.backend = "iree", collage.region = 0 : i64}
func.func @fusion(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "iree", nodes = array<i64: 1>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 1, 2>, rule = "fuse_ops"},
      {backend = "iree", nodes = array<i64: 2>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"}]} {
  %0 = torch.operator "onnx.Mul"(%arg0, %arg0) : (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Add"(%0, %arg0) : (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %1 : !torch.vtensor<[1,8],f32>
}
