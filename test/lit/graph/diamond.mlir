// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2,3,4})' | filecheck %s --check-prefix=WHOLE
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2,3 max-exits=2})' | filecheck %s --check-prefix=TWO
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=1,2,3 max-exits=1})' | filecheck %s --check-prefix=REJECT
// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-test-extract{nodes=1,4})' | filecheck %s --check-prefix=HOLE
// A diamond a -> (b, c) -> d. As one region it has one output; without d it has two
// exits (b and c); {a, d} is not convex (paths leave through b and c and re-enter).

// WHOLE-LABEL: func.func @f(
// WHOLE-NEXT:    %[[R:.*]] = call @f_extracted(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
// WHOLE-NEXT:    return %[[R]]
// WHOLE-LABEL: func.func private @f_extracted(
// WHOLE-COUNT-4: torch.operator

// TWO-LABEL: func.func @f(
// TWO-NEXT:    %[[R:.*]]:2 = call @f_extracted(%arg0)
// TWO-NEXT:    torch.operator "onnx.Add"(%[[R]]#0, %[[R]]#1)

// REJECT: collage.invalid = "2 exits > max_exits=1"

// HOLE: collage.invalid = "not convex"
func.func @f(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %a = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Abs"(%a) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %c = torch.operator "onnx.Neg"(%a) : (!torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %d = torch.operator "onnx.Add"(%b, %c) : (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %d : !torch.vtensor<[4],f32>
}
