// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/diamond.json})' | filecheck %s --check-prefix=WHOLE
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/diamond_nofuse.json})' | filecheck %s --check-prefix=SPLIT

// A diamond: Relu (1) feeds Abs (2) and Neg (3), which meet in Add (4). Candidates: every
// op alone on both backends (0.5 each on onnxruntime), and the whole diamond on iree, whose
// four ops cost 1 + 3 * d with fusion discount d. d = 0.25: 1.75 < 4 * 0.5, one iree
// region. d = 0.9: 3.7, so four onnxruntime regions in execution order.

// WHOLE-LABEL: func.func @diamond(
// WHOLE-SAME:    collage.estimated_cost = 1.750000e+00 : f64
// WHOLE-COUNT-4: {collage.backend = "iree", collage.region = 0 : i64}
// WHOLE-NEXT:    return

// SPLIT-LABEL: func.func @diamond(
// SPLIT-SAME:    collage.estimated_cost = 2.000000e+00 : f64
// SPLIT-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "onnxruntime", collage.region = 0 : i64}
// SPLIT-NEXT:    "onnx.Abs"{{.*}}{collage.backend = "onnxruntime", collage.region = 1 : i64}
// SPLIT-NEXT:    "onnx.Neg"{{.*}}{collage.backend = "onnxruntime", collage.region = 2 : i64}
// SPLIT-NEXT:    "onnx.Add"{{.*}}{collage.backend = "onnxruntime", collage.region = 3 : i64}
func.func @diamond(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "iree", nodes = array<i64: 1>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 1, 2, 3, 4>, rule = "fuse_ops"},
      {backend = "iree", nodes = array<i64: 2>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
      {backend = "iree", nodes = array<i64: 3>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
      {backend = "iree", nodes = array<i64: 4>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Abs"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Neg"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %3 = torch.operator "onnx.Add"(%1, %2) : (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %3 : !torch.vtensor<[1,8],f32>
}
