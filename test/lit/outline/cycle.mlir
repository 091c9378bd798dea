// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-outline)' 2>&1 | filecheck %s
// Regions {a, d} and {b, c} are each convex, but a feeds c and b feeds d: as calls they
// would need each other first. Outline refuses with a one-line error.

// CHECK: collage-opt: error: collage-outline: @f: cannot outline: regions form a cycle
func.func @f(%arg0: !torch.vtensor<[4],f32>, %arg1: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Relu"(%arg1) {collage.region = 1 : i64, collage.backend = "iree"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %c = torch.operator "onnx.Abs"(%a) {collage.region = 1 : i64, collage.backend = "iree"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %d = torch.operator "onnx.Abs"(%b) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %c, %d : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
}
