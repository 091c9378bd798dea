// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=2})' | filecheck %s
// A single op (the Abs, post-dfs index 2) outlined on its own; neighbours stay.

// CHECK-LABEL: func.func @f(
// CHECK:         %[[A:.*]] = torch.operator "onnx.Relu"(%arg0) {collage.node = 1
// CHECK:         %[[B:.*]] = call @f_extracted(%[[A]])
// CHECK:         torch.operator "onnx.Neg"(%[[B]]) {collage.node = 3
// CHECK-LABEL: func.func private @f_extracted(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
// CHECK-SAME:    torch.onnx_meta.opset_version = 17
// CHECK-NEXT:    %[[R:.*]] = torch.operator "onnx.Abs"(%arg0)
// CHECK-NEXT:    return %[[R]]
func.func @f(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Abs"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Neg"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
