// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree})' | filecheck %s
// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree print-summary=true})' 2>&1 | filecheck %s --check-prefix=SUM

// Residual block: p=Relu (1) feeds c1=Conv (3) -> r1=Relu (4) -> c2=Conv (6) and the skip
// into a=Add (7) -> r2=Relu (8). Depth 3, one exit: p stays alone (with p, the Add and so
// the whole branch must come in: depth 5), onnxruntime takes every window of 3,4,6,7,8.
// iree fuses like FuseOps: conv+relu, conv+add(+relu), add+relu, never relu->conv; the
// whole block is its maximal region.

// CHECK-LABEL: func.func @residual(
// CHECK-SAME: collage.candidates = [
// CHECK-SAME: {backend = "iree", nodes = array<i64: 1>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 1, 3, 4, 6, 7, 8>, rule = "maximal"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 3, 4, 6, 7, 8>, rule = "maximal"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3, 4>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4>, rule = "connected"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4, 6>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 4>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 4, 6>, rule = "connected"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 4, 6, 7>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 6>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 6>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 6, 7>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 6, 7>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 6, 7, 8>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 6, 7, 8>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 7>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 7>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 7, 8>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 7, 8>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 8>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 8>, rule = "op"}]
// SUM:      collage-annotate @residual: 25 candidates
// SUM-NEXT:   iree: 11 (fuse_ops: 4, maximal: 1, op: 6)
// SUM-NEXT:   onnxruntime: 14 (connected: 7, maximal: 1, op: 6)

func.func @residual(%arg0: !torch.vtensor<[1,4,8,8],f32>) -> !torch.vtensor<[1,4,8,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,4,8,8],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  %w1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.1> : tensor<4x4x3x3xf32>} : () -> !torch.vtensor<[4,4,3,3],f32>
  %1 = torch.operator "onnx.Conv"(%0, %w1) {torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]} : (!torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[4,4,3,3],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  %2 = torch.operator "onnx.Relu"(%1) : (!torch.vtensor<[1,4,8,8],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  %w2 = torch.operator "onnx.Constant"() {torch.onnx.value = dense<0.2> : tensor<4x4x3x3xf32>} : () -> !torch.vtensor<[4,4,3,3],f32>
  %3 = torch.operator "onnx.Conv"(%2, %w2) {torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]} : (!torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[4,4,3,3],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  %4 = torch.operator "onnx.Add"(%3, %0) : (!torch.vtensor<[1,4,8,8],f32>, !torch.vtensor<[1,4,8,8],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  %5 = torch.operator "onnx.Relu"(%4) : (!torch.vtensor<[1,4,8,8],f32>) -> !torch.vtensor<[1,4,8,8],f32>
  return %5 : !torch.vtensor<[1,4,8,8],f32>
}
