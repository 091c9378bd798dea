// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime},collage-search{cost=table:%S/Inputs/ortonly.json},collage-outline)' 2>&1 | filecheck %s

// Public functions whose names differ only in punctuation would give their regions one
// name: it ended in an internal error ("Verification failed", exit 2). The error says why.
// CHECK: collage-opt: error: collage-outline: @a-b: its region 0 on onnxruntime would be @a_b_onnxruntime_0, a name the module already holds
func.func @"a.b"(%arg0: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  return %0 : !torch.vtensor<[2,8],f32>
}
func.func @"a-b"(%arg0: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Neg"(%arg0) : (!torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32>
  return %0 : !torch.vtensor<[2,8],f32>
}
