// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/partial.json})' 2>&1 | filecheck %s
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/partial.json unknown=invalid})' | filecheck %s --check-prefix=SKIP

// partial.json knows nothing of openvino, so its candidate's cost is unknown (NaN). That
// fails the search, unless unknown=invalid, which skips it and takes iree.
// CHECK: unknown cost (NaN) for Candidate(openvino:op [1])
// SKIP-LABEL: func.func @unknown(
// SKIP: "onnx.Relu"{{.*}}{collage.backend = "iree", collage.region = 0 : i64}
func.func @unknown(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    collage.candidates = [
      {backend = "iree", nodes = array<i64: 1>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 1>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0 : !torch.vtensor<[1,8],f32>
}
