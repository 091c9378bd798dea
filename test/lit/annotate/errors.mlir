// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=nope})' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-annotate)' 2>&1 | filecheck %s --check-prefix=NONE

// UNKNOWN: collage-opt: error: {{.*}}unknown backend 'nope' (known: {{.*}}onnxruntime
// NONE: collage-opt: error: {{.*}}needs backends=

func.func @f(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0 : !torch.vtensor<[1,8],f32>
}
