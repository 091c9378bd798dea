// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime max-depth=1})' | filecheck %s --check-prefix=D1
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime max-depth=2})' | filecheck %s --check-prefix=D2
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree})' | filecheck %s --check-prefix=D3
// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime,iree print-summary=true})' 2>&1 | filecheck %s --check-prefix=SUM

// Abs -> Relu -> Relu (nodes 1, 2, 3). Depth 1: single ops, plus the maximal region (the
// whole chain) whatever the limit. Depth 2: the two windows of two. Default depth 3: every
// window; iree fuses all of them too (all elementwise). The IR is unchanged but for stamps.

// D1-LABEL: func.func @chain(
// D1-SAME: collage.candidates = [
// D1-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// D1-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3>, rule = "maximal"},
// D1-SAME: {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
// D1-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"}]

// D2-LABEL: func.func @chain(
// D2-SAME: collage.candidates = [
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2>, rule = "connected"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3>, rule = "maximal"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 3>, rule = "connected"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"}]

// D3-LABEL: func.func @chain(
// D3-SAME: collage.candidates = [
// D3-SAME: {backend = "iree", nodes = array<i64: 1>, rule = "op"},
// D3-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// D3-SAME: {backend = "iree", nodes = array<i64: 1, 2>, rule = "fuse_ops"},
// D3-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2>, rule = "connected"},
// D3-SAME: {backend = "iree", nodes = array<i64: 1, 2, 3>, rule = "fuse_ops"},
// D3-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3>, rule = "connected"},
// D3-SAME: {backend = "iree", nodes = array<i64: 2>, rule = "op"},
// D3-SAME: {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
// D3-SAME: {backend = "iree", nodes = array<i64: 2, 3>, rule = "fuse_ops"},
// D3-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 3>, rule = "connected"},
// D3-SAME: {backend = "iree", nodes = array<i64: 3>, rule = "op"},
// D3-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"}]
// D3-NEXT:    torch.operator "onnx.Abs"(%arg0) {collage.node = 1 : i64}
// D3-NEXT:    torch.operator "onnx.Relu"(%0) {collage.node = 2 : i64}
// D3-NEXT:    torch.operator "onnx.Relu"(%1) {collage.node = 3 : i64}
// D3-NEXT:    return

// SUM:      collage-annotate @chain: 12 candidates
// SUM-NEXT:   iree: 6 (fuse_ops: 3, op: 3)
// SUM-NEXT:   onnxruntime: 6 (connected: 3, op: 3)

func.func @chain(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Abs"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Relu"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Relu"(%1) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %2 : !torch.vtensor<[1,8],f32>
}
