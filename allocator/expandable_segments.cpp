// Expandable segments (expandable_segments:True): one reserved virtual range per (stream,
// pool) whose mapped prefix grows by pages; free pages are unmapped (caching_allocator.cpp).
#include "allocator/device_state.h"

namespace npu::alloc::detail {

// Makes the free block at the end of the (stream, pool) expandable segment at least `size`
// bytes, extending the extent by pages, and maps its first `size` bytes; returns it (in the free
// set), or nullptr when memory is short.
Block* DeviceState::growExpandable(BlockPool& pool, npuStream_t stream, size_t size) {
  const auto key = std::make_pair(stream, static_cast<const BlockPool*>(&pool));
  auto found = expandable.find(key);
  Segment* seg = found == expandable.end() ? nullptr : found->second;
  if (seg == nullptr) {
    // Reserving address space costs no capacity, so reserve 1.125x the device (as CUDA's and
    // torch_npu's expandable segments do): the segment can then grow as far as memory allows
    // without ever moving, and a range fragmented by free holes (unmapped, so costing nothing)
    // can still map its tail past the device size. Physical memory stays capped by mapPages.
    const size_t address_size = roundUp(total_memory + total_memory / 8, page_size);
    void* base = nullptr;
    npuError_t err;
    {
      DeviceGuard guard(device);
      err = npuMemAddressReserve(&base, address_size);
    }
    if (err == npuErrorMemoryAllocation) return nullptr;
    if (err != npuSuccess) runtimeFailure("npuMemAddressReserve", err);
    seg = new Segment();
    seg->base = static_cast<char*>(base);
    seg->address_size = address_size;
    seg->stream = stream;
    seg->pool = &pool;
    seg->expandable = true;
    seg->page_mapped.assign(address_size / page_size, false);
    segments.emplace(reinterpret_cast<uintptr_t>(base), seg);
    expandable.emplace(key, seg);
  }
  Block* tail = seg->tail;
  const size_t have = tail != nullptr && tail->isFree() ? tail->size : 0;
  if (have < size) {
    const size_t extend = roundUp(size - have, page_size);
    if (extend > seg->address_size - seg->size) {
      releaseIfUnmapped(seg);
      return nullptr;
    }
    // The new extent is unmapped address space: it costs nothing until mapPages.
    if (have != 0) {
      tail->size += extend;
      keyGrew(tail);
    } else {
      tail = newBlock(seg->base + seg->size, extend, stream, &pool, seg);
      tail->prev = seg->tail;
      if (seg->tail != nullptr) {
        seg->tail->next = tail;
      } else {
        seg->head = tail;
      }
      seg->tail = tail;
      insertFree(tail);
    }
    seg->size += extend;
  }
  if (!mapPages(seg, tail->ptr, size)) {
    releaseIfUnmapped(seg);
    return nullptr;
  }
  return tail;
}

// Maps the pages under [ptr, ptr + size) of an expandable segment that are not mapped yet;
// false, with nothing changed, when the memory fraction or the device refuses.
bool DeviceState::mapPages(Segment* seg, const char* ptr, size_t size) {
  const size_t first = static_cast<size_t>(ptr - seg->base) / page_size;
  const size_t end = (static_cast<size_t>(ptr - seg->base) + size + page_size - 1) / page_size;
  size_t need = 0;
  for (size_t p = first; p < end; ++p) need += seg->page_mapped[p] ? 0 : page_size;
  if (need == 0) return true;
  if (need > allowedBytes() || reserved + need > allowedBytes()) return false;
  std::vector<std::pair<size_t, size_t>> done;  // runs mapped by this call, [from, to)
  npuError_t err = npuSuccess;
  {
    DeviceGuard guard(device);
    for (size_t p = first; p < end && err == npuSuccess;) {
      if (seg->page_mapped[p]) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < end && !seg->page_mapped[q]) ++q;
      err = npuMemMap(seg->base + p * page_size, (q - p) * page_size);
      if (err == npuSuccess) {
        for (size_t i = p; i < q; ++i) seg->page_mapped[i] = true;
        done.emplace_back(p, q);
      }
      p = q;
    }
    if (err != npuSuccess) {
      for (const auto& [from, to] : done) {
        npuMemUnmap(seg->base + from * page_size, (to - from) * page_size);
        for (size_t i = from; i < to; ++i) seg->page_mapped[i] = false;
      }
    }
  }
  if (err == npuErrorMemoryAllocation) return false;
  if (err != npuSuccess) runtimeFailure("npuMemMap", err);
  for (const auto& [from, to] : done) {
    trace("segment_map", seg->base + from * page_size, (to - from) * page_size, seg->stream,
          seg->pool);
  }
  const StatType type = seg->pool->statType();
  if (seg->mapped == 0) increase(stats.segment, type, 1);
  seg->mapped += need;
  reserved += need;
  ++stats.num_device_alloc;
  increase(stats.reserved_bytes, type, static_cast<int64_t>(need));
  return true;
}

// Unmaps the mapped pages in [first, end) of an expandable segment (runs of them, as the
// runtime wants whole mapped ranges).
void DeviceState::unmapPages(Segment* seg, size_t first, size_t end) {
  const StatType type = seg->pool->statType();
  DeviceGuard guard(device);
  for (size_t p = first; p < end;) {
    if (!seg->page_mapped[p]) {
      ++p;
      continue;
    }
    size_t q = p;
    while (q < end && seg->page_mapped[q]) ++q;
    const size_t bytes = (q - p) * page_size;
    npuError_t err = npuMemUnmap(seg->base + p * page_size, bytes);
    if (err != npuSuccess) runtimeFailure("npuMemUnmap", err);
    for (size_t i = p; i < q; ++i) seg->page_mapped[i] = false;
    trace("segment_unmap", seg->base + p * page_size, bytes, seg->stream, seg->pool);
    seg->mapped -= bytes;
    reserved -= bytes;
    ++stats.num_device_free;
    decrease(stats.reserved_bytes, type, static_cast<int64_t>(bytes));
    if (seg->mapped == 0) decrease(stats.segment, type, 1);
    p = q;
  }
}

// Unmaps every whole page inside a free block of an expandable segment, wherever it lies (the
// pages a free block shares with a used neighbour stay), then gives the range back if nothing
// is mapped any more.
void DeviceState::unmapFreePages(Segment* seg) {
  for (Block* b = seg->head; b != nullptr; b = b->next) {
    if (!b->isFree()) continue;
    const auto offset = static_cast<size_t>(b->ptr - seg->base);
    const size_t first = (offset + page_size - 1) / page_size;
    const size_t end = (offset + b->size) / page_size;
    if (first < end) unmapPages(seg, first, end);
  }
  releaseIfUnmapped(seg);
}

// An expandable segment with no page mapped holds only free address space (a used block has
// mapped pages): its blocks and range are given back.
void DeviceState::releaseIfUnmapped(Segment* seg) {
  if (seg->mapped != 0) return;
  for (Block* b = seg->head; b != nullptr;) {
    Block* next = b->next;
    if (!b->isFree()) return;  // cannot happen (see above); keep the segment if it does
    b = next;
  }
  for (Block* b = seg->head; b != nullptr;) {
    Block* next = b->next;
    eraseFree(b);
    recycleBlock(b);
    b = next;
  }
  npuMemAddressFree(seg->base);
  segments.erase(reinterpret_cast<uintptr_t>(seg->base));
  expandable.erase(std::make_pair(seg->stream, static_cast<const BlockPool*>(seg->pool)));
  delete seg;
}

}  // namespace npu::alloc::detail
