// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime})' | filecheck %s

// Annotating searched IR again makes new candidates and drops the old decision: outlining
// after it used to outline the stale regions (here on iree), rc 0.

// CHECK-LABEL: func.func @f(
// CHECK-NOT: collage.estimated_cost
// CHECK-NOT: collage.region_costs
// CHECK-SAME: collage.candidates = [{backend = "onnxruntime"
// CHECK-NOT: collage.region
// CHECK-NOT: collage.backend
// CHECK: return
func.func @f(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.estimated_cost = 1.0e-3 : f64, collage.region_costs = [1.0e-3], torch.onnx_meta.opset_version = 17 : si64} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "iree"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %a : !torch.vtensor<[4],f32>
}
