#include "Shadow.h"

#include <c10/util/Exception.h>

#include "npu/runtime.h"

namespace torch_npu {

bool shadowExecution() {
  static const bool shadow = npuSimShadow() != 0;
  return shadow;
}

void refuseDataDependent(const std::string& op) {
  TORCH_CHECK(false, op,
              ": the size of its result depends on the tensors' values, which shadow execution "
              "(NPU_SIM_SHADOW=1) does not compute. Run this part of the program without "
              "NPU_SIM_SHADOW, or give the size explicitly (nonzero_static(size=...), "
              "repeat_interleave(output_size=...), index with integer tensors of a known "
              "length)");
}

void warnPlaceholders() {
  TORCH_WARN_ONCE(
      "Shadow execution (NPU_SIM_SHADOW=1): kernels do not run, so values read on the host "
      "(Tensor.item(), .cpu(), .tolist(), printing) are placeholders: what the device would have "
      "computed reads as zero (small copies from the host, up to 64 KiB, read back as they went). "
      "Shapes, dtypes, memory and the order of work are real.");
}

}  // namespace torch_npu
