// RUN: not collage-opt --split-input-file %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime})' 2>&1 | filecheck %s
// RUN: not collage-opt --split-input-file %s --pass-pipeline='builtin.module(inline,collage-annotate{backends=onnxruntime})' 2>&1 | filecheck %s --check-prefix=INLINED

// Functions the passes cannot partition are named with what to do: one that returns
// nothing (it failed later on every backend: "At least one output should be requested"),
// one that calls a function of the user's own (it was called "outlined already").

// CHECK: collage-annotate: @f returns nothing: there is no output to compute
func.func @f(%arg0: !torch.vtensor<[1,8],f32>) attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return
}

// -----
// CHECK: collage-annotate: @g calls @h: collage-annotate takes one function of ONNX ops (inline the calls first
// INLINED: func.func @g(
// INLINED-SAME: collage.candidates = [
// INLINED: onnx.Abs
// INLINED-NEXT: onnx.Relu
func.func @g(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Abs"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = call @h(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %1 : !torch.vtensor<[1,8],f32>
}
func.func private @h(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0 : !torch.vtensor<[1,8],f32>
}
