// A flat hash map from a non-null address to a non-null pointer. Not installed.
//
// Every free() looks its pointer up here, so this is on the hot path: open addressing with
// linear probing keeps an entry in one slot of one array (no node allocation, no modulo),
// and deletion shifts later entries back instead of leaving tombstones, so lookups stay short
// however long the process runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace npu::alloc {

template <typename T>
class PointerMap {
 public:
  PointerMap() { resize(64); }

  // The value for `key`, or nullptr.
  T* find(const void* key) const {
    const auto k = reinterpret_cast<uintptr_t>(key);
    for (size_t i = home(k);; i = (i + 1) & mask_) {
      if (slots_[i].key == k) return slots_[i].value;
      if (slots_[i].key == 0) return nullptr;
    }
  }

  // `key` must not be present.
  void insert(const void* key, T* value) {
    if ((count_ + 1) * 2 > slots_.size()) resize(slots_.size() * 2);
    place(reinterpret_cast<uintptr_t>(key), value);
    ++count_;
  }

  // Removes `key` and returns its value, or nullptr if it was not present.
  T* erase(const void* key) {
    const auto k = reinterpret_cast<uintptr_t>(key);
    size_t hole = home(k);
    while (slots_[hole].key != k) {
      if (slots_[hole].key == 0) return nullptr;
      hole = (hole + 1) & mask_;
    }
    T* value = slots_[hole].value;
    // Move back each following entry of the run that may live in the hole: one whose home is
    // not cyclically in (hole, j].
    for (size_t j = (hole + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const size_t h = home(slots_[j].key);
      const bool stays = hole < j ? (h > hole && h <= j) : (h > hole || h <= j);
      if (!stays) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --count_;
    return value;
  }

  size_t size() const { return count_; }

 private:
  struct Slot {
    uintptr_t key = 0;
    T* value = nullptr;
  };

  size_t home(uintptr_t k) const {
    // Fibonacci hashing: addresses are 512-byte aligned, so their low bits carry nothing.
    return static_cast<size_t>((static_cast<uint64_t>(k) * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void place(uintptr_t k, T* value) {
    size_t i = home(k);
    while (slots_[i].key != 0) i = (i + 1) & mask_;
    slots_[i] = Slot{k, value};
  }

  void resize(size_t capacity) {  // capacity: a power of two
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64;
    for (size_t c = capacity; c > 1; c >>= 1) --shift_;
    for (const Slot& s : old) {
      if (s.key != 0) place(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

}  // namespace npu::alloc
