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
// less than copying it later), with non-temporal stores if `streamCopy` (see copyStreaming).
void reduceInto(void* out, const void* const* in, int n, uint64_t count, HcclDataType dtype,
                HcclReduceOp op, uint32_t avgDivisor, void* copy = nullptr,
                bool streamCopy = false);

// memcpy with non-temporal stores, for an output written once that will not be read back before
// it has left the caches (a large collective's output): a normal store first reads the line it
// writes (read for ownership), so streaming stores move about a third less memory traffic
// (here: 32 MiB copied out of a hot 2 MiB buffer in 0.77 ms instead of 1.25 ms). Ends with a
// store fence, so the data is visible to other threads like ordinary stores. Regions must not
// overlap.
void copyStreaming(void* dst, const void* src, uint64_t bytes);

// float16/bfloat16 <-> float32 (round to nearest even), for reductions that span several
// steps (the inter-node path): they run in float32 and round once at the end. fromFloat32
// first divides by avgDivisor when it is non-zero.
void toFloat32(const void* in, HcclDataType dtype, float* out, uint64_t count);
void fromFloat32(const float* in, void* out, HcclDataType dtype, uint64_t count,
                 uint32_t avgDivisor);

// False for the combinations we refuse: AVG of bool.
bool reduceSupported(HcclDataType dtype, HcclReduceOp op);

}  // namespace npu::ccl
