"""atc: the model converter (ONNX -> .om offline model) of SimNPU's offline inference path.

`atc --model=m.onnx --framework=5 --output=m --soc_version=Ascend910B2` as CANN's ATC;
the format is atc.om, the passes atc.convert. See docs/inference.md.
"""
