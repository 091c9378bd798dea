// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree})' | filecheck %s
// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree print-summary=true})' 2>&1 | filecheck %s --check-prefix=SUM

// Tuple / multi-output: Split (1) -> Relu (2), Neg (3) -> Concat (4). With one exit,
// Split joins only with everything ({1,2} has two exits); the Concat gathers the two
// branches. iree (Split, Concat injective; Relu, Neg elementwise) fuses the same sets.

// CHECK-LABEL: func.func @split(
// CHECK-SAME: collage.candidates = [
// CHECK-SAME: {backend = "iree", nodes = array<i64: 1>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 1, 2, 3, 4>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3, 4>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 2>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 2, 3, 4>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 3, 4>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 2, 4>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 4>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 3, 4>, rule = "fuse_ops"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4>, rule = "connected"},
// CHECK-SAME: {backend = "iree", nodes = array<i64: 4>, rule = "op"},
// CHECK-SAME: {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"}]
// SUM:      collage-annotate @split: 16 candidates
// SUM-NEXT:   iree: 8 (fuse_ops: 4, op: 4)
// SUM-NEXT:   onnxruntime: 8 (connected: 4, op: 4)

func.func @split(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0:2 = torch.operator "onnx.Split"(%arg0) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[1,8],f32>) -> (!torch.vtensor<[1,4],f32>, !torch.vtensor<[1,4],f32>)
  %1 = torch.operator "onnx.Relu"(%0#0) : (!torch.vtensor<[1,4],f32>) -> !torch.vtensor<[1,4],f32>
  %2 = torch.operator "onnx.Neg"(%0#1) : (!torch.vtensor<[1,4],f32>) -> !torch.vtensor<[1,4],f32>
  %3 = torch.operator "onnx.Concat"(%1, %2) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[1,4],f32>, !torch.vtensor<[1,4],f32>) -> !torch.vtensor<[1,8],f32>
  return %3 : !torch.vtensor<[1,8],f32>
}
