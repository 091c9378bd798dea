// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime max-depth=2})' | filecheck %s --check-prefix=D2
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime max-exits=2 allow-taps=true})' | filecheck %s --check-prefix=TAPS
// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime max-depth=2 print-summary=true})' 2>&1 | filecheck %s --check-prefix=D2-SUM
// RUN: collage-opt %s -o /dev/null --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime max-exits=2 allow-taps=true print-summary=true})' 2>&1 | filecheck %s --check-prefix=TAPS-SUM

// Diamond: a=Abs (1) feeds b=Relu (2) and c=Neg (3), which meet in d=Add (4).
// One exit, no taps: a joins only with the whole diamond ({a,b} taps a and has two exits;
// {a,b,d} is not convex, a->c->d leaves it); b and c never pair (not adjacent). At depth 2
// the whole diamond (depth 3) is still proposed, as the maximal region.
// Two exits with taps: {a,b}, {a,c} and {a,b,c} join too.

// D2-LABEL: func.func @diamond(
// D2-SAME: collage.candidates = [
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3, 4>, rule = "maximal"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 3, 4>, rule = "connected"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 4>, rule = "connected"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4>, rule = "connected"},
// D2-SAME: {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"}]
// D2-SUM:      collage-annotate @diamond: 8 candidates
// D2-SUM-NEXT:   onnxruntime: 8 (connected: 3, maximal: 1, op: 4)

// TAPS-LABEL: func.func @diamond(
// TAPS-SAME: collage.candidates = [
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 1>, rule = "op"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 2, 3, 4>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 1, 3>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 2>, rule = "op"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 3, 4>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 2, 4>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 3>, rule = "op"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 3, 4>, rule = "connected"},
// TAPS-SAME: {backend = "onnxruntime", nodes = array<i64: 4>, rule = "op"}]
// TAPS-SUM:      collage-annotate @diamond: 11 candidates
// TAPS-SUM-NEXT:   onnxruntime: 11 (connected: 7, op: 4)

func.func @diamond(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Abs"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %1 = torch.operator "onnx.Relu"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %2 = torch.operator "onnx.Neg"(%0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  %3 = torch.operator "onnx.Add"(%1, %2) : (!torch.vtensor<[1,8],f32>, !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %3 : !torch.vtensor<[1,8],f32>
}
