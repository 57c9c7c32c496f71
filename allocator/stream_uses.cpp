// Blocks used on streams besides their own (recordStream): freeing one records an event on
// each, and the block rejoins the free set when all have completed.
#include "allocator/device_state.h"

namespace npu::alloc::detail {

bool DeviceState::tryRecordStream(const void* ptr, npuStream_t stream) {
  std::lock_guard<DeviceLock> lock(mutex);
  Block* b = allocated.find(ptr);
  if (b == nullptr) return false;
  if (stream == nullptr) stream = default_stream;
  // The allocating stream is ordered with itself already.
  if (stream == b->stream) return true;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
  return true;
}

void DeviceState::insertEvents(Block* b) {
  DeviceGuard guard(device);
  for (npuStream_t s : b->stream_uses) {
    npuEvent_t event = nullptr;
    if (!spare_events.empty()) {
      event = spare_events.back();
      spare_events.pop_back();
    } else {
      npuError_t err = npuEventCreateWithFlags(&event, npuEventDisableTiming);
      if (err != npuSuccess) runtimeFailure("npuEventCreateWithFlags", err);
    }
    if (npuEventRecord(event, s) != npuSuccess) {
      // The stream is gone (destroying a stream finishes its work first): nothing of it can
      // still touch the block.
      spare_events.push_back(event);
      continue;
    }
    ++b->event_count;
    pending[s].push_back(PendingUse{event, b});
    ++pending_count;
  }
  b->stream_uses.clear();
  if (b->event_count == 0) freeBlock(b);
}

// Frees the blocks whose stream uses have all completed. Each stream's events complete in
// record order, so a stream's queue is only read up to its first unfinished event.
void DeviceState::processEvents() {
  for (auto it = pending.begin(); it != pending.end();) {
    std::deque<PendingUse>& queue = it->second;
    while (!queue.empty()) {
      // Anything but "not ready" (done, or a failure reported through the event) means the
      // stream will not touch the block again.
      if (npuEventQuery(queue.front().event) == npuErrorNotReady) break;
      Block* b = queue.front().block;
      spare_events.push_back(queue.front().event);
      queue.pop_front();
      --pending_count;
      if (--b->event_count == 0) freeBlock(b);
    }
    it = queue.empty() ? pending.erase(it) : std::next(it);
  }
}

// Waits, without the lock, for every stream use pending now; then frees those blocks. Events
// are never destroyed while the allocator lives, so a handle stays valid even if another thread
// recycles it meanwhile (waiting for its new record only takes longer).
void DeviceState::waitForPendingUses(std::unique_lock<DeviceLock>& lock) {
  if (pending_count == 0) return;
  ++stats.num_sync_all_streams;
  std::vector<npuEvent_t> events;
  events.reserve(pending_count);
  for (const auto& [stream, queue] : pending) {
    for (const PendingUse& use : queue) events.push_back(use.event);
  }
  lock.unlock();
  for (npuEvent_t e : events) npuEventSynchronize(e);
  lock.lock();
  processEvents();
}

}  // namespace npu::alloc::detail
