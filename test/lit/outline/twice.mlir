// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-outline)' -o %t.mlir
// RUN: not collage-opt %t.mlir --pass-pipeline='builtin.module(collage-outline)' 2>&1 | filecheck %s --check-prefix=AGAIN
// RUN: not collage-opt %t.mlir --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime})' 2>&1 | filecheck %s --check-prefix=ANNOTATE
// Outlined IR calls its regions: outlining it again said "run collage-search first", and
// annotating it found no candidates, rc 0. Both now say what the pass takes.

// AGAIN: collage-opt: error: collage-outline: @f is outlined already (it calls region functions): collage-outline takes the model as collage-search leaves it
// ANNOTATE: collage-opt: error: collage-annotate: @f is outlined already (it calls region functions): collage-annotate takes the model as imported
func.func @f(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.region_costs = [1.5e-3], collage.candidates = [], torch.onnx_meta.opset_version = 17 : si64} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %a : !torch.vtensor<[4],f32>
}
