// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed.json})' | filecheck %s --check-prefix=MIX
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/mixed_host.json})' | filecheck %s --check-prefix=HOST

// Relu (1) -> Sigmoid (2) on 1x8 f32 (32 bytes). iree is fast at Relu, onnxruntime at
// Sigmoid: mixing costs 0.25 + 0.25 plus one hand-off of 32 * 0.0078125 = 0.25, below
// either backend alone (1.25). With "host": true the argument and the result are handed
// over too (two more 0.25).

// MIX-LABEL: func.func @mixed(
// MIX-SAME:    collage.estimated_cost = 7.500000e-01 : f64
// MIX-SAME:    collage.region_costs = [2.500000e-01, 2.500000e-01]
// MIX-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "iree", collage.region = 0 : i64}
// MIX-NEXT:    "onnx.Sigmoid"{{.*}}{collage.backend = "onnxruntime", collage.region = 1 : i64}

// HOST-LABEL: func.func @mixed(
// HOST-SAME:    collage.estimated_cost = 1.250000e+00 : f64
// HOST-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "iree", collage.region = 0 : i64}
// HOST-NEXT:    "onnx.Sigmoid"{{.*}}{collage.backend = "onnxruntime", collage.region = 1 : i64}
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
