// The element-wise reductions of the collectives: one loop per (dtype, op), dispatched in one
// place (reduceInto).
#pragma once

#include <cstdint>

#include "npu/hccl.h"

namespace npu::ccl {

// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i] for i < count, folded in that order (so a
// reference that folds rank 0, 1, 2, ... gets the same bits). float16 and bfloat16 accumulate in
// float32 and round once; AVG divides the sum by avgDivisor in the accumulation type (integer
// division for integer types); integer sum and product wrap. bool: sum and max are "or", prod
// and min are "and". `out` may be one of the inputs (element i is read before it is written).
// The caller has checked that (dtype, op) is supported (reduceSupported).
// With `copy`, the result is also stored there (a second store of a block still in L1 costs
// less than copying it later).
void reduceInto(void* out, const void* const* in, int n, uint64_t count, HcclDataType dtype,
                HcclReduceOp op, uint32_t avgDivisor, void* copy = nullptr);

// float16/bfloat16 <-> float32 (round to nearest even), for reductions that span several
// steps (the inter-node path): they run in float32 and round once at the end. fromFloat32
// first divides by avgDivisor when it is non-zero.
void toFloat32(const void* in, HcclDataType dtype, float* out, uint64_t count);
void fromFloat32(const float* in, void* out, HcclDataType dtype, uint64_t count,
                 uint32_t avgDivisor);

// False for the combinations we refuse: AVG of bool.
bool reduceSupported(HcclDataType dtype, HcclReduceOp op);

}  // namespace npu::ccl
