// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/ties.json})' 2>&1 | filecheck %s

// The Add's operands were swapped after collage-annotate: the graph now numbers Neg 1 and
// Relu 2, so the candidates (nodes by number) would cover the other op, and a candidate
// made for Relu alone would put Neg on a backend that never claimed it (rc 0). The stamps
// annotate wrote say so.
// CHECK: collage-opt: error: collage-search: @f: op Neg (node 1) is stamped collage.node = 2: the IR changed after collage-annotate (run it again)
func.func @f(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {collage.candidates = [{backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"}, {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"}, {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"}], torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) {collage.node = 1 : i64} : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Neg"(%arg0) {collage.node = 2 : i64} : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Add"(%1, %0) {collage.node = 3 : i64} : (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
