// RUN: collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends="onnxruntime" max-depth=1})' | filecheck %s --check-prefix=QUOTED
// RUN: not collage-opt %s --pass-pipeline='func.func(collage-annotate{backends=onnxruntime})' 2>&1 | filecheck %s --check-prefix=NESTED
// RUN: not collage-opt %s --pass-pipeline='builtin.module(builtin.module(collage-annotate{backends=onnxruntime}))' 2>&1 | filecheck %s --check-prefix=NESTED
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime}),builtin.module(collage-annotate{backends=iree})' 2>&1 | filecheck %s --check-prefix=TWO
// RUN: not collage-opt %s --pass-pipeline='builtin.module(collage-annotate{backends=onnxruntime}),canonicalize' 2>&1 | filecheck %s --check-prefix=TWO

// Pipeline text as MLIR spells it: quoted option values ('"iree"' was taken with its
// quotes: "unknown backend '\"iree\"'"); a collage pass nested under another anchor (MLIR
// said it "does not refer to a registered pass"); two anchors ("unknown option").
// QUOTED: collage.candidates = [{backend = "onnxruntime", nodes = array<i64: 1>
// NESTED: collage-opt: error: pass pipeline: collage-annotate inside '{{(func.func|builtin.module)}}(...)': collage passes run on the module, directly inside builtin.module(...)
// TWO: collage-opt: error: pass pipeline '{{.*}}': give one builtin.module(...) holding every pass
func.func @f(%arg0: !torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %0 = torch.operator "onnx.Relu"(%arg0) : (!torch.vtensor<[1,8],f32>) -> !torch.vtensor<[1,8],f32>
  return %0 : !torch.vtensor<[1,8],f32>
}
