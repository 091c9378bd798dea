// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/partial.json})' 2>&1 | filecheck %s
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/bad.json})' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/missing.json})' 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=guess})' 2>&1 | filecheck %s --check-prefix=OPT
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-search{cost=table:%S/Inputs/partial.json unknown=maybe})' 2>&1 | filecheck %s --check-prefix=UNK

// Options and cost tables are checked before the IR; a function must be annotated first.
// CHECK: @plain has no collage.candidates; run collage-annotate first
// BAD: bad.json: per_op.iree.Relu: expected a cost (number >= 0 or "inf"), got -1
// MISSING: missing.json: cannot read cost table
// OPT: collage-search: cost=guess: expected 'measure' or 'table:FILE'
// UNK: collage-search: unknown=maybe: expected one of raise, invalid
func.func @plain(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0 : !torch.vtensor<[1,8],f32>
}
