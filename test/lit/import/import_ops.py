# RUN: %PYTHON %s | filecheck %s
# Import of small models written inline (ONNX text), one TEST per case.

import onnx
import onnx.parser

import collage_mlir


def run(name: str, text: str) -> None:
    print(f"TEST: {name}")
    model = onnx.parser.parse_model(text)
    print(collage_mlir.import_onnx(model))


HEADER = '<ir_version: 8, opset_import: ["" : 17]>'

# CHECK-LABEL: TEST: conv
# CHECK: func.func @g(%arg0: !torch.vtensor<[1,3,8,8],f32>) -> !torch.vtensor<[1,4,8,8],f32>
# CHECK-SAME: collage.input_names = ["x"], collage.output_names = ["y"]
# CHECK-SAME: torch.onnx_meta.opset_version = 17
# CHECK: torch.operator "onnx.Constant"
# CHECK: torch.operator "onnx.Conv"(%arg0, %{{.*}}) {torch.onnx.kernel_shape = [3 : si64, 3 : si64], torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]}
# CHECK-SAME: -> !torch.vtensor<[1,4,8,8],f32>
run("conv", HEADER + """
g (float[1,3,8,8] x) => (float[1,4,8,8] y) <float[4,3,3,3] w = {0.0}> {
  y = Conv<kernel_shape=[3,3], pads=[1,1,1,1]>(x, w)
}""".replace("{0.0}", "{" + ",".join(["0.5"] * 108) + "}"))

# CHECK-LABEL: TEST: gemm_matmul
# CHECK: torch.operator "onnx.MatMul"(%arg0, %arg1) : (!torch.vtensor<[2,3],f32>, !torch.vtensor<[3,4],f32>) -> !torch.vtensor<[2,4],f32>
# CHECK: torch.operator "onnx.Gemm"({{.*}}) {torch.onnx.transB = 1 : si64}
# CHECK-SAME: -> !torch.vtensor<[2,5],f32>
run("gemm_matmul", HEADER + """
g (float[2,3] a, float[3,4] b, float[5,4] c) => (float[2,5] y) {
  m = MatMul(a, b)
  y = Gemm<transB=1>(m, c)
}""")

# CHECK-LABEL: TEST: batchnorm
# CHECK: torch.operator "onnx.BatchNormalization"(%arg0, %arg1, %arg2, %arg3, %arg4) {torch.onnx.epsilon = 9.99999974E-6 : f32}
# CHECK-SAME: -> !torch.vtensor<[1,2,4,4],f32>
run("batchnorm", HEADER + """
g (float[1,2,4,4] x, float[2] s, float[2] b, float[2] m, float[2] v) => (float[1,2,4,4] y) {
  y = BatchNormalization<epsilon=0.00001>(x, s, b, m, v)
}""")

# CHECK-LABEL: TEST: concat
# CHECK: torch.operator "onnx.Concat"(%arg0, %arg1) {torch.onnx.axis = 1 : si64} : (!torch.vtensor<[1,2],f32>, !torch.vtensor<[1,3],f32>) -> !torch.vtensor<[1,5],f32>
run("concat", HEADER + """
g (float[1,2] a, float[1,3] b) => (float[1,5] y) {
  y = Concat<axis=1>(a, b)
}""")

# A Reshape whose target shape is a constant: shape inference resolves the result type.
# CHECK-LABEL: TEST: reshape_const
# CHECK: %[[S:.*]] = torch.operator "onnx.Constant"() {torch.onnx.value = dense<[2, -1]> : tensor<2xsi64>}
# CHECK: torch.operator "onnx.Reshape"(%arg0, %[[S]]) : (!torch.vtensor<[2,3,4],f32>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[2,12],f32>
run("reshape_const", HEADER + """
g (float[2,3,4] x) => (float[2,12] y) {
  s = Constant<value = int64[2] {2, -1}>()
  y = Reshape(x, s)
}""")

# An omitted optional input (Clip's min) becomes torch.constant.none.
# CHECK-LABEL: TEST: omitted_optional
# CHECK: %[[N:.*]] = torch.constant.none
# CHECK: torch.operator "onnx.Clip"(%arg0, %[[N]], %arg1)
run("omitted_optional", HEADER + """
g (float[4] x, float hi) => (float[4] y) {
  y = Clip(x, , hi)
}""")
