"""Writes tiny_mlp.onnx and converts it with atc into tiny_mlp.om (the model mlp_infer.c runs).

The weights follow formulas that mlp_infer.c repeats for its host reference, so the C example
checks the engine without reading any file but the .om. Usage: make_tiny_mlp.py [out_dir]
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

IN, HIDDEN, OUT, BATCH = 4, 8, 3, 2
o, i = np.meshgrid(np.arange(HIDDEN), np.arange(IN), indexing="ij")
w1 = (((o * IN + i) % 7 - 3) * 0.1).astype(np.float32)            # [HIDDEN, IN], Gemm transB
b1 = ((np.arange(HIDDEN) % 3 - 1) * 0.05).astype(np.float32)
h, p = np.meshgrid(np.arange(HIDDEN), np.arange(OUT), indexing="ij")
w2 = (((h * OUT + p) % 5 - 2) * 0.1).astype(np.float32)           # [HIDDEN, OUT], MatMul
b2 = (np.arange(OUT) * 0.1).astype(np.float32)

graph = helper.make_graph(
    [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
     helper.make_node("Relu", ["h"], ["r"], name="relu"),
     helper.make_node("MatMul", ["r", "w2"], ["m"], name="fc2"),
     helper.make_node("Add", ["m", "b2"], ["y"], name="bias2")],
    "tiny_mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, OUT])],
    [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="make_tiny_mlp")
model.ir_version = 8
out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
onnx_path = os.path.join(tempfile.mkdtemp(), "tiny_mlp.onnx")
save(model, onnx_path)
subprocess.run([sys.executable, "-m", "atc", f"--model={onnx_path}", "--framework=5",
                f"--output={os.path.join(out_dir, 'tiny_mlp')}", "--soc_version=Ascend910B2"],
               check=True)
