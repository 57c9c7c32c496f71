// Constants and size arithmetic shared by the allocator's translation units. Not installed.
#pragma once

#include <cstddef>

#include "npu/caching_allocator.h"

namespace npu::alloc {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kMinBlockSize = 512;         // every size is a multiple of this
constexpr size_t kSmallSize = 1 * kMiB;       // requests up to here use the small pool
constexpr size_t kSmallBuffer = 2 * kMiB;     // segment size of the small pool
constexpr size_t kLargeBuffer = 20 * kMiB;    // segment size for large requests below 10 MiB
constexpr size_t kMinLargeAlloc = 10 * kMiB;  // from here segments are sized to the request
constexpr size_t kRoundLarge = 2 * kMiB;      // ... rounded up to this
// A cached block bigger than max_split_size is only handed out for a request that wastes less
// than this (PyTorch's max_non_split_rounding_mb default).
constexpr size_t kMaxNonSplitRounding = kLargeBuffer;
// roundup_power2_divisions has one entry per power-of-two interval from 1 MiB to 64 GiB.
constexpr size_t kRoundupPower2Intervals = 16;

// The block size a request of `size` bytes gets: 512-byte multiples, or the next of
// `divisions` equal steps between two powers of two when roundup_power2_divisions asks for it.
size_t roundSize(size_t size, const AllocatorConfig& config);
// The segment size requested from the runtime for a block of `size` (already rounded) bytes.
size_t segmentSize(size_t size, const AllocatorConfig& config);

}  // namespace npu::alloc
