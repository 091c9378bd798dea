// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/ties.json})' | filecheck %s

// Every backend costs the same. The attribute lists openvino first, yet the search tries
// candidates in sort_key order (first node, nodes, backend, rule), so "iree" wins each tie.

// CHECK-LABEL: func.func @ties(
// CHECK-SAME:    collage.estimated_cost = 2.000000e+00 : f64
// CHECK-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "iree", collage.region = 0 : i64}
// CHECK-NEXT:    "onnx.Abs"{{.*}}{collage.backend = "iree", collage.region = 1 : i64}
func.func @ties(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "openvino", nodes = array<i64: 2>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 1>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 2>, rule = "op"},
      {backend = "iree", nodes = array<i64: 1>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Abs"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %1 : !torch.vtensor<[1,8],f32>
}
