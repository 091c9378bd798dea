// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/partial.json})' 2>&1 | filecheck %s

// Node 2 (Abs) has no candidate at all: the error names it.
// CHECK: no backend can run Abs node 2: no backend offered a candidate
func.func @gap(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    collage.candidates = [
      {backend = "iree", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 3>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Abs"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Neg"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
