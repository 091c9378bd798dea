// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=2,3 max-exits=1})' | filecheck %s --check-prefix=ONE
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=2,3 max-exits=2})' | filecheck %s --check-prefix=TWO
// Two independent ops as one SubGraph: two exits. Rejected at max-exits=1; at max-exits=2
// outlined as one function with two results.

// ONE:     func.func @f({{.*}}collage.invalid = "2 exits > max_exits=1"
// ONE-NOT: call

// TWO-LABEL: func.func @f(
// TWO-NEXT:    %[[R:.*]]:2 = call @f_extracted(%arg0, %arg1) : (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) -> (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>)
// TWO-NEXT:    return %[[R]]#0, %[[R]]#1
// TWO-LABEL: func.func private @f_extracted(
// TWO:         %[[A:.*]] = torch.operator "onnx.Relu"(%arg0)
// TWO:         %[[B:.*]] = torch.operator "onnx.Abs"(%arg1)
// TWO:         return %[[A]], %[[B]]
func.func @f(%arg0: !torch.vtensor<[1,8],f32>, %arg1: !torch.vtensor<[1,8],f32>) -> (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Abs"(%arg1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0, %1 : !torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>
}
