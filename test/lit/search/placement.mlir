// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed.json})' | filecheck %s --check-prefix=FREE
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed.json placement=%S/Inputs/pin_relu.json})' | filecheck %s --check-prefix=PINNED
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed.json placement=%S/Inputs/nothing.json})' 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed.json backends=onnxruntime})' | filecheck %s --check-prefix=ONLY
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed.json backends=nope})' 2>&1 | filecheck %s --check-prefix=NOPE

// The same graph and costs as mixed.mlir: left free, the Relu goes to iree; a placement
// file pinning Relu to onnxruntime removes every iree candidate holding the Relu;
// backends= leaves out the candidates of the backends it does not name.

// FREE:      "onnx.Relu"{{.*}}{collage.backend = "iree"
// PINNED:    "onnx.Relu"{{.*}}{collage.backend = "onnxruntime"
// PINNED:    "onnx.Sigmoid"{{.*}}{collage.backend = "onnxruntime"
// MISSING:   collage-search: {{.*}}nothing.json: cannot read placement file
// ONLY:      "onnx.Relu"{{.*}}{collage.backend = "onnxruntime"
// ONLY:      "onnx.Sigmoid"{{.*}}{collage.backend = "onnxruntime"
// NOPE:      collage-search: backends=nope: nope names no backend (known:
func.func @mixed(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "iree", nodes = array<i64: 1>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 1, 2>, rule = "fuse_ops"},
      {backend = "iree", nodes = array<i64: 2>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Sigmoid"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %1 : !torch.vtensor<[1,8],f32>
}
