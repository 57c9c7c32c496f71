// The 910B cost model of shadow execution, the adapter's half (docs/shadow.md): every aten op
// that launched kernels on the npu is charged its modeled device time (npuSimCharge, after its
// kernels, on their stream), from a roofline of the card's figures (torch_npu/data/profile_*.toml,
// installed from Python): time = max(flops / cube or vector peak, bytes / HBM bandwidth), each
// derated by its measured efficiency, plus the per-kernel launch overhead. Copies, memsets and
// collectives are timed by the runtime and ccl from the same profile.
//
// Ops are seen through a global RecordFunction callback (installed with the model, so normal
// runs pay nothing): its start records the inputs' shapes, its end the outputs', and an op is
// charged only for the kernel launches that no op nested in it made (a composite op whose
// kernels all come from the ops it calls is not charged twice).
#pragma once

#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_npu {

struct OpCostFigures {
  double cube_tflops_fp16 = 0, cube_tflops_bf16 = 0, cube_tflops_fp32 = 0;
  double vector_tflops = 0;          // elementwise and reductions, any dtype
  double hbm_gbps = 0;
  double cube_efficiency = 1, vector_efficiency = 1, hbm_efficiency = 1;  // achieved / peak
  double launch_overhead_us = 0;     // per charged op
};

// Installs the figures and starts charging (shadow execution only; once per process).
void installCostModel(const OpCostFigures& figures);
bool costModelInstalled();

// Counts a kernel launch onto `stream` by the calling thread (NPUStream.cpp's launchBody).
void noteKernelLaunch(void* stream);

// The modeled time of one op, from its inputs' and outputs' shapes (exposed for the tests that
// check the roofline by hand).
using OpSizes = c10::SmallVector<int64_t, 6>;  // no allocation per tensor of an op
struct OpShape {
  OpSizes sizes;
  int64_t element_size = 0;
  int dtype = 0;  // c10::ScalarType
};
using OpShapes = c10::SmallVector<OpShape, 4>;
struct OpCost {
  double flops = 0;
  double bytes = 0;
  bool cube = false;
  uint64_t ns = 0;
};
// What an attention op's non-tensor arguments say about its work (read only for attention ops:
// SDPA's fused backend, npu_fusion_attention and their backwards).
struct AttentionArgs {
  std::string layout = "BNSD";  // SDPA's; npu_fusion_attention: BSH, SBH, BSND, BNSD or TND
  // Causal masking: the kernel skips the masked blocks (the 910B's flash attention does, for
  // npu_fusion_attention's sparse_mode 2 and 3; torch_npu maps SDPA's is_causal to them).
  bool causal = false;
  bool bottom_right = false;  // the mask's diagonal ends at the last key (sparse_mode 3)
  // TND: the cumulative sequence ends of the queries and keys (actual_seq_qlen / _kvlen).
  std::vector<int64_t> seq_q, seq_k;
};
OpCost modelOp(const std::string& op, const OpShapes& inputs,
               const OpShapes& outputs, const AttentionArgs& attention = {});

// Per op name: calls, modeled ns, flops (since installation or the last reset).
struct OpCostTotal {
  std::string name;
  uint64_t calls = 0;
  uint64_t ns = 0;
  double flops = 0;
};
std::vector<OpCostTotal> costTotals();
void resetCostTotals();

}  // namespace torch_npu
