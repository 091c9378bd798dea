// RUN: not collage-opt --split-input-file %s --pass-pipeline='builtin.module(collage-outline)' 2>&1 | filecheck %s
// RUN: not collage-opt --split-input-file %s --pass-pipeline='builtin.module(collage-merge{cost=table:%S/../merge/Inputs/merge_chain.json})' 2>&1 | filecheck %s --check-prefix=MERGE
// Stamps edited by hand between collage-search and the passes after it are errors naming
// the function and what is wrong (they were internal errors: an IndexError, a failed cast),
// and so are costs that are not seconds (merge wrote NaN estimates, rc 0).

// CHECK: @neg: regions numbered [-5, 0]; collage-search numbers them 0..1
// MERGE: @neg: regions numbered [-5, 0]; collage-search numbers them 0..1
func.func @neg(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.region_costs = [1.0e-3, 1.0e-3]} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Abs"(%a) {collage.region = -5 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %b : !torch.vtensor<[4],f32>
}

// -----
// CHECK: @str: op Abs (node 2): expected collage.region = <integer> and collage.backend = "<name>", got "1" and "onnxruntime"
// MERGE: @str: op Abs (node 2): expected collage.region
func.func @str(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.region_costs = [1.0e-3, 1.0e-3]} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Abs"(%a) {collage.region = "1", collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %b : !torch.vtensor<[4],f32>
}

// -----
// CHECK: @costs: collage.region_costs: expected an array of seconds, got "x"
// MERGE: @costs: collage.region_costs: expected an array of seconds, got "x"
func.func @costs(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.region_costs = "x"} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %a : !torch.vtensor<[4],f32>
}

// -----
// CHECK: @nan: collage.region_costs: nan is not a cost (seconds, 0 or more)
// MERGE: @nan: collage.region_costs: nan is not a cost (seconds, 0 or more)
func.func @nan(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.region_costs = [0x7FF8000000000000 : f64]} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %a : !torch.vtensor<[4],f32>
}
