// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-outline)' | filecheck %s
// Three regions on two backends: region 0 has two outputs (a multi-output region), region 1
// reads one of them, region 2 reads region 1 and region 0. Calls come in dependency order
// and every region becomes a private function tagged with its backend.

// CHECK-LABEL: func.func @f(
// CHECK-NEXT:    %[[R0:.*]]:2 = call @f_onnxruntime_0(%arg0) : (!torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>)
// CHECK-NEXT:    %[[R1:.*]] = call @f_iree_1(%[[R0]]#0)
// CHECK-NEXT:    %[[R2:.*]] = call @f_openvino_2(%[[R1]], %[[R0]]#1)
// CHECK-NEXT:    return %[[R2]]
// CHECK-LABEL: func.func private @f_onnxruntime_0(
// CHECK-SAME:    collage.backend = "onnxruntime"
// CHECK-SAME:    collage.estimated_cost = 1.500000e-03
// CHECK:         %[[A:.*]] = torch.operator "onnx.Relu"
// CHECK:         %[[C:.*]] = torch.operator "onnx.Neg"(%[[A]])
// CHECK:         return %[[A]], %[[C]]
// CHECK-LABEL: func.func private @f_iree_1(
// CHECK-SAME:    collage.backend = "iree"
// CHECK:         torch.operator "onnx.Abs"
// CHECK-LABEL: func.func private @f_openvino_2(
// CHECK:         torch.operator "onnx.Add"
// CHECK-NOT:   collage.candidates
func.func @f(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {collage.region_costs = [1.5e-3, 2.0e-3, 1.0e-3], collage.candidates = [], torch.onnx_meta.opset_version = 17 : si64} {
  %a = torch.operator "onnx.Relu"(%arg0) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Abs"(%a) {collage.region = 1 : i64, collage.backend = "iree"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %c = torch.operator "onnx.Neg"(%a) {collage.region = 0 : i64, collage.backend = "onnxruntime"} : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %d = torch.operator "onnx.Add"(%b, %c) {collage.region = 2 : i64, collage.backend = "openvino"} : (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %d : !torch.vtensor<[4],f32>
}
