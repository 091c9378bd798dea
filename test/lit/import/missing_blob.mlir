// RUN: not collage-opt %s 2>&1 | filecheck %s

// A constant naming a blob the file does not hold (a hand edit, or IR printed with its
// blobs elided) is refused with its line; it failed in the first backend to read it,
// which the message then blamed.

// CHECK: collage-opt: error: {{.*}}missing_blob.mlir:11: dense_resource<W3> names no blob in the file's resource section
func.func @f(%arg0: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> attributes {torch.onnx_meta.opset_version = 17 : si64} {
  %w = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<W1> : tensor<4xf32>} : () -> !torch.vtensor<[4],f32>
  %a = torch.operator "onnx.Add"(%arg0, %w) : (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  %v = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<W3> : tensor<4xf32>} : () -> !torch.vtensor<[4],f32>
  %b = torch.operator "onnx.Mul"(%a, %v) : (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32>
  return %b : !torch.vtensor<[4],f32>
}

{-#
  dialect_resources: {
    builtin: {
      W1: "0x040000000000803F0000803F0000803F0000803F"
    }
  }
#-}
