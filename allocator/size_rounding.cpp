// Request and segment sizes, as PyTorch's caching allocator computes them.
#include <algorithm>
#include <bit>

#include "allocator/allocator_internal.h"

namespace npu::alloc {
namespace {

size_t roundUp(size_t size, size_t multiple) { return (size + multiple - 1) / multiple * multiple; }

// The divisions configured for the power-of-two interval holding `size`: interval 0 is
// everything below 2 MiB, interval 15 everything from 32 GiB up.
size_t divisionsFor(size_t size, const AllocatorConfig& config) {
  if (config.roundup_power2_divisions.empty()) return 0;
  const size_t log_size = std::bit_width(size) - 1;
  const size_t first = std::bit_width(kMiB) - 1;
  size_t index = log_size > first ? log_size - first : 0;
  index = std::min(index, config.roundup_power2_divisions.size() - 1);
  return config.roundup_power2_divisions[index];
}

// Rounds up to the next of `divisions` equal steps between the powers of two around `size`,
// so that a model with slowly varying shapes reuses a few block sizes instead of many.
size_t roundUpToDivision(size_t size, size_t divisions) {
  if (std::has_single_bit(size)) return size;
  const size_t floor = std::bit_floor(size);
  const size_t step = floor >> (std::bit_width(divisions) - 1);
  if (step == 0) return floor << 1;
  const size_t rounded = size & ~(step - 1);
  return rounded == size ? size : rounded + step;
}

}  // namespace

size_t roundSize(size_t size, const AllocatorConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const size_t divisions = divisionsFor(size, config);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return roundUpToDivision(size, divisions);
  }
  return roundUp(size, kMinBlockSize);
}

size_t segmentSize(size_t size, const AllocatorConfig& config) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (config.huge_pages) return roundUp(size, kGiB);
  if (size < kMinLargeAlloc) return std::max(config.large_segment_size, size);
  return roundUp(size, kRoundLarge);
}

}  // namespace npu::alloc
