"""Tools that ship with torch_npu: npu-smi (npu_smi), and more to come."""
