// RUN: collage-opt %s --split-input-file --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2})' | filecheck %s --check-prefix=AB
// RUN: collage-opt %s --split-input-file --pass-pipeline='builtin.module(collage-test-extract{nodes=1,3})' | filecheck %s --check-prefix=AC
// RUN: collage-opt %s --split-input-file --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2,3})' | filecheck %s --check-prefix=ABC

// A chain a -> b -> c. {a,c} leaves through b and re-enters: rejected. {a,b} and {a,b,c} outline.

// AB-LABEL: func.func @chain(
// AB:         %[[R:.*]] = call @chain_extracted(%arg0)
// AB:         torch.operator "onnx.Neg"(%[[R]])
// AB-LABEL: func.func private @chain_extracted(
// AB:         torch.operator "onnx.Relu"
// AB:         torch.operator "onnx.Abs"
// AB-NOT:     onnx.Neg
// AB:         return

// AC:       func.func @chain({{.*}}collage.invalid = "not convex"
// AC-NOT:   call

// ABC-LABEL: func.func @chain(
// ABC-NEXT:    %[[R:.*]] = call @chain_extracted(%arg0)
// ABC-NEXT:    return %[[R]]
// ABC-LABEL: func.func private @chain_extracted(
// ABC-COUNT-3: torch.operator
func.func @chain(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Abs"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Neg"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
