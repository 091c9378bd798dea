// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2 max-exits=2})' | filecheck %s --check-prefix=NOTAP
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2 max-exits=2 allow-taps=true})' | filecheck %s --check-prefix=TAP
// The Relu's value is both returned and used by the Abs inside the region: a tap.

// NOTAP: collage.invalid = "has taps"

// TAP-LABEL: func.func @f(
// TAP-NEXT:    %[[R:.*]]:2 = call @f_extracted(%arg0)
// TAP-NEXT:    return %[[R]]#0, %[[R]]#1
// TAP-LABEL: func.func private @f_extracted(
// TAP-NEXT:    %[[A:.*]] = torch.operator "onnx.Relu"(%arg0)
// TAP-NEXT:    %[[B:.*]] = torch.operator "onnx.Abs"(%[[A]])
// TAP-NEXT:    return %[[A]], %[[B]]
func.func @f(%arg0: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %a = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Abs"(%a) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %a, %b : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
}
