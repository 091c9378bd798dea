// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/islands.json})' | filecheck %s --check-prefix=CARVED
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/islands.json islands=false})' | filecheck %s --check-prefix=PLAIN

// Relu, Relu, Sigmoid, Relu, Relu, Sigmoid, Relu, Relu (nodes 1-8). openvino runs Relu
// cheaply and Sigmoid dearly, onnxruntime the other way round; a region costs 0.1 a call.
// The candidates are single ops and the whole model on each backend. openvino's whole model
// costs 0.1 + 2 + 6 * 0.01 = 2.16. Its archipelago carves the two Sigmoids out onto
// onnxruntime (0.11 each) and leaves three parts of two Relus on openvino (0.12 each), four
// hand-offs of 0.001: 0.584. Without it, every Relu is a region of its own: 6 * 0.11 +
// 2 * 0.11 + 0.004 = 0.884.

// CARVED-LABEL: func.func @islands(
// CARVED-SAME:    collage.estimated_cost = 5.840000e-01 : f64
// CARVED-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 0 : i64}
// CARVED-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 0 : i64}
// CARVED-NEXT:    "onnx.Sigmoid"{{.*}}{collage.backend = "onnxruntime", collage.region = 1 : i64}
// CARVED-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 2 : i64}
// CARVED-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 2 : i64}
// CARVED-NEXT:    "onnx.Sigmoid"{{.*}}{collage.backend = "onnxruntime", collage.region = 3 : i64}
// CARVED-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 4 : i64}
// CARVED-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 4 : i64}

// PLAIN-LABEL: func.func @islands(
// PLAIN-SAME:    collage.estimated_cost = 8.840000e-01 : f64
// PLAIN-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 0 : i64}
// PLAIN-NEXT:    "onnx.Relu"{{.*}}{collage.backend = "openvino", collage.region = 1 : i64}
func.func @islands(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {
    torch.onnx_meta.opset_version = 17 : si64,
    collage.candidates = [
      {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 1>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 2>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 3>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 4>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 5>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 5>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 6>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 6>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 7>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 7>, rule = "op"},
      {backend = "onnxruntime", nodes = array<i64: 8>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 8>, rule = "op"},
      {backend = "openvino", nodes = array<i64: 1, 2, 3, 4, 5, 6, 7, 8>, rule = "whole"},
      {backend = "onnxruntime", nodes = array<i64: 1, 2, 3, 4, 5, 6, 7, 8>, rule = "whole"}]} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Relu"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Sigmoid"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %3 = torch.operator "onnx.Relu"(%2) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %4 = torch.operator "onnx.Relu"(%3) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %5 = torch.operator "onnx.Sigmoid"(%4) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %6 = torch.operator "onnx.Relu"(%5) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %7 = torch.operator "onnx.Relu"(%6) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %7 : !torch.vtensor<[1,8],f32>
}
