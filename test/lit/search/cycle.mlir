// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/cycle.json})' | filecheck %s
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/cycle.json},collage-outline)' | filecheck %s --check-prefix=OUT

// Two branches: Relu (1) -> Neg (2) and Abs (3) -> Sigmoid (4). The free iree candidates
// {1, 4} and {2, 3} are each convex, but together they read each other ({1,4} -> {2,3} by
// 1 -> 2, {2,3} -> {1,4} by 3 -> 4): no call order exists. The search takes one of them
// and two single ops (total 2.0); execution order puts Abs first, then {Relu, Sigmoid}.

// CHECK-LABEL: func.func @cycle(
// CHECK-SAME:    collage.estimated_cost = 2.000000e+00 : f64
// CHECK-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "iree", collage.region = 1 : i64}
// CHECK-NEXT:    "onnx.Neg"{{.*}}{collage.backend = "onnxruntime", collage.region = 2 : i64}
// CHECK-NEXT:    "onnx.Abs"{{.*}}{collage.backend = "onnxruntime", collage.region = 0 : i64}
// CHECK-NEXT:    "onnx.Sigmoid"{{.*}}{collage.backend = "iree", collage.region = 1 : i64}

// OUT-LABEL: func.func @cycle(
// OUT-NEXT:    %[[A:.*]] = call @cycle_onnxruntime_0(%arg0)
// OUT-NEXT:    %[[B:.*]]:2 = call @cycle_iree_1(%arg0, %[[A]])
// OUT-NEXT:    %[[C:.*]] = call @cycle_onnxruntime_2(%[[B]]#0)
func.func @cycle(%arg0: !torch.vtensor<[1,8],f32>) -> (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "iree", nodes = array<i64: 1, 4>, rule = "horizontal"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
      {backend = "iree", nodes = array<i64: 2, 3>, rule = "horizontal"},
      {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Neg"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Abs"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %3 = torch.operator "onnx.Sigmoid"(%2) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %1, %3 : !torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>
}
