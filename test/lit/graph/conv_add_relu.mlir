// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=3,4,5})' | filecheck %s
// conv -> add -> relu as one region; the weight constant is cloned into the region and
// removed from the caller once nothing there uses it.

// CHECK-LABEL: func.func @f(
// CHECK-NOT:     onnx.Constant
// CHECK:         %[[R:.*]] = call @f_extracted(%arg0, %arg1) : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[1,3,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
// CHECK-NEXT:    return %[[R]]
// CHECK-LABEL: func.func private @f_extracted(
// CHECK:         %[[W:.*]] = torch.operator "onnx.Constant"
// CHECK:         %[[C:.*]] = torch.operator "onnx.Conv"(%arg0, %[[W]])
// CHECK:         %[[S:.*]] = torch.operator "onnx.Add"(%[[C]], %arg1)
// CHECK:         %[[O:.*]] = torch.operator "onnx.Relu"(%[[S]])
// CHECK:         return %[[O]]
func.func @f(%arg0: !torch.vtensor<[1,2,4,4],f32>, %arg1: !torch.vtensor<[1,3,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense<1.0> : tensor<3x2x1x1xf32>} : () -> !torch.vtensor<[3,2,1,1],f32>
  %0 = torch.operator "onnx.Conv"(%arg0, %w) : (!torch.vtensor<[1,2,4,4],f32>, !torch.vtensor<[3,2,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  %1 = torch.operator "onnx.Add"(%0, %arg1) : (!torch.vtensor<[1,3,4,4],f32>, !torch.vtensor<[1,3,1,1],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  %2 = torch.operator "onnx.Relu"(%1) : (!torch.vtensor<[1,3,4,4],f32>) -> !torch.vtensor<[1,3,4,4],f32>
  return %2 : !torch.vtensor<[1,3,4,4],f32>
}
