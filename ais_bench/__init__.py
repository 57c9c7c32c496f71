"""ais_bench: the inference tool of the Ascend stack, the subset SimNPU provides.

`from ais_bench.infer.interface import InferSession` runs an .om through AscendCL's model API
(libascendcl.so, through ais_bench._acl); `python -m ais_bench --model m.om ...` is the
benchmark command. See docs/inference.md.
"""
