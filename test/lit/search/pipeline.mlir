// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree},collage-search{cost=table:%S/Inputs/pipeline.json},collage-outline)' | filecheck %s
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-partition{backends=onnxruntime,iree cost=table:%S/Inputs/pipeline.json})' | filecheck %s

// The three phases in one pipeline (and as the one collage-partition pass, which must give
// the same result): annotate finds the candidates, search picks
// onnxruntime for Abs (1.0 vs 3.0) and one iree region for both Relus (0.5 + 0.5), and
// outline turns the two regions into calls in execution order.

// CHECK-LABEL: func.func @chain(
// CHECK-SAME:    collage.estimated_cost = 2.000000e+00 : f64
// CHECK-NEXT:    %[[A:.*]] = call @chain_onnxruntime_0(%arg0)
// CHECK-NEXT:    %[[B:.*]] = call @chain_iree_1(%[[A]])
// CHECK-NEXT:    return %[[B]]
// CHECK-LABEL: func.func private @chain_onnxruntime_0(
// CHECK-SAME:    collage.backend = "onnxruntime", collage.estimated_cost = 1.000000e+00 : f64
// CHECK-LABEL: func.func private @chain_iree_1(
// CHECK-SAME:    collage.backend = "iree", collage.estimated_cost = 1.000000e+00 : f64
// CHECK-COUNT-2: "onnx.Relu"
func.func @chain(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Abs"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Relu"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Relu"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
