"""torch_npu.contrib: helpers beside the core API.

transfer_to_npu (import it, or set TORCH_TRANSFER_TO_NPU=1) makes an unmodified CUDA-style
script run on npu. It is not imported here: importing it changes torch for the whole process.
"""
