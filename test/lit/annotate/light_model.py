# RUN: %PYTHON %s 2>&1 | filecheck %s
# A whole imported light model (squeezenet) through collage-annotate with all three real
# backends: every op gets a stamp, the function gets the candidates, and every backend
# that supports every op proposes the whole function (its maximal region). The model is
# upgraded to opset 17 on import (69 op nodes in that form), so IREE takes every op too.
import io
import os
import re
import sys

import onnx

from collage_mlir.tools.collage_opt import main

path = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_squeezenet.onnx")
out = io.StringIO()
rc = main([path, "--pass-pipeline=builtin.module(collage-annotate{backends=onnxruntime,openvino,"
           "iree print-summary=true})"], stdout=out)
sys.stderr.flush()
text = out.getvalue()
ops = re.findall(r'torch.operator "onnx.(\w+)"[^\n]*', text)
stamped = [line for line in text.splitlines() if "collage.node" in line]
consts = sum(1 for line in text.splitlines()
             if re.search(r'"onnx.(Constant|ConstantOfShape)"', line))
print(f"rc={rc} stamped={len(stamped)} unstamped={len(ops) - len(stamped) - consts}")
whole = ", ".join(str(n) for n in sorted(int(m) for m in
                                         re.findall(r"collage.node = (\d+)", text)))
print("whole function candidate backends:",
      sorted(set(re.findall(r'backend = "(\w+)", nodes = array<i64: ' + whole + r'>', text))))

# CHECK: collage-annotate @{{.*}}: {{[0-9]+}} candidates
# CHECK-DAG: iree: {{[0-9]+}} (fuse_ops: {{[0-9]+}}, maximal: 1, op: 68)
# CHECK-DAG: onnxruntime: {{[0-9]+}} (connected: {{[0-9]+}}, maximal: 1, op: 68)
# CHECK-DAG: openvino: {{[0-9]+}} (connected: {{[0-9]+}}, maximal: 1, op: 68)
# CHECK: rc=0 stamped=68 unstamped=0
# CHECK: whole function candidate backends: ['iree', 'onnxruntime', 'openvino']
