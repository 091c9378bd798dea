// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree print-summary=true})' 2>&1 | filecheck %s

// A backend that runs none of the ops was left out of the summary without a word (here
// IREE: the function carries no torch.onnx_meta.opset_version, which its import needs).
// CHECK: collage-annotate @f: 1 candidates
// CHECK-NEXT: iree: 0 (it runs none of these ops)
// CHECK-NEXT: onnxruntime: 1 (op: 1)
func.func @f(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0 : !torch.vtensor<[1,8],f32>
}
