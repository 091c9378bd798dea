// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree})' | filecheck %s
// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree print-summary=true})' 2>&1 | filecheck %s --check-prefix=SUM

// Conv (3) + Add of an argument bias (4) + Relu (5): iree fuses conv+add, conv+add+relu,
// add+relu; onnxruntime proposes the same connected sets. The weight (2) is a constant:
// never a candidate node, cloned into every region.

// CHECK-LABEL: func.func @conv_add_relu(
// CHECK-SAME: collage.candidates = [
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3, 4>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3, 4, 5>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4, 5>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 4>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 4, 5>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 4, 5>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 5>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 5>, rule = "op"}]
// SUM:      collage-annotate @conv_add_relu: 12 candidates
// SUM-NEXT:   iree: 6 (fuse_ops: 3, op: 3)
// SUM-NEXT:   onnxruntime: 6 (connected: 3, op: 3)

func.func @conv_add_relu(%arg0: !torch.vtensor<[1,3,8,8],f32>, %arg1: !torch.vtensor<[1,4,6,6],f32>) -> !torch.vtensor<[1,4,6,6],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.1> : tensor<4x3x3x3xf32>} : () -> !torch.vtensor<[4,3,3,3],f32>
  %0 = torch.operator "onnx.Conv"(%arg0, %w) : (!torch.vtensor<[1,3,8,8],f32>, !torch.vtensor<[4,3,3,3],f32>) -> !torch.vtensor<[1,4,6,6],f32>
  %1 = torch.operator "onnx.Add"(%0, %arg1) : (!torch.vtensor<[1,4,6,6],f32>, !torch.vtensor<[1,4,6,6],f32>) -> !torch.vtensor<[1,4,6,6],f32>
  %2 = torch.operator "onnx.Relu"(%1) : (!torch.vtensor<[1,4,6,6],f32>) -> !torch.vtensor<[1,4,6,6],f32>
  return %2 : !torch.vtensor<[1,4,6,6],f32>
}
